/*
 * prctl_spy.h - what the library set PR_SET_PTRACER to.
 *
 * test/prctl_spy.c defines prctl() for every test binary (they link
 * libringcc.a statically, so the library's calls come here): it records
 * PR_SET_PTRACER, then makes the system call. Linux has no way to read the
 * setting back, and without Yama it does nothing anyway. A file of its own,
 * so that the library and the harness, which call prctl, do not call into a
 * test program (scripts/check-layers.py, /work/shared/tools/layers.py).
 */
#ifndef RCC_PRCTL_SPY_H
#define RCC_PRCTL_SPY_H

/* PR_SET_PTRACER calls so far in this process, and the last value set
 * (12345 before any). */
int h_ptracer_calls(void);
unsigned long h_ptracer_last(void);

#endif /* RCC_PRCTL_SPY_H */
