/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: rate caps and bandwidth measurement.
 *
 * struct rb_rate is a token bucket for populate-rate= and flush-rate=:
 * rbi_rate_delay() says how long the caller must wait before moving
 * 'bytes', and charges them.  struct rb_bw is the moving average of the
 * bandwidth actually achieved, an exponentially weighted average over
 * wall time with a time constant of RB_BW_TAU_S seconds, so a sample
 * taken over a long batch weighs more than one over a short batch.
 * Neither locks: the owner (one background thread) serialises use;
 * readers of rb_bw.bps use atomic loads.
 */

#ifndef RAMBACK_THROTTLE_H
#define RAMBACK_THROTTLE_H

#include "env.h"

#define RB_BW_TAU_S 3.0

struct rb_rate {
  uint64_t bps;           /* 0: unlimited */
  uint64_t next_ns;       /* time at which the bucket is empty again */
};

struct rb_bw {
  uint64_t bps;           /* current estimate, 0: none yet */
  uint64_t samples;
  double tau_up, tau_down;      /* seconds; 0: RB_BW_TAU_S */
};

/* Nanoseconds to wait before transferring 'bytes' (0: go now). */
extern uint64_t rbi_rate_delay (struct rb_rate *r, uint64_t bytes,
                                uint64_t now_ns);

/* Nanoseconds that 'bytes' take at 'bps' bytes per second (bps > 0). */
extern uint64_t rbi_rate_ns (uint64_t bytes, uint64_t bps);

/* Record 'bytes' moved in 'elapsed_ns'. */
extern void rbi_bw_sample (struct rb_bw *bw, uint64_t bytes,
                           uint64_t elapsed_ns);

/* 'bytes' in 'elapsed_ns' is an upper bound of the bandwidth (part of
 * the work, with the slow part still to come): lower the estimate to it
 * at once if it is below.
 */
extern void rbi_bw_bound (struct rb_bw *bw, uint64_t bytes,
                          uint64_t elapsed_ns);

#endif /* RAMBACK_THROTTLE_H */
