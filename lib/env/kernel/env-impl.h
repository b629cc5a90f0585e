/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramback: the OS shim (lib/env/env.h) for the Linux kernel.
 *
 * Found through the include path: dm/Kbuild puts lib/env/kernel/ on it,
 * so the lib files that dm-ramback.ko shares (io.c, flush.c,
 * populate.c, chunkmap.c, sumbits.c, rangelock.c) include this instead
 * of the POSIX one and compile unchanged, with no stand-ins for the C
 * library's headers.  It
 * supplies:
 *
 *   types              <linux/types.h>, plus UINT64_MAX, UINT64_C...
 *   rb_mutex           struct mutex (rangelock's tree lock; held only
 *                      for tree updates, never across I/O)
 *   rb_cond            a wait queue; a waiter queues itself (exclusive)
 *                      before it drops the mutex, so a signal or
 *                      broadcast sent under the mutex cannot be missed
 *   rb_atomic_*        kernel atomics, sequentially consistent (below),
 *                      and rb_atomic_fence(), a full barrier
 *   rb_calloc/rb_free  kvcalloc/kvfree (the chunk map of a large device
 *                      is megabytes, so it may come from vmalloc); the
 *                      shared code allocates only when a table is
 *                      constructed (GFP_KERNEL)
 *   rb_assert/abort    BUG_ON/BUG: a broken chunk-state or range-tree
 *                      invariant stops the task rather than carry on and
 *                      write wrong data to the backing device
 *   rb_set_errno       nothing: the shared code sets errno only beside
 *                      a -1 return from an allocation, which the kernel
 *                      callers map to -ENOMEM themselves
 *   rb_popcount64      hweight64(): POPCNT where the CPU has it
 *                      (alternatives); __builtin_popcountll would become
 *                      a call to libgcc, which modules are not linked with
 *   rb_ctz64           __ffs64()
 *   rb_now_ns, rb_deadline_ms, rb_phys_mem   clocks and memory size
 *   rb_thread          a kthread (rb_thread_create/join, in dm/rbk-env.c)
 *   errno              reads as EIO.  The kernel has no per-thread errno:
 *                      a failure is decided by the -1 that comes with it,
 *                      never by errno, and the errno detail a kernel
 *                      caller reports comes from the request itself (a
 *                      bio's status, struct rb_io's err).  Writing errno
 *                      does not compile: the shared code uses
 *                      rb_set_errno().
 *   PRIu64, snprintf   the kernel's (u64 is unsigned long long)
 *   rb_realloc         kvrealloc, GFP_NOIO: called on the write-back path,
 *                      which must not recurse into I/O (the caller passes
 *                      the old size)
 *
 * Every wait is TASK_IDLE: uninterruptible, as the shared code expects
 * (it loops on its condition), without counting as load and without the
 * hung-task warning for an idle flusher that waits for work for hours.
 */

#ifndef RAMBACK_ENV_IMPL_H
#define RAMBACK_ENV_IMPL_H

#include <linux/types.h>
#include <linux/atomic.h>
#include <linux/bitops.h>
#include <linux/blkdev.h>	/* before errno is defined: it names a parameter */
#include <linux/bug.h>
#include <linux/build_bug.h>
#include <linux/errno.h>
#include <linux/ktime.h>
#include <linux/limits.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/stddef.h>
#include <linux/string.h>
#include <linux/timekeeping.h>
#include <linux/wait.h>

#define UINT8_MAX U8_MAX
#define UINT16_MAX U16_MAX
#define UINT32_MAX U32_MAX
#define UINT64_MAX U64_MAX
#define INT32_MAX S32_MAX
#define INT64_MAX S64_MAX
#define UINT32_C(c) c##U
#define UINT64_C(c) c##ULL
#define INT64_C(c) c##LL

static inline void *rb_calloc(size_t n, size_t size)
{
	return kvcalloc(n, size, GFP_KERNEL);
}

static inline void rb_free(void *p)
{
	kvfree(p);
}

#define rb_assert(expr) BUG_ON(!(expr))
#define rb_abort() BUG()

static inline void rb_set_errno(int e)
{
}

#define errno EIO
#define ENOTSUP EOPNOTSUPP	/* as in glibc */

#define PRIu64 "llu"
#define PRIu32 "u"
#define PRId64 "lld"

static inline void *rb_realloc(void *p, size_t old_size, size_t size)
{
	return kvrealloc(p, old_size, size, GFP_NOIO | __GFP_NOWARN);
}

#define rb_popcount64(x) hweight64(x)
#define rb_ctz64(x) __ffs64(x)

/* Typedefs because lib/env/env.h's API names them (pthread_mutex_t etc.). */
typedef struct mutex rb_mutex;
typedef struct {
	wait_queue_head_t wq;
} rb_cond;

static inline void rb_mutex_init(rb_mutex *m)
{
	mutex_init(m);
}

static inline void rb_mutex_destroy(rb_mutex *m)
{
	mutex_destroy(m);
}

static inline void rb_mutex_lock(rb_mutex *m)
{
	mutex_lock(m);
}

static inline void rb_mutex_unlock(rb_mutex *m)
{
	mutex_unlock(m);
}

static inline void rb_cond_init(rb_cond *c)
{
	init_waitqueue_head(&c->wq);
}

/* Nobody may still wait on a condition being destroyed (no race to lose). */
static inline void rb_cond_destroy(rb_cond *c)
{
	WARN_ON_ONCE(waitqueue_active(&c->wq));
}

/*
 * Like pthread_cond_wait: returns with the mutex held, possibly without
 * a signal (callers loop on their condition).  Uninterruptible: the
 * range lock waits for I/O in flight on the same chunks.
 */
static inline void rb_cond_wait(rb_cond *c, rb_mutex *m)
{
	DEFINE_WAIT(wait);

	prepare_to_wait_exclusive(&c->wq, &wait, TASK_IDLE);
	mutex_unlock(m);
	schedule();
	finish_wait(&c->wq, &wait);
	mutex_lock(m);
}

/*
 * Wait until the absolute monotonic time 'deadline_ns' (U64_MAX: for
 * ever).  False on timeout; true if woken (callers loop on their
 * condition and the clock either way).
 */
static inline bool rb_cond_wait_until(rb_cond *c, rb_mutex *m,
				      uint64_t deadline_ns)
{
	DEFINE_WAIT(wait);
	uint64_t now = ktime_get_ns();
	long left;

	if (deadline_ns == U64_MAX) {
		rb_cond_wait(c, m);
		return true;
	}
	if (now >= deadline_ns)
		return false;
	left = nsecs_to_jiffies(deadline_ns - now) + 1;
	prepare_to_wait_exclusive(&c->wq, &wait, TASK_IDLE);
	mutex_unlock(m);
	left = schedule_timeout(left);
	finish_wait(&c->wq, &wait);
	mutex_lock(m);
	return left > 0;
}

/* Threads: kthreads that run fn(arg) and end when it returns. */
struct rb_kthread;
typedef struct rb_kthread *rb_thread;
int rb_thread_create(rb_thread *t, void *(*fn)(void *), void *arg);
void rb_thread_join(rb_thread t);

/* The CPU priority of write back and populate (never starve the I/O). */
static inline void rb_thread_background(void)
{
	set_user_nice(current, 5);
}

static inline void rb_cond_signal(rb_cond *c)
{
	wake_up(&c->wq);
}

static inline void rb_cond_broadcast(rb_cond *c)
{
	wake_up_all(&c->wq);
}

static inline uint64_t rb_now_ns(void)
{
	return ktime_get_ns();
}

static inline uint64_t rb_deadline_ms(int ms)
{
	return ms < 0 ? U64_MAX : rb_now_ns() + (uint64_t)ms * NSEC_PER_MSEC;
}

static inline uint64_t rb_phys_mem(void)
{
	return (uint64_t)totalram_pages() << PAGE_SHIFT;
}

/*
 * Atomics.  lib/env/env.h promises sequential consistency, and the chunk
 * map's hints depend on it (sumbits.h: a setter's "set state, then set
 * hint" against a searcher's "clear hint, then re-check state").  The
 * mapping is the usual one for C11 seq_cst:
 *   - every read-modify-write is a fully ordered kernel RMW
 *     (atomic64_add_return, try_cmpxchg);
 *   - a store is WRITE_ONCE between two full barriers;
 *   - a load is an acquire load, preceded by a full barrier except on
 *     x86, where (TSO, every store above a locked instruction or
 *     fenced) a plain load is already seq_cst, which keeps
 *     chunkmap_get() on the I/O fast path free of fences.
 * The read-modify-writes work on 4- and 8-byte words; loads, stores
 * and exchanges also on the flags (bool) of struct rb.  Anything else
 * fails the build.
 */
#ifdef CONFIG_X86
#define rb_sc_load_fence() barrier()
#else
#define rb_sc_load_fence() smp_mb()
#endif

#define rb_atomic_check_size(p) \
	BUILD_BUG_ON(sizeof(*(p)) != 4 && sizeof(*(p)) != 8)
#define rb_atomic_check_size_ls(p) \
	BUILD_BUG_ON(sizeof(*(p)) != 1 && sizeof(*(p)) != 4 &&		\
		     sizeof(*(p)) != 8)

#define rb_atomic_load(p) ({						\
	rb_atomic_check_size_ls(p);					\
	rb_sc_load_fence();						\
	smp_load_acquire(p);						\
})

#define rb_atomic_load_relaxed(p) READ_ONCE(*(p))
#define rb_atomic_store_relaxed(p, v) WRITE_ONCE(*(p), (v))
#define rb_atomic_xchg_relaxed(p, v) ({					\
	rb_atomic_check_size_ls(p);					\
	xchg_relaxed((p), (v));						\
})
#define rb_atomic_load_acquire(p) smp_load_acquire(p)
#define rb_atomic_store_release(p, v) smp_store_release((p), (v))

#define rb_atomic_store(p, v) do {					\
	rb_atomic_check_size_ls(p);					\
	smp_mb();							\
	WRITE_ONCE(*(p), (v));						\
	smp_mb();							\
} while (0)

/* Add and subtract return the new value, like __atomic_add_fetch. */
#define rb_atomic_add(p, v) ({						\
	typeof(p) __rb_p = (p);						\
	rb_atomic_check_size(__rb_p);					\
	(typeof(*__rb_p))(sizeof(*__rb_p) == 8 ?			\
		atomic64_add_return((s64)(v), (atomic64_t *)__rb_p) :	\
		atomic_add_return((int)(v), (atomic_t *)__rb_p));	\
})

#define rb_atomic_sub(p, v) ({						\
	typeof(p) __rb_p = (p);						\
	rb_atomic_check_size(__rb_p);					\
	(typeof(*__rb_p))(sizeof(*__rb_p) == 8 ?			\
		atomic64_sub_return((s64)(v), (atomic64_t *)__rb_p) :	\
		atomic_sub_return((int)(v), (atomic_t *)__rb_p));	\
})

/* Or and and: a compare-and-swap loop; returns the new value. */
#define rb_atomic_rmw_(p, v, OP) ({					\
	typeof(p) __rb_p = (p);						\
	typeof(*__rb_p) __rb_v = (v), __rb_o;				\
	rb_atomic_check_size(__rb_p);					\
	__rb_o = READ_ONCE(*__rb_p);					\
	while (!try_cmpxchg(__rb_p, &__rb_o, __rb_o OP __rb_v))	\
		;							\
	__rb_o OP __rb_v;						\
})
#define rb_atomic_or(p, v) rb_atomic_rmw_(p, v, |)
#define rb_atomic_and(p, v) rb_atomic_rmw_(p, v, &)

/* Exchange: xchg() is fully ordered; returns the old value. */
#define rb_atomic_xchg(p, v) ({						\
	rb_atomic_check_size_ls(p);					\
	xchg((p), (v));							\
})

/*
 * Like __atomic_compare_exchange_n (strong): on failure *oldp gets the
 * current value.  try_cmpxchg() is fully ordered on success; a failed
 * one is not, so a barrier follows it (free on x86, where the locked
 * cmpxchg already is one): chunkmap_move() acts on the value a failed
 * CAS read when it finds nothing left to move.
 */
#define rb_atomic_cas(p, oldp, v) ({					\
	bool __rb_ok;							\
	rb_atomic_check_size(p);					\
	__rb_ok = try_cmpxchg((p), (oldp), (v));			\
	if (!__rb_ok)							\
		smp_mb__after_atomic();					\
	__rb_ok;							\
})

/*
 * A full memory barrier, like __atomic_thread_fence (__ATOMIC_SEQ_CST):
 * every load and store before it, plain or atomic, is ordered before
 * every load and store after it.  For a plain store that must be
 * visible before a later rb_atomic_load() (the store-buffering pattern,
 * which seq_cst atomics alone do not order against plain accesses).
 */
#define rb_atomic_fence() smp_mb()

#endif /* RAMBACK_ENV_IMPL_H */
