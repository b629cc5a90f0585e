/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests: a backing store in memory that the test can stop, fail
 * and inspect, to force the interleavings where data gets lost.
 *
 * The store has two images, like a disk with a volatile write cache (or
 * a file in the Linux page cache):
 *   pending   what reads see: every write applied so far;
 *   durable   what survives a power cut: pending as of the last good
 *             flush.
 * A failing flush drops every unsynced write (pending := durable) and
 * reports the error once, like Linux after a writeback error: a flush
 * that was waiting behind it then "succeeds" with the data gone.
 * Flushes run one at a time (a second one waits for the first).
 *
 * Writes capture their buffer when they arrive (as a real device takes
 * the data when the request is issued): a request held at a gate stores
 * what RAM held when it was submitted, not what RAM holds when the gate
 * opens.
 *
 * A test may set can_fua on the store (ts_store) before rb_open: a
 * write with fua set is then applied to both images at once.
 *
 * Gates: ts_gate_arm() holds the next request matching a pattern (op,
 * byte range, the tag of the calling thread) inside the store until the
 * test calls ts_gate_open(), so the test thread can act while a
 * write-back, a load or a sync is in flight.  A gate can make the held
 * request fail.  Flush gates hold the flush in progress: later flushes
 * wait behind it.
 *
 * Every request is logged with its arrival and completion order, so a
 * test can assert what reached the store and in which order.
 *
 * Threads tag themselves with ts_set_tag(); the core's own threads (the
 * flusher, the populator) are untagged, matched by the tag "".
 *
 * Every wait here is for a state, bounded by TS_TIMEOUT_S only so that a
 * broken core fails the test instead of hanging it.
 */

#ifndef RAMBACK_TEST_STORE_H
#define RAMBACK_TEST_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>

#include "store.h"

/* Bugs known to be present on this branch whose tests are committed but
 * skipped.  The lead sets one to 0 when its fix lands, and the test runs.
 * RAMBACK_RUN_KNOWN_BUGS=1 in the environment runs them anyway (to see
 * them fail).
 *
 * KNOWN_BUG_SYNC_ERROR_RACE: a failed sync re-dirties only what it
 * snapshotted, not writes that reached the store while it ran (and were
 * dropped with the rest), and a sync that waited behind a failing one
 * reports success with its data gone.
 */
#define KNOWN_BUG_SYNC_ERROR_RACE 0

/* True if a test of this known bug must be skipped (and skips it). */
extern bool ts_skip_known_bug (int known, const char *what);

#define TS_TIMEOUT_S 120

struct rb;

/* rb_sync until a whole sweep succeeds; a failure (EIO) re-dirties and
 * the flusher retries, so this ends unless the core gives up.
 */
extern void ts_sync_until_ok (struct rb *rb);

enum ts_op {
  TS_READ = 1,
  TS_WRITE = 2,
  TS_ZERO = 4,
  TS_FLUSH = 8,
};

/* Which requests a gate or a query is about. */
struct ts_match {
  unsigned ops;                 /* TS_* bits; 0: any */
  uint64_t offset, count;       /* overlapping [offset, +count); 0: any */
  const char *tag;              /* NULL: any thread; "": untagged ones */
  bool after;                   /* hold a write after it is performed,
                                   before its reply (a write in flight
                                   whose pages are already in the cache) */
};

/* One logged request. */
struct ts_rec {
  enum ts_op op;
  uint64_t offset, count;
  const char *tag;              /* static string or NULL */
  /* Arrivals and completions tick one clock, so r1.done < r2.arrived
   * means r1 was finished before r2 reached the store.
   */
  uint64_t arrived;
  uint64_t done;                /* 0: in flight */
  int err;
};

struct tstore;
struct ts_gate;

/* A store of 'size' bytes, both images set to 'init' (NULL: zeroes). */
extern struct tstore *ts_new (uint64_t size, const uint8_t *init);
/* The store to put in rb_config.store_override.  rb_close() closes it;
 * the tstore itself lives on until ts_free().
 */
extern struct rb_store *ts_store (struct tstore *ts);
extern void ts_free (struct tstore *ts);

/* From now on next_data reports holes: blocks of 4 KiB that read as
 * zeroes (before it, all is data).
 */
extern void ts_report_holes (struct tstore *ts);

/* Tag the calling thread's requests (a string that outlives them). */
extern void ts_set_tag (const char *tag);

/* The next n writes and zeroes fail with EIO (-1: all, until 0). */
extern void ts_fail_writes (struct tstore *ts, int n);
/* From now on every submit with a read in it waits ms milliseconds
 * before it is served, as a store far away does (one round trip per
 * batch: its requests run in parallel).
 */
extern void ts_read_latency (struct tstore *ts, unsigned ms);
/* The next n flushes that have something unsynced fail. */
extern void ts_fail_syncs (struct tstore *ts, int n);

/* Hold the next request matching m; when opened it fails with err
 * (0: it goes on normally).
 */
extern struct ts_gate *ts_gate_arm (struct tstore *ts,
                                    const struct ts_match *m, int err);
/* Wait until a request is held at the gate. */
extern void ts_gate_wait (struct ts_gate *g);
extern bool ts_gate_held (struct ts_gate *g);
/* The request held (valid after ts_gate_wait). */
extern struct ts_rec ts_gate_rec (struct ts_gate *g);
/* Let the held request go (or disarm an unused gate); frees g. */
extern void ts_gate_open (struct ts_gate *g);

/* Requests matching m that have arrived (in flight or done). */
extern size_t ts_count (struct tstore *ts, const struct ts_match *m);
/* The nth (0-based) request matching m, in arrival order. */
extern bool ts_find (struct tstore *ts, const struct ts_match *m, size_t nth,
                     struct ts_rec *out);
/* Wait until at least n requests matching m have arrived. */
extern void ts_wait_count (struct tstore *ts, const struct ts_match *m,
                           size_t n, const char *what);

/* Copies of the images, or a comparison of a range of them. */
extern void ts_read_durable (struct tstore *ts, void *buf, uint64_t count,
                             uint64_t offset);
extern void ts_read_pending (struct tstore *ts, void *buf, uint64_t count,
                             uint64_t offset);
extern bool ts_durable_has (struct tstore *ts, const void *data,
                            uint64_t count, uint64_t offset);
extern bool ts_pending_has (struct tstore *ts, const void *data,
                            uint64_t count, uint64_t offset);
/* Fail the test with the first difference if durable != model. */
extern void ts_assert_durable (struct tstore *ts, const uint8_t *model,
                               const char *what);

/* Poll until expr holds (a state of the core, not of the store). */
#define TS_WAIT(expr, what)                                             \
  do {                                                                  \
    gint64 ts_end_ = g_get_monotonic_time () +                          \
      (gint64) TS_TIMEOUT_S * G_USEC_PER_SEC;                           \
    while (!(expr)) {                                                   \
      if (g_get_monotonic_time () > ts_end_)                            \
        g_error ("timed out after %d s waiting for %s",                 \
                 TS_TIMEOUT_S, (what));                                 \
      g_usleep (200);                                                   \
    }                                                                   \
  } while (0)

/* Helpers for random workloads. */
extern void ts_fill_random (GRand *r, uint8_t *p, size_t n);
/* A random extent of [0, size) biased like tests/model.py: a fifth of
 * them touch the (possibly partial) last chunk, a third start or end
 * within a few bytes of a chunk boundary, some are whole chunks.
 */
extern void ts_rand_extent (GRand *r, uint64_t size, uint32_t chunk,
                            uint64_t maxlen, uint64_t *off, uint64_t *len);

#endif /* RAMBACK_TEST_STORE_H */
