/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the summary bitmaps (sumbits.h), against a plain array
 * model, including concurrent setters and clearers.
 */

#include <config.h>

#undef NDEBUG
#include <glib.h>
#include <string.h>

#include "sumbits.h"

static bool *model;

static bool
still_model (void *arg, uint64_t i)
{
  return rb_atomic_load (&((bool *) arg)[i]);
}

/* Every item set in the model must be found by walking sumbits_next(),
 * clearing the hints of items that are not set.
 */
static void
check_walk (struct sumbits *sb, uint64_t n)
{
  uint64_t i = 0, found = 0, expect = 0, k;

  for (k = 0; k < n; k++)
    expect += model[k];
  while ((i = sumbits_next (sb, i)) != UINT64_MAX) {
    g_assert_cmpuint (i, <, n);
    if (model[i])
      found++;
    else
      sumbits_clear (sb, i, still_model, model);
    i++;
  }
  g_assert_cmpuint (found, ==, expect);
}

static void
test_sizes (void)
{
  static const uint64_t sizes[] = { 1, 63, 64, 65, 4095, 4096, 4097,
                                    262144, 262145, 1000003 };
  size_t s;

  for (s = 0; s < G_N_ELEMENTS (sizes); s++) {
    uint64_t n = sizes[s], i;
    struct sumbits sb;
    GRand *r = g_rand_new_with_seed (n);

    model = g_new0 (bool, n);
    g_assert_cmpint (sumbits_init (&sb, n, false), ==, 0);
    g_assert_cmpuint (sumbits_next (&sb, 0), ==, UINT64_MAX);
    for (i = 0; i < n / 7 + 1; i++) {
      uint64_t k = g_rand_int_range (r, 0, n);
      model[k] = true;
      sumbits_set (&sb, k);
    }
    check_walk (&sb, n);
    /* Clear half of the model, walk again: stale hints get dropped. */
    for (i = 0; i < n; i += 2)
      model[i] = false;
    check_walk (&sb, n);
    /* After a walk that cleared, only real items remain hinted. */
    i = 0;
    while ((i = sumbits_next (&sb, i)) != UINT64_MAX) {
      g_assert_true (model[i]);
      i++;
    }
    sumbits_free (&sb);

    /* all_set starts with everything hinted, and nothing past n. */
    g_assert_cmpint (sumbits_init (&sb, n, true), ==, 0);
    g_assert_cmpuint (sumbits_next (&sb, 0), ==, 0);
    g_assert_cmpuint (sumbits_next (&sb, n - 1), ==, n - 1);
    g_assert_cmpuint (sumbits_next (&sb, n), ==, UINT64_MAX);
    sumbits_free (&sb);
    g_free (model);
    g_rand_free (r);
  }
}

/* Concurrency: setters mark items true then set the hint; a searcher
 * walks and clears hints of false items.  No item that is true at the
 * end may have lost its hint.
 */
#define N 200000
#define SETTERS 3

static struct sumbits csb;

static gpointer
setter (gpointer arg)
{
  GRand *r = g_rand_new_with_seed (GPOINTER_TO_UINT (arg));
  int k;

  for (k = 0; k < 200000; k++) {
    uint64_t i = g_rand_int_range (r, 0, N);
    if (g_rand_boolean (r)) {
      rb_atomic_store (&model[i], true);
      sumbits_set (&csb, i);
    }
    else
      rb_atomic_store (&model[i], false);
  }
  g_rand_free (r);
  return NULL;
}

static gpointer
searcher (gpointer arg)
{
  int pass;

  for (pass = 0; pass < 50; pass++) {
    uint64_t i = 0;
    while ((i = sumbits_next (&csb, i)) != UINT64_MAX) {
      if (!still_model (model, i))
        sumbits_clear (&csb, i, still_model, model);
      i++;
    }
  }
  return NULL;
}

static void
test_concurrent (void)
{
  GThread *t[SETTERS + 1];
  uint64_t i;
  int k;

  model = g_new0 (bool, N);
  g_assert_cmpint (sumbits_init (&csb, N, false), ==, 0);
  for (k = 0; k < SETTERS; k++)
    t[k] = g_thread_new ("setter", setter, GUINT_TO_POINTER (k + 1));
  t[SETTERS] = g_thread_new ("searcher", searcher, NULL);
  for (k = 0; k <= SETTERS; k++)
    g_thread_join (t[k]);
  for (i = 0; i < N; i++)
    if (model[i]) {
      /* The hint for a set item must be reachable from the top. */
      g_assert_cmpuint (sumbits_next (&csb, i), ==, i);
    }
  sumbits_free (&csb);
  g_free (model);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/sumbits/sizes", test_sizes);
  g_test_add_func ("/sumbits/concurrent", test_concurrent);
  return g_test_run ();
}
