/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: populating the RAM image from the backing store.
 *
 * The populator thread scans upwards from chunk 0 for EMPTY chunks
 * (through the chunk map's hints), asks the store where its data is
 * (SEEK_DATA/SEEK_HOLE, NBD block status) so holes are marked CLEAN
 * without reading them (the RAM image starts zeroed), and loads the rest
 * in large sequential reads straight into RAM.  Each run is loaded while
 * holding a LOAD range, and only chunks still EMPTY under that range are
 * loaded: a write that got there first (demand loading its chunk ahead
 * of the scan) is never overwritten.  That is the populate race closed.
 *
 * Populate pauses while in writethrough mode (the backing store's
 * bandwidth goes to draining dirty data; on a UPS that is what matters)
 * and resumes when writeback mode returns.  Demand loads go on in both.
 *
 * One batch (or one hole) is one call of rbi_populate_step(), which
 * returns the delay before the next; the populator thread
 * (populator_main) only pauses and waits that out.
 */

#include "env.h"
#include "cleanup.h"
#include "error.h"
#include "internal.h"
#include "backoff.h"

#define BATCH_IOS 8

void
rbi_check_populated (struct rb *rb)
{
  if (rb_atomic_load (&rb->populated) ||
      chunkmap_loaded (&rb->map) < rb->nchunks)
    return;
  if (rb_atomic_xchg (&rb->populated, true))
    return;
  rb_log ("populated: all %" PRIu64 " chunks are in RAM", rb->nchunks);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  rb_cond_broadcast (&rb->populated_cond);
}

/* Read the EMPTY chunks of [first, first+n) in as few requests as
 * possible.  Returns 0 or -1 with errno.  The caller holds a range.
 */
int
rbi_load_chunks (struct rb *rb, uint64_t first, uint64_t n)
{
  uint64_t c = first, end = first + n;
  uint64_t per_io = RB_MAX ((uint64_t) RB_MAX_STORE_IO >> rb->chunk_shift,
                            UINT64_C (1));

  while (c < end) {
    uint64_t len, off, bytes;

    len = chunkmap_run (&rb->map, c, RB_MIN (end - c, per_io),
                        CS_BIT (CS_EMPTY));
    if (len == 0) {
      c++;
      continue;
    }
    off = rbi_chunk_offset (rb, c);
    bytes = rbi_chunks_bytes (rb, c, len);
    if (rb_store_pread (rb->store, rb->ram.base + off, bytes, off) == -1) {
      int err = errno;
      rbi_record_store_error (rb, err, "load", bytes, off);
      rb_set_error (err, "cannot load %" PRIu64 " bytes at %" PRIu64
                    " from the backing store", bytes, off);
      return -1;
    }
    chunkmap_move (&rb->map, c, len, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
    rb_atomic_add (&rb->loaded_bytes, bytes);
    rb_atomic_add (&rb->demand_loaded_bytes, bytes);
    c += len;
  }
  return 0;
}

/* Sleep up to ns, or until stop; returns false if stopping. */
static bool
populator_sleep (struct rb *rb, uint64_t ns)
{
  uint64_t deadline = rb_now_ns () + ns;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  while (!rb->stopping && rb_now_ns () < deadline)
    rb_cond_wait_until (&rb->populator_cond, &rb->lock, deadline);
  return !rb->stopping;
}

/* Wait while in writethrough mode; false if stopping. */
static bool
wait_writeback (struct rb *rb)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  while (!rb->stopping &&
         rb_atomic_load (&rb->mode) == RB_MODE_WRITETHROUGH)
    rb_cond_wait (&rb->populator_cond, &rb->lock);
  return !rb->stopping;
}

/* Chunks [c, c+n) lie wholly in a hole of the store: mark them CLEAN. */
static void
mark_hole (struct rb *rb, uint64_t c, uint64_t n)
{
  struct rl_node node;
  uint64_t start = rbi_chunk_offset (rb, c);

  rangelock_acquire (&rb->rl, &node, start,
                     start + rbi_chunks_bytes (rb, c, n), RL_LOAD);
  chunkmap_move (&rb->map, c, n, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
  rangelock_release (&rb->rl, &node);
}

/* Where the store's next data is.  Returns the chunk holding the first
 * data byte at or after chunk c (chunks before it are all hole), and in
 * *data_end the first chunk past the data extent.
 */
static uint64_t
next_data_chunk (struct rb *rb, uint64_t c, uint64_t *data_end)
{
  uint64_t data, hole;

  *data_end = rb->nchunks;
  if (rb->store->ops->next_data == NULL)
    return c;
  if (rb->store->ops->next_data (rb->store, rbi_chunk_offset (rb, c),
                                 &data, &hole) == -1) {
    rb_log ("populate: cannot map holes (%s): reading everything",
            rb_get_error ());
    return c;
  }
  *data_end = (hole + rb->chunk_size - 1) >> rb->chunk_shift;
  if (*data_end > rb->nchunks)
    *data_end = rb->nchunks;
  return data >= rb->size ? rb->nchunks : rbi_chunk_of (rb, data);
}

/* Load one batch: up to BATCH_IOS runs of EMPTY chunks in [c, limit),
 * each under its own LOAD range, read in one submit (a remote store runs
 * them in parallel).  Returns the chunk to continue from, or c on error.
 */
static uint64_t
load_batch (struct rb *rb, uint64_t c, uint64_t limit)
{
  struct rl_node nodes[BATCH_IOS];
  struct rb_io ios[BATCH_IOS];
  uint64_t runs[BATCH_IOS][2];
  uint64_t per_io = RB_MAX ((uint64_t) RB_MAX_STORE_IO >> rb->chunk_shift,
                            UINT64_C (1));
  uint64_t next = c, bytes = 0, t0, wait;
  size_t k = 0, i;
  bool failed = false;

  /* With a rate cap, batches of about a tenth of a second's worth, so
   * the cap holds from the start and progress is steady.
   */
  if (rb->populate_rate.bps) {
    uint64_t cap = RB_MAX (rb->populate_rate.bps / 10,
                           (uint64_t) rb->chunk_size) >> rb->chunk_shift;
    per_io = RB_MAX (RB_MIN (per_io, cap), UINT64_C (1));
  }

  /* Find the runs (unlocked: only a hint; rechecked under the ranges). */
  while (k < BATCH_IOS && next < limit &&
         (!rb->populate_rate.bps || k == 0)) {
    uint64_t n = chunkmap_run (&rb->map, next,
                               RB_MIN (per_io, limit - next),
                               CS_BIT (CS_EMPTY));
    if (n == 0) {
      uint64_t e = chunkmap_next (&rb->map, next, CS_BIT (CS_EMPTY));
      if (e == UINT64_MAX || e >= limit) {
        next = limit;
        break;
      }
      next = e;
      continue;
    }
    runs[k][0] = next;
    runs[k][1] = n;
    bytes += rbi_chunks_bytes (rb, next, n);
    next += n;
    k++;
  }
  if (k == 0)
    return next;

  t0 = rb_now_ns ();
  wait = rbi_rate_delay (&rb->populate_rate, bytes, t0);
  if (wait && !populator_sleep (rb, wait))
    return c;

  for (i = 0; i < k; i++) {
    uint64_t off = rbi_chunk_offset (rb, runs[i][0]);
    nodes[i] = (struct rl_node) {
      .start = off, .end = off + rbi_chunks_bytes (rb, runs[i][0], runs[i][1]),
      .kind = RL_LOAD,
    };
  }
  rangelock_acquire_batch (&rb->rl, nodes, k);
  for (i = 0; i < k; i++) {
    uint64_t off = nodes[i].start;

    /* A demand load may have got here first: load only what is still
     * EMPTY, which under the range means exactly the leading run.
     */
    runs[i][1] = chunkmap_run (&rb->map, runs[i][0], runs[i][1],
                               CS_BIT (CS_EMPTY));
    ios[i] = (struct rb_io) {
      .op = RB_IO_READ, .buf = rb->ram.base + off,
      .count = rbi_chunks_bytes (rb, runs[i][0], runs[i][1]), .offset = off,
    };
  }
  /* Drop runs that turned out empty (count 0) from the submission. */
  {
    struct rb_io sub[BATCH_IOS];
    size_t map[BATCH_IOS], m = 0;

    for (i = 0; i < k; i++)
      if (runs[i][1] > 0) {
        map[m] = i;
        sub[m++] = ios[i];
      }
    if (m > 0)
      rb->store->ops->submit (rb->store, sub, m);
    for (i = 0; i < m; i++)
      ios[map[i]].err = sub[i].err;
  }

  bytes = 0;
  for (i = 0; i < k; i++) {
    if (runs[i][1] > 0 && ios[i].err) {
      rbi_record_store_error (rb, ios[i].err, "populate read",
                              ios[i].count, ios[i].offset);
      failed = true;
    }
    else if (runs[i][1] > 0) {
      chunkmap_move (&rb->map, runs[i][0], runs[i][1], CS_BIT (CS_EMPTY),
                     CS_CLEAN, NULL);
      rb_atomic_add (&rb->loaded_bytes, ios[i].count);
      bytes += ios[i].count;
    }
    rangelock_release (&rb->rl, &nodes[i]);
  }
  if (bytes) {
    uint64_t elapsed = rb_now_ns () - t0;
    if (rb->populate_rate.bps)
      elapsed = RB_MAX (elapsed, rbi_rate_ns (bytes, rb->populate_rate.bps));
    rbi_bw_sample (&rb->populate_bw, bytes, elapsed);
  }
  rbi_check_populated (rb);
  return failed ? c : next;
}

void
rbi_populator_state_init (struct rb_populator_state *ps)
{
  *ps = (struct rb_populator_state) { .backoff = BACKOFF_MIN_MS };
}

/* One populate pass: mark a hole, or load a batch.  Returns the delay
 * before the next (internal.h): 0, a back-off after a failure, or
 * RB_STEP_DONE once everything is loaded.
 */
uint64_t
rbi_populate_step (struct rb *rb, struct rb_populator_state *ps)
{
  uint64_t data, data_end, next;

  if (chunkmap_loaded (&rb->map) >= rb->nchunks)
    return RB_STEP_DONE;
  ps->c = chunkmap_next (&rb->map, ps->c, CS_BIT (CS_EMPTY));
  if (ps->c == UINT64_MAX) {
    if (ps->wrapped)    /* counters and map disagree: cannot happen */
      return RB_STEP_DONE;
    ps->c = 0;
    ps->wrapped = true;
    return 0;
  }
  ps->wrapped = false;

  data = next_data_chunk (rb, ps->c, &data_end);
  if (data > ps->c) {
    mark_hole (rb, ps->c, data - ps->c);
    ps->c = data;
    return 0;
  }
  next = load_batch (rb, ps->c, RB_MAX (data_end, ps->c + 1));
  if (next == ps->c) {          /* failed: back off, then retry */
    uint64_t delay = ps->backoff * 1000000;
    ps->backoff = rbi_backoff_next_ms (ps->backoff);
    return delay;
  }
  ps->backoff = BACKOFF_MIN_MS;
  ps->c = next;
  return 0;
}

/* The POSIX populator thread: pause in writethrough mode, wait out what
 * rbi_populate_step() asks for.
 */
static void *
populator_main (void *arg)
{
  struct rb *rb = arg;
  struct rb_populator_state ps;
  uint64_t delay;

  rb_thread_background ();
  rb_log ("populate: loading %" PRIu64 " chunks", rb->nchunks);
  rbi_populator_state_init (&ps);
  while (wait_writeback (rb)) {
    delay = rbi_populate_step (rb, &ps);
    if (delay == RB_STEP_DONE)
      break;
    if (delay && !populator_sleep (rb, delay))
      break;
  }
  rbi_check_populated (rb);
  return NULL;
}

int
rbi_populator_start (struct rb *rb)
{
  if (rb_thread_create (&rb->populator, populator_main, rb) == -1) {
    rb_set_error (errno, "cannot start the populate thread");
    return -1;
  }
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->populator_running = true;
  }
  return 0;
}

void
rbi_populator_stop (struct rb *rb)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_atomic_store (&rb->stopping, true);
    rb_cond_broadcast (&rb->populator_cond);
  }
  if (rb->populator_running) {
    rb_thread_join (rb->populator);
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->populator_running = false;
  }
}

int
rb_wait_populated (struct rb *rb, int timeout_ms)
{
  uint64_t deadline = rb_deadline_ms (timeout_ms);

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  while (!rb_atomic_load (&rb->populated)) {
    if (rb->stopping) {
      rb_set_error (ESHUTDOWN, "wait-populated: shutting down");
      return -1;
    }
    if (!rb->populator_running && !rb->cfg.populate) {
      rb_set_error (EINVAL, "wait-populated: populate=false, chunks are "
                    "only loaded on demand");
      return -1;
    }
    if (!rb_cond_wait_until (&rb->populated_cond, &rb->lock, deadline)) {
      rb_set_error (ETIMEDOUT, "wait-populated: %" PRIu64 " of %" PRIu64
                    " chunks loaded after %d ms",
                    chunkmap_loaded (&rb->map), rb->nchunks, timeout_ms);
      return -1;
    }
  }
  return 0;
}
