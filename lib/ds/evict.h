/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: which resident chunk gives its RAM up (ram-size=).
 *
 * Design: CLOCK with an active and an inactive set, the Linux page
 * cache's scheme (a CLOCK approximation of 2Q), over one flag byte per
 * chunk and one hand that sweeps the chunks in order.
 *   - A chunk that enters RAM is inactive and unreferenced: the access
 *     that loaded it does not count.  Every later access (a hit) sets
 *     REF, lock-free (evict_touch).
 *   - The hand, at an inactive chunk: without REF it is the victim (if
 *     the caller may evict it now: clean and synced, engine/slots.c);
 *     with REF it loses REF and is SEEN.  A hit on a SEEN chunk (or
 *     the hand finding it referenced again) promotes it to active.  So
 *     a chunk must be used on both sides of a pass of the hand to
 *     become active: the hand's passes are the clock that tells reuse
 *     from one burst of accesses.
 *   - At an active chunk: with REF it loses REF (a second chance);
 *     without, it is demoted to inactive if the active set is over its
 *     target (active_max).  Active chunks are never victims.
 * Why this and not LRU, ARC or CLOCK-Pro: a sequential scan of the
 * whole device touches each chunk in one burst (a 4 KiB scan reads a
 * 64 KiB chunk 16 times in a row, all within one turn of the hand), so
 * its chunks reach SEEN at most and leave from the inactive set, while
 * a hot working set, used turn after turn, stays in the active set:
 * the scan resistance 2Q gives, at CLOCK's cost (a hit is one byte
 * store, and only when REF is not set yet: no list to move under a
 * lock, which the I/O path cannot afford).  ARC and CLOCK-Pro adapt
 * the split with ghost entries of evicted chunks; that would cost
 * another per-chunk table for a gain on workloads whose reuse distance
 * is just over the RAM, and is left out.
 *
 * Locking: the hand belongs to one caller at a time (the engine's
 * slot lock); evict_touch runs anywhere, at any time: flags change with
 * atomic RMWs and a promotion or demotion with a CAS, so each is
 * counted once in nactive; a REF may be lost to a racing clear of the
 * hand (a hit is a hint).
 */

#ifndef RAMBACK_EVICT_H
#define RAMBACK_EVICT_H

#include "env.h"

#define EV_REF 1u               /* used since the hand last passed */
#define EV_SEEN 2u              /* inactive, was referenced last turn */
#define EV_ACTIVE 4u            /* in the active set */

struct evict {
  uint64_t n;                   /* chunks */
  uint32_t *flags;              /* per chunk, EV_* */
  uint64_t hand;                /* [slot lock] next chunk to look at */
  uint64_t nactive;             /* [atomic] chunks with EV_ACTIVE */
  uint64_t active_max;          /* [slot lock] the active set's target
                                   size (chunks), set by the caller */
};

extern int evict_init (struct evict *ev, uint64_t n, uint64_t active_max);
extern void evict_free (struct evict *ev);

extern void evict_promote (struct evict *ev, uint64_t c);

/* A hit on resident chunk c. */
static inline void
evict_touch (struct evict *ev, uint64_t c)
{
  uint32_t f = rb_atomic_load_relaxed (&ev->flags[c]);

  if (f & EV_SEEN)
    evict_promote (ev, c);
  else if (!(f & EV_REF))
    rb_atomic_or (&ev->flags[c], (uint32_t) EV_REF);
}

/* Chunk c left RAM (or never was in it): forget its history. */
extern void evict_forget (struct evict *ev, uint64_t c);

/* Is chunk c resident, may it be evicted now (the caller's answers). */
typedef bool (*evict_pred) (void *opaque, uint64_t c);

/* Move the hand up to *steps chunks on and return the first victim
 * (resident, inactive, unreferenced, and evictable), or UINT64_MAX;
 * *steps is decreased by the chunks the hand passed, so that a caller
 * whose victims may still turn out not to go (checked again under
 * their locks) bounds its whole search with one budget.  desperate:
 * any resident evictable chunk is a victim (a caller that found none
 * the normal way: clean chunks are all active or recently used); the
 * flags still age on the way.
 */
extern uint64_t evict_pick (struct evict *ev, uint64_t *steps,
                            bool desperate, evict_pred resident,
                            evict_pred evictable, void *opaque);

#endif /* RAMBACK_EVICT_H */
