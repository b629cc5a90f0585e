/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the ordered range locks (rangelock.h): overlapping
 * holders exclude each other, disjoint ones do not wait, overlapping
 * waiters are granted in arrival order, a RAM range does not wait for an
 * earlier STORE, and a try never waits.
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

/* --- kinds -------------------------------------------------------------- */

struct kw {
  enum rl_kind kind;
  uint64_t a, b;
  struct rl_node n;
  int granted;                  /* [atomic] */
  int go;                       /* [atomic] release when set */
  GThread *t;
};

static gpointer
kw_main (gpointer arg)
{
  struct kw *k = arg;

  rangelock_acquire (&rl, &k->n, k->a, k->b, k->kind);
  rb_atomic_store (&k->granted, 1);
  while (!rb_atomic_load (&k->go))
    g_thread_yield ();
  rangelock_release (&rl, &k->n);
  return NULL;
}

static void
kw_start (struct kw *k, enum rl_kind kind, uint64_t a, uint64_t b)
{
  *k = (struct kw) { .kind = kind, .a = a, .b = b };
  k->t = g_thread_new ("kind", kw_main, k);
}

static void
kw_wait_granted (struct kw *k)
{
  while (!rb_atomic_load (&k->granted))
    g_thread_yield ();
}

static void
kw_finish (struct kw *k)
{
  rb_atomic_store (&k->go, 1);
  g_thread_join (k->t);
}

/* A RAM range (a writeback-mode write: RAM only) is granted beside an
 * earlier STORE over the same bytes; every other kind waits for the
 * STORE, and a STORE that comes after the RAM range waits for it.
 */
static void
test_kinds (void)
{
  struct rl_node store;
  struct kw up, wr, ld, st2;

  rangelock_init (&rl);
  rangelock_acquire (&rl, &store, 0, 10, RL_STORE);
  kw_start (&up, RL_RAM, 5, 15);
  kw_wait_granted (&up);                /* beside the STORE */
  kw_start (&wr, RL_WRITE, 0, 10);
  wait_queued (3);
  kw_start (&ld, RL_LOAD, 9, 10);
  wait_queued (4);
  kw_start (&st2, RL_STORE, 12, 13);    /* overlaps the RAM range only */
  wait_queued (5);
  g_assert_cmpint (rb_atomic_load (&wr.granted), ==, 0);
  g_assert_cmpint (rb_atomic_load (&ld.granted), ==, 0);
  g_assert_cmpint (rb_atomic_load (&st2.granted), ==, 0);
  rangelock_release (&rl, &store);
  /* The WRITE and the LOAD still wait for the RAM range, and so does the
   * second STORE.
   */
  g_assert_cmpint (rb_atomic_load (&wr.granted), ==, 0);
  g_assert_cmpint (rb_atomic_load (&st2.granted), ==, 0);
  kw_finish (&up);
  kw_wait_granted (&st2);
  kw_wait_granted (&wr);
  kw_finish (&wr);
  kw_wait_granted (&ld);
  kw_finish (&ld);
  kw_finish (&st2);
  g_assert_cmpuint (rl.held, ==, 0);
  rangelock_destroy (&rl);
}

/* rangelock_try_acquire takes a range only if nothing overlapping is
 * held, of any kind, and never waits.
 */
static void
test_try (void)
{
  struct rl_node a, b;

  rangelock_init (&rl);
  g_assert_true (rangelock_try_acquire (&rl, &a, 10, 20, RL_WRITE));
  g_assert_false (rangelock_try_acquire (&rl, &b, 19, 30, RL_WRITE));
  g_assert_false (rangelock_try_acquire (&rl, &b, 0, 11, RL_RAM));
  g_assert_true (rangelock_try_acquire (&rl, &b, 20, 30, RL_WRITE));
  g_assert_cmpuint (rangelock_bytes (&rl, RL_WRITE), ==, 20);
  rangelock_release (&rl, &a);
  rangelock_release (&rl, &b);
  g_assert_cmpuint (rl.held, ==, 0);
  rangelock_destroy (&rl);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/rangelock/stress", test_stress);
  g_test_add_func ("/rangelock/order", test_order);
  g_test_add_func ("/rangelock/kinds", test_kinds);
  g_test_add_func ("/rangelock/try", test_try);
  return g_test_run ();
}
