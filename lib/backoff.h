/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the one retry policy for a failing backing store, used by
 * the flusher, the populator, the journal's apply and the NBD store's
 * reconnects: after a failure wait BACKOFF_MIN_MS, double the wait
 * after each further failure up to BACKOFF_MAX_MS, and start again from
 * the minimum after a success.  Types from env.h only (shared with the
 * kernel like the files that use it).
 */

#ifndef RAMBACK_BACKOFF_H
#define RAMBACK_BACKOFF_H

#include "env.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 5000
#define BACKOFF_MIN_NS (BACKOFF_MIN_MS * UINT64_C (1000000))
#define BACKOFF_MAX_NS (BACKOFF_MAX_MS * UINT64_C (1000000))

/* The wait after a wait of ms milliseconds that did not help. */
static inline uint64_t
rbi_backoff_next_ms (uint64_t ms)
{
  return RB_MIN (ms * 2, (uint64_t) BACKOFF_MAX_MS);
}

/* The same in nanoseconds. */
static inline uint64_t
rbi_backoff_next_ns (uint64_t ns)
{
  return RB_MIN (ns * 2, BACKOFF_MAX_NS);
}

#endif /* RAMBACK_BACKOFF_H */
