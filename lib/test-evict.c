/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the eviction policy (evict.h) over a model cache: a hot
 * set survives a scan of the whole device, a chunk the caller may not
 * evict is never picked, a cache of pinned chunks yields none, and
 * one budget bounds a search whose victims do not go.
 */

#include <config.h>

#undef NDEBUG
#include <glib.h>
#include <string.h>

#include "evict.h"

struct cache {
  struct evict ev;
  uint64_t n, slots, used;
  bool *resident, *pinned;
  uint64_t hits, misses;
};

static uint64_t
is_resident (void *opaque, uint64_t c)
{
  struct cache *k = opaque;
  return k->resident[c];
}

static bool
evictable (void *opaque, uint64_t c)
{
  struct cache *k = opaque;
  return !k->pinned[c];
}

static void
cache_init (struct cache *k, uint64_t n, uint64_t slots)
{
  memset (k, 0, sizeof *k);
  k->n = n;
  k->slots = slots;
  k->resident = g_new0 (bool, n);
  k->pinned = g_new0 (bool, n);
  g_assert_cmpint (evict_init (&k->ev, n), ==, 0);
}

static void
cache_free (struct cache *k)
{
  evict_free (&k->ev);
  g_free (k->resident);
  g_free (k->pinned);
}

/* One access to chunk c: a hit touches it, a miss evicts if full. */
static void
access_chunk (struct cache *k, uint64_t c)
{
  if (k->resident[c]) {
    k->hits++;
    evict_touch (&k->ev, c);
    return;
  }
  k->misses++;
  if (k->used == k->slots) {
    uint64_t steps = 2 * k->n + 2, v;

    v = evict_pick (&k->ev, &steps, false, is_resident, evictable, k);
    if (v == UINT64_MAX) {
      steps = k->n;
      v = evict_pick (&k->ev, &steps, true, is_resident, evictable, k);
    }
    g_assert_cmpuint (v, !=, UINT64_MAX);
    g_assert_true (k->resident[v]);
    g_assert_false (k->pinned[v]);
    k->resident[v] = false;
    evict_forget (&k->ev, v);
    k->used--;
  }
  k->resident[c] = true;
  k->used++;
}

/* A hot set of 40 chunks in a 100-slot cache of a 1000-chunk device,
 * used among random accesses to the rest; then a scan reads every chunk 16 times in a row
 * (4 KiB reads of a 64 KiB chunk) while the hot set keeps being used
 * at one hot access per 4 scanned chunks, so that each hot chunk is
 * used only once per 160 misses: more than a turn of the hand, which
 * a CLOCK with one REF bit does not survive (every hot chunk
 * missed).  The hot set must stay.
 */
static void
test_scan (void)
{
  struct cache k;
  GRand *r = g_rand_new_with_seed (11);
  uint64_t i, c, hot_misses;
  int round, j;

  cache_init (&k, 1000, 100);
  /* Warm up: the hot set among random cold accesses (a miss each). */
  for (round = 0; round < 20; round++)
    for (i = 0; i < 40; i++) {
      access_chunk (&k, 500 + i);
      access_chunk (&k, g_rand_int_range (r, 0, 500));
    }
  for (i = 0; i < 40; i++)
    g_assert_true (k.resident[500 + i]);

  hot_misses = 0;
  for (c = 0; c < 1000; c++) {
    uint64_t h = 500 + (c / 4) % 40;

    for (j = 0; j < 16; j++)
      access_chunk (&k, c);
    if (c % 4)
      continue;
    if (!k.resident[h])
      hot_misses++;
    access_chunk (&k, h);
  }
  g_test_message ("hot misses during the scan: %" PRIu64, hot_misses);
  g_assert_cmpuint (hot_misses, <=, 4);
  for (i = 0; i < 40; i++)
    g_assert_true (k.resident[500 + i]);
  g_rand_free (r);
  cache_free (&k);
}

/* Random accesses with a changing set of pinned chunks (dirty, not
 * synced): a pinned chunk is never picked (access_chunk asserts it),
 * and with every resident chunk pinned nothing is.
 */
static void
test_pinned (void)
{
  struct cache k;
  GRand *r = g_rand_new_with_seed (7);
  uint64_t c, steps;
  int op;

  cache_init (&k, 300, 64);
  for (op = 0; op < 20000; op++) {
    c = g_rand_int_range (r, 0, 300);
    if (k.resident[c] && g_rand_int_range (r, 0, 4) == 0)
      k.pinned[c] = !k.pinned[c];
    if (!k.resident[c]) {
      /* Keep one unpinned chunk, as write back would. */
      uint64_t p = 0, d;
      for (d = 0; d < 300; d++)
        p += k.resident[d] && k.pinned[d];
      if (p >= k.slots - 1)
        for (d = 0; d < 300; d++)
          k.pinned[d] = false;
    }
    access_chunk (&k, c);
    g_assert_cmpuint (k.used, <=, k.slots);
  }
  for (c = 0; c < 300; c++)
    k.pinned[c] = k.resident[c];
  steps = 1000;
  g_assert_cmpuint (evict_pick (&k.ev, &steps, false, is_resident,
                                evictable, &k), ==, UINT64_MAX);
  g_assert_cmpuint (steps, ==, 0);
  steps = 1000;
  g_assert_cmpuint (evict_pick (&k.ev, &steps, true, is_resident,
                                evictable, &k), ==, UINT64_MAX);
  g_rand_free (r);
  cache_free (&k);
}

/* A cache whose clean chunks are all used (every one used twice a
 * turn): the normal pick finds none, the desperate one does.
 */
static void
test_desperate (void)
{
  struct cache k;
  uint64_t c, v, steps;
  int round;

  cache_init (&k, 16, 8);
  for (round = 0; round < 10; round++)
    for (c = 0; c < 8; c++) {
      access_chunk (&k, c);
      evict_touch (&k.ev, c);
      if (round < 9) {
        steps = 1;
        evict_pick (&k.ev, &steps, false, is_resident, evictable, &k);
      }
    }
  for (c = 0; c < 2; c++)
    k.pinned[c] = false;
  for (c = 2; c < 8; c++)
    k.pinned[c] = true;
  steps = 16;
  v = evict_pick (&k.ev, &steps, true, is_resident, evictable, &k);
  g_assert_cmpuint (v, <, 2);
  cache_free (&k);
}

/* Victims that do not go (the engine checks them again under their
 * locks and may keep them: not synced yet) are picked again on the
 * next turn of the hand; one budget bounds the whole search: the hand
 * passes every chunk at most once per budget of n steps.
 */
static void
test_budget (void)
{
  struct cache k;
  uint64_t c, v, steps = 3 * 16, picks = 0;

  cache_init (&k, 16, 8);
  for (c = 0; c < 16; c += 2) {
    k.resident[c] = true;
    k.used++;
  }
  while ((v = evict_pick (&k.ev, &steps, false, is_resident, evictable,
                          &k)) != UINT64_MAX) {
    g_assert_true (k.resident[v]);
    g_assert_cmpuint (++picks, <=, 3 * 8);
  }
  g_assert_cmpuint (picks, ==, 3 * 8);
  g_assert_cmpuint (steps, ==, 0);
  cache_free (&k);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/evict/scan", test_scan);
  g_test_add_func ("/evict/pinned", test_pinned);
  g_test_add_func ("/evict/desperate", test_desperate);
  g_test_add_func ("/evict/budget", test_budget);
  return g_test_run ();
}
