/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Tests of the journal's format on its own (journal.c, no threads):
 * transactions appended, applied and retired through many laps of a
 * small journal, with a "power cut" (only the durable images of the
 * test stores survive, test-store.h) after every step; each time,
 * replaying what survived must give exactly the backing store as of
 * the last committed transaction.  That exercises wrap-around,
 * transactions split across the end of the area, and the rule that the
 * super block's tail is made durable before space it still counts as
 * live is overwritten.
 */

#include <config.h>

#undef NDEBUG
#include <glib.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "ramback.h"
#include "test-store.h"

#define KiB 1024
#define MiB (1024 * 1024)
#define BACK_SIZE (2 * MiB)
#define JOURNAL_SIZE (MiB + 4 * KiB)
#define MAX_EXTENTS 4

static void
done (struct tstore *ts)
{
  rb_store_close (ts_store (ts));
  ts_free (ts);
}

/* Replay what survived of (journal, back) into fresh stores; returns
 * the recovered backing image (BACK_SIZE bytes, g_free).
 */
static uint8_t *
recover (struct tstore *jts, struct tstore *bts, struct rbj_replay *rp)
{
  uint8_t *jimg = g_malloc (JOURNAL_SIZE), *bimg = g_malloc (BACK_SIZE);
  struct tstore *j2, *b2;
  struct rb_journal *j;

  ts_read_durable (jts, jimg, JOURNAL_SIZE, 0);
  ts_read_durable (bts, bimg, BACK_SIZE, 0);
  j2 = ts_new (JOURNAL_SIZE, jimg);
  b2 = ts_new (BACK_SIZE, bimg);
  j = rbj_open (ts_store (j2), "test", ts_store (b2), rp);
  g_assert_nonnull (j);
  g_assert_cmpint (rbj_close (j, true), ==, 0);
  ts_read_durable (b2, bimg, BACK_SIZE, 0);
  done (j2);
  done (b2);
  g_free (jimg);
  return bimg;
}

static void
test_laps (void)
{
  GRand *r = g_rand_new_with_seed (7);
  struct tstore *jts = ts_new (JOURNAL_SIZE, NULL);
  struct tstore *bts = ts_new (BACK_SIZE, NULL);
  uint8_t *committed = g_malloc0 (BACK_SIZE), *applied = g_malloc0 (BACK_SIZE);
  struct rbj_replay rp;
  struct rb_journal *j;
  uint64_t appended = 0, cap, seq;
  struct { uint64_t seq, start, len; } live[64];
  size_t nlive = 0, step;

  j = rbj_open (ts_store (jts), "test", ts_store (bts), &rp);
  g_assert_nonnull (j);
  g_assert_true (rp.formatted);
  cap = rbj_capacity (j);

  for (step = 0; step < 400; step++) {
    /* A transaction of 1..4 extents of 4K..96K, or retire the oldest
     * after applying it, at random; the journal fills and wraps.
     */
    bool apply = nlive > 0 &&
      (g_rand_int_range (r, 0, 3) == 0 || nlive == 64 ||
       rbj_used (j) > cap / 2);
    if (apply) {
      /* In place: the backing store takes the newest committed content
       * of the whole image (a merge of every live transaction), synced,
       * then the oldest live one is retired.
       */
      struct rb_store *b = ts_store (bts);
      g_assert_cmpint (rb_store_pwrite (b, committed, BACK_SIZE, 0), ==, 0);
      g_assert_cmpint (b->ops->flush (b), ==, 0);
      memcpy (applied, committed, BACK_SIZE);
      rbj_retire (j, live[nlive - 1].seq, live[nlive - 1].start,
                  live[nlive - 1].len);
      nlive = 0;
    }
    else {
      struct rbj_extent x[MAX_EXTENTS];
      uint8_t *bufs[MAX_EXTENTS];
      size_t n = g_rand_int_range (r, 1, MAX_EXTENTS + 1), i;
      uint64_t data = 0, pos;

      for (i = 0; i < n; i++) {
        uint64_t len = g_rand_int_range (r, 1, 25) * 4 * KiB;
        x[i].offset = g_rand_int_range (r, 0, (BACK_SIZE - len) / 512) * 512;
        x[i].length = len;
        x[i].kind = g_rand_int_range (r, 0, 5) ? RBJ_DATA : RBJ_ZERO;
        bufs[i] = NULL;
        if (x[i].kind == RBJ_DATA) {
          bufs[i] = g_malloc (len);
          ts_fill_random (r, bufs[i], len);
          data += len;
        }
        x[i].data = bufs[i];
      }
      if (rbj_txn_bytes (n, data) > cap - rbj_used (j)) {
        for (i = 0; i < n; i++)
          g_free (bufs[i]);
        continue;               /* the applier's turn next */
      }
      seq = rbj_next_seq (j);
      g_assert_cmpint (rbj_begin (j, n, data, &pos), ==, 0);
      if (step % 2) {
        /* Every other one in a single write (a small transaction). */
        g_assert_cmpint (rbj_commit_whole (j, x, n, &live[nlive].start,
                                           &live[nlive].len), ==, 0);
      }
      else {
        for (i = 0; i < n; i++)
          if (x[i].kind == RBJ_DATA) {
            g_assert_cmpint (rbj_write (j, pos, x[i].data, x[i].length),
                             ==, 0);
            pos += x[i].length;
          }
        g_assert_cmpint (rbj_commit (j, x, n, &live[nlive].start,
                                     &live[nlive].len), ==, 0);
      }
      live[nlive++].seq = seq;
      appended += live[nlive - 1].len;
      for (i = 0; i < n; i++) {
        if (x[i].kind == RBJ_DATA)
          memcpy (committed + x[i].offset, bufs[i], x[i].length);
        else
          memset (committed + x[i].offset, 0, x[i].length);
        g_free (bufs[i]);
      }
    }
    /* Power cut now: recovery must give the last commit exactly. */
    if (step % 7 == 0 || step > 380) {
      uint8_t *got = recover (jts, bts, &rp);
      if (memcmp (got, committed, BACK_SIZE) != 0) {
        size_t k;
        for (k = 0; got[k] == committed[k]; k++)
          ;
        g_error ("step %zu: recovered image differs at %zu (replayed %"
                 PRIu64 " transactions, %zu live)", step, k, rp.txns, nlive);
      }
      g_free (got);
    }
  }
  g_test_message ("%" PRIu64 " bytes appended through a %" PRIu64
                  "-byte journal (%.1f laps)", appended, cap,
                  (double) appended / cap);
  g_assert_cmpuint (appended, >, 10 * cap);
  g_assert_cmpint (rbj_close (j, false), ==, 0);
  done (jts);
  done (bts);
  g_free (committed);
  g_free (applied);
  g_rand_free (r);
}

/* A journal of another backing store, and a file that is not a
 * journal, are refused without a write.
 */
static void
test_refusals (void)
{
  struct tstore *jts = ts_new (JOURNAL_SIZE, NULL);
  struct tstore *bts = ts_new (BACK_SIZE, NULL), *other = ts_new (MiB, NULL);
  struct rbj_replay rp;
  struct rb_journal *j;
  uint8_t junk[4096];
  struct tstore *data;

  j = rbj_open (ts_store (jts), "test", ts_store (bts), &rp);
  g_assert_nonnull (j);
  g_assert_cmpint (rbj_close (j, true), ==, 0);
  g_assert_null (rbj_open (ts_store (jts), "test", ts_store (other), &rp));
  g_assert_nonnull (strstr (rb_get_error (), "belongs to a backing store"));

  memset (junk, 0x5a, sizeof junk);
  data = ts_new (JOURNAL_SIZE, NULL);
  g_assert_cmpint (rb_store_pwrite (ts_store (data), junk, sizeof junk, 0),
                   ==, 0);
  g_assert_null (rbj_open (ts_store (data), "test", ts_store (bts), &rp));
  g_assert_nonnull (strstr (rb_get_error (), "not a ramback journal"));
  g_assert_cmpuint (ts_count (data, &(struct ts_match) { .ops = TS_WRITE }),
                    ==, 1);
  done (data);
  done (jts);
  done (bts);
  done (other);
}

/* A transaction appended and never synced (its process died before
 * the journal's sync: the store's cache keeps it), then a restart that
 * replays it.  The backing store's own cache writes the replay's first
 * extent back before the second one arrives, and the power goes.
 * Recovery must find a point in time: both extents old (the
 * transaction lost, as it was never acknowledged) or both new.  Replay
 * of a transaction the journal does not hold durably left the first
 * extent new and the second old, with no journal to complete it.
 */
struct replay_job {
  struct tstore *jts, *bts;
  struct rb_journal *j;
  const struct rbj_extent *x;
};

static gpointer
commit_thread (gpointer p)
{
  struct replay_job *rj = p;
  uint64_t pos, start, len;

  if (rbj_begin (rj->j, 2, 8 * KiB, &pos) == 0)
    rbj_commit_whole (rj->j, rj->x, 2, &start, &len);
  return NULL;
}

static gpointer
reopen_thread (gpointer p)
{
  struct replay_job *rj = p;
  struct rbj_replay rp;

  rj->j = rbj_open (ts_store (rj->jts), "test", ts_store (rj->bts), &rp);
  return NULL;
}

static void
test_replay_unsynced (void)
{
  struct tstore *jts = ts_new (JOURNAL_SIZE, NULL);
  struct tstore *bts = ts_new (BACK_SIZE, NULL);
  struct ts_match mj = { .ops = TS_WRITE, .offset = 4 * KiB,
                         .count = JOURNAL_SIZE - 4 * KiB, .after = true };
  struct ts_match mb = { .ops = TS_WRITE, .offset = MiB, .count = 4 * KiB };
  uint8_t a[4 * KiB], b[4 * KiB], *got;
  struct rbj_extent x[2] = {
    { .offset = 0, .length = 4 * KiB, .kind = RBJ_DATA, .data = a },
    { .offset = MiB, .length = 4 * KiB, .kind = RBJ_DATA, .data = b },
  };
  struct replay_job first = { jts, bts, NULL, x }, second = { jts, bts };
  struct rb_store *back = ts_store (bts);
  struct ts_gate *gj, *gb;
  struct rbj_replay rp;
  GThread *t1, *t2;
  bool a_new, b_new;

  memset (a, 0xa1, sizeof a);
  memset (b, 0xb2, sizeof b);
  first.j = rbj_open (ts_store (jts), "test", back, &rp);
  g_assert_nonnull (first.j);
  /* The append reaches the journal's cache; its sync never comes. */
  gj = ts_gate_arm (jts, &mj, 0);
  t1 = g_thread_new ("commit", commit_thread, &first);
  ts_gate_wait (gj);

  /* The restart replays it: hold its write of the second extent. */
  gb = ts_gate_arm (bts, &mb, 0);
  t2 = g_thread_new ("reopen", reopen_thread, &second);
  ts_gate_wait (gb);
  g_assert_cmpint (back->ops->flush (back), ==, 0);     /* the disk's own */

  got = recover (jts, bts, &rp);
  a_new = got[0] == 0xa1;
  b_new = got[MiB] == 0xb2;
  if (a_new != b_new)
    g_error ("replay of a transaction the journal did not hold durably, "
             "then a power cut: the backing store recovered with its first "
             "extent %s and its second %s (replayed %" PRIu64 " "
             "transactions): no point in time", a_new ? "new" : "old",
             b_new ? "new" : "old", rp.txns);
  g_free (got);

  ts_gate_open (gb);
  g_thread_join (t2);
  g_assert_nonnull (second.j);
  g_assert_cmpint (rbj_close (second.j, true), ==, 0);
  ts_gate_open (gj);
  g_thread_join (t1);
  g_assert_cmpint (rbj_close (first.j, false), ==, 0);
  done (jts);
  done (bts);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/journal/laps", test_laps);
  g_test_add_func ("/journal/refusals", test_refusals);
  g_test_add_func ("/journal/replay-unsynced", test_replay_unsynced);
  return g_test_run ();
}
