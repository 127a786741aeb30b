/*
 * env.h - the one place environment variables are read. Every RINGCC_*
 * variable goes through rcc_getenv, so the INFO dump of settings
 * (rcc_log_env_once) and docs/environment.md can list them all.
 */
#ifndef RCC_ENV_H
#define RCC_ENV_H

#include <stddef.h>
#include <stdint.h>

/* getenv(name), with an empty value read as unset (NULL). */
const char *rcc_getenv(const char *name);

/* A variable's integer: base 10 only, an optional '-' and digits, nothing
 * else (no spaces, '+', "0x" or octal: RINGCC_TIMEOUT_MS=010 is ten).
 * 0, or -1 when s is not such a number or does not fit in 64 bits. */
int rcc_parse_decimal(const char *s, int64_t *out);

/* Exactly 2 * bytes hex digits (either case, nothing else) into out[bytes]:
 * -1 when s is that, else the index of the first character that does not fit
 * (a non-hex character, one too many, or strlen(s) when s is short). */
int rcc_parse_hex(const char *s, uint8_t *out, size_t bytes);

#endif /* RCC_ENV_H */
