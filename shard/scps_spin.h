/* scps_spin: the pause a thread makes between two looks at a value another
 * thread will change, while it spins rather than sleeps. */
#ifndef SCPS_SPIN_H
#define SCPS_SPIN_H

static inline void scps__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

#endif
