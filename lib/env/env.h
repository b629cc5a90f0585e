/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the OS shim.
 *
 * Everything the shared code needs from its environment that is not
 * I/O to the backing store: locks, condition variables, threads,
 * atomics, clocks, memory, assertions and the few C library calls it
 * makes.  The shared files include nothing else from the system (no
 * <stdlib.h>, <assert.h>, <errno.h>, <pthread.h>...), so the same
 * sources build in userspace and in the kernel.
 *
 * The environment is chosen by the include path: "env-impl.h" is
 *   lib/env/posix/env-impl.h   pthreads and libc (env-posix.c), for
 *                              the library, the plugin and the tests
 *   lib/env/kernel/env-impl.h  the Linux kernel, for the device-mapper
 *                              target (dm/Kbuild puts it on the path)
 * Each defines every name below, as a function or a macro.
 *
 * Types:    rb_mutex, rb_cond, rb_thread; bool, size_t, uint64_t...
 *           with UINT64_MAX, UINT64_C and friends; NULL.
 * Locks:    rb_mutex_init/destroy/lock/unlock.
 * Conds:    rb_cond_init/destroy/wait/signal/broadcast, and
 *           rb_cond_wait_until (c, m, deadline_ns): false on timeout,
 *           deadline UINT64_MAX waits forever (CLOCK_MONOTONIC).
 * Threads:  rb_thread_create (t, fn, arg): 0, or -1 with errno;
 *           rb_thread_join; rb_thread_background (): lower the calling
 *           thread's CPU and I/O priority, so write back and populate
 *           never starve application I/O of CPU or of the disk.
 * Time:     rb_now_ns (monotonic), rb_deadline_ms (ms < 0: never).
 * Memory:   rb_phys_mem (bytes, 0 if unknown); rb_calloc, rb_free (may
 *           be large: the kernel takes them from kvmalloc);
 *           rb_realloc (p, old_size, size).
 * Text:     snprintf, PRIu64 and friends, va_list.
 * Checks:   rb_assert (expr): a broken invariant stops the program (the
 *           task in the kernel) rather than carry on and write wrong
 *           data; rb_abort ().
 * Errors:   rb_set_errno (e): set errno beside a -1 return; errno reads
 *           it.  The kernel has no per-thread errno: there errno reads
 *           as EIO and rb_set_errno does nothing, so shared code decides
 *           on the -1, never on errno, and takes an error's detail from
 *           the request (struct rb_io's err) where it matters.
 * Bits:     rb_popcount64, rb_ctz64 (x != 0).
 * Atomics:  sequentially consistent unless the name says otherwise.  The
 *           chunk map depends on seq_cst between "set state" and "set
 *           hint" (see sumbits.h), so do not weaken these without
 *           reading that.
 *             rb_atomic_load, rb_atomic_store, rb_atomic_load_relaxed,
 *             rb_atomic_store_relaxed, rb_atomic_xchg_relaxed (flags
 *               that order nothing else)
 *             rb_atomic_load_acquire, rb_atomic_store_release (publish
 *               data initialized before the store)
 *             rb_atomic_add, rb_atomic_sub, rb_atomic_or, rb_atomic_and
 *               (return the new value)
 *             rb_atomic_xchg (return the old value)
 *             rb_atomic_cas (p, oldp, v): strong; on failure *oldp gets
 *               the current value
 *             rb_atomic_fence (): a full barrier
 */

#ifndef RAMBACK_ENV_H
#define RAMBACK_ENV_H

#include "env-impl.h"

#endif /* RAMBACK_ENV_H */
