/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the eviction policy (evict.h for the design). */

#include "env.h"
#include "error.h"
#include "evict.h"

#define EV_MIN(a, b) ((a) < (b) ? (a) : (b))

int
evict_init (struct evict *ev, uint64_t n)
{
  ev->n = n;
  ev->hand = 0;
  ev->flags = rb_calloc (n ? n : 1, sizeof *ev->flags);
  if (ev->flags == NULL) {
    rb_set_error (ENOMEM, "cannot allocate the eviction table for %"
                  PRIu64 " chunks", n);
    return -1;
  }
  return 0;
}

void
evict_free (struct evict *ev)
{
  rb_free (ev->flags);
  ev->flags = NULL;
}

void
evict_forget (struct evict *ev, uint64_t c)
{
  rb_atomic_and (&ev->flags[c], ~(uint32_t) EV_HITS_MASK);
}

/* What a hit on a chunk of w slots is worth: 256 (mean / w)^4, mean
 * the caller's mean slots a chunk (256ths, evict.h), at most
 * EV_SCORE_MAX.  The ratio is capped at 256: no product overflows.
 */
static uint64_t
weight_factor (uint64_t mean_w, uint64_t w)
{
  uint64_t q = EV_MIN ((mean_w ? mean_w : 256) / w, (uint64_t) 256 * 256);

  q = q * q >> 8;
  return EV_MIN (q * q >> 8, (uint64_t) EV_SCORE_MAX);
}

/* The hand at chunk c, which holds w slots (0: not resident): its
 * score ages, and takes the hits since the last pass, per slot; is it
 * the victim?
 */
static bool
visit (struct evict *ev, uint64_t c, uint64_t w, bool desperate,
       evict_pred evictable, void *opaque)
{
  uint32_t f = rb_atomic_load (&ev->flags[c]);
  uint32_t h = EV_MIN (f & EV_HITS_MASK, EV_HITS_MAX);
  uint32_t s = f >> EV_SCORE_SHIFT, ns;

  if (f == 0 && w == 0)
    return false;
  ns = s - s / 4 - (s > 0);
  if (w > 0 && h > 0) {
    uint64_t inc = h * weight_factor (ev->mean_w, w);

    ns = (uint32_t) EV_MIN ((uint64_t) ns + inc, (uint64_t) EV_SCORE_MAX);
    if (s == 0)                 /* one burst is not reuse (evict.h) */
      ns = EV_MIN (ns, EV_FIRST);
  }
  /* Hits that came meanwhile stay for the next pass. */
  while (!rb_atomic_cas (&ev->flags[c], &f,
                         (ns << EV_SCORE_SHIFT) |
                         ((f & EV_HITS_MASK) - EV_MIN (f & EV_HITS_MASK, h))))
    ;
  return w > 0 && (ns <= EV_THRESH || desperate) && evictable (opaque, c);
}

uint64_t
evict_pick (struct evict *ev, uint64_t *steps, bool desperate,
            evict_weight weight, evict_pred evictable, void *opaque)
{
  while (*steps > 0 && ev->n > 0) {
    uint64_t c = ev->hand;

    ev->hand = c + 1 == ev->n ? 0 : c + 1;
    (*steps)--;
    if (visit (ev, c, weight (opaque, c), desperate, evictable, opaque))
      return c;
  }
  return UINT64_MAX;
}
