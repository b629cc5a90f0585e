/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: write back (the flusher thread), syncs, and the fsyncgate rule.
 *
 * The flusher works in sweeps: from chunk 0 upwards it collects runs of
 * dirty chunks (found through the chunk map's hints, so a sweep costs
 * O(dirty), not O(device)), writes each batch as large requests in
 * ascending order, and at the end of the sweep syncs the store.  Every
 * sweep covers the sync tickets issued before it began: rb_sync() takes
 * a ticket and waits for the sweep that covers it.
 *
 * Per batch:
 *   1. wait for flush-rate=, before holding anything;
 *   2. take a STORE range over each run (this waits for earlier
 *      writethrough writes to the same chunks, and makes later ones wait
 *      for us: the flush race);
 *   3. move the chunks DIRTY -> CLEAN *before* the data is captured, so
 *      a write that lands while the store is in flight re-dirties the
 *      chunk and it is written again: the store converges on RAM;
 *   4. write straight from the RAM image (no bounce copy);
 *   5. on failure put the chunks back to DIRTY; on success remember the
 *      range as unsynced.
 *
 * fsyncgate: a chunk counts as safely stored only after its write *and*
 * a later successful sync.  A failed sync may have dropped any write
 * since the last good one (Linux marks failed pages clean and a retried
 * fsync then "succeeds"), so every range written since the last good
 * sync is re-dirtied and written again; a sync is never just retried.
 * A sweep with any failure fails the tickets it covers, so FLUSH keeps
 * failing until one full sweep, writes and sync, succeeds.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "error.h"
#include "internal.h"

#define BATCH_RUNS 32
#define BATCH_BYTES (UINT64_C (64) * 1024 * 1024)
#define ZERO_RUN_BYTES (UINT64_C (1) << 30)
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 5000
#define SUSPECT_POLL_NS (100 * UINT64_C (1000000))

struct run {
  uint64_t first, n;
  enum chunk_state kind;        /* CS_DIRTY (data) or CS_ZERO */
  uint64_t taken;               /* chunks moved to CLEAN by us */
};

/* Wait up to ns on the flusher's condition; returns early on stop. */
static void
flusher_sleep (struct rb *rb, uint64_t ns)
{
  uint64_t deadline = rb_now_ns () + ns;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  while (!rb->stopping && rb_now_ns () < deadline)
    rb_cond_wait_until (&rb->flusher_cond, &rb->lock, deadline);
}

/* Batch size: with a rate cap, about a tenth of a second's worth, so the
 * cap is smooth and status shows steady progress.  The final drain of a
 * clean stop ignores the cap, so it uses full batches too.
 */
static uint64_t
batch_bytes (struct rb *rb)
{
  uint64_t b = BATCH_BYTES;

  if (rb->flush_rate.bps && !rb_atomic_load (&rb->stopping) &&
      rb->flush_rate.bps / 10 < b)
    b = RB_MAX (rb->flush_rate.bps / 10, (uint64_t) rb->chunk_size);
  return b;
}

/* Collect up to BATCH_RUNS runs of dirty chunks from *cursor upwards. */
static size_t
collect (struct rb *rb, uint64_t *cursor, struct run *runs)
{
  uint64_t c = *cursor, bytes = 0, budget = batch_bytes (rb);
  uint64_t per_io = RB_MAX ((uint64_t) RB_MAX_STORE_IO >> rb->chunk_shift,
                            UINT64_C (1));
  uint64_t per_zero = RB_MAX (ZERO_RUN_BYTES >> rb->chunk_shift,
                              UINT64_C (1));
  size_t k = 0;

  while (k < BATCH_RUNS && bytes < budget) {
    enum chunk_state st;
    uint64_t n, max;

    c = chunkmap_next (&rb->map, c, CS_ANY_DIRTY);
    if (c == UINT64_MAX)
      break;
    st = chunkmap_get (&rb->map, c);
    if (st != CS_DIRTY && st != CS_ZERO) {      /* cleaned meanwhile */
      c++;
      continue;
    }
    max = st == CS_ZERO ? per_zero
      : RB_MIN (per_io, RB_MAX ((budget - bytes) >> rb->chunk_shift,
                                UINT64_C (1)));
    n = chunkmap_run (&rb->map, c, max, CS_BIT (st));
    if (n == 0) {
      c++;
      continue;
    }
    runs[k].first = c;
    runs[k].n = n;
    runs[k].kind = st;
    runs[k].taken = 0;
    k++;
    if (st == CS_DIRTY)         /* zeroing costs no bandwidth */
      bytes += chunks_bytes (rb, c, n);
    c += n;
  }
  *cursor = c == UINT64_MAX ? rb->nchunks : c;
  return k;
}

static uint64_t
data_bytes (struct rb *rb, const struct run *runs, size_t k)
{
  uint64_t b = 0;
  size_t i;

  for (i = 0; i < k; i++)
    if (runs[i].kind == CS_DIRTY)
      b += chunks_bytes (rb, runs[i].first, runs[i].n);
  return b;
}

/* Steps 2-5 above.  Returns 0, or -1 with errno of the first failure. */
static int
store_batch (struct rb *rb, struct run *runs, size_t k, uint64_t t0)
{
  struct rb_io ios[BATCH_RUNS];
  struct rl_node nodes[BATCH_RUNS];
  uint64_t bytes = 0;
  int first_err = 0;
  size_t i;

  for (i = 0; i < k; i++) {
    uint64_t off = chunk_offset (rb, runs[i].first);
    nodes[i] = (struct rl_node) {
      .start = off, .end = off + chunks_bytes (rb, runs[i].first, runs[i].n),
      .kind = RL_STORE,
    };
  }
  rangelock_acquire_batch (&rb->rl, nodes, k);

  for (i = 0; i < k; i++) {
    uint64_t off = nodes[i].start, len = nodes[i].end - nodes[i].start;
    unsigned from = runs[i].kind == CS_ZERO ? CS_BIT (CS_ZERO) : CS_ANY_DIRTY;

    runs[i].taken = chunkmap_move (&rb->map, runs[i].first, runs[i].n,
                                   from, CS_CLEAN, NULL);
    rb_atomic_add (&rb->inflight_chunks, runs[i].taken);
    ios[i] = (struct rb_io) {
      .op = runs[i].kind == CS_ZERO ? RB_IO_ZERO : RB_IO_WRITE,
      .buf = runs[i].kind == CS_ZERO ? NULL : rb->ram.base + off,
      .count = len, .offset = off,
    };
  }

  if (rb->store->ops->submit (rb->store, ios, k) == -1)
    first_err = errno ? errno : EIO;

  for (i = 0; i < k; i++) {
    if (ios[i].err) {
      char msg[200];
      snprintf (msg, sizeof msg, "write back of %" PRIu64 " bytes at %"
                PRIu64 ": %s", ios[i].count, ios[i].offset,
                rb_strerror (ios[i].err));
      rb_redirty (rb, ios[i].offset, ios[i].count);
      rb_atomic_store (&rb->store_failing, true);
      rb_record_error (rb, ios[i].err, msg);
    }
    else {
      rb_note_unsynced (rb, ios[i].offset, ios[i].count);
      rb_atomic_add (&rb->stored_bytes, ios[i].count);
      if (ios[i].op == RB_IO_WRITE)
        bytes += ios[i].count;
    }
    rb_atomic_sub (&rb->inflight_chunks, runs[i].taken);
    rangelock_release (&rb->rl, &nodes[i]);
  }

  if (bytes) {
    /* A batch after an idle spell goes out at once, at page cache
     * speed; under a flush-rate= cap the sustained bandwidth is the cap,
     * so never record more.
     */
    uint64_t elapsed = rb_now_ns () - t0;
    if (rb->flush_rate.bps)
      elapsed = RB_MAX (elapsed, (uint64_t) (bytes * 1e9 / rb->flush_rate.bps));
    rb_bw_sample (&rb->flush_bw, bytes, elapsed);
  }
  rb_recompute_limit (rb);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_cond_broadcast (&rb->space_cond);
  }
  if (rb_tracing (rb))
    rb_log ("flush: %zu runs, %" PRIu64 " bytes%s", k, bytes,
            first_err ? " (with errors)" : "");
  if (first_err) {
    errno = first_err;
    return -1;
  }
  return 0;
}

/* One sweep over the whole device.  Returns 0 or the errno of the first
 * failure.
 */
static int
sweep (struct rb *rb)
{
  struct run runs[BATCH_RUNS];
  uint64_t cursor = 0, backoff = BACKOFF_MIN_MS;
  int err = 0;
  size_t k;

  while ((k = collect (rb, &cursor, runs)) > 0) {
    uint64_t now = rb_now_ns (), t0 = now;
    uint64_t wait = rb_rate_delay (&rb->flush_rate,
                                   data_bytes (rb, runs, k), now);

    /* The cap is lifted for the final drain of a clean stop. */
    if (wait && !rb_atomic_load (&rb->stopping))
      flusher_sleep (rb, wait);
    if (store_batch (rb, runs, k, t0) == -1) {
      if (err == 0)
        err = errno;
      flusher_sleep (rb, backoff * 1000000);
      backoff = RB_MIN (backoff * 2, (uint64_t) BACKOFF_MAX_MS);
    }
    else
      backoff = BACKOFF_MIN_MS;
  }
  return err;
}

static bool
have_work_locked (struct rb *rb, uint64_t target)
{
  return chunkmap_dirty (&rb->map) > 0 || rb->sync_requested > target ||
    rb->unsynced.len > 0;
}

static bool
sync_needed (struct rb *rb, uint64_t target)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  return rb->unsynced.len > 0 || target > rb->sync_done;
}

/* Woken from idle by new dirty data: give a burst of writes a moment
 * to arrive, so it is written back (and synced) as one sweep rather than
 * one sync per write.  A sync request or a stop ends the wait at once.
 */
#define COALESCE_MS 20

static void
coalesce_locked (struct rb *rb, uint64_t target)
{
  uint64_t deadline = rb_now_ns () + COALESCE_MS * UINT64_C (1000000);

  while (!rb->stopping && rb->sync_requested == target &&
         rb_cond_wait_until (&rb->flusher_cond, &rb->lock, deadline))
    ;
}

/* Ranges the store can no longer vouch for (store.h, take_suspects:
 * an old remote write that may have landed late): dirty them again so
 * that they are rewritten from RAM.  Returns true while the store may
 * still hand over more; the flusher then looks again every
 * SUSPECT_POLL_NS, and a clean stop waits for them.
 */
static bool
redirty_suspects (struct rb *rb)
{
  struct rb_store_range r[16];
  bool pending = false;
  size_t i, n;

  if (rb->store->ops->take_suspects == NULL)
    return false;
  do {
    n = rb->store->ops->take_suspects (rb->store, r, 16, &pending);
    for (i = 0; i < n; i++)
      rb_redirty (rb, r[i].offset, r[i].count);
  } while (n == 16);
  return pending;
}

static void *
flusher_main (void *arg)
{
  struct rb *rb = arg;
  uint64_t backoff = BACKOFF_MIN_MS;

  for (;;) {
    uint64_t target;
    bool suspects;
    int err;

    suspects = redirty_suspects (rb);
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
      target = rb->sync_requested;
    }
    err = sweep (rb);
    /* Sync only if something was written since the last good sync, or
     * somebody is waiting for one: an empty sync still costs the store
     * a round trip (an NBD FLUSH, a disk cache flush).
     */
    if (sync_needed (rb, target) && rb_sync_store (rb) == -1 && err == 0)
      err = errno;

    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    if (err == 0) {
      if (target > rb->sync_done)
        rb->sync_done = target;
      /* Every write and the sync succeeded: the store works again. */
      rb_atomic_store (&rb->store_failing, false);
    }
    else if (target > rb->sync_failed) {
      rb->sync_failed = target;
      rb->sync_errno = err;
    }
    rb_cond_broadcast (&rb->sync_cond);

    if (err) {
      /* The store is failing: back off before the next sweep. */
      uint64_t deadline = rb_now_ns () + backoff * 1000000;
      backoff = RB_MIN (backoff * 2, (uint64_t) BACKOFF_MAX_MS);
      if (rb->stopping)
        rb_warn ("clean stop: %" PRIu64 " dirty chunks cannot be written "
                "back yet (%s); retrying", chunkmap_dirty (&rb->map),
                rb_strerror (err));
      while (rb_now_ns () < deadline &&
             rb_cond_wait_until (&rb->flusher_cond, &rb->lock, deadline))
        ;
      continue;
    }
    backoff = BACKOFF_MIN_MS;
    if (!have_work_locked (rb, target)) {
      if (suspects) {
        rb_cond_wait_until (&rb->flusher_cond, &rb->lock,
                            rb_now_ns () + SUSPECT_POLL_NS);
        continue;
      }
      if (rb->stopping)
        break;
      rb_atomic_store (&rb->flusher_idle, true);
      while (!rb->stopping && !have_work_locked (rb, target))
        rb_cond_wait (&rb->flusher_cond, &rb->lock);
      rb_atomic_store (&rb->flusher_idle, false);
      coalesce_locked (rb, target);
    }
  }
  return NULL;
}

static void *
flusher_thread (void *arg)
{
  rb_thread_background ();
  return flusher_main (arg);
}

int
rb_flusher_start (struct rb *rb)
{
  if (rb_thread_create (&rb->flusher, flusher_thread, rb) == -1) {
    rb_set_error (errno, "cannot start the flusher thread");
    return -1;
  }
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->flusher_running = true;
  }
  return 0;
}

int
rb_flusher_stop (struct rb *rb)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_atomic_store (&rb->stopping, true);
    rb_cond_broadcast (&rb->flusher_cond);
  }
  if (rb->flusher_running)
    rb_thread_join (rb->flusher);
  else
    flusher_main (rb);        /* never started: drain on this thread */
  {
    /* Nobody sweeps any more: answer every sync still waiting. */
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->flusher_running = false;
    if (chunkmap_dirty (&rb->map) == 0 && rb->unsynced.len == 0)
      rb->sync_done = rb->sync_requested;
    else {
      rb->sync_failed = rb->sync_requested;
      rb->sync_errno = EIO;
    }
    rb_cond_broadcast (&rb->sync_cond);
  }
  if (chunkmap_dirty (&rb->map) > 0) {
    rb_set_error (EIO, "%" PRIu64 " dirty chunks were not written back",
                  chunkmap_dirty (&rb->map));
    return -1;
  }
  return 0;
}

void
rb_flusher_kick (struct rb *rb)
{
  if (rb_atomic_load (&rb->flusher_idle)) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_cond_signal (&rb->flusher_cond);
  }
}

void
rb_note_unsynced (struct rb *rb, uint64_t offset, uint64_t count)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    struct rb_extents *x = &rb->unsynced;

    x->bytes += count;
    if (x->len > 0 && x->v[x->len - 1].offset + x->v[x->len - 1].count
        == offset)
      x->v[x->len - 1].count += count;
    else {
      if (x->len == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 64;
        struct rb_extent *v = realloc (x->v, cap * sizeof *v);
        if (v == NULL) {
          /* Cannot remember it: keep it dirty instead, which is safe. */
          x->bytes -= count;
          rb_mutex_unlock (&rb->lock);
          rb_redirty (rb, offset, count);
          rb_mutex_lock (&rb->lock);
          return;
        }
        x->v = v;
        x->cap = cap;
      }
      x->v[x->len++] = (struct rb_extent) { offset, count };
    }
  }
  rb_flusher_kick (rb);
}

int
rb_sync_store (struct rb *rb)
{
  struct rb_extents snap;
  size_t i;
  int err;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    snap = rb->unsynced;
    memset (&rb->unsynced, 0, sizeof rb->unsynced);
  }
  if (rb->store->ops->flush (rb->store) == 0) {
    rb_atomic_add (&rb->syncs, 1);
    free (snap.v);
    return 0;
  }
  err = errno ? errno : EIO;
  rb_atomic_add (&rb->sync_errors, 1);
  rb_atomic_store (&rb->store_failing, true);
  rb_record_error (rb, err, rb_get_error ());
  /* Never trust a retried sync: write it all again. */
  for (i = 0; i < snap.len; i++)
    rb_redirty (rb, snap.v[i].offset, snap.v[i].count);
  free (snap.v);
  errno = err;
  return -1;
}

void
rb_redirty (struct rb *rb, uint64_t offset, uint64_t count)
{
  uint64_t c0 = chunk_of (rb, offset);
  uint64_t c1 = chunk_of (rb, offset + count - 1);

  chunkmap_move (&rb->map, c0, c1 - c0 + 1,
                 CS_BIT (CS_EMPTY) | CS_BIT (CS_CLEAN), CS_DIRTY, NULL);
  rb_flusher_kick (rb);
}

int
rb_sync (struct rb *rb, int timeout_ms)
{
  uint64_t deadline = rb_deadline_ms (timeout_ms), t;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  if (!rb->flusher_running) {
    rb_set_error (rb->stopping ? ESHUTDOWN : EINVAL,
                  "sync: the flusher is not running");
    return -1;
  }
  t = ++rb->sync_requested;
  rb_cond_signal (&rb->flusher_cond);
  while (rb->sync_done < t && rb->sync_failed < t) {
    if (!rb_cond_wait_until (&rb->sync_cond, &rb->lock, deadline)) {
      rb_set_error (ETIMEDOUT, "sync: not finished after %d ms "
                    "(write back continues)", timeout_ms);
      return -1;
    }
  }
  if (rb->sync_done >= t)
    return 0;
  rb_set_error (rb->sync_errno, "sync: the backing store failed "
                "(%" PRIu64 " chunks stay dirty in RAM and will be retried)",
                chunkmap_dirty (&rb->map));
  return -1;
}
