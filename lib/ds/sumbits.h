/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: summary bitmaps ("hints") over a large array.
 *
 * A hierarchy of bitmaps: bit i of level 0 says "item i may be
 * interesting" (for the chunk map an item is one 64-bit word of chunk
 * states), bit j of level 1 says "some bit of level-0 word j may be set",
 * and so on until a level fits in one word.  Finding the next interesting
 * item costs O(levels * 64) plus the items found, never a scan of the
 * whole array: that is what keeps a clean 1 TiB device free of linear
 * scans.
 *
 * Hints are set eagerly and cleared lazily.  A setter first makes the item
 * interesting (e.g. marks a chunk dirty), then calls sumbits_set().  Only
 * a searcher clears: it clears the hint, then re-checks the item with a
 * callback and sets the hint again if the item is still interesting.
 * With sequentially consistent atomics, either the searcher's re-check
 * sees the setter's change or the setter's sumbits_set() comes after the
 * clear, so a hint is never lost.  Many setters and searchers may run at
 * once without a lock.
 */

#ifndef RAMBACK_SUMBITS_H
#define RAMBACK_SUMBITS_H

#include "env.h"

#define SUMBITS_MAX_LEVELS 8

struct sumbits {
  unsigned levels;
  uint64_t count[SUMBITS_MAX_LEVELS];   /* bits at each level */
  uint64_t *bits[SUMBITS_MAX_LEVELS];
};

/* -1 with errno (ENOMEM) on failure. */
extern int sumbits_init (struct sumbits *sb, uint64_t n, bool all_set);
extern void sumbits_free (struct sumbits *sb);

extern void sumbits_set (struct sumbits *sb, uint64_t i);

/* The first item >= from whose hint is set, or UINT64_MAX. */
extern uint64_t sumbits_next (const struct sumbits *sb, uint64_t from);

/* Clear the hint of item i; 'still' re-checks the item afterwards (see
 * above) and the hint is set again if it returns true.
 */
extern void sumbits_clear (struct sumbits *sb, uint64_t i,
                           bool (*still) (void *arg, uint64_t i), void *arg);

#endif /* RAMBACK_SUMBITS_H */
