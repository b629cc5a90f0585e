/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: which resident chunk gives its RAM up (ram-size=).
 *
 * Design: a generalized CLOCK (GCLOCK) whose count is a chunk's hits
 * weighed by the slots it holds, one 32-bit word per chunk of the
 * device (4 bytes a chunk, resident or not: 16 KiB for 256 MiB of 64
 * KiB chunks) and one hand that sweeps the chunks in order.
 *   - A hit counts in the chunk's word (evict_touch: one atomic add,
 *     none once 15 hits wait for the hand).  The access that loads a
 *     chunk does not count; a later miss on a chunk already resident
 *     (a sector not loaded yet) does.
 *   - The hand, at a resident chunk holding w slots (its loaded
 *     sectors with partial chunks, else 1) with h hits since it last
 *     passed: score = score - score/4 - 1 + 256 h (mean / w)^4, in 16
 *     bits, saturating, mean the slots of a resident chunk on average
 *     (the caller's, mean_w).  A chunk whose score is at most
 *     EV_THRESH (a quarter of a hit a turn, at the mean weight) is the
 *     victim, if the caller may evict it now (clean and synced,
 *     engine/slots.c).  So a chunk stays while it is used about once
 *     in four turns, and how much it was used in earlier turns keeps
 *     it through turns without: the frequency one REF bit forgets.
 *   - The weight, because the budget counts sectors: with 4 KiB reads
 *     a 64 KiB chunk gathers the cold sectors read next to its hot one
 *     (a miss loads what it reads), and costs 16 slots for the hits of
 *     one.  Evicting it costs a miss for each hot sector, which then
 *     comes back alone, and frees all of them: the steeper the
 *     penalty on chunks above the mean, the better, up to the fourth
 *     power (the trace, 64 KiB chunks: 0.799, 0.808, 0.818 and 0.829
 *     for the first to the fourth, the scans kept within a point).
 *     Against the mean, not absolute: a workload whose chunks all
 *     weigh the same (reads of whole chunks) is ranked by hits alone,
 *     with the resolution of 4 KiB chunks (by w alone, 64 KiB reads of
 *     64 KiB chunks hit 0.802, 0.821 with the policy before this one,
 *     0.827 with this).
 *   - Burst resistance: a chunk credited for the first time (score 0)
 *     gets at most EV_FIRST, which one turn without hits takes back
 *     under EV_THRESH.  A sequential scan uses each chunk in one burst
 *     (16 reads of 4 KiB in a row, or one of 1 MiB), within one turn,
 *     and leaves at the second pass at the latest, while a working set
 *     used turn after turn scores far above the threshold.
 *   - Non-resident chunks keep their score as the hand ages it (a
 *     victim leaves with one at most EV_THRESH): a chunk evicted and
 *     read again soon comes back with it, the ghost history of
 *     ARC/CLOCK-Pro for no more memory, as the table covers the device.
 * Numbers (lib/test-evict-trace.c: fio's zipf over 65,536 4 KiB
 * sectors, ram-size= an eighth): zipf 1.1 hits 0.829 with 64 KiB
 * chunks (the CLOCK with an active and an inactive set this replaces:
 * 0.789), 0.836 with 256 KiB ones (0.795), 0.886 with 4 KiB ones
 * (0.884), against 0.902 for keeping the 8,192 hottest sectors; a scan
 * of the whole device keeps 0.97-1.00 of the zipf hits (0.97-1.00
 * before).  What is left with 64 KiB chunks is their granularity: the
 * hot sectors are spread over every chunk, and a victim takes all of
 * its sectors; evicting sectors of a chunk (chunkmap.h would need it)
 * would be the next step, bounded by the 4 KiB chunks' 0.886.
 * Not chosen: TinyLFU admission needs a sketch beside this table, and
 * a miss must load anyway (the read is served from RAM); CLOCK-Pro's
 * test periods need non-resident entries, which this table already
 * is; resizing the old policy's active set moved 64 KiB chunks by 2
 * points at most and cost the 4 KiB ones.
 *
 * Locking: the hand and mean_w belong to one caller at a time (the
 * engine's slot lock); evict_touch runs anywhere, at any time, with an
 * atomic add (the hits field has room for racing adds past 15: read
 * as 15); the hand folds the hits it read into the score with a CAS
 * and leaves those that came meanwhile; evict_forget clears the hits
 * with an atomic and.
 */

#ifndef RAMBACK_EVICT_H
#define RAMBACK_EVICT_H

#include "env.h"

#define EV_HITS_MASK 0xffu     /* hits since the hand last passed */
#define EV_HITS_MAX 15u         /* counted up to */
#define EV_SCORE_SHIFT 16       /* the score: the high 16 bits */
#define EV_SCORE_MAX 0xffffu
#define EV_SCORE_UNIT 8         /* a hit per slot adds 1 << 8 */
#define EV_THRESH 64u           /* a victim's score, at most */
#define EV_FIRST (EV_THRESH + EV_THRESH / 4)    /* a first credit, at most */

struct evict {
  uint64_t n;                   /* chunks */
  uint32_t *flags;              /* per chunk: score, hits */
  uint64_t hand;                /* [slot lock] next chunk to look at */
  uint64_t mean_w;              /* [slot lock] the mean slots a resident
                                   chunk holds, in 1/256ths, set by the
                                   caller (0: one slot) */
};

extern int evict_init (struct evict *ev, uint64_t n);
extern void evict_free (struct evict *ev);

/* A hit on resident chunk c. */
static inline void
evict_touch (struct evict *ev, uint64_t c)
{
  uint32_t f = rb_atomic_load_relaxed (&ev->flags[c]);

  if ((f & EV_HITS_MASK) < EV_HITS_MAX)
    rb_atomic_add (&ev->flags[c], (uint32_t) 1);
}

/* Chunk c left RAM: its hits go, its score stays (the hand ages it). */
extern void evict_forget (struct evict *ev, uint64_t c);

/* May chunk c be evicted now; how many slots does it hold (0: not
 * resident)?  The caller's answers.
 */
typedef bool (*evict_pred) (void *opaque, uint64_t c);
typedef uint64_t (*evict_weight) (void *opaque, uint64_t c);

/* Move the hand up to *steps chunks on and return the first victim
 * (resident, its score at most EV_THRESH, evictable), or UINT64_MAX;
 * *steps is decreased by the chunks the hand passed, so that a caller
 * whose victims may still turn out not to go (checked again under
 * their locks) bounds its whole search with one budget.  desperate:
 * any resident evictable chunk is a victim (a caller that found none
 * the normal way: clean chunks are all used); the scores still age
 * on the way.
 */
extern uint64_t evict_pick (struct evict *ev, uint64_t *steps,
                            bool desperate, evict_weight weight,
                            evict_pred evictable, void *opaque);

#endif /* RAMBACK_EVICT_H */
