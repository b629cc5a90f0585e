/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: rate caps and bandwidth measurement (throttle.h). */

#include <config.h>

#include <math.h>

#include "env.h"
#include "throttle.h"

uint64_t
rbi_rate_delay (struct rb_rate *r, uint64_t bytes, uint64_t now_ns)
{
  uint64_t cost, start;

  if (r->bps == 0)
    return 0;
  /* Do not bank unused time: an idle minute must not allow a burst. */
  start = r->next_ns > now_ns ? r->next_ns : now_ns;
  cost = (uint64_t) ((double) bytes * 1e9 / (double) r->bps);
  r->next_ns = start + cost;
  /* Wait until the previous charge is used up, then go. */
  return start - now_ns;
}

uint64_t
rbi_rate_ns (uint64_t bytes, uint64_t bps)
{
  return (uint64_t) (bytes * 1e9 / bps);
}

void
rbi_bw_sample (struct rb_bw *bw, uint64_t bytes, uint64_t elapsed_ns)
{
  double secs = elapsed_ns / 1e9, sample, alpha, old;

  if (elapsed_ns == 0 || bytes == 0)
    return;
  sample = bytes / secs;
  old = (double) rb_atomic_load (&bw->bps);
  if (bw->samples++ == 0 || old == 0)
    rb_atomic_store (&bw->bps, (uint64_t) sample);
  else {
    double tau = sample > old ? bw->tau_up : bw->tau_down;
    alpha = 1.0 - exp (-secs / (tau > 0 ? tau : RB_BW_TAU_S));
    rb_atomic_store (&bw->bps, (uint64_t) (old + alpha * (sample - old)));
  }
}

void
rbi_bw_bound (struct rb_bw *bw, uint64_t bytes, uint64_t elapsed_ns)
{
  uint64_t bound;

  if (elapsed_ns == 0)
    return;
  bound = (uint64_t) (bytes * 1e9 / elapsed_ns);
  if (bound < rb_atomic_load (&bw->bps))
    rb_atomic_store (&bw->bps, bound);
}
