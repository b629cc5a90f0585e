/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: scoped cleanup helpers, after nbdkit's common/utils/cleanup.h.
 *
 * CLEANUP_FREE char *p = ...;      free(p) when p goes out of scope.
 * ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&m);  unlock m when the scope ends;
 * put it inside a bare { } block to keep the critical section short.
 */

#ifndef RAMBACK_CLEANUP_H
#define RAMBACK_CLEANUP_H

#include "env.h"

static inline void
rb_cleanup_free (void *ptr)
{
  rb_free (*(void **) ptr);
}
#define CLEANUP_FREE __attribute__ ((cleanup (rb_cleanup_free)))

static inline void
rb_cleanup_unlock (rb_mutex **mp)
{
  rb_mutex_unlock (*mp);
}
#define RB_CONCAT_(a, b) a##b
#define RB_CONCAT(a, b) RB_CONCAT_ (a, b)
#define ACQUIRE_LOCK_FOR_CURRENT_SCOPE(mutex)                           \
  rb_mutex *RB_CONCAT (_lock_, __LINE__)                                \
    __attribute__ ((cleanup (rb_cleanup_unlock), unused)) = (mutex);    \
  rb_mutex_lock (RB_CONCAT (_lock_, __LINE__))

/* Functions, not macros: each argument is evaluated once, and nesting
 * them does not shadow.  Everything measured here fits in uint64_t.
 */
static inline uint64_t
rb_min_u64 (uint64_t a, uint64_t b)
{
  return a < b ? a : b;
}

static inline uint64_t
rb_max_u64 (uint64_t a, uint64_t b)
{
  return a > b ? a : b;
}
#define RB_MIN(a, b) rb_min_u64 ((a), (b))
#define RB_MAX(a, b) rb_max_u64 ((a), (b))

static inline int
rb_is_power_of_2 (unsigned long v)
{
  return v && (v & (v - 1)) == 0;
}

#endif /* RAMBACK_CLEANUP_H */
