/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: summary bitmaps (sumbits.h). */

#include "env.h"
#include "sumbits.h"

#define WORDS(bits) (((bits) + 63) / 64)

int
sumbits_init (struct sumbits *sb, uint64_t n, bool all_set)
{
  uint64_t bits = n;
  unsigned l;

  memset (sb, 0, sizeof *sb);
  for (l = 0; l < SUMBITS_MAX_LEVELS; l++) {
    uint64_t w = WORDS (bits), i;

    sb->count[l] = bits;
    sb->bits[l] = rb_calloc (w ? w : 1, sizeof (uint64_t));
    if (sb->bits[l] == NULL) {
      sumbits_free (sb);
      rb_set_errno (ENOMEM);
      return -1;
    }
    sb->levels = l + 1;
    if (all_set) {
      for (i = 0; i < bits / 64; i++)
        sb->bits[l][i] = ~UINT64_C (0);
      if (bits % 64)
        sb->bits[l][bits / 64] = (UINT64_C (1) << (bits % 64)) - 1;
    }
    if (w <= 1)
      break;
    bits = w;
  }
  if (sb->count[sb->levels - 1] > 64) {  /* more than 64^8 items */
    sumbits_free (sb);
    rb_set_errno (EFBIG);
    return -1;
  }
  return 0;
}

void
sumbits_free (struct sumbits *sb)
{
  unsigned l;

  for (l = 0; l < sb->levels; l++)
    rb_free (sb->bits[l]);
  memset (sb, 0, sizeof *sb);
}

void
sumbits_set (struct sumbits *sb, uint64_t i)
{
  unsigned l;

  for (l = 0; l < sb->levels; l++) {
    uint64_t bit = UINT64_C (1) << (i % 64);
    uint64_t *w = &sb->bits[l][i / 64];

    /* Already set: every level above is set too, or a searcher that
     * is clearing it will re-check this level and set it again.
     */
    if (rb_atomic_load (w) & bit)
      return;
    rb_atomic_or (w, bit);
    i /= 64;
  }
}

/* First set bit >= idx at level l, using the levels above to skip
 * empty words.
 */
static uint64_t
find (const struct sumbits *sb, unsigned l, uint64_t idx)
{
  while (idx < sb->count[l]) {
    uint64_t w = idx / 64;
    uint64_t word = rb_atomic_load (&sb->bits[l][w]) &
      (~UINT64_C (0) << (idx % 64));

    if (word)
      return w * 64 + rb_ctz64 (word);
    if (l + 1 == sb->levels)
      idx = (w + 1) * 64;
    else {
      uint64_t nw = find (sb, l + 1, w + 1);
      if (nw == UINT64_MAX)
        return UINT64_MAX;
      idx = nw * 64;
    }
  }
  return UINT64_MAX;
}

uint64_t
sumbits_next (const struct sumbits *sb, uint64_t from)
{
  return find (sb, 0, from);
}

void
sumbits_clear (struct sumbits *sb, uint64_t i,
               bool (*still) (void *arg, uint64_t i), void *arg)
{
  uint64_t bit = UINT64_C (1) << (i % 64);
  unsigned l;

  rb_atomic_and (&sb->bits[0][i / 64], ~bit);
  if (still (arg, i)) {
    sumbits_set (sb, i);
    return;
  }
  /* Propagate upwards while the word below became empty. */
  for (l = 1; l < sb->levels; l++) {
    uint64_t w = i / 64;

    if (rb_atomic_load (&sb->bits[l - 1][w]) != 0)
      return;
    bit = UINT64_C (1) << (w % 64);
    rb_atomic_and (&sb->bits[l][w / 64], ~bit);
    /* Re-check after clearing: a concurrent sumbits_set() may have
     * set a bit below and seen our bit still set.
     */
    if (rb_atomic_load (&sb->bits[l - 1][w]) != 0) {
      rb_atomic_or (&sb->bits[l][w / 64], bit);
      return;
    }
    i = w;
  }
}
