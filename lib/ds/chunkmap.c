/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the chunk state map (chunkmap.h). */

#include "env.h"
#include "chunkmap.h"

#define PER_WORD 32
#define LOW_BITS UINT64_C (0x5555555555555555)
#define RB_MIN_U(a, b) ((a) < (b) ? (a) : (b))

/* The state s repeated in all 32 fields. */
static inline uint64_t
pattern (unsigned s)
{
  return LOW_BITS * s;
}

/* Low bit of each field set where the field equals s. */
static inline uint64_t
fields_equal (uint64_t word, unsigned s)
{
  uint64_t x = word ^ pattern (s);
  return ~(x | (x >> 1)) & LOW_BITS;
}

/* Low bit of each field set where the field is in the set 'mask'. */
static inline uint64_t
fields_in (uint64_t word, unsigned mask)
{
  uint64_t m = 0;
  unsigned s;

  for (s = 0; s < 4; s++)
    if (mask & CS_BIT (s))
      m |= fields_equal (word, s);
  return m;
}

/* Low bits of the fields [lo, hi) of a word. */
static inline uint64_t
field_range (unsigned lo, unsigned hi)
{
  uint64_t m = hi >= PER_WORD ? ~UINT64_C (0) : (UINT64_C (1) << (2 * hi)) - 1;
  m &= ~UINT64_C (0) << (2 * lo);
  return m & LOW_BITS;
}

/* Fields past the last chunk are parked in CLEAN, so no search ever
 * finds them as EMPTY or dirty.
 */
static void
park_tail (struct chunkmap *cm)
{
  unsigned used = cm->nchunks % PER_WORD;

  if (used) {
    uint64_t *w = &cm->words[cm->nwords - 1];
    uint64_t tail = ~(field_range (0, used) * 3);

    *w = (*w & ~tail) | (pattern (CS_CLEAN) & tail);
  }
}

static int
init_common (struct chunkmap *cm, bool existing)
{
  uint64_t w;

  park_tail (cm);
  if (sumbits_init (&cm->dirty_hint, cm->nwords, false) == -1 ||
      sumbits_init (&cm->empty_hint, cm->nwords, true) == -1) {
    chunkmap_free (cm);
    rb_set_errno (ENOMEM);
    return -1;
  }
  if (!existing)
    return 0;
  /* Rebuild the counters and the dirty hints (the empty hints start all
   * set, and a search clears what is stale).
   */
  for (w = 0; w < cm->nwords; w++) {
    uint64_t word = cm->words[w];
    uint64_t d = fields_in (word, CS_ANY_DIRTY);

    cm->loaded += PER_WORD - rb_popcount64 (fields_equal (word,
                                                                 CS_EMPTY));
    cm->dirty += rb_popcount64 (d);
    cm->zero += rb_popcount64 (fields_equal (word, CS_ZERO));
    if (d)
      sumbits_set (&cm->dirty_hint, w);
  }
  /* The parked fields count as loaded above: take them off. */
  cm->loaded -= cm->nwords * PER_WORD - cm->nchunks;
  return 0;
}

int
chunkmap_init (struct chunkmap *cm, uint64_t nchunks)
{
  memset (cm, 0, sizeof *cm);
  cm->nchunks = nchunks;
  cm->nwords = (nchunks + PER_WORD - 1) / PER_WORD;
  cm->words = rb_calloc (cm->nwords ? cm->nwords : 1, sizeof (uint64_t));
  if (cm->words == NULL) {
    rb_set_errno (ENOMEM);
    return -1;
  }
  return init_common (cm, false);
}

int
chunkmap_init_at (struct chunkmap *cm, uint64_t nchunks, uint64_t *words,
                  bool existing)
{
  memset (cm, 0, sizeof *cm);
  cm->nchunks = nchunks;
  cm->nwords = (nchunks + PER_WORD - 1) / PER_WORD;
  cm->words = words;
  cm->words_external = true;
  if (!existing)
    memset (words, 0, cm->nwords * sizeof (uint64_t));
  return init_common (cm, existing);
}

void
chunkmap_free (struct chunkmap *cm)
{
  if (!cm->words_external)
    rb_free (cm->words);
  if (!cm->sect_external)
    rb_free (cm->sect);
  rb_free (cm->hot);
  if (!cm->part_external) {
    rb_free (cm->part);
    rb_free (cm->valid);
  }
  sumbits_free (&cm->dirty_hint);
  sumbits_free (&cm->empty_hint);
  memset (cm, 0, sizeof *cm);
}

/* chunkmap_mark, and with heat the hot bits of what was set already. */
static void
mark (struct chunkmap *cm, uint64_t s, uint64_t n, bool heat)
{
  /* None past the device: a whole short last chunk's are its own. */
  uint64_t end = RB_MIN_U (s + n, cm->nsect);

  if (cm->sect == NULL)
    return;
  while (s < end) {
    unsigned lo = s % 64, k = RB_MIN_U (end - s, (uint64_t) 64 - lo);
    uint64_t m = chunkmap_bit_range (lo, k), *w = &cm->sect[s / 64];

    uint64_t old = rb_atomic_load (w);

    /* Always the RMW (the CAS succeeds once, even if the bits look set
     * already): a plain load could see bits a flusher is just taking,
     * before this writer's data is visible to it (store-load
     * reordering, see chunkmap_move).
     */
    while (!rb_atomic_cas (w, &old, old | m))
      ;
    if (m & ~old)
      rb_atomic_add (&cm->sect_set, (uint64_t) rb_popcount64 (m & ~old));
    /* Set already: the sector was rewritten while dirty.  A plain load
     * first, so that a sector rewritten again and again costs no more
     * RMWs than before.
     */
    if ((m & old) && cm->hot && heat) {
      uint64_t *hw = &cm->hot[s / 64];

      if ((m & old) & ~rb_atomic_load_relaxed (hw))
        rb_atomic_or (hw, m & old);
    }
    s += k;
  }
}

void
chunkmap_mark (struct chunkmap *cm, uint64_t s, uint64_t n)
{
  mark (cm, s, n, true);
}

void
chunkmap_mark_again (struct chunkmap *cm, uint64_t s, uint64_t n)
{
  mark (cm, s, n, false);
}

void
chunkmap_mark_bits (struct chunkmap *cm, uint64_t s, uint64_t b)
{
  while (b) {
    unsigned lo = rb_ctz64 (b), len;
    uint64_t x = b >> lo;

    len = x == ~UINT64_C (0) ? 64 - lo : rb_ctz64 (~x);
    chunkmap_mark (cm, s + lo, len);
    b = lo + len >= 64 ? 0 : b & (~UINT64_C (0) << (lo + len));
  }
}

uint64_t
chunkmap_take_bits (struct chunkmap *cm, uint64_t s, unsigned n)
{
  return chunkmap_take_bits_but (cm, s, n, 0);
}

uint64_t
chunkmap_take_bits_but (struct chunkmap *cm, uint64_t s, unsigned n,
                        uint64_t keep)
{
  unsigned lo = s % 64;
  uint64_t m = chunkmap_bit_range (lo, n) & ~(keep << lo);
  uint64_t *w = &cm->sect[s / 64], old;

  rb_assert (lo + n <= 64);
  if (m == ~UINT64_C (0))
    old = rb_atomic_xchg (w, 0);
  else {
    old = rb_atomic_load (w);
    while ((old & m) && !rb_atomic_cas (w, &old, old & ~m))
      ;
  }
  if (old & m)
    rb_atomic_sub (&cm->sect_set, (uint64_t) rb_popcount64 (old & m));
  return (old & m) >> lo;
}

/* Words of the sector bits (and of V). */
static uint64_t
sect_words (const struct chunkmap *cm)
{
  uint64_t nbits = cm->nchunks << cm->sect_per_chunk_shift;
  return (nbits + 63) / 64 ? (nbits + 63) / 64 : 1;
}

int
chunkmap_init_hot (struct chunkmap *cm)
{
  rb_assert (cm->sect != NULL && cm->hot == NULL);
  cm->hot = rb_calloc (sect_words (cm), sizeof (uint64_t));
  if (cm->hot == NULL) {
    rb_set_errno (ENOMEM);
    return -1;
  }
  return 0;
}

void
chunkmap_cool (struct chunkmap *cm, uint64_t s, uint64_t b)
{
  uint64_t *hw;

  if (cm->hot == NULL || b == 0)
    return;
  hw = &cm->hot[s / 64];
  b <<= s % 64;
  if (rb_atomic_load_relaxed (hw) & b)
    rb_atomic_and (hw, ~b);
}

uint64_t
chunkmap_peek_bits (const struct chunkmap *cm, uint64_t s, unsigned n)
{
  unsigned lo = s % 64;

  return (rb_atomic_load_relaxed (&cm->sect[s / 64]) &
          chunkmap_bit_range (lo, n)) >> lo;
}

/* Has chunk c any sector bit set? */
static bool
chunk_has_bits (const struct chunkmap *cm, uint64_t c)
{
  unsigned shift = cm->sect_per_chunk_shift;
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

  while (s < end) {
    unsigned n = RB_MIN_U (end - s, (uint64_t) 64 - s % 64);
    if (chunkmap_peek_bits (cm, s, n))
      return true;
    s += n;
  }
  return false;
}

/* All the sector bits of chunk c. */
static void
mark_chunk (struct chunkmap *cm, uint64_t c)
{
  chunkmap_mark (cm, c << cm->sect_per_chunk_shift,
                 UINT64_C (1) << cm->sect_per_chunk_shift);
}

int
chunkmap_init_sectors (struct chunkmap *cm, unsigned per_chunk_shift,
                       uint64_t *words, bool existing, uint64_t nsect)
{
  uint64_t nbits = cm->nchunks << per_chunk_shift, w;
  uint64_t nsw = (nbits + 63) / 64 ? (nbits + 63) / 64 : 1;

  rb_assert (nsect <= nbits &&
             nsect + (UINT64_C (1) << per_chunk_shift) > nbits);

  if (words) {
    cm->sect = words;
    cm->sect_external = true;
    if (!existing)
      memset (words, 0, nsw * sizeof (uint64_t));
  }
  else {
    cm->sect = rb_calloc (nsw, sizeof (uint64_t));
    if (cm->sect == NULL) {
      rb_set_errno (ENOMEM);
      return -1;
    }
    existing = false;
  }
  cm->sect_per_chunk_shift = per_chunk_shift;
  cm->nsect = nsect;
  cm->sect_set = 0;
  if (existing) {
    /* Bits past the device, from an image before they were clipped:
     * nothing to write back there.
     */
    for (w = nsect; w < nsw * 64; w = (w / 64 + 1) * 64)
      cm->sect[w / 64] &= ~chunkmap_bit_range (w % 64, 64 - w % 64);
    for (w = 0; w < nsw; w++)
      cm->sect_set += (uint64_t) rb_popcount64 (cm->sect[w]);
  }
  /* A word at a time (the tail is parked CLEAN, never dirty).  Not the
   * ZERO chunks: they are written back whole, and a move to DIRTY sets
   * all their bits (chunkmap.h, "Counting").
   */
  for (w = 0; w < cm->nwords; w++) {
    uint64_t d = fields_equal (cm->words[w], CS_DIRTY);
    while (d) {
      uint64_t c = w * PER_WORD + rb_ctz64 (d) / 2;
      if (!existing || !chunk_has_bits (cm, c))
        mark_chunk (cm, c);
      d &= d - 1;
    }
  }
  return 0;
}

/* Clear the V bits of chunk c (an EMPTY chunk's, at init). */
static void
clear_valid (struct chunkmap *cm, uint64_t c)
{
  unsigned shift = cm->sect_per_chunk_shift;
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

  while (s < end) {
    unsigned n = RB_MIN_U (end - s, (uint64_t) 64 - s % 64);
    cm->valid[s / 64] &= ~chunkmap_bit_range (s % 64, n);
    s += n;
  }
}

static void valid_chunk (struct chunkmap *cm, uint64_t c);

/* A resumed image: V is what RAM holds.  An EMPTY chunk holds nothing
 * (never trusted: a crash in the middle of an eviction leaves its V
 * bits), a whole one every sector (an image written before whole
 * chunks kept their V bits), a partial one its V bits; the count is
 * rebuilt from them.
 */
static void
resident_rebuild (struct chunkmap *cm)
{
  uint64_t c, w, nsw = sect_words (cm);

  for (c = 0; c < cm->nchunks; c++) {
    if (chunkmap_get (cm, c) == CS_EMPTY)
      clear_valid (cm, c);
    else if (!chunkmap_partial (cm, c))
      valid_chunk (cm, c);
  }
  cm->resident = 0;
  for (w = 0; w < nsw; w++) {
    uint64_t v = cm->valid[w];

    if (w * 64 >= cm->nsect)
      break;
    if (cm->nsect - w * 64 < 64)
      v &= chunkmap_bit_range (0, cm->nsect - w * 64);
    cm->resident += (uint64_t) rb_popcount64 (v);
  }
}

int
chunkmap_init_partial (struct chunkmap *cm, uint64_t *part, uint64_t *valid,
                       bool existing)
{
  uint64_t npw = (cm->nchunks + 63) / 64 ? (cm->nchunks + 63) / 64 : 1;
  uint64_t nsw = sect_words (cm), w;

  rb_assert (cm->sect != NULL && cm->sect_per_chunk_shift > 0);
  if (part) {
    cm->part = part;
    cm->valid = valid;
    cm->part_external = true;
    if (!existing) {
      memset (part, 0, npw * sizeof (uint64_t));
      memset (valid, 0, nsw * sizeof (uint64_t));
    }
  }
  else {
    cm->part = rb_calloc (npw, sizeof (uint64_t));
    cm->valid = rb_calloc (nsw, sizeof (uint64_t));
    if (cm->part == NULL || cm->valid == NULL) {
      rb_free (cm->part);
      rb_free (cm->valid);
      cm->part = cm->valid = NULL;
      rb_set_errno (ENOMEM);
      return -1;
    }
    existing = false;
  }
  cm->npartial = 0;
  cm->resident = 0;
  if (!existing)                /* a new map: every chunk EMPTY */
    return 0;
  for (w = 0; w < npw; w++) {
    uint64_t b = cm->part[w];
    while (b) {
      uint64_t c = w * 64 + rb_ctz64 (b);
      b &= b - 1;
      if (c >= cm->nchunks || chunkmap_get (cm, c) == CS_EMPTY)
        cm->part[w] &= ~(UINT64_C (1) << (c % 64));
      else
        cm->npartial++;
    }
  }
  resident_rebuild (cm);
  return 0;
}

bool
chunkmap_any_partial (const struct chunkmap *cm, uint64_t c, uint64_t n)
{
  uint64_t end = c + n;

  if (cm->part == NULL || rb_atomic_load (&cm->npartial) == 0)
    return false;
  while (c < end) {
    unsigned lo = c % 64, k = RB_MIN_U (end - c, (uint64_t) 64 - lo);
    if (rb_atomic_load (&cm->part[c / 64]) & chunkmap_bit_range (lo, k))
      return true;
    c += k;
  }
  return false;
}

uint64_t
chunkmap_next_partial (const struct chunkmap *cm, uint64_t from)
{
  uint64_t w, npw = (cm->nchunks + 63) / 64;

  if (cm->part == NULL || from >= cm->nchunks ||
      rb_atomic_load (&cm->npartial) == 0)
    return UINT64_MAX;
  for (w = from / 64; w < npw; w++) {
    uint64_t b = rb_atomic_load (&cm->part[w]);
    if (w == from / 64)
      b &= ~UINT64_C (0) << (from % 64);
    if (b)
      return w * 64 + rb_ctz64 (b);
  }
  return UINT64_MAX;
}

void
chunkmap_set_partial (struct chunkmap *cm, uint64_t c)
{
  uint64_t m = UINT64_C (1) << (c % 64), *w = &cm->part[c / 64];
  uint64_t old = rb_atomic_load (w);

  /* (rb_atomic_or returns the new value: a CAS, to count once.) */
  while (!(old & m)) {
    if (rb_atomic_cas (w, &old, old | m)) {
      rb_atomic_add (&cm->npartial, 1);
      return;
    }
  }
}

/* Set V bits, counting those that were not set in cm->resident: the
 * CAS tells exactly which bits this call set, so loads meeting on a
 * sector count it once.
 */
void
chunkmap_set_valid (struct chunkmap *cm, uint64_t s, uint64_t n)
{
  uint64_t end = s + n;

  while (s < end) {
    unsigned lo = s % 64, k = RB_MIN_U (end - s, (uint64_t) 64 - lo);
    uint64_t m = chunkmap_bit_range (lo, k), *w = &cm->valid[s / 64];
    uint64_t old = rb_atomic_load (w);

    while ((m & ~old) && !rb_atomic_cas (w, &old, old | m))
      ;
    if (m & ~old)
      rb_atomic_add (&cm->resident, (uint64_t) rb_popcount64 (m & ~old));
    s += k;
  }
}

/* Every V bit of chunk c (but those past the device): it is whole. */
static void
valid_chunk (struct chunkmap *cm, uint64_t c)
{
  unsigned shift = cm->sect_per_chunk_shift;
  uint64_t s = c << shift, end = RB_MIN_U (s + (UINT64_C (1) << shift),
                                           cm->nsect);

  if (s < end)
    chunkmap_set_valid (cm, s, end - s);
}

uint64_t
chunkmap_valid_bits (const struct chunkmap *cm, uint64_t s, unsigned n)
{
  unsigned lo = s % 64;

  return (rb_atomic_load (&cm->valid[s / 64]) &
          chunkmap_bit_range (lo, n)) >> lo;
}

uint64_t
chunkmap_invalid (const struct chunkmap *cm, uint64_t s, unsigned n)
{
  uint64_t c = s >> cm->sect_per_chunk_shift;
  uint64_t all;
  enum chunk_state st;

  if (s >= cm->nsect)
    return 0;
  n = RB_MIN_U (n, cm->nsect - s);      /* none past the device */
  all = chunkmap_bit_range (0, n);

  /* The state before P: P is set before a chunk leaves EMPTY, so a
   * chunk seen loaded is seen partial if it is.  (P first, then the
   * state, saw an EMPTY chunk that a load of other sectors made
   * partial and CLEAN in between as whole: its sectors not loaded were
   * read from RAM as zeroes.)
   */
  st = chunkmap_get (cm, c);
  if (chunkmap_partial (cm, c))
    return ~chunkmap_valid_bits (cm, s, n) & all;
  return st == CS_EMPTY ? all : 0;
}

uint64_t
chunkmap_count_invalid (const struct chunkmap *cm, uint64_t s, uint64_t s1,
                        uint64_t max)
{
  unsigned shift = cm->sect_per_chunk_shift;
  uint64_t n = 0;

  while (s <= s1 && n < max) {
    uint64_t next_chunk = ((s >> shift) + 1) << shift;
    unsigned k = RB_MIN_U (RB_MIN_U (s1 + 1, next_chunk) - s,
                           (uint64_t) 64 - s % 64);

    n += (uint64_t) rb_popcount64 (chunkmap_invalid (cm, s, k));
    s += k;
  }
  return n;
}

bool
chunkmap_complete (struct chunkmap *cm, uint64_t c)
{
  unsigned shift = cm->sect_per_chunk_shift;
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

  if (!chunkmap_partial (cm, c))
    return chunkmap_get (cm, c) != CS_EMPTY;
  end = RB_MIN_U (end, cm->nsect);      /* past the device: valid */
  while (s < end) {
    unsigned n = RB_MIN_U (end - s, (uint64_t) 64 - s % 64);
    if (chunkmap_valid_bits (cm, s, n) != chunkmap_bit_range (0, n))
      return false;
    s += n;
  }
  chunkmap_make_whole (cm, c);
  return true;
}

void
chunkmap_make_whole (struct chunkmap *cm, uint64_t c)
{
  uint64_t m = UINT64_C (1) << (c % 64), *w, old;

  if (cm->part == NULL)
    return;
  w = &cm->part[c / 64];
  old = rb_atomic_load (w);
  if (old & m)
    valid_chunk (cm, c);
  while (old & m) {
    if (rb_atomic_cas (w, &old, old & ~m)) {
      rb_atomic_sub (&cm->npartial, 1);
      return;
    }
  }
}

enum chunk_state
chunkmap_get (const struct chunkmap *cm, uint64_t c)
{
  uint64_t w = rb_atomic_load (&cm->words[c / PER_WORD]);
  return (w >> (2 * (c % PER_WORD))) & 3;
}

const char *
rbi_chunk_state_name (enum chunk_state s)
{
  switch (s) {
  case CS_EMPTY: return "empty";
  case CS_CLEAN: return "clean";
  case CS_DIRTY: return "dirty";
  case CS_ZERO:  return "zero";
  default: rb_abort ();
  }
}

static inline bool
is_dirty_state (unsigned s)
{
  return (CS_ANY_DIRTY & CS_BIT (s)) != 0;
}

/* Chunks of word w at the fields in f left EMPTY: those not partial
 * are whole, every sector of theirs valid.  Their ranges are held
 * (chunkmap.h), so P does not change under us but by a completion,
 * which finds every V set already.
 */
static void
valid_whole (struct chunkmap *cm, uint64_t w, uint64_t f)
{
  while (f) {
    uint64_t c = w * PER_WORD + rb_ctz64 (f) / 2;

    if (!chunkmap_partial (cm, c))
      valid_chunk (cm, c);
    f &= f - 1;
  }
}

/* chunkmap_move; a chunk moving from a state in 'whole' to DIRTY gets
 * all its sector bits set before its CAS.
 */
static inline uint64_t
move (struct chunkmap *cm, uint64_t first, uint64_t n, unsigned from,
      enum chunk_state to, unsigned whole, uint64_t moved[4])
{
  uint64_t end = first + n, c = first, total = 0;
  uint64_t counts[4] = { 0, 0, 0, 0 };
  int64_t ddirty = 0, dloaded = 0;
  unsigned s;

  rb_assert (end <= cm->nchunks);
  rb_assert (to != CS_EMPTY);          /* nothing returns to EMPTY */
  from &= ~CS_BIT (to);             /* to -> to is not a move */

  while (c < end) {
    uint64_t w = c / PER_WORD;
    unsigned lo = c % PER_WORD;
    unsigned hi = RB_MIN_U (end - w * PER_WORD, PER_WORD);
    uint64_t range = field_range (lo, hi);
    /* An RMW, not a load, for moves to dirty: see chunkmap.h. */
    uint64_t old = is_dirty_state (to) ? rb_atomic_or (&cm->words[w], 0)
      : rb_atomic_load (&cm->words[w]), new, m;
    uint64_t wc[4];

    do {
      m = fields_in (old, from) & range;
      if (m == 0)
        break;
      /* ZERO -> DIRTY: every sector differs from the store (above). */
      if (to == CS_DIRTY && cm->sect) {
        uint64_t z = fields_in (old, whole) & m;
        while (z) {
          mark_chunk (cm, w * PER_WORD + rb_ctz64 (z) / 2);
          z &= z - 1;
        }
      }
      new = (old & ~(m * 3)) | (pattern (to) & (m * 3));
    } while (!rb_atomic_cas (&cm->words[w], &old, new));

    /* The hint, after the change (sumbits.h), and also when nothing
     * moved: the chunk may be dirty by another writer's CAS whose hint
     * is not set yet, and this caller may be acknowledged before that
     * writer gets to it; a FLUSH then must still find the chunk.
     */
    if (is_dirty_state (to))
      sumbits_set (&cm->dirty_hint, w);
    if (m != 0) {
      for (s = 0; s < 4; s++) {
        wc[s] = rb_popcount64 (fields_equal (old, s) & m);
        counts[s] += wc[s];
      }
      /* A chunk that leaves EMPTY whole holds all its sectors (V). */
      if (wc[CS_EMPTY] && cm->part)
        valid_whole (cm, w, fields_equal (old, CS_EMPTY) & m);
    }
    c = (w + 1) * PER_WORD;
  }

  for (s = 0; s < 4; s++) {
    total += counts[s];
    if (is_dirty_state (to) && !is_dirty_state (s))
      ddirty += counts[s];
    if (!is_dirty_state (to) && is_dirty_state (s))
      ddirty -= counts[s];
  }
  dloaded = counts[CS_EMPTY];
  if (to == CS_ZERO && total)
    rb_atomic_add (&cm->zero, total);
  else if (to != CS_ZERO && counts[CS_ZERO])
    rb_atomic_sub (&cm->zero, counts[CS_ZERO]);
  if (ddirty)
    rb_atomic_add (&cm->dirty, (uint64_t) ddirty);
  if (dloaded)
    rb_atomic_add (&cm->loaded, (uint64_t) dloaded);
  if (moved)
    memcpy (moved, counts, sizeof counts);
  return total;
}

uint64_t
chunkmap_move (struct chunkmap *cm, uint64_t first, uint64_t n,
               unsigned from, enum chunk_state to, uint64_t moved[4])
{
  return move (cm, first, n, from, to, CS_BIT (CS_ZERO), moved);
}

uint64_t
chunkmap_dirty_whole (struct chunkmap *cm, uint64_t first, uint64_t n,
                      unsigned from)
{
  return move (cm, first, n, from, CS_DIRTY, from | CS_BIT (CS_ZERO), NULL);
}

struct still_arg {
  struct chunkmap *cm;
  unsigned mask;
};

static bool
word_still_has (void *argv, uint64_t w)
{
  struct still_arg *a = argv;
  return fields_in (rb_atomic_load (&a->cm->words[w]), a->mask) != 0;
}

uint64_t
chunkmap_next (struct chunkmap *cm, uint64_t from, unsigned mask)
{
  struct sumbits *hint =
    mask == CS_BIT (CS_EMPTY) ? &cm->empty_hint : &cm->dirty_hint;
  struct still_arg arg = { cm, mask };
  uint64_t w = from / PER_WORD;

  rb_assert (mask == CS_BIT (CS_EMPTY) || mask == CS_ANY_DIRTY);
  if (from >= cm->nchunks)
    return UINT64_MAX;

  while ((w = sumbits_next (hint, w)) != UINT64_MAX) {
    uint64_t word = rb_atomic_load (&cm->words[w]);
    uint64_t m = fields_in (word, mask);
    bool partial = w == from / PER_WORD && from % PER_WORD;

    if (partial)
      m &= field_range (from % PER_WORD, PER_WORD);
    if (m)
      return w * PER_WORD + rb_ctz64 (m) / 2;
    /* The whole word has none: drop its hint (re-checked inside). */
    if (!partial)
      sumbits_clear (hint, w, word_still_has, &arg);
    w++;
  }
  return UINT64_MAX;
}

uint64_t
chunkmap_run (const struct chunkmap *cm, uint64_t c, uint64_t max,
              unsigned mask)
{
  uint64_t n = 0;

  while (n < max && c + n < cm->nchunks &&
         (mask & CS_BIT (chunkmap_get (cm, c + n))))
    n++;
  return n;
}

bool
chunkmap_all (const struct chunkmap *cm, uint64_t first, uint64_t n,
              unsigned mask)
{
  uint64_t end = first + n, c = first;

  while (c < end) {
    uint64_t w = c / PER_WORD;
    unsigned lo = c % PER_WORD;
    unsigned hi = RB_MIN_U (end - w * PER_WORD, PER_WORD);
    uint64_t range = field_range (lo, hi);

    if ((fields_in (rb_atomic_load (&cm->words[w]), mask) & range) != range)
      return false;
    c = (w + 1) * PER_WORD;
  }
  return true;
}

bool
chunkmap_evict (struct chunkmap *cm, uint64_t c)
{
  uint64_t w = c / PER_WORD, shift = 2 * (c % PER_WORD);
  uint64_t old = rb_atomic_load (&cm->words[w]), s, end;

  do {
    if (((old >> shift) & 3) != CS_CLEAN)
      return false;
  } while (!rb_atomic_cas (&cm->words[w], &old,
                           old & ~(UINT64_C (3) << shift)));
  rb_atomic_sub (&cm->loaded, 1);
  sumbits_set (&cm->empty_hint, w);
  if (cm->sect == NULL)
    return true;
  s = c << cm->sect_per_chunk_shift;
  end = s + (UINT64_C (1) << cm->sect_per_chunk_shift);
  while (s < end) {
    unsigned n = RB_MIN_U (end - s, (uint64_t) 64 - s % 64);

    chunkmap_take_bits (cm, s, n);
    if (cm->part) {
      uint64_t m = chunkmap_bit_range (s % 64, n), *vw = &cm->valid[s / 64];
      uint64_t v = rb_atomic_load (vw);

      while ((v & m) && !rb_atomic_cas (vw, &v, v & ~m))
        ;
      if (v & m)
        rb_atomic_sub (&cm->resident, (uint64_t) rb_popcount64 (v & m));
    }
    s += n;
  }
  if (cm->part) {
    uint64_t m = UINT64_C (1) << (c % 64), *pw = &cm->part[c / 64];
    uint64_t p = rb_atomic_load (pw);

    while (p & m) {
      if (rb_atomic_cas (pw, &p, p & ~m)) {
        rb_atomic_sub (&cm->npartial, 1);
        break;
      }
    }
  }
  return true;
}
