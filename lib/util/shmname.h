/*
 * shmname.h - the names of the library's shared-memory segments, which say
 * who made them: /dev/shm/ringcc-BOOT-PIDNS-PID-RANDOM
 *
 *   BOOT    the first 12 hex digits of the boot id (/proc/sys/kernel/
 *           random/boot_id): a segment of an earlier boot is no one's
 *   PIDNS   the inode of the creator's pid namespace (/proc/self/ns/pid):
 *           pids are comparable only inside one
 *   PID     the creator's pid there
 *   RANDOM  32 hex digits (128 random bits): the name cannot be guessed
 *
 * A segment whose creator is gone (same boot and pid namespace, no such
 * process, or a zombie) is garbage: a rank killed during init leaves its own.
 * The library sweeps those of its user at init (transports/shm.c), and
 * ringcc-run removes those of the ranks it reaped. Header-only, so that
 * ringcc-run (which does not link the library) reads the same format.
 */
#ifndef RCC_SHMNAME_H
#define RCC_SHMNAME_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define RCC_SHM_PREFIX "ringcc-"
#define RCC_SHM_BOOT_DIGITS 12
#define RCC_SHM_NAME_MAX 96

/* Who this process is, for names: the boot id's first 12 hex digits (boot
 * "000000000000" when unreadable) and its pid namespace's inode (0). */
static inline void rcc_shm_identity(char boot[RCC_SHM_BOOT_DIGITS + 1],
                                    unsigned long long *pidns) {
  char line[64] = "";
  int n = 0;
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (f != NULL) {
    if (fgets(line, sizeof(line), f) == NULL)
      line[0] = '\0';
    fclose(f);
  }
  for (const char *p = line; *p != '\0' && n < RCC_SHM_BOOT_DIGITS; p++)
    if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))
      boot[n++] = *p;
  while (n < RCC_SHM_BOOT_DIGITS)
    boot[n++] = '0';
  boot[n] = '\0';
  struct stat st;
  *pidns = stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino
                                                : 0;
}

/* "/ringcc-BOOT-PIDNS-PID-RANDOM" into out (RCC_SHM_NAME_MAX bytes). */
static inline void rcc_shm_name_format(char *out, size_t len, const char *boot,
                                       unsigned long long pidns, int pid,
                                       const uint8_t random[16]) {
  int off = snprintf(out, len, "/" RCC_SHM_PREFIX "%s-%llu-%d-", boot, pidns,
                     pid);
  for (int i = 0; i < 16 && off > 0 && (size_t)off + 3 <= len; i++)
    off += snprintf(out + off, len - (size_t)off, "%02x", random[i]);
}

static inline int rcc_shm_decimal(const char **p, unsigned long long *v) {
  const char *s = *p;
  *v = 0;
  if (*s < '0' || *s > '9')
    return -1;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (*v > (~0ull - 9) / 10)
      return -1;
    *v = *v * 10 + (unsigned)(*s - '0');
  }
  *p = s;
  return 0;
}

/* A name of /dev/shm (without the leading '/'): 0 with its creator's boot,
 * pid namespace and pid when it is one of the library's, else -1. */
static inline int rcc_shm_name_parse(const char *name,
                                     char boot[RCC_SHM_BOOT_DIGITS + 1],
                                     unsigned long long *pidns, int *pid) {
  size_t plen = strlen(RCC_SHM_PREFIX);
  unsigned long long v;
  if (strncmp(name, RCC_SHM_PREFIX, plen) != 0)
    return -1;
  const char *p = name + plen;
  for (int i = 0; i < RCC_SHM_BOOT_DIGITS; i++, p++) {
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return -1;
    boot[i] = *p;
  }
  boot[RCC_SHM_BOOT_DIGITS] = '\0';
  if (*p++ != '-' || rcc_shm_decimal(&p, pidns) != 0 || *p++ != '-' ||
      rcc_shm_decimal(&p, &v) != 0 || v == 0 || v > 0x7fffffff ||
      *p++ != '-')
    return -1;
  *pid = (int)v;
  for (int i = 0; i < 32; i++, p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return -1;
  return *p == '\0' ? 0 : -1;
}

#endif /* RCC_SHMNAME_H */
