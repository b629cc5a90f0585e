/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the chunk state map (chunkmap.h) against a byte-per-chunk
 * model: moves, counters, searches, the partial last word, and a map
 * rebuilt from its words alone (chunkmap_init_at, for resume), and the
 * sector bits.  The counters (dirty, ZERO, loaded) against the model.
 */

#include <config.h>

#undef NDEBUG
#include <glib.h>
#include <string.h>

#include "chunkmap.h"

static void
check_model (struct chunkmap *cm, const uint8_t *m, uint64_t n)
{
  uint64_t c, dirty = 0, loaded = 0, zero = 0;

  for (c = 0; c < n; c++) {
    g_assert_cmpint (chunkmap_get (cm, c), ==, m[c]);
    dirty += m[c] == CS_DIRTY || m[c] == CS_ZERO;
    loaded += m[c] != CS_EMPTY;
    zero += m[c] == CS_ZERO;
  }
  g_assert_cmpuint (chunkmap_dirty (cm), ==, dirty);
  g_assert_cmpuint (chunkmap_zero (cm), ==, zero);
  g_assert_cmpuint (chunkmap_loaded (cm), ==, loaded);
}

static uint64_t
model_next (const uint8_t *m, uint64_t n, uint64_t from, unsigned mask)
{
  for (; from < n; from++)
    if (mask & CS_BIT (m[from]))
      return from;
  return UINT64_MAX;
}

static void
test_random (void)
{
  static const uint64_t sizes[] = { 1, 31, 32, 33, 1000, 4099 };
  size_t s;

  for (s = 0; s < G_N_ELEMENTS (sizes); s++) {
    uint64_t n = sizes[s];
    uint8_t *m = g_new0 (uint8_t, n);
    GRand *r = g_rand_new_with_seed (42 + n);
    struct chunkmap cm;
    int op;

    g_assert_cmpint (chunkmap_init (&cm, n), ==, 0);
    check_model (&cm, m, n);
    g_assert_cmpuint (chunkmap_next (&cm, 0, CS_BIT (CS_EMPTY)), ==, 0);
    g_assert_cmpuint (chunkmap_next (&cm, 0, CS_ANY_DIRTY), ==, UINT64_MAX);

    for (op = 0; op < 3000; op++) {
      uint64_t first = g_rand_int_range (r, 0, n);
      uint64_t len = g_rand_int_range (r, 1, n - first + 1);
      unsigned from = g_rand_int_range (r, 1, 16);
      unsigned to = g_rand_int_range (r, 1, 4);
      uint64_t moved[4], expect = 0, c, e[4] = { 0, 0, 0, 0 };
      uint64_t got;

      for (c = first; c < first + len; c++)
        if ((from & ~CS_BIT (to)) & CS_BIT (m[c])) {
          e[m[c]]++;
          expect++;
          m[c] = to;
        }
      got = chunkmap_move (&cm, first, len, from, to, moved);
      g_assert_cmpuint (got, ==, expect);
      for (c = 0; c < 4; c++)
        g_assert_cmpuint (moved[c], ==, e[c]);
      check_model (&cm, m, n);

      /* Searches agree with the model (and drop stale hints safely). */
      {
        uint64_t f = g_rand_int_range (r, 0, n);
        g_assert_cmpuint (chunkmap_next (&cm, f, CS_ANY_DIRTY), ==,
                          model_next (m, n, f, CS_ANY_DIRTY));
        g_assert_cmpuint (chunkmap_next (&cm, f, CS_BIT (CS_EMPTY)), ==,
                          model_next (m, n, f, CS_BIT (CS_EMPTY)));
        g_assert_cmpint (chunkmap_all (&cm, first, len, CS_LOADED), ==,
                         model_next (m, first + len, first,
                                     CS_BIT (CS_EMPTY)) == UINT64_MAX);
      }
      {
        uint64_t c0 = g_rand_int_range (r, 0, n), run = 0;
        unsigned mask = CS_BIT (m[c0]);
        while (c0 + run < n && (mask & CS_BIT (m[c0 + run])))
          run++;
        g_assert_cmpuint (chunkmap_run (&cm, c0, n, mask), ==, run);
      }
    }
    /* The words alone, as a RAM image file keeps them: a map built on
     * them has the same states, counters and searches (resume).  And
     * the same words, not existing, are all EMPTY.
     */
    {
      uint64_t *words = g_memdup2 (cm.words, cm.nwords * sizeof (uint64_t));
      uint8_t *empty = g_new0 (uint8_t, n);
      struct chunkmap again;
      uint64_t f;

      g_assert_cmpint (chunkmap_init_at (&again, n, words, true), ==, 0);
      check_model (&again, m, n);
      for (f = 0; f < n; f++) {
        g_assert_cmpuint (chunkmap_next (&again, f, CS_ANY_DIRTY), ==,
                          model_next (m, n, f, CS_ANY_DIRTY));
        g_assert_cmpuint (chunkmap_next (&again, f, CS_BIT (CS_EMPTY)), ==,
                          model_next (m, n, f, CS_BIT (CS_EMPTY)));
      }
      chunkmap_free (&again);
      g_assert_cmpint (chunkmap_init_at (&again, n, words, false), ==, 0);
      check_model (&again, empty, n);
      chunkmap_free (&again);
      g_free (words);           /* not freed by chunkmap_free */
      g_free (empty);
    }
    chunkmap_free (&cm);
    g_free (m);
    g_rand_free (r);
  }
}

/* The sector bits: set and taken in pieces, within and across words;
 * a move ZERO -> DIRTY (or chunkmap_dirty_whole) sets all of a chunk's
 * bits; a map rebuilt with dirty chunks starts with all their bits set.
 * chunkmap_sectors_set counts the bits set throughout.
 */
static void
test_sectors (void)
{
  struct chunkmap cm;
  uint64_t words[4] = { 0, 0, 0, 0 }, s;
  unsigned shift;

  for (shift = 0; shift <= 8; shift += 4) {       /* 1, 16, 256 per chunk */
    uint64_t per = UINT64_C (1) << shift;

    g_assert_cmpint (chunkmap_init (&cm, 100), ==, 0);
    g_assert_cmpint (chunkmap_init_sectors (&cm, shift, NULL, false,
                                                   100 * per), ==, 0);
    chunkmap_move (&cm, 0, 100, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
    /* Nothing set yet. */
    for (s = 0; s < 100 * per; s += 64)
      g_assert_cmpuint (chunkmap_peek_bits (&cm, s, 64), ==, 0);

    /* A run across a word boundary: sectors 60..69. */
    chunkmap_mark (&cm, 60, 10);
    chunkmap_mark (&cm, 62, 4);           /* set already: not counted */
    g_assert_cmpuint (chunkmap_sectors_set (&cm), ==, 10);
    g_assert_cmpuint (chunkmap_peek_bits (&cm, 56, 8), ==, 0xf0);
    g_assert_cmpuint (chunkmap_peek_bits (&cm, 64, 8), ==, 0x3f);
    g_assert_cmpuint (chunkmap_take_bits (&cm, 58, 4), ==, 0xc);
    g_assert_cmpuint (chunkmap_sectors_set (&cm), ==, 8);
    g_assert_cmpuint (chunkmap_peek_bits (&cm, 56, 8), ==, 0xc0);
    g_assert_cmpuint (chunkmap_take_bits (&cm, 0, 64), ==,
                      UINT64_C (3) << 62);
    g_assert_cmpuint (chunkmap_take_bits (&cm, 64, 64), ==, 0x3f);
    g_assert_cmpuint (chunkmap_take_bits (&cm, 64, 64), ==, 0);
    g_assert_cmpuint (chunkmap_sectors_set (&cm), ==, 0);

    /* ZERO -> DIRTY: every sector of the chunk; CLEAN -> DIRTY: none. */
    chunkmap_move (&cm, 7, 1, CS_BIT (CS_CLEAN), CS_ZERO, NULL);
    chunkmap_move (&cm, 7, 2, CS_ANY_DIRTY | CS_BIT (CS_CLEAN), CS_DIRTY,
                   NULL);
    for (s = 0; s < 100 * per; s++) {
      uint64_t b = chunkmap_peek_bits (&cm, s, 1);
      g_assert_cmpuint (b, ==, s >= 7 * per && s < 8 * per ? 1 : 0);
    }

    /* chunkmap_dirty_whole: every sector of the chunks it moves (9),
     * none of those it leaves (8 is DIRTY already).
     */
    for (s = 7 * per; s < 8 * per; s++)
      g_assert_cmpuint (chunkmap_take_bits (&cm, s, 1), ==, 1);
    g_assert_cmpuint (chunkmap_dirty_whole (&cm, 8, 2, CS_BIT (CS_CLEAN)),
                      ==, 1);
    g_assert_cmpint (chunkmap_get (&cm, 9), ==, CS_DIRTY);
    g_assert_cmpuint (chunkmap_dirty (&cm), ==, 3);
    g_assert_cmpuint (chunkmap_sectors_set (&cm), ==, per);
    for (s = 0; s < 100 * per; s++) {
      uint64_t b = chunkmap_peek_bits (&cm, s, 1);
      g_assert_cmpuint (b, ==, s >= 9 * per && s < 10 * per ? 1 : 0);
    }
    chunkmap_free (&cm);
  }

  /* Resume: the dirty chunks of a map from before have all their bits. */
  g_assert_cmpint (chunkmap_init_at (&cm, 100, words, false), ==, 0);
  chunkmap_move (&cm, 0, 100, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
  chunkmap_move (&cm, 33, 2, CS_BIT (CS_CLEAN), CS_DIRTY, NULL);
  chunkmap_free (&cm);
  g_assert_cmpint (chunkmap_init_at (&cm, 100, words, true), ==, 0);
  g_assert_cmpint (chunkmap_init_sectors (&cm, 4, NULL, false, 100 * 16),
                   ==, 0);
  g_assert_cmpuint (chunkmap_sectors_set (&cm), ==, 2 * 16);
  for (s = 0; s < 100 * 16; s++)
    g_assert_cmpuint (chunkmap_peek_bits (&cm, s, 1), ==,
                      s >= 33 * 16 && s < 35 * 16 ? 1 : 0);
  chunkmap_free (&cm);

  /* Resume with the bits kept (a format 3 RAM image): they stay as they
   * were, and a dirty chunk without any gets all of its own.
   */
  {
    uint64_t sect[100 * 16 / 64] = { 0 };

    g_assert_cmpint (chunkmap_init_at (&cm, 100, words, true), ==, 0);
    sect[33 * 16 / 64] |= UINT64_C (1) << (33 * 16 % 64 + 3);
    g_assert_cmpint (chunkmap_init_sectors (&cm, 4, sect, true, 100 * 16),
                     ==, 0);
    g_assert_cmpuint (chunkmap_sectors_set (&cm), ==, 1 + 16);
    for (s = 0; s < 100 * 16; s++)
      g_assert_cmpuint (chunkmap_peek_bits (&cm, s, 1), ==,
                        s == 33 * 16 + 3 || (s >= 34 * 16 && s < 35 * 16)
                        ? 1 : 0);
    chunkmap_free (&cm);
  }
}

/* Two writers dirty one chunk at once: A's compare-and-swap makes it
 * DIRTY (or ZERO), and A is preempted before it sets the word's dirty
 * hint; B's move finds the chunk DIRTY already, changes nothing, and B
 * is acknowledged.  A FLUSH now must find the chunk: the write back
 * that answers it searches by the hint.  A's state change without its
 * hint is made by hand here (A is stopped between the two).
 */
static void
test_hint_second_writer (void)
{
  static const enum chunk_state states[] = { CS_DIRTY, CS_ZERO };
  struct chunkmap cm;
  size_t i;

  for (i = 0; i < G_N_ELEMENTS (states); i++) {
    enum chunk_state to = states[i];

    g_assert_cmpint (chunkmap_init (&cm, 100), ==, 0);
    chunkmap_move (&cm, 0, 100, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
    /* A search over a clean map drops the hints. */
    g_assert_cmpuint (chunkmap_next (&cm, 0, CS_ANY_DIRTY), ==, UINT64_MAX);
    /* A: its CAS, CLEAN -> to for chunk 5, then stopped. */
    cm.words[0] ^= ((uint64_t) (CS_CLEAN ^ to)) << (2 * 5);
    g_assert_cmpint (chunkmap_get (&cm, 5), ==, to);
    /* B: the same move, acknowledged. */
    chunkmap_move (&cm, 5, 1, CS_BIT (CS_CLEAN) | CS_BIT (CS_EMPTY), to, NULL);
    if (chunkmap_next (&cm, 0, CS_ANY_DIRTY) != 5)
      g_error ("a %s chunk of a writer stopped before its hint, moved "
               "again by a second writer that was acknowledged, is not "
               "found by write back's search",
               rbi_chunk_state_name (to));
    chunkmap_free (&cm);
  }
}

static void
test_names (void)
{
  g_assert_cmpstr (rbi_chunk_state_name (CS_EMPTY), ==, "empty");
  g_assert_cmpstr (rbi_chunk_state_name (CS_ZERO), ==, "zero");
}

/* Eviction (ram-size=): only a CLEAN chunk goes back to EMPTY, with
 * the counters, the EMPTY hint, its sector bits, P and V right.
 */
static void
test_evict (void)
{
  struct chunkmap cm;
  uint64_t c;

  g_assert_cmpint (chunkmap_init (&cm, 100), ==, 0);
  g_assert_cmpint (chunkmap_init_sectors (&cm, 4, NULL, false, 100 * 16),
                   ==, 0);
  g_assert_cmpint (chunkmap_init_partial (&cm, NULL, NULL, false), ==, 0);
  chunkmap_move (&cm, 0, 100, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
  g_assert_cmpuint (chunkmap_next (&cm, 0, CS_BIT (CS_EMPTY)), ==,
                    UINT64_MAX);
  /* 40 dirty with a bit, 41 partial and clean with stale bits. */
  chunkmap_mark (&cm, 40 * 16 + 3, 1);
  chunkmap_move (&cm, 40, 1, CS_BIT (CS_CLEAN), CS_DIRTY, NULL);
  chunkmap_set_partial (&cm, 41);
  chunkmap_set_valid (&cm, 41 * 16, 5);
  chunkmap_mark (&cm, 41 * 16 + 1, 2);
  g_assert_false (chunkmap_evict (&cm, 40));
  g_assert_cmpint (chunkmap_get (&cm, 40), ==, CS_DIRTY);
  g_assert_true (chunkmap_evict (&cm, 41));
  g_assert_false (chunkmap_evict (&cm, 41));
  g_assert_true (chunkmap_evict (&cm, 99));
  g_assert_cmpint (chunkmap_get (&cm, 41), ==, CS_EMPTY);
  g_assert_cmpuint (chunkmap_loaded (&cm), ==, 98);
  g_assert_cmpuint (chunkmap_dirty (&cm), ==, 1);
  g_assert_cmpuint (chunkmap_npartial (&cm), ==, 0);
  g_assert_false (chunkmap_partial (&cm, 41));
  g_assert_cmpuint (chunkmap_valid_bits (&cm, 41 * 16, 16), ==, 0);
  g_assert_cmpuint (chunkmap_peek_bits (&cm, 41 * 16, 16), ==, 0);
  g_assert_cmpuint (chunkmap_peek_bits (&cm, 40 * 16, 16), ==, 1 << 3);
  g_assert_cmpuint (chunkmap_sectors_set (&cm), ==, 1);
  c = chunkmap_next (&cm, 0, CS_BIT (CS_EMPTY));
  g_assert_cmpuint (c, ==, 41);
  g_assert_cmpuint (chunkmap_next (&cm, 42, CS_BIT (CS_EMPTY)), ==, 99);
  /* Loaded again, it may be partial again. */
  chunkmap_set_partial (&cm, 41);
  chunkmap_move (&cm, 41, 1, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
  g_assert_cmpuint (chunkmap_loaded (&cm), ==, 99);
  g_assert_cmpuint (chunkmap_npartial (&cm), ==, 1);
  chunkmap_free (&cm);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/chunkmap/random", test_random);
  g_test_add_func ("/chunkmap/names", test_names);
  g_test_add_func ("/chunkmap/sectors", test_sectors);
  g_test_add_func ("/chunkmap/evict", test_evict);
  g_test_add_func ("/chunkmap/hint-second-writer", test_hint_second_writer);
  return g_test_run ();
}
