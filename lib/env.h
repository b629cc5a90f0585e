/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the OS shim.
 *
 * Everything the core needs from the operating system that is not I/O
 * to the backing store: locks, condition variables, threads, atomics,
 * clocks and memory.  env-posix.c implements it with pthreads; a kernel
 * port (device-mapper target) supplies its own env with the same names,
 * so chunkmap.c, rangelock.c, io.c, flush.c and populate.c are shared,
 * not forked.  Nothing outside env-posix.c includes <pthread.h>.
 */

#ifndef RAMBACK_ENV_H
#define RAMBACK_ENV_H

#ifndef __KERNEL__

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

typedef pthread_mutex_t rb_mutex;
typedef pthread_cond_t rb_cond;
typedef pthread_t rb_thread;

extern void rb_mutex_init (rb_mutex *m);
extern void rb_mutex_destroy (rb_mutex *m);
extern void rb_mutex_lock (rb_mutex *m);
extern void rb_mutex_unlock (rb_mutex *m);

/* Condition variables use CLOCK_MONOTONIC for timed waits. */
extern void rb_cond_init (rb_cond *c);
extern void rb_cond_destroy (rb_cond *c);
extern void rb_cond_wait (rb_cond *c, rb_mutex *m);
/* Wait until the absolute monotonic time 'deadline_ns'.  Returns false
 * on timeout.  deadline_ns == UINT64_MAX waits forever.
 */
extern bool rb_cond_wait_until (rb_cond *c, rb_mutex *m, uint64_t deadline_ns);
extern void rb_cond_signal (rb_cond *c);
extern void rb_cond_broadcast (rb_cond *c);

/* Start a thread; -1 with errno on failure. */
extern int rb_thread_create (rb_thread *t, void *(*fn) (void *), void *arg);
extern void rb_thread_join (rb_thread t);
/* Called by a background thread on itself: lower its CPU and I/O
 * priority, so write back and populate never starve application I/O of
 * CPU (one of the seed's bugs) or of the disk; the disk is still kept
 * busy whenever the CPU is idle.
 */
extern void rb_thread_background (void);

/* Monotonic clock in nanoseconds. */
extern uint64_t rb_now_ns (void);
/* Deadline 'ms' milliseconds from now; ms < 0 means never. */
extern uint64_t rb_deadline_ms (int ms);

/* Physical memory of the machine in bytes (0 if unknown). */
extern uint64_t rb_phys_mem (void);

/* Atomics: sequentially consistent unless the name says otherwise.  The
 * chunk map depends on seq_cst between "set state" and "set hint" (see
 * sumbits.h), so do not weaken these without reading that.
 */
#define rb_atomic_load(p) __atomic_load_n ((p), __ATOMIC_SEQ_CST)
#define rb_atomic_store(p, v) __atomic_store_n ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_add(p, v) __atomic_add_fetch ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_sub(p, v) __atomic_sub_fetch ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_or(p, v) __atomic_or_fetch ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_and(p, v) __atomic_and_fetch ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_cas(p, oldp, v) \
  __atomic_compare_exchange_n ((p), (oldp), (v), false, \
                               __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
#define rb_atomic_load_relaxed(p) __atomic_load_n ((p), __ATOMIC_RELAXED)

#else /* __KERNEL__ */
#include "env-kernel.h"    /* dm/env-kernel.h: the same names, for the kernel */
#endif /* __KERNEL__ */

#endif /* RAMBACK_ENV_H */
