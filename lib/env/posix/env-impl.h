/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the OS shim (../../env.h) for POSIX threads and the C library.
 *
 * Found through the include path (-I lib/env/posix).  The functions are
 * in env-posix.c.  Nothing else in the shared code includes
 * <pthread.h>, <stdlib.h>, <assert.h> or <errno.h> for what is here.
 */

#ifndef RAMBACK_ENV_IMPL_H
#define RAMBACK_ENV_IMPL_H

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

typedef pthread_mutex_t rb_mutex;
typedef pthread_cond_t rb_cond;
typedef pthread_t rb_thread;
typedef pthread_rwlock_t rb_rwlock;

extern void rb_mutex_init (rb_mutex *m);
extern void rb_mutex_destroy (rb_mutex *m);
extern void rb_mutex_lock (rb_mutex *m);
extern void rb_mutex_unlock (rb_mutex *m);

/* Userspace only (the journal, txn.c; nothing shared with the kernel
 * uses it): a reader-writer lock where a waiting writer goes before
 * new readers, so a commit point does not starve behind a stream of
 * writes.
 */
extern void rb_rwlock_init (rb_rwlock *l);
extern void rb_rwlock_destroy (rb_rwlock *l);
extern void rb_rwlock_rdlock (rb_rwlock *l);
extern void rb_rwlock_wrlock (rb_rwlock *l);
extern void rb_rwlock_unlock (rb_rwlock *l);

/* Condition variables use CLOCK_MONOTONIC for timed waits. */
extern void rb_cond_init (rb_cond *c);
extern void rb_cond_destroy (rb_cond *c);
extern void rb_cond_wait (rb_cond *c, rb_mutex *m);
extern bool rb_cond_wait_until (rb_cond *c, rb_mutex *m, uint64_t deadline_ns);
extern void rb_cond_signal (rb_cond *c);
extern void rb_cond_broadcast (rb_cond *c);

extern int rb_thread_create (rb_thread *t, void *(*fn) (void *), void *arg);
extern void rb_thread_join (rb_thread t);
extern void rb_thread_background (void);

extern uint64_t rb_now_ns (void);
extern uint64_t rb_deadline_ms (int ms);
extern uint64_t rb_phys_mem (void);

#define rb_calloc(n, size) calloc ((n), (size))
#define rb_free(p) free (p)
#define rb_realloc(p, old_size, size) realloc ((p), (size))
#define rb_assert(expr) assert (expr)
#define rb_abort() abort ()

static inline void
rb_set_errno (int e)
{
  errno = e;
}

#define rb_popcount64(x) __builtin_popcountll (x)
#define rb_ctz64(x) __builtin_ctzll (x)

#define rb_atomic_load(p) __atomic_load_n ((p), __ATOMIC_SEQ_CST)
#define rb_atomic_store(p, v) __atomic_store_n ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_add(p, v) __atomic_add_fetch ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_sub(p, v) __atomic_sub_fetch ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_or(p, v) __atomic_or_fetch ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_and(p, v) __atomic_and_fetch ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_xchg(p, v) __atomic_exchange_n ((p), (v), __ATOMIC_SEQ_CST)
#define rb_atomic_cas(p, oldp, v) \
  __atomic_compare_exchange_n ((p), (oldp), (v), false, \
                               __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
#define rb_atomic_load_relaxed(p) __atomic_load_n ((p), __ATOMIC_RELAXED)
#define rb_atomic_store_relaxed(p, v) \
  __atomic_store_n ((p), (v), __ATOMIC_RELAXED)
#define rb_atomic_xchg_relaxed(p, v) \
  __atomic_exchange_n ((p), (v), __ATOMIC_RELAXED)
#define rb_atomic_load_acquire(p) __atomic_load_n ((p), __ATOMIC_ACQUIRE)
#define rb_atomic_store_release(p, v) \
  __atomic_store_n ((p), (v), __ATOMIC_RELEASE)
#define rb_atomic_fence() __atomic_thread_fence (__ATOMIC_SEQ_CST)

#endif /* RAMBACK_ENV_IMPL_H */
