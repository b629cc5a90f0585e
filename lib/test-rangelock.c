/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the ordered range locks (rangelock.h): overlapping
 * holders exclude each other, disjoint ones do not wait, and overlapping
 * waiters are granted in arrival order.
 */

#include <config.h>

#undef NDEBUG
#include <glib.h>

#include "rangelock.h"

static struct rangelock rl;

/* --- exclusion under stress ------------------------------------------ */

#define UNITS 1000
#define THREADS 4
#define ROUNDS 20000

static int holders[UNITS];

static gpointer
stress (gpointer arg)
{
  GRand *r = g_rand_new_with_seed (GPOINTER_TO_UINT (arg));
  int k;

  for (k = 0; k < ROUNDS; k++) {
    uint64_t a = g_rand_int_range (r, 0, UNITS);
    uint64_t b = a + g_rand_int_range (r, 1, 40);
    struct rl_node n;
    uint64_t u;

    if (b > UNITS)
      b = UNITS;
    rangelock_acquire (&rl, &n, a, b, k % 3);
    for (u = a; u < b; u++)
      g_assert_cmpint (rb_atomic_add (&holders[u], 1), ==, 1);
    for (u = a; u < b; u++)
      rb_atomic_sub (&holders[u], 1);
    rangelock_release (&rl, &n);
  }
  g_rand_free (r);
  return NULL;
}

static void
test_stress (void)
{
  GThread *t[THREADS];
  int i;

  rangelock_init (&rl);
  for (i = 0; i < THREADS; i++)
    t[i] = g_thread_new ("stress", stress, GUINT_TO_POINTER (i + 7));
  for (i = 0; i < THREADS; i++)
    g_thread_join (t[i]);
  g_assert_cmpuint (rl.held, ==, 0);
  g_assert_cmpuint (rangelock_bytes (&rl, RL_STORE), ==, 0);
  rangelock_destroy (&rl);
}

/* --- arrival order ---------------------------------------------------- */

struct waiter {
  uint64_t a, b;
  int id;
  GThread *t;
  struct rl_node n;
};

static GMutex order_lock;
static int order[8], norder;
static int granted[8];

static gpointer
waiter_main (gpointer arg)
{
  struct waiter *w = arg;

  rangelock_acquire (&rl, &w->n, w->a, w->b, RL_WRITE);
  g_mutex_lock (&order_lock);
  order[norder++] = w->id;
  g_mutex_unlock (&order_lock);
  rb_atomic_store (&granted[w->id], 1);
  rangelock_release (&rl, &w->n);
  return NULL;
}

/* Wait until thread w is queued in the tree (held counts waiters too). */
static void
wait_queued (uint64_t expect)
{
  for (;;) {
    uint64_t h;
    rb_mutex_lock (&rl.lock);
    h = rl.held;
    rb_mutex_unlock (&rl.lock);
    if (h >= expect)
      return;
    g_thread_yield ();
  }
}

static void
test_order (void)
{
  struct rl_node first;
  struct waiter w[3] = {
    { 5, 15, 0 },     /* overlaps the first holder: must wait */
    { 0, 10, 1 },     /* overlaps both: must come after w[0] */
    { 20, 30, 2 },    /* disjoint: must not wait */
  };
  int i;

  rangelock_init (&rl);
  rangelock_acquire (&rl, &first, 0, 10, RL_STORE);
  for (i = 0; i < 3; i++) {
    w[i].t = g_thread_new ("waiter", waiter_main, &w[i]);
    if (i < 2)
      wait_queued (2 + i);
  }
  g_thread_join (w[2].t);          /* the disjoint one finished alone */
  g_assert_cmpint (granted[2], ==, 1);
  g_assert_cmpint (granted[0], ==, 0);
  g_assert_cmpint (granted[1], ==, 0);
  rangelock_release (&rl, &first);
  g_thread_join (w[0].t);
  g_thread_join (w[1].t);
  g_assert_cmpint (norder, ==, 3);
  g_assert_cmpint (order[0], ==, 2);
  g_assert_cmpint (order[1], ==, 0);
  g_assert_cmpint (order[2], ==, 1);
  rangelock_destroy (&rl);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/rangelock/stress", test_stress);
  g_test_add_func ("/rangelock/order", test_order);
  return g_test_run ();
}
