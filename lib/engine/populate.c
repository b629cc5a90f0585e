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
 * Chunks loaded in part (chunkmap.h: a miss loads only the sectors it
 * asks for) are found through their P bits and filled one at a time,
 * under a LOAD range over the chunk, with the sectors they lack
 * (rbi_load_sectors, which demand misses use too); a whole-chunk run
 * never includes one.
 *
 * One batch (or one hole) is one call of rbi_populate_step(), which
 * returns the delay before the next; the populator thread
 * (populator_main) only pauses and waits that out.
 *
 * A miss must not wait for populate.  Two ways it could, both seen
 * over a slow link: behind populate's bytes queued on the link (a
 * batch sized from a bandwidth measured while the link let a burst
 * through was seconds of the link's real rate), and behind a batch's
 * LOAD ranges, which a read of a sector inside them waited on until
 * the last of the batch's requests came back (a server that serves
 * small requests first, as a token bucket does, starves the batch
 * while the misses it holds back pile up, each holding a server
 * thread).  So:
 *   - a batch is the only populate I/O in flight, and it is sized from
 *     the last batch's own bandwidth (not a long average: when the link
 *     slows, the next batch follows at once), counted over the time
 *     beyond the quickest batch so far (a round trip, which a store
 *     far away can make longer than BATCH_NS), and grows at most twofold
 *     from one batch to the next (a slow start from BATCH_FIRST): at
 *     most about BATCH_NS of the link, and YIELD_BATCH_NS while clients
 *     miss;
 *   - over a store slower than BOUNCE_BPS a batch is read into a bounce
 *     buffer without any range held, and then copied in under the
 *     ranges, chunk by chunk, only where a chunk is still EMPTY and not
 *     partial: a miss inside the batch loads its own sectors meanwhile
 *     (a few KiB read twice), and a write that got there first leaves
 *     its chunk out of EMPTY, so the copy skips it.  The ranges are then
 *     held for a memcpy, not a round trip.  The buffer holds one batch
 *     (at most BATCH_NS of BOUNCE_BPS) and goes when populate ends.
 *     Such a read may overlap a store write of the same chunk (one that
 *     left EMPTY after the runs were picked, store.h); what it read of
 *     that chunk is not used.  Not with ram-size= (eviction returns
 *     chunks to EMPTY, with newer data in the store than a read begun
 *     before), and not over fast stores, where a batch is over in
 *     BATCH_NS and the copy would cost more than it saves.
 */

#include "env.h"
#include "cleanup.h"
#include "error.h"
#include "internal.h"
#include "backoff.h"

#define BATCH_IOS 8

/* Populate yields to clients (see the top).  A batch is at most about
 * BATCH_NS of the last batch's bandwidth and twice the last batch
 * (BATCH_FIRST before there is one), and while clients reach data not
 * loaded yet (rbi_note_miss, in the last YIELD_NS) at most YIELD_BATCH
 * and YIELD_BATCH_NS of the link, each followed by a pause YIELD_FACTOR
 * times as long as it took: populate then takes about a tenth of the
 * store's time, and misses the rest.  BATCH_NS is what keeps a lone
 * populate near the link's capacity: a batch pays one round trip, so
 * its share of the link is about 1 - RTT / BATCH_NS.
 */
#define BATCH_NS (100 * UINT64_C (1000000))
#define BATCH_FIRST (256 * 1024)
#define YIELD_NS (200 * UINT64_C (1000000))
#define YIELD_BATCH (256 * 1024)
#define YIELD_BATCH_NS (20 * UINT64_C (1000000))
#define YIELD_FACTOR 9
/* Below this bandwidth (bytes/s) batches go through the bounce buffer:
 * copying costs well under a twentieth of the transfer.
 */
#define BOUNCE_BPS (UINT64_C (256) * 1024 * 1024)
/* Each read lands in the bounce buffer at an address aligned as its
 * offset is, modulo this (a power of two, the largest page size), so
 * that a store that reads with O_DIRECT (store-file.c) still can.
 */
#define BOUNCE_ALIGN (UINT64_C (64) * 1024)

static bool
clients_missing (struct rb *rb)
{
  uint64_t t = rb_atomic_load (&rb->last_miss_ns);

  return t != 0 && rb_now_ns () - t < YIELD_NS;
}

/* Bytes that bps moves in ns. */
static uint64_t
bytes_in (uint64_t bps, uint64_t ns)
{
  return bps / (UINT64_C (1000000000) / ns);
}

/* Bytes for the next batch (above). */
static uint64_t
batch_budget (struct rb *rb, const struct rb_populator_state *ps,
              bool yielding)
{
  uint64_t b = BATCH_FIRST;

  if (ps->last_bps) {
    b = RB_MIN (bytes_in (ps->last_bps, BATCH_NS), 2 * ps->last_bytes);
    if (yielding)
      b = RB_MIN (b, bytes_in (ps->last_bps, YIELD_BATCH_NS));
  }
  if (yielding)
    b = RB_MIN (b, (uint64_t) YIELD_BATCH);
  return RB_MAX (b, (uint64_t) rb->chunk_size);
}

void
rbi_check_populated (struct rb *rb)
{
  /* loaded before npartial: a chunk is marked partial before it leaves
   * EMPTY (chunkmap.h), so with every chunk loaded, one still partial
   * is seen.
   */
  if (rb_atomic_load (&rb->populated) ||
      chunkmap_loaded (&rb->map) < rb->nchunks ||
      chunkmap_npartial (&rb->map) > 0)
    return;
  if (rb_atomic_xchg (&rb->populated, true))
    return;
  rb_log ("populated: all %" PRIu64 " chunks are in RAM", rb->nchunks);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  rb_cond_broadcast (&rb->populated_cond);
}

/* The run of chunks from c (at most max) that are EMPTY and not
 * partial: what a whole-chunk load may read.
 */
static uint64_t
empty_run (struct rb *rb, uint64_t c, uint64_t max)
{
  uint64_t n = chunkmap_run (&rb->map, c, max, CS_BIT (CS_EMPTY)), i;

  for (i = 0; i < n; i++)
    if (chunkmap_partial (&rb->map, c + i))
      return i;
  return n;
}

/* Sectors [s, s+n) were read from the store into RAM (range held): they
 * are valid.  A chunk read whole becomes CLEAN; one read in part is
 * partial first (chunkmap.h: P before its V bits, both before it leaves
 * EMPTY), and whole once its last sector is in.
 */
static void
sectors_loaded (struct rb *rb, uint64_t s, uint64_t n)
{
  unsigned shift = rb->map.sect_per_chunk_shift;
  uint64_t end = s + n;

  while (s < end) {
    uint64_t c = s >> shift, cs = c << shift;
    uint64_t ce = RB_MIN (cs + (UINT64_C (1) << shift), end);

    if (s == cs && ce == cs + (UINT64_C (1) << shift))
      chunkmap_make_whole (&rb->map, c);
    else {
      chunkmap_set_partial (&rb->map, c);
      chunkmap_set_valid (&rb->map, s, ce - s);
    }
    chunkmap_move (&rb->map, c, 1, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
    chunkmap_complete (&rb->map, c);
    s = ce;
  }
}

/* Requests per submit of a sector load (on the stack, a kernel one
 * too: it is built there, though only userspace has partial chunks).
 */
#define SECTOR_IOS 16

int
rbi_load_sectors (struct rb *rb, uint64_t start, uint64_t end, bool demand)
{
  unsigned ss = rb->sector_shift;
  uint64_t s = start >> ss, se = ((RB_MIN (end, rb->size) - 1) >> ss) + 1;
  uint64_t max_run = (uint64_t) RB_MAX_STORE_IO >> ss;
  struct rb_io ios[SECTOR_IOS];
  uint64_t runs[SECTOR_IOS][2];
  size_t k, i;

  if (start >= end)
    return 0;
  rb_assert (rb->map.part != NULL);
  while (s < se) {
    int err = 0;

    /* Up to SECTOR_IOS runs of sectors not valid, merged across
     * chunks, in one submit: a remote store runs them in parallel.
     */
    for (k = 0; k < SECTOR_IOS && s < se; ) {
      unsigned n = RB_MIN (se - s, 64 - s % 64);
      uint64_t c = s >> rb->map.sect_per_chunk_shift;
      uint64_t cend = (c + 1) << rb->map.sect_per_chunk_shift;
      uint64_t b;

      n = RB_MIN ((uint64_t) n, cend - s);
      b = chunkmap_invalid (&rb->map, s, n);
      while (b && k < SECTOR_IOS) {
        unsigned lo = rb_ctz64 (b), len;
        uint64_t x = b >> lo;

        len = x == ~UINT64_C (0) ? 64 - lo : rb_ctz64 (~x);
        if (k > 0 && runs[k - 1][0] + runs[k - 1][1] == s + lo &&
            runs[k - 1][1] + len <= max_run)
          runs[k - 1][1] += len;
        else {
          runs[k][0] = s + lo;
          runs[k][1] = len;
          k++;
        }
        b = lo + len >= 64 ? 0 : b & (~UINT64_C (0) << (lo + len));
      }
      if (b)                    /* out of requests: the rest next round */
        break;
      s += n;
    }
    if (k == 0)
      continue;
    for (i = 0; i < k; i++) {
      uint64_t off = runs[i][0] << ss;
      uint64_t len = RB_MIN ((runs[i][0] + runs[i][1]) << ss, rb->size) - off;
      ios[i] = (struct rb_io) {
        .op = RB_IO_READ, .buf = rb->ram.base + off, .count = len,
        .offset = off,
      };
    }
    rb->store->ops->submit (rb->store, ios, k);
    for (i = 0; i < k; i++) {
      if (ios[i].err) {
        rbi_record_store_error (rb, ios[i].err,
                                demand ? "load" : "populate read",
                                ios[i].count, ios[i].offset);
        if (err == 0)
          err = ios[i].err;
        continue;
      }
      sectors_loaded (rb, runs[i][0], runs[i][1]);
      rb_atomic_add (&rb->loaded_bytes, ios[i].count);
      if (demand)
        rb_atomic_add (&rb->demand_loaded_bytes, ios[i].count);
    }
    if (err) {
      rb_set_error (err, "cannot load %" PRIu64 " bytes at %" PRIu64
                    " from the backing store", ios[0].count, ios[0].offset);
      return -1;
    }
    /* Where the next round starts: after the last run taken (a word
     * cut short by SECTOR_IOS is looked at again).
     */
    s = RB_MAX (s, runs[k - 1][0] + runs[k - 1][1]);
  }
  return 0;
}

/* Fill partial chunk c (the populator): its sectors not valid. */
static int
fill_partial (struct rb *rb, uint64_t c)
{
  struct rl_node node;
  uint64_t start = rbi_chunk_offset (rb, c);
  uint64_t end = start + rbi_chunks_bytes (rb, c, 1);
  int r;

  rangelock_acquire (&rb->rl, &node, start, end, RL_LOAD);
  r = rbi_load_sectors (rb, start, end, false);
  rangelock_release (&rb->rl, &node);
  rbi_check_populated (rb);
  return r;
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

    len = empty_run (rb, c, RB_MIN (end - c, per_io));
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

/* Where each of the k reads of nodes lands in the bounce buffer: at
 * the next BOUNCE_ALIGN boundary plus its offset modulo BOUNCE_ALIGN,
 * so up to 2 * BOUNCE_ALIGN - 1 beyond its bytes (4 KiB chunks start
 * anywhere in a block).  Sets pos[i]; returns the bytes the layout
 * spans.
 */
static uint64_t
bounce_layout (const struct rl_node *nodes, size_t k, uint64_t *pos)
{
  uint64_t end = 0;
  size_t i;

  for (i = 0; i < k; i++) {
    pos[i] = ((end + BOUNCE_ALIGN - 1) & ~(BOUNCE_ALIGN - 1)) +
      (nodes[i].start & (BOUNCE_ALIGN - 1));
    end = pos[i] + (nodes[i].end - nodes[i].start);
  }
  return end;
}

/* The bounce buffer for a layout of 'span' bytes, from an address
 * aligned to BOUNCE_ALIGN; NULL if it cannot grow (the batch then goes
 * straight into RAM, under its ranges).
 */
static char *
bounce_get (struct rb_populator_state *ps, uint64_t span)
{
  uint64_t need = span + BOUNCE_ALIGN;  /* the start, aligned up */
  void *p;

  if (ps->bounce_size < need) {
    p = rb_realloc (ps->bounce, ps->bounce_size, need);
    if (p == NULL)
      return NULL;
    ps->bounce = p;
    ps->bounce_size = need;
  }
  return (char *) (((uintptr_t) ps->bounce + BOUNCE_ALIGN - 1) &
                   ~(uintptr_t) (BOUNCE_ALIGN - 1));
}

/* Under a range over chunks [c, c+n), whose data is at src: copy in
 * and make CLEAN the chunks still EMPTY and not partial (the others
 * were loaded or written meanwhile).  Returns the bytes copied.
 */
static uint64_t
copy_in (struct rb *rb, uint64_t c, uint64_t n, const char *src)
{
  uint64_t i = 0, bytes = 0, base = rbi_chunk_offset (rb, c);

  while (i < n) {
    uint64_t len = empty_run (rb, c + i, n - i), off, cnt;

    if (len == 0) {
      i++;
      continue;
    }
    off = rbi_chunk_offset (rb, c + i);
    cnt = rbi_chunks_bytes (rb, c + i, len);
    memcpy (rb->ram.base + off, src + (off - base), cnt);
    chunkmap_move (&rb->map, c + i, len, CS_BIT (CS_EMPTY), CS_CLEAN, NULL);
    bytes += cnt;
    i += len;
  }
  return bytes;
}

/* Load one batch: up to BATCH_IOS runs of EMPTY chunks in [c, limit),
 * read in one submit (a remote store runs them in parallel), each under
 * its own LOAD range: held over the read, or, through the bounce buffer
 * (see the top), only over the copy.  Returns the chunk to continue
 * from, or c on error.
 */
static uint64_t
load_batch (struct rb *rb, struct rb_populator_state *ps, uint64_t c,
            uint64_t limit, uint64_t budget)
{
  struct rl_node nodes[BATCH_IOS];
  struct rb_io ios[BATCH_IOS];
  uint64_t runs[BATCH_IOS][2], pos[BATCH_IOS];
  uint64_t per_io = RB_MAX ((uint64_t) RB_MAX_STORE_IO >> rb->chunk_shift,
                            UINT64_C (1));
  uint64_t next = c, bytes = 0, read = 0, t0, wait;
  char *bounce = NULL;
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
  per_io = RB_MAX (RB_MIN (per_io, budget >> rb->chunk_shift), UINT64_C (1));

  /* Find the runs (unlocked: only a hint; rechecked under the ranges). */
  while (k < BATCH_IOS && next < limit && bytes < budget &&
         (!rb->populate_rate.bps || k == 0)) {
    uint64_t n = empty_run (rb, next, RB_MIN (per_io, limit - next));
    if (n == 0) {
      uint64_t e = chunkmap_next (&rb->map, next, CS_BIT (CS_EMPTY));
      if (e == UINT64_MAX || e >= limit) {
        next = limit;
        break;
      }
      /* EMPTY but partial (a writethrough write of part of it in
       * flight): not a whole-chunk load; populate_step fills it.
       */
      next = e > next ? e : next + 1;
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
  if (!rb->slotted && ps->last_bps <= BOUNCE_BPS)
    bounce = bounce_get (ps, bounce_layout (nodes, k, pos));
  if (bounce) {
    for (i = 0; i < k; i++)
      ios[i] = (struct rb_io) {
        .op = RB_IO_READ, .buf = bounce + pos[i], .offset = nodes[i].start,
        .count = nodes[i].end - nodes[i].start,
      };
    rb->store->ops->submit (rb->store, ios, k);
    rangelock_acquire_batch (&rb->rl, nodes, k);
  }
  else {
    struct rb_io sub[BATCH_IOS];
    size_t map[BATCH_IOS], m = 0;

    rangelock_acquire_batch (&rb->rl, nodes, k);
    for (i = 0; i < k; i++) {
      uint64_t off = nodes[i].start;

      /* A demand load may have got here first: load only what is
       * still EMPTY, which under the range means exactly the leading
       * run.
       */
      runs[i][1] = empty_run (rb, runs[i][0], runs[i][1]);
      ios[i] = (struct rb_io) {
        .op = RB_IO_READ, .buf = rb->ram.base + off,
        .count = rbi_chunks_bytes (rb, runs[i][0], runs[i][1]),
        .offset = off,
      };
    }
    /* Drop runs that turned out empty (count 0) from the submission. */
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
      uint64_t got = ios[i].count;

      if (bounce)
        got = copy_in (rb, runs[i][0], runs[i][1], ios[i].buf);
      else
        chunkmap_move (&rb->map, runs[i][0], runs[i][1], CS_BIT (CS_EMPTY),
                       CS_CLEAN, NULL);
      rb_atomic_add (&rb->loaded_bytes, got);
      bytes += got;
      read += ios[i].count;
    }
    rangelock_release (&rb->rl, &nodes[i]);
  }
  if (read) {
    uint64_t took = rb_now_ns () - t0, elapsed = took, moving;

    if (rb->populate_rate.bps)
      elapsed = RB_MAX (elapsed, rbi_rate_ns (read, rb->populate_rate.bps));
    rbi_bw_sample (&rb->populate_bw, read, elapsed);
    /* The link's bandwidth for the next batch: the time the bytes took
     * beyond the quickest batch so far (about a round trip).  Over a
     * store whose round trip is longer than BATCH_NS, a batch's own
     * bandwidth would size each batch at half the last, down to one
     * chunk per round trip; a batch no slower than the round trip says
     * only that the link can take more (twice as much, the cap).
     */
    if (ps->rtt_ns == 0 || took < ps->rtt_ns)
      ps->rtt_ns = took;
    moving = RB_MAX (took - ps->rtt_ns, took / 16);
    ps->last_bytes = read;
    ps->last_bps = read * UINT64_C (1000000000) / RB_MAX (moving, UINT64_C (1));
    if (rb->populate_rate.bps)
      ps->last_bps = RB_MIN (ps->last_bps, rb->populate_rate.bps);
  }
  rbi_check_populated (rb);
  return failed ? c : next;
}

void
rbi_populator_state_init (struct rb_populator_state *ps)
{
  *ps = (struct rb_populator_state) { .backoff = BACKOFF_MIN_MS };
}

void
rbi_populator_state_fini (struct rb_populator_state *ps)
{
  rb_free (ps->bounce);
  ps->bounce = NULL;
  ps->bounce_size = 0;
}

/* One populate pass: mark a hole, or load a batch.  Returns the delay
 * before the next (internal.h): 0, a back-off after a failure, or
 * RB_STEP_DONE once everything is loaded.
 */
static uint64_t
populate_step (struct rb *rb, struct rb_populator_state *ps, bool yielding,
               uint64_t max_chunks)
{
  uint64_t data, data_end, next, p, t0 = rb_now_ns ();

  if (chunkmap_loaded (&rb->map) >= rb->nchunks &&
      chunkmap_npartial (&rb->map) == 0)
    return RB_STEP_DONE;
  p = chunkmap_next_partial (&rb->map, ps->c);
  ps->c = chunkmap_next (&rb->map, ps->c, CS_BIT (CS_EMPTY));
  if (p != UINT64_MAX && p <= ps->c) {
    /* A chunk loaded in part on demand (or written in part): the rest
     * of it, sectors of the store in its gaps.  Still EMPTY (p ==
     * ps->c: a writethrough write of part of it in flight), it is
     * filled once that write is done, under its range; load_batch
     * cannot take it whole.
     */
    ps->wrapped = false;
    ps->c = p;
    if (fill_partial (rb, p) == -1) {
      uint64_t delay = ps->backoff * 1000000;
      ps->backoff = rbi_backoff_next_ms (ps->backoff);
      return delay;
    }
    ps->backoff = BACKOFF_MIN_MS;
    ps->c = p + 1;
    return yielding ? (rb_now_ns () - t0) * YIELD_FACTOR : 0;
  }
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
    uint64_t n = RB_MIN (data - ps->c, max_chunks);

    mark_hole (rb, ps->c, n);
    ps->c += n;
    return 0;
  }
  next = load_batch (rb, ps, ps->c, RB_MAX (data_end, ps->c + 1),
                     RB_MIN (batch_budget (rb, ps, yielding),
                             max_chunks << rb->chunk_shift));
  if (next == ps->c) {          /* failed: back off, then retry */
    uint64_t delay = ps->backoff * 1000000;
    ps->backoff = rbi_backoff_next_ms (ps->backoff);
    return delay;
  }
  ps->backoff = BACKOFF_MIN_MS;
  ps->c = next;
  return yielding ? (rb_now_ns () - t0) * YIELD_FACTOR : 0;
}

/* With ram-size= smaller than the device (slots.c) populate is a
 * prefetch: each batch takes free slots (never evicting), as many as
 * the whole chunks it loads have sectors, and once not one chunk's
 * worth is free it stops for good, leaving the room to the misses.
 */
uint64_t
rbi_populate_step (struct rb *rb, struct rb_populator_state *ps)
{
  bool yielding = clients_missing (rb);
  unsigned per_chunk = rb->chunk_shift - rb->slot_shift;
  uint64_t got, delay;

  if (!rb->slotted)
    return populate_step (rb, ps, yielding, UINT64_MAX >> rb->chunk_shift);
  got = rbi_slots_try_reserve (rb, RB_MAX (batch_budget (rb, ps, yielding) >>
                                           rb->chunk_shift, UINT64_C (1))
                               << per_chunk);
  if (got >> per_chunk == 0) {
    rbi_slots_unreserve (rb, got);
    rb_log ("populate: ram-size= is full, the prefetch stops with %" PRIu64
            " of %" PRIu64 " chunks in RAM", chunkmap_loaded (&rb->map),
            rb->nchunks);
    rb_atomic_store (&rb->prefetch_done, true);
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_cond_broadcast (&rb->populated_cond);
    return RB_STEP_DONE;
  }
  delay = populate_step (rb, ps, yielding, got >> per_chunk);
  rbi_slots_unreserve (rb, got);
  return delay;
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
  rbi_populator_state_fini (&ps);
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
  while (!rb_atomic_load (&rb->populated) &&
         !rb_atomic_load (&rb->prefetch_done)) {
    if (rb->stopping) {
      rb_set_error (ESHUTDOWN, "wait-populated: shutting down");
      return -1;
    }
    if (!rb->populator_running && !rb->cfg.populate) {
      rb_set_error (EINVAL, "wait-populated: populate=false, chunks are "
                    "only loaded on demand");
      return -1;
    }
    if (rb_atomic_load (&rb->mode) == RB_MODE_WRITETHROUGH) {
      rb_set_error (EAGAIN, "wait-populated: populate is paused in "
                    "writethrough mode, with %" PRIu64 " of %" PRIu64
                    " chunks loaded (it resumes in writeback mode: "
                    "ramback mode writeback)",
                    chunkmap_loaded (&rb->map), rb->nchunks);
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
