/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the OS shim (../../env.h) for the deterministic simulator.
 *
 * Found through the include path (-I lib/env/sim), by lib/sim/ only.
 * The engine's sources compile unchanged against it; what they get:
 *
 *   - Threads are fibers (ucontext) of one OS thread, run one at a time
 *     by a seeded scheduler (env-sim.c).  Every lock, unlock, condition
 *     wait, signal or broadcast, every atomic read-modify-write and
 *     every atomic load or store is a scheduling point: the scheduler's
 *     PRNG may hand the CPU to another runnable fiber there.  Between
 *     two points a fiber runs alone, so a run is a pure function of the
 *     seed.
 *   - Time is virtual: rb_now_ns is the simulated clock.  Timed waits
 *     end when the clock reaches their deadline; the clock jumps to the
 *     earliest deadline when no fiber can run.  Nothing sleeps for real.
 *   - No fiber runnable and no deadline pending is a deadlock: the
 *     simulator reports it as a failure (sim_fail).
 *
 * errno is saved and restored per fiber.  The per-thread error text of
 * error.c (__thread) is shared by all fibers: a message may be replaced
 * by another fiber's between two scheduling points, never the -1 that
 * goes with it.
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

struct sim_task;

/* A lock: its owner (NULL: free).  Waiters are the fibers blocked on it
 * (the scheduler keeps them; a lock holds no list).
 */
typedef struct {
  struct sim_task *owner;
} rb_mutex;

/* A condition variable has no state of its own: its waiters are the
 * fibers blocked on it.
 */
typedef struct {
  int unused;
} rb_cond;

typedef struct {
  struct sim_task *writer;
  unsigned readers;
  unsigned writers_waiting;
} rb_rwlock;

typedef struct sim_task *rb_thread;

extern void rb_mutex_init (rb_mutex *m);
extern void rb_mutex_destroy (rb_mutex *m);
extern void rb_mutex_lock (rb_mutex *m);
extern void rb_mutex_unlock (rb_mutex *m);

extern void rb_rwlock_init (rb_rwlock *l);
extern void rb_rwlock_destroy (rb_rwlock *l);
extern void rb_rwlock_rdlock (rb_rwlock *l);
extern void rb_rwlock_wrlock (rb_rwlock *l);
extern void rb_rwlock_unlock (rb_rwlock *l);

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
/* A broken invariant of the engine is a finding: sim_fail reports it
 * with the seed and the trace.
 */
extern void sim_assert_failed (const char *expr, const char *file, int line)
  __attribute__ ((noreturn));
#define rb_assert(expr) \
  ((expr) ? (void) 0 : sim_assert_failed (#expr, __FILE__, __LINE__))
#define rb_abort() sim_assert_failed ("rb_abort ()", __FILE__, __LINE__)

static inline void
rb_set_errno (int e)
{
  errno = e;
}

#define rb_popcount64(x) __builtin_popcountll (x)
#define rb_ctz64(x) __builtin_ctzll (x)

/* A scheduling point (env-sim.c): the scheduler may switch fibers. */
extern void sim_point (void);

/* The atomics: a scheduling point, then the operation, which no other
 * fiber can interleave with.  Memory order is moot on one OS thread:
 * every interleaving the scheduler makes is sequentially consistent.
 */
#define rb_atomic_load(p) (sim_point (), __atomic_load_n ((p), __ATOMIC_SEQ_CST))
#define rb_atomic_store(p, v) \
  (sim_point (), __atomic_store_n ((p), (v), __ATOMIC_SEQ_CST))
#define rb_atomic_add(p, v) \
  (sim_point (), __atomic_add_fetch ((p), (v), __ATOMIC_SEQ_CST))
#define rb_atomic_sub(p, v) \
  (sim_point (), __atomic_sub_fetch ((p), (v), __ATOMIC_SEQ_CST))
#define rb_atomic_or(p, v) \
  (sim_point (), __atomic_or_fetch ((p), (v), __ATOMIC_SEQ_CST))
#define rb_atomic_and(p, v) \
  (sim_point (), __atomic_and_fetch ((p), (v), __ATOMIC_SEQ_CST))
#define rb_atomic_xchg(p, v) \
  (sim_point (), __atomic_exchange_n ((p), (v), __ATOMIC_SEQ_CST))
#define rb_atomic_cas(p, oldp, v) \
  (sim_point (), \
   __atomic_compare_exchange_n ((p), (oldp), (v), false, \
                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
#define rb_atomic_load_relaxed(p) rb_atomic_load (p)
#define rb_atomic_store_relaxed(p, v) rb_atomic_store ((p), (v))
#define rb_atomic_xchg_relaxed(p, v) rb_atomic_xchg ((p), (v))
#define rb_atomic_load_acquire(p) rb_atomic_load (p)
#define rb_atomic_store_release(p, v) rb_atomic_store ((p), (v))
#define rb_atomic_fence() sim_point ()

#endif /* RAMBACK_ENV_IMPL_H */
