/*
 * env.h - the one place environment variables are read. Every RINGCC_*
 * variable goes through rcc_getenv, so the INFO dump of settings
 * (rcc_log_env_once) and docs/environment.md can list them all.
 */
#ifndef RCC_ENV_H
#define RCC_ENV_H

/* getenv(name), with an empty value read as unset (NULL). */
const char *rcc_getenv(const char *name);

#endif /* RCC_ENV_H */
