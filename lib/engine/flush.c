/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: write back (the flusher thread), syncs, and the fsyncgate rule.
 *
 * The flusher works in sweeps: from chunk 0 upwards it collects runs of
 * dirty chunks (found through the chunk map's hints, so a sweep costs
 * O(dirty), not O(device)), writes each batch as large requests in
 * ascending order, and at the end of the sweep syncs the store (a long
 * sweep also every SWEEP_SYNC_NS on the way).  Every
 * sweep covers the sync tickets issued before it began: rb_sync() takes
 * a ticket and waits for the sweep that covers it.  One sweep and its
 * sync are one call of rbi_flush_step(), which returns the delay before
 * the next; the flusher thread (flusher_main) only waits that out.
 *
 * Per batch:
 *   1. wait for flush-rate=, before holding anything;
 *   2. take a STORE range over each run (this waits for earlier
 *      writethrough writes to the same chunks, and makes later ones wait
 *      for us: the flush race);
 *   3. move the chunks DIRTY -> CLEAN *before* the data is captured, so
 *      a write that lands while the store is in flight re-dirties the
 *      chunk and it is written again: the store converges on RAM;
 *   4. write straight from the RAM image (no bounce copy): with sector
 *      bits (chunkmap.h), only the dirty sectors, taken after each
 *      chunk's CAS, with dirty sectors in a row (across chunks too)
 *      merged into one request, so a 4 KiB random write costs 4 KiB of
 *      write-back and a sequential one still goes out in large
 *      requests; a chunk with half or more of its sectors dirty is
 *      written whole (dense(): at most twice its dirty bytes, in one
 *      request that merges with its neighbours and is large enough
 *      for direct I/O, where its sectors one by one would go through
 *      the page cache at several times the CPU per byte); without
 *      sector bits, whole runs of chunks;
 *   5. on failure put the chunks back to DIRTY; on success remember the
 *      range as unsynced.
 *
 * fsyncgate: a chunk counts as safely stored only after its write *and*
 * a later successful sync.  A failed sync may have dropped any write
 * since the last good one (Linux reports a write-back error to one
 * fdatasync only, marks the failed pages clean, and a retried fsync
 * then "succeeds"; an NBD server may drop its cache when a connection
 * dies), so a sync is never just retried.  Syncs are serialised
 * (sync_lock), and when one fails, everything written since the last
 * good sync is re-dirtied and written again: the writes it was meant to
 * cover, those that completed while it ran, and those still in flight,
 * which notice the new failure generation when they complete
 * (rbi_write_done).  A caller's sync counts only if no sync failed since
 * it began writing (rbi_sync_store's gen), so a FUA write or a FLUSH is
 * acknowledged only if every write it covers completed before a sync
 * that succeeded started.  A sync that fails in another thread (a FUA
 * write's) re-dirties after it moved the generation on, so a sweep
 * reads its generation only once no re-dirtying is under way
 * (rb->redirtying): else it could begin with the new generation, find
 * what the failure dropped still CLEAN, and answer the tickets with a
 * good sync and that data on neither the store nor its cache.  And a
 * sync that fails before the first good one since the start (sync_owed)
 * may drop what a process that crashed left in the store's cache, which
 * RAM may have loaded as CLEAN: it puts every sector RAM holds back to
 * dirty (redirty_loaded); a chunk evicted before (ram-size=) is not
 * (evicting only after the first good sync would stall misses for the
 * first sweep).  A sweep with any failure fails the tickets it covers,
 * so FLUSH keeps failing until one full sweep, writes and sync,
 * succeeds.
 *
 * flush-delay=SECONDS: data rewritten often is written back once.  Woken
 * from idle by new dirty data, the flusher waits SECONDS (rather than
 * the short coalescing wait) before it sweeps, and a sweep that leaves
 * new dirty data behind waits until SECONDS after it began before the
 * next one: a block rewritten many times within that is stored once.
 * Nothing waits on it: a stop, a sync ticket (rb_sync, FLUSH with
 * fsync=wait), writethrough mode and a writer at the dirty limit
 * (dirty-max=, ups-window=) end the wait at once (rbi_flusher_hurry,
 * flusher_delaying), and no wait begins while the dirty data is over
 * half the limit, so that writers do not stall on it.
 *
 * Cold first (dirty-expire=SECONDS): under write pressure, sectors
 * rewritten while dirty stay dirty, and the others are written back
 * first.  A write that lands on a sector still dirty sets its hot bit
 * (chunkmap.h).  A batch collected while the dirty data is over half
 * the limit (where write back cannot keep up anyway, and writers are
 * about to wait) leaves the dirty sectors whose hot bit is set where
 * they are, and writes the rest; a chunk with only such sectors is not
 * taken at all.  While the last sweep held back more than half the
 * limit, a sweep also clears the hot bits of what it leaves (a second
 * chance: CLOCK for dirty data), so what is not rewritten before the
 * next sweep goes then; below that it keeps them, and the set held
 * back grows.  So it settles at about half the limit, of the sectors
 * rewritten most often (a second chance every sweep, about a second
 * under pressure on a slow link, would keep only those rewritten more
 * often than that: with zipf 1.1 over 32768 sectors, the top 300
 * rather than the top 1024 of a 2048-sector limit, 70% of the writes
 * rather than 79%).  So the link carries the blocks written once, and the
 * ones rewritten again and again stay in RAM, where their rewrites cost
 * nothing: the dirty budget holds the hot set, and a write finds its
 * sector dirty more often.  Below half the limit nothing changes, and
 * write back clears the hot bits of what it takes.
 * Nothing is held back when something needs the data on the store:
 * a sync ticket not yet answered (rb_sync, FLUSH with fsync=wait), a
 * stop or its final drain, writethrough mode (set by hand, or by the UPS
 * hooks on battery).  A sweep that held data back never answers a
 * ticket it did not cover: it holds back only while every ticket up to
 * its target is answered already, and one taken during it is the next
 * sweep's.  (FUA writes go to the store themselves, io.c.)
 * The age bound: a sweep that begins SECONDS or more after the last
 * sweep that held nothing back holds nothing back, so a sector rewritten
 * for ever still reaches the store about every SECONDS (plus a sweep or
 * two); 30 by default, the page cache's dirty_expire_centisecs.  And a
 * sweep that held data back and wrote nothing makes the next one hold
 * nothing back: when every dirty sector is hot, write back does not
 * spin, and writers at the limit make progress.
 *
 * Resume (resume.c): with a ram= file, step 3 is preceded by setting
 * the chunks' NB bits ("may differ from the store"), and a good sync
 * retires the NB bits of what it covered (rbi_nb_retire).
 *
 * Why one file of over 900 lines: a sweep, its sync and the tickets it
 * answers (rbi_flush_step, rb_sync, rbi_sync_answer_locked) are one
 * mechanism under the fsyncgate rule above; the POSIX thread that runs
 * the step is a few dozen lines, and the dm target runs the same step
 * from its own kthread.
 */

#include "env.h"
#include "cleanup.h"
#include "error.h"
#include "internal.h"

#define BATCH_RUNS RB_FLUSH_BATCH_RUNS
#define BATCH_BYTES (UINT64_C (64) * 1024 * 1024)
#define ZERO_RUN_BYTES (UINT64_C (1) << 30)
#include "backoff.h"
#define SUSPECT_POLL_NS (100 * UINT64_C (1000000))

/* Wait up to ns on the flusher's condition; returns early on stop. */
/* flush-rate= holds, unless a clean stop's final drain has begun. */
static bool
rate_capped (struct rb *rb)
{
  return rb->flush_rate.bps && !rb_atomic_load (&rb->stopping) &&
    !rb_atomic_load (&rb->stop_drain);
}

/* The wait flush-rate= asks for; ends early when the cap is lifted. */
static void
rate_sleep (struct rb *rb, uint64_t ns)
{
  uint64_t deadline = rb_now_ns () + ns;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  while (rate_capped (rb) && rb_now_ns () < deadline)
    rb_cond_wait_until (&rb->flusher_cond, &rb->lock, deadline);
}

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

  if (rate_capped (rb) && rb->flush_rate.bps / 10 < b)
    b = RB_MAX (rb->flush_rate.bps / 10, (uint64_t) rb->chunk_size);
  return b;
}

/* Is DIRTY chunk c dense: half or more of its sectors dirty?  Then it is
 * written whole (step 4 at the top).  A hint: bits may be set meanwhile.
 */
static bool
dense (struct rb *rb, uint64_t c)
{
  unsigned shift = rb->map.sect_per_chunk_shift, cnt = 0;
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

  if (shift == 0)
    return false;
  while (s < end) {
    unsigned n = RB_MIN (end - s, 64 - s % 64);

    cnt += rb_popcount64 (chunkmap_peek_bits (&rb->map, s, n));
    s += n;
  }
  return cnt >= (UINT64_C (1) << shift) / 2;
}

/* Cold first (the top of the file): the dirty sectors of chunk c's
 * word [s, s+n) a batch that holds back leaves dirty; a hint.
 */
static uint64_t
held_bits (struct rb *rb, uint64_t s, unsigned n)
{
  return chunkmap_peek_hot (&rb->map, s, n) &
    chunkmap_peek_bits (&rb->map, s, n);
}

/* Has DIRTY chunk c dirty sectors, and all of them hot?  Then a batch
 * that holds back does not take it at all.
 */
static bool
all_held (struct rb *rb, uint64_t c)
{
  unsigned shift = rb->map.sect_per_chunk_shift;
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift), any = 0;

  while (s < end) {
    unsigned n = RB_MIN (end - s, 64 - s % 64);
    uint64_t b = chunkmap_peek_bits (&rb->map, s, n);

    if (b & ~chunkmap_peek_hot (&rb->map, s, n))
      return false;
    any |= b;
    s += n;
  }
  return any != 0;
}

/* Hold chunk c's hot dirty sectors back (all_held), giving them their
 * second chance if fs->age.
 */
static void
hold_chunk (struct rb *rb, struct rb_flusher_state *fs, uint64_t c)
{
  unsigned shift = rb->map.sect_per_chunk_shift;
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

  while (s < end) {
    unsigned n = RB_MIN (end - s, 64 - s % 64);
    uint64_t h = held_bits (rb, s, n);

    if (fs->age)
      chunkmap_cool (&rb->map, s, h);
    fs->held += rb_popcount64 (h);
    s += n;
  }
}

/* Estimated store requests and dirty bytes of DIRTY chunk c (its
 * sector bits as they are now; whole chunks without them).  *prev:
 * the sector before c is dirty and in the same run, so a run of dirty
 * sectors going on from it is no new request (take_sectors merges it);
 * updated for the next chunk.
 */
static void
estimate (struct rb *rb, uint64_t c, bool hold, bool *prev, uint64_t *nios,
          uint64_t *bytes)
{
  unsigned shift = rb->map.sect_per_chunk_shift;
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

  if (rb->map.sect == NULL || dense (rb, c)) {
    *nios += *prev ? 0 : 1;
    *prev = true;
    *bytes += rbi_chunks_bytes (rb, c, 1);
    return;
  }
  while (s < end) {
    unsigned n = RB_MIN (end - s, 64 - s % 64);
    uint64_t b = chunkmap_peek_bits (&rb->map, s, n);

    if (hold)
      b &= ~chunkmap_peek_hot (&rb->map, s, n);
    *nios += rb_popcount64 (b & ~((b << 1) | (*prev ? 1 : 0)));
    *bytes += (uint64_t) rb_popcount64 (b) << rb->sector_shift;
    *prev = (b >> (n - 1)) & 1;
    s += n;
  }
}

/* Requests a batch plans for: the rest of RB_FLUSH_BATCH_IOS is slack
 * for bits set between collect and store.
 */
#define BATCH_IOS_PLANNED (RB_FLUSH_BATCH_IOS * 3 / 4)

/* Collect up to BATCH_RUNS runs of dirty chunks from *cursor upwards.
 * With fs->hold, chunks whose dirty sectors are all hot are left out
 * (and their hot bits cleared).
 */
static size_t
collect (struct rb *rb, struct rb_flusher_state *fs, uint64_t *cursor,
         struct rb_run *runs)
{
  uint64_t c = *cursor, bytes = 0, nios = 0, budget = batch_bytes (rb);
  uint64_t per_io = RB_MAX ((uint64_t) RB_MAX_STORE_IO >> rb->chunk_shift,
                            UINT64_C (1));
  uint64_t per_zero = RB_MAX (ZERO_RUN_BYTES >> rb->chunk_shift,
                              UINT64_C (1));
  size_t k = 0;

  while (k < BATCH_RUNS && bytes < budget && nios < BATCH_IOS_PLANNED) {
    enum chunk_state st;
    uint64_t n, max, i, b = 0, next;

    c = chunkmap_next (&rb->map, c, CS_ANY_DIRTY);
    if (c == UINT64_MAX)
      break;
    /* The chunk's state may change under us (a zero turns a DIRTY
     * chunk ZERO, a write a ZERO chunk DIRTY): when it is not what we
     * read any more, look at chunk c again, never past it.  A sync
     * ticket this sweep answers may count on c (a write acknowledged
     * before the ticket was taken).
     */
    st = chunkmap_get (&rb->map, c);
    if (st != CS_DIRTY && st != CS_ZERO)
      continue;
    max = st == CS_ZERO ? per_zero
      : RB_MIN (per_io, RB_MAX ((budget - bytes) >> rb->chunk_shift,
                                UINT64_C (1)));
    n = chunkmap_run (&rb->map, c, max, CS_BIT (st));
    if (n == 0)
      continue;
    next = c + n;
    if (st == CS_DIRTY) {       /* zeroing costs no bandwidth */
      bool prev = false;

      /* Cut the run where the batch has planned requests enough, or
       * at a chunk held back whole (the run goes on past it).
       */
      for (i = 0; i < n; i++) {
        uint64_t ni = 0, nb = 0;

        if (fs->hold && rb->map.hot && all_held (rb, c + i)) {
          hold_chunk (rb, fs, c + i);
          next = c + i + 1;
          break;
        }
        estimate (rb, c + i, fs->hold, &prev, &ni, &nb);
        if (i > 0 && nios + ni > BATCH_IOS_PLANNED) {
          next = c + i;
          break;
        }
        nios += ni;
        b += nb;
      }
      n = i;
      bytes += b;
      if (n == 0) {
        c = next;
        continue;
      }
    }
    else
      nios++;
    runs[k].first = c;
    runs[k].n = n;
    runs[k].kind = st;
    runs[k].taken = 0;
    runs[k].bytes = b;
    k++;
    c = next;
  }
  *cursor = c == UINT64_MAX ? rb->nchunks : c;
  return k;
}

static uint64_t
data_bytes (struct rb *rb, const struct rb_run *runs, size_t k)
{
  uint64_t b = 0;
  size_t i;

  for (i = 0; i < k; i++)
    b += runs[i].bytes;
  return b;
}

/* Add sectors [s, s+n) to the batch's requests: appended to the last
 * one if they follow it (so dirty sectors in a row, across chunks, go
 * out as one request), else a new one.  When the batch has no room
 * left (*nio == cap), the last request, which belongs to this run, is
 * stretched to cover them: a few clean sectors are written again, from
 * RAM, which is always safe.
 */
static bool
add_sectors (struct rb *rb, struct rb_io *ios, size_t *nio, size_t cap,
             size_t run_first_io, uint64_t s, uint64_t n)
{
  uint64_t off = s << rb->sector_shift, end = (s + n) << rb->sector_shift;
  struct rb_io *last = *nio > run_first_io ? &ios[*nio - 1] : NULL;

  if (off >= rb->size)
    return true;
  end = RB_MIN (end, rb->size);
  if (last && last->offset + last->count == off) {
    last->count = end - last->offset;
    return true;
  }
  if (*nio == cap) {
    uint64_t gap = last ? last->offset + last->count : 0;

    /* Stretched over sectors that may not be valid (a partial chunk,
     * chunkmap.h): those bytes were never loaded, and must not reach
     * the store.  The caller keeps these sectors dirty instead.
     */
    if (last == NULL ||
        chunkmap_any_partial (&rb->map, rbi_chunk_of (rb, gap),
                              rbi_chunk_of (rb, off - 1) -
                              rbi_chunk_of (rb, gap) + 1))
      return false;
    last->count = end - last->offset;
    return true;
  }
  ios[(*nio)++] = (struct rb_io) {
    .op = RB_IO_WRITE, .buf = rb->ram.base + off,
    .count = end - off, .offset = off,
  };
  return true;
}

/* Take the DIRTY run's chunks one by one: CAS to CLEAN, then take
 * their sector bits (chunkmap.h for the order) and turn the dirty
 * sectors into requests.  A chunk that turned ZERO meanwhile is
 * written whole (RAM is all zero there, the store is not).  A partial
 * chunk (chunkmap.h) is never written whole, and of its dirty sectors
 * only the valid ones: a write that is filling a sector not loaded
 * marks it dirty before its copy and valid after (io.c, part_done).
 * What is left out (those, or sectors the batch has no request for)
 * is marked again and the chunk dirtied again, for a later sweep.
 * With fs->hold, the hot dirty sectors are left dirty (and their hot
 * bits cleared), and a chunk with any is not written whole; the hot
 * bits of what is taken are cleared.
 * Returns the chunks taken.
 */
static uint64_t
take_sectors (struct rb *rb, struct rb_flusher_state *fs,
              const struct rb_run *run, struct rb_io *ios,
              uint64_t *weights, size_t *nio, size_t cap)
{
  unsigned shift = rb->map.sect_per_chunk_shift;
  size_t first_io = *nio;
  uint64_t c, taken = 0;

  for (c = run->first; c < run->first + run->n; c++) {
    uint64_t moved[4], s, end, last_count = *nio ? ios[*nio - 1].count : 0;
    uint64_t weighed = 0;       /* sectors of c weighed in flight */
    size_t nio_before = *nio;
    bool whole;

    bool part, hold, left = false;

    if (chunkmap_move (&rb->map, c, 1, CS_ANY_DIRTY, CS_CLEAN, moved) == 0)
      continue;
    taken++;
    part = chunkmap_partial (&rb->map, c);
    whole = !part && (moved[CS_ZERO] > 0 || *nio == cap || dense (rb, c));
    s = c << shift;
    end = s + (UINT64_C (1) << shift);
    /* A chunk that turned ZERO is written whole, hot or not. */
    hold = fs->hold && rb->map.hot && moved[CS_ZERO] == 0;
    if (hold && whole) {
      uint64_t t;

      for (t = s; t < end; t += RB_MIN (end - t, 64 - t % 64))
        if (held_bits (rb, t, RB_MIN (end - t, 64 - t % 64)))
          whole = false;
    }
    while (s < end) {
      unsigned n = RB_MIN (end - s, 64 - s % 64);
      uint64_t keep = hold ? chunkmap_peek_hot (&rb->map, s, n) : 0;
      uint64_t b = keep ? chunkmap_take_bits_but (&rb->map, s, n, keep)
        : chunkmap_take_bits (&rb->map, s, n);
      uint64_t dirty = b;       /* the dirty sectors: what counts */

      /* Held back: what is still set of keep (the rest of it was not
       * dirty).  Taken: hot no more.
       */
      if (keep) {
        uint64_t h = keep & chunkmap_peek_bits (&rb->map, s, n);

        if (h) {
          left = true;
          fs->held += rb_popcount64 (h);
        }
        chunkmap_cool (&rb->map, s, fs->age ? keep : keep & ~h);
      }
      else
        chunkmap_cool (&rb->map, s, b & chunkmap_peek_hot (&rb->map, s, n));

      if (whole)
        b = chunkmap_bit_range (0, n);
      if (part) {
        uint64_t inval = b & ~chunkmap_valid_bits (&rb->map, s, n);

        chunkmap_mark_bits (&rb->map, s, inval);
        left |= inval != 0;
        b &= ~inval;
        dirty &= ~inval;
      }
      while (b) {
        unsigned lo = rb_ctz64 (b), len;
        uint64_t x = b >> lo, m;

        len = x == ~UINT64_C (0) ? 64 - lo : rb_ctz64 (~x);
        m = lo + len >= 64 ? ~UINT64_C (0) << lo
          : ((UINT64_C (1) << len) - 1) << lo;
        if (!add_sectors (rb, ios, nio, cap, first_io, s + lo, len)) {
          chunkmap_mark (&rb->map, s + lo, len);
          left = true;
          dirty &= ~m;
        }
        b &= ~m;
      }
      /* The dirty limit counts the dirty sectors in flight, not what
       * write back sends for them (a dense chunk whole): what leaves
       * the dirty count is what enters the in-flight one (io.c).  On
       * the last request, which holds some of them.
       */
      if (dirty && *nio > 0) {
        weights[*nio - 1] += (uint64_t) rb_popcount64 (dirty)
          << rb->sector_shift;
        weighed += (uint64_t) rb_popcount64 (dirty);
      }
      s += n;
    }
    /* A chunk that turned ZERO counted a sector (io.c), bits or not:
     * so does its write, which then never weighs nothing.  Never more
     * than the chunk's sectors, though: the dirty count is capped at
     * the dirty chunks whole, so a ZERO chunk with stale bits set (a
     * bit per sector of a 512-byte chunk) left it by a chunk at least
     * but maybe no more, and its bits and its sector both in flight
     * would raise the sum (io.c: taking data in flight never raises it).
     */
    if (moved[CS_ZERO] && (*nio != nio_before ||
                           (*nio && ios[*nio - 1].count != last_count)) &&
        weighed < (UINT64_C (1) << shift))
      weights[*nio - 1] += UINT64_C (1) << rb->sector_shift;
    /* After the bits (chunkmap.h): dirty again, for a later sweep. */
    if (left)
      chunkmap_move (&rb->map, c, 1, CS_BIT (CS_CLEAN), CS_DIRTY, NULL);
  }
  return taken;
}

/* Take the ZERO run's chunks one by one: a chunk still ZERO moves to
 * CLEAN and is zeroed on the store, with chunks in a row going out as
 * one zero request.  A chunk that is no longer ZERO is left alone: a
 * write landed in it since collect() (a writethrough or FUA write may
 * already be stored, synced and acknowledged), and a zero request over
 * it would destroy that write on the store.  It is dirty, and the sweep
 * goes back to it (*rewind): the sync tickets the sweep answers may
 * count on the zero being stored.  The requests cover exactly the
 * chunks moved.
 * When the batch has no request left for another gap, the rest of the
 * run stays ZERO and *rewind says where the sweep goes on.  Returns the
 * chunks taken.
 */
static uint64_t
take_zero (struct rb *rb, const struct rb_run *run, struct rb_io *ios,
           size_t *nio, size_t cap, uint64_t *rewind)
{
  uint64_t c, taken = 0;
  bool joined = false;          /* ios[*nio - 1] ends at chunk c */

  for (c = run->first; c < run->first + run->n; c++) {
    uint64_t off = rbi_chunk_offset (rb, c), len = rbi_chunks_bytes (rb, c, 1);

    if (!joined && *nio == cap) {
      *rewind = RB_MIN (*rewind, c);
      break;
    }
    if (chunkmap_move (&rb->map, c, 1, CS_BIT (CS_ZERO), CS_CLEAN,
                       NULL) == 0) {
      /* Dirty now, it is written back by this sweep, not a later one:
       * the sync tickets this sweep answers may cover the zero.
       */
      *rewind = RB_MIN (*rewind, c);
      joined = false;
      continue;
    }
    taken++;
    if (joined)
      ios[*nio - 1].count += len;
    else
      ios[(*nio)++] = (struct rb_io) {
        .op = RB_IO_ZERO, .count = len, .offset = off,
      };
    joined = true;
  }
  return taken;
}

/* Steps 2-5 above.  Returns 0, or -1 with errno of the first failure;
 * adds the data bytes written to *written.
 */
static int
store_batch (struct rb *rb, struct rb_flusher_state *fs, size_t k,
             uint64_t *written)
{
  struct rb_run *runs = fs->runs;
  struct rb_io *ios = fs->ios;
  struct rl_node *nodes = fs->nodes;
  uint64_t bytes = 0, gen, inflight = 0;
  int first_err = 0;
  size_t i, nio = 0;

  for (i = 0; i < k; i++) {
    uint64_t off = rbi_chunk_offset (rb, runs[i].first);
    nodes[i] = (struct rl_node) {
      .start = off,
      .end = off + rbi_chunks_bytes (rb, runs[i].first, runs[i].n),
      .kind = RL_STORE,
    };
  }
  rangelock_acquire_batch (&rb->rl, nodes, k);
  gen = rbi_write_begin (rb);
  memset (fs->weights, 0, sizeof fs->weights);

  for (i = 0; i < k; i++) {
    uint64_t off = nodes[i].start, len = nodes[i].end - nodes[i].start;
    /* Room for this run, leaving one request for each run after it. */
    size_t cap = RB_FLUSH_BATCH_IOS - (k - 1 - i);

    /* With resume: the chunk is "not durable" before it is CLEAN. */
    if (rb->nb)
      rbi_nb_set (rb, runs[i].first, runs[i].n);
    if (runs[i].kind == CS_ZERO)
      runs[i].taken = take_zero (rb, &runs[i], ios, &nio, cap, &fs->rewind);
    else if (rb->map.sect)
      runs[i].taken = take_sectors (rb, fs, &runs[i], ios, fs->weights,
                                    &nio, cap);
    else {
      /* Whole chunks from RAM: a chunk of the run that turned ZERO or
       * was written meanwhile holds in RAM what the store must get.
       */
      runs[i].taken = chunkmap_move (&rb->map, runs[i].first, runs[i].n,
                                     CS_ANY_DIRTY, CS_CLEAN, NULL);
      fs->weights[nio] = runs[i].taken << rb->chunk_shift;
      ios[nio++] = (struct rb_io) {
        .op = RB_IO_WRITE, .buf = rb->ram.base + off,
        .count = len, .offset = off,
      };
    }
    rb_atomic_add (&rb->inflight_chunks, runs[i].taken);
  }
  /* In flight as the dirty limit counts it (io.c): what left the dirty
   * count, a zero request's chunks a sector each.
   */
  for (i = 0; i < nio; i++) {
    if (ios[i].op == RB_IO_ZERO)
      fs->weights[i] = rbi_zero_weight (rb, ios[i].offset, ios[i].count);
    inflight += fs->weights[i];
  }
  rb_atomic_add (&rb->inflight_bytes, inflight);

  if (nio > 0 && rb->store->ops->submit (rb->store, ios, nio) == -1)
    first_err = errno ? errno : EIO;

  for (i = 0; i < nio; i++) {
    if (ios[i].err) {
      rbi_redirty (rb, ios[i].offset, ios[i].count);
      rb_atomic_store (&rb->store_failing, true);
      rbi_record_store_error (rb, ios[i].err, "write back",
                              ios[i].count, ios[i].offset);
      if (first_err == 0)
        first_err = ios[i].err;
    }
    else {
      rbi_write_done (rb, gen, ios[i].offset, ios[i].count,
                      fs->weights[i]);
      rb_atomic_add (ios[i].op == RB_IO_ZERO ? &rb->zeroed_bytes
                     : &rb->stored_bytes, ios[i].count);
      if (ios[i].op == RB_IO_WRITE)
        bytes += ios[i].count;
    }
  }
  rb_atomic_sub (&rb->inflight_bytes, inflight);
  for (i = 0; i < k; i++) {
    rb_atomic_sub (&rb->inflight_chunks, runs[i].taken);
    rangelock_release (&rb->rl, &nodes[i]);
  }

  *written += bytes;
  rbi_recompute_limit (rb);
  rbi_slots_notify (rb);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_cond_broadcast (&rb->space_cond);
  }
  if (rbi_tracing (rb))
    rb_log ("flush: %zu runs, %zu requests, %" PRIu64 " bytes%s", k, nio,
            bytes, first_err ? " (with errors)" : "");
  if (first_err) {
    rb_set_errno (first_err);
    return -1;
  }
  return 0;
}

/* What a sweep wrote and how long the store was busy with it. */
struct sweep_stats {
  uint64_t bytes, busy_ns;
};

/* While a sweep runs, its write bandwidth so far bounds the durable
 * bandwidth (the sync is still to come): lower the estimate at once if
 * the store turns out slower, without waiting for the end of a long
 * sweep.  Only over a long enough stretch to mean something.
 */
#define BOUND_MIN_NS (UINT64_C (250) * 1000000)

/* A sweep that takes longer (a flush-rate= cap, a slow store) syncs the
 * store on the way at this interval, so that what it wrote back is
 * durable within about that long, not only at the end of the sweep.
 */
#define SWEEP_SYNC_NS (UINT64_C (1000) * 1000000)

static uint64_t
dirty_expire_ns (struct rb *rb)
{
  return rb->cfg.dirty_expire_ms * UINT64_C (1000000);
}

/* Cold first (the top of the file): may the next batch of this sweep
 * hold rewritten sectors back?  Only under pressure, and when nobody
 * needs the data on the store.
 */
static bool
may_hold (struct rb *rb, struct rb_flusher_state *fs, uint64_t sweep_start)
{
  if (rb->map.hot == NULL || fs->force_full || rb->cfg.dirty_expire_ms == 0 ||
      sweep_start - fs->full_start >= dirty_expire_ns (rb) ||
      rb_atomic_load (&rb->stopping) || rb_atomic_load (&rb->stop_drain) ||
      rb_atomic_load (&rb->mode) != RB_MODE_WRITEBACK ||
      !rbi_dirty_pressure (rb))
    return false;
  {
    /* Every ticket answered, none taken since the sweep began. */
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    return rb->sync_requested == fs->target && fs->target <= rb->sync_done &&
      !rb->sync_owed;
  }
}

/* One sweep over the whole device.  Returns 0 or the errno of the first
 * failure.
 */
static int
sweep (struct rb *rb, struct rb_flusher_state *fs, struct sweep_stats *ss)
{
  struct rb_run *runs = fs->runs;
  uint64_t cursor = 0, backoff = BACKOFF_MIN_MS, synced = rb_now_ns ();
  uint64_t start = synced;
  int err = 0;
  size_t k;

  /* Second chances only while the last sweep held back over half the
   * limit (the top of the file).
   */
  fs->held = 0;
  fs->age = (fs->held_last << rb->sector_shift) >=
    rb_atomic_load (&rb->dirty_limit) / 2;
  while ((fs->hold = may_hold (rb, fs, start)),
         (k = collect (rb, fs, &cursor, runs)) > 0) {
    uint64_t now = rb_now_ns (), t0, elapsed, bytes = 0;
    uint64_t wait = rbi_rate_delay (&rb->flush_rate,
                                    data_bytes (rb, runs, k), now);

    /* The cap is lifted for the final drain of a clean stop. */
    if (wait && rate_capped (rb))
      rate_sleep (rb, wait);
    t0 = rb_now_ns ();
    fs->rewind = UINT64_MAX;
    if (store_batch (rb, fs, k, &bytes) == -1) {
      if (err == 0)
        err = errno;
      flusher_sleep (rb, backoff * 1000000);
      backoff = rbi_backoff_next_ms (backoff);
    }
    else
      backoff = BACKOFF_MIN_MS;
    cursor = RB_MIN (cursor, fs->rewind);
    if (rb_now_ns () - synced >= SWEEP_SYNC_NS) {
      uint64_t gen;
      {
        ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
        gen = rb->fail_gen;
      }
      if (rbi_sync_store (rb, gen) == -1 && err == 0)
        err = errno;
      synced = rb_now_ns ();
    }
    /* A batch after an idle spell goes out at page cache speed; under
     * a flush-rate= cap the sustained bandwidth is the cap, so never
     * count it as faster.
     */
    elapsed = rb_now_ns () - t0;
    if (rate_capped (rb))
      elapsed = RB_MAX (elapsed, rbi_rate_ns (bytes, rb->flush_rate.bps));
    ss->bytes += bytes;
    ss->busy_ns += elapsed;
    if (ss->busy_ns >= BOUND_MIN_NS) {
      rbi_bw_bound (&rb->flush_bw, ss->bytes, ss->busy_ns);
      rbi_recompute_limit (rb);
    }
  }
  fs->hold = false;
  /* Cold first: a sweep that held nothing back wrote everything that
   * was dirty when it began; one that held back and wrote nothing
   * makes the next one hold nothing back.
   */
  fs->held_last = fs->held;
  if (fs->held == 0) {
    fs->full_start = start;
    fs->force_full = false;
  }
  else {
    rb_atomic_add (&rb->held_back, fs->held);
    fs->force_full = ss->bytes == 0;
  }
  return err;
}

static bool
have_work_locked (struct rb *rb, uint64_t target)
{
  return chunkmap_dirty (&rb->map) > 0 || rb->sync_requested > target ||
    rb->unsynced.len > 0 || rb->sync_owed;
}

static bool
sync_needed (struct rb *rb, uint64_t target)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  return rb->unsynced.len > 0 || target > rb->sync_done || rb->sync_owed;
}

/* Woken from idle by new dirty data: give a burst of writes a moment
 * to arrive, so it is written back (and synced) as one sweep rather than
 * one sync per write.  A sync request or a stop ends the wait at once.
 */
#define COALESCE_MS 20

/* flush-delay=: may the flusher hold dirty data back now?  Not when
 * somebody waits for it (see the top of the file).
 */
static bool
may_delay_locked (struct rb *rb, uint64_t target)
{
  return rb->cfg.flush_delay_ms > 0 && !rb->stopping &&
    rb->sync_requested == target &&
    rb_atomic_load (&rb->mode) == RB_MODE_WRITEBACK &&
    !rbi_dirty_pressure (rb);
}

/* Wait until deadline while may_delay_locked.  flusher_delaying is set
 * before the conditions are checked, and rbi_flusher_hurry changes them
 * before it reads it (all seq_cst): either we see the change or it
 * sees the flag and signals, under the lock we wait with.
 */
static void
delay_locked (struct rb *rb, uint64_t target, uint64_t deadline)
{
  rb_atomic_store (&rb->flusher_delaying, true);
  while (may_delay_locked (rb, target) &&
         rb_cond_wait_until (&rb->flusher_cond, &rb->lock, deadline))
    ;
  rb_atomic_store (&rb->flusher_delaying, false);
}

static uint64_t
flush_delay_ns (struct rb *rb)
{
  return rb->cfg.flush_delay_ms * UINT64_C (1000000);
}

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
  /* With ram-size=, under sync_lock: the evictor (slots.c) must not
   * see a range taken from the store and not yet dirty again.
   */
  if (rb->slotted)
    rb_mutex_lock (&rb->sync_lock);
  do {
    n = rb->store->ops->take_suspects (rb->store, r, 16, &pending);
    for (i = 0; i < n; i++)
      rbi_redirty (rb, r[i].offset, r[i].count);
  } while (n == 16);
  if (rb->slotted)
    rb_mutex_unlock (&rb->sync_lock);
  return pending;
}

/* One pass of the flusher: take what the store no longer vouches for,
 * sweep, sync, answer the tickets the sweep covered.  Returns the delay
 * before the next pass (internal.h): 0, nanoseconds (fs->wakeable says
 * whether a kick may end them early), RB_STEP_DONE, or RB_STEP_IDLE
 * with rb->flusher_idle set: the caller waits for work (a kick) and
 * then clears it.
 */
uint64_t
rbi_flush_step (struct rb *rb, struct rb_flusher_state *fs)
{
  struct sweep_stats ss = { 0, 0 };
  uint64_t gen, t;
  int err;

  fs->pass_start = rb_now_ns ();
  fs->delaying = false;
  fs->suspects = redirty_suspects (rb);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    /* A sync that failed in another thread (a FUA write's) is putting
     * back to dirty what the store dropped: the sweep that answers the
     * tickets with its generation must find that data dirty.  No I/O
     * in between: a short wait, and only after a failure.
     */
    while (rb->redirtying > 0)
      rb_cond_wait (&rb->flusher_cond, &rb->lock);
    fs->target = rb->sync_requested;
    gen = rb->fail_gen;
  }
  err = sweep (rb, fs, &ss);
  /* Sync only if something was written since the last good sync, or
   * somebody is waiting for one: an empty sync still costs the store
   * a round trip (an NBD FLUSH, a disk cache flush).  The sync covers
   * the tickets only if no sync failed since the sweep began.
   */
  t = rb_now_ns ();
  if (sync_needed (rb, fs->target)) {
    if (rbi_sync_store (rb, gen) == -1) {
      if (err == 0)
        err = errno;
    }
    else if (err == 0 && ss.bytes > 0) {
      /* The bandwidth that sizes the UPS window is bytes made
       * durable per second: the sweep's writes and its sync.
       */
      rbi_bw_sample (&rb->flush_bw, ss.bytes,
                     ss.busy_ns + (rb_now_ns () - t));
    }
  }
  rbi_recompute_limit (rb);
  /* ram-size=: what was written back and synced may leave RAM now. */
  rbi_slots_trim (rb);

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  rbi_sync_answer_locked (rb, fs->target, err);
  /* Every write and the sync succeeded: the store works again. */
  if (err == 0)
    rb_atomic_store (&rb->store_failing, false);

  fs->wakeable = false;
  /* At a stop, a store that refuses because the server itself is
   * shutting down (an nbdkit filter below that sleeps, once nbdkit's
   * quit flag is set) never takes the data: say so and give up, rather
   * than retry for ever (a ram= image keeps it for the next start).
   */
  if (err == ESHUTDOWN && rb->stopping) {
    rb_warn ("clean stop: %" PRIu64 " dirty chunks cannot be written "
             "back: the backing store refuses all I/O because the server "
             "is shutting down (%s); giving up", chunkmap_dirty (&rb->map),
             rb_strerror (err));
    return RB_STEP_DONE;
  }
  if (err) {
    /* The store is failing: back off before the next sweep. */
    uint64_t delay = fs->backoff * 1000000;
    fs->backoff = rbi_backoff_next_ms (fs->backoff);
    if (rb->stopping)
      rb_warn ("clean stop: %" PRIu64 " dirty chunks cannot be written "
               "back yet (%s); retrying", chunkmap_dirty (&rb->map),
               rb_strerror (err));
    return delay;
  }
  fs->backoff = BACKOFF_MIN_MS;
  if (!have_work_locked (rb, fs->target)) {
    if (fs->suspects) {
      fs->wakeable = true;
      return SUSPECT_POLL_NS;
    }
    if (rb->stopping)
      return RB_STEP_DONE;
    /* Idle from now, in the same critical section that answered the
     * tickets: whoever sees them answered sees an idle flusher too
     * (control.c, sync 0).  The waiter clears it when it wakes.
     */
    rb_atomic_store (&rb->flusher_idle, true);
    return RB_STEP_IDLE;
  }
  /* New dirty data only: flush-delay= holds it back until the delay
   * since this pass began is over.
   */
  if (may_delay_locked (rb, fs->target)) {
    uint64_t until = fs->pass_start + flush_delay_ns (rb), now = rb_now_ns ();
    if (now < until) {
      fs->delaying = true;
      return until - now;
    }
  }
  return 0;
}

void
rbi_flusher_state_init (struct rb_flusher_state *fs)
{
  *fs = (struct rb_flusher_state) { .backoff = BACKOFF_MIN_MS,
                                     .full_start = rb_now_ns () };
}

/* Wait out what rbi_flush_step() asked for (the POSIX flusher thread and
 * the kernel target's kthread both do it this way).
 */
void
rbi_flusher_wait (struct rb *rb, const struct rb_flusher_state *fs,
                  uint64_t delay)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  if (delay == RB_STEP_IDLE) {
    while (!rb->stopping && !have_work_locked (rb, fs->target))
      rb_cond_wait (&rb->flusher_cond, &rb->lock);
    rb_atomic_store (&rb->flusher_idle, false);
    if (rb->cfg.flush_delay_ms)
      delay_locked (rb, fs->target, rb_now_ns () + flush_delay_ns (rb));
    else
      coalesce_locked (rb, fs->target);
  }
  else if (fs->delaying)
    delay_locked (rb, fs->target, rb_now_ns () + delay);
  else if (fs->wakeable)
    rb_cond_wait_until (&rb->flusher_cond, &rb->lock, rb_now_ns () + delay);
  else {
    uint64_t deadline = rb_now_ns () + delay;

    while (rb_now_ns () < deadline &&
           rb_cond_wait_until (&rb->flusher_cond, &rb->lock, deadline))
      ;
  }
}

static void *
flusher_main (void *arg)
{
  struct rb *rb = arg;
  struct rb_flusher_state *fs = &rb->flusher_state;
  uint64_t delay;

  rbi_flusher_state_init (fs);
  while ((delay = rbi_flush_step (rb, fs)) != RB_STEP_DONE)
    if (delay)
      rbi_flusher_wait (rb, fs, delay);
  return NULL;
}

static void *
flusher_thread (void *arg)
{
  rb_thread_background ();
  return flusher_main (arg);
}

int
rbi_flusher_start (struct rb *rb)
{
  if (rb->jops)                 /* journal=: transactions (txn.c) */
    return rb->jops->start (rb);
  /* Cold first (the top of the file): the hot bits, before any write
   * may set them.  Without them, nothing is held back.
   */
  if (rb->cfg.dirty_expire_ms && rb->map.sect && rb->map.hot == NULL &&
      chunkmap_init_hot (&rb->map) == -1) {
    rb_set_error (errno, "cannot allocate the hot sector map for %" PRIu64
                  " chunks", rb->nchunks);
    return -1;
  }
  {
    /* The first pass syncs the store: what a process that crashed
     * wrote without a sync may still be only in the store's cache (a
     * file's page cache, an NBD server's), and a sync answered later
     * promises it too.
     */
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->sync_owed = !rb->store->read_only;
  }
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
rbi_flusher_stop (struct rb *rb)
{
  if (rb->jops)
    return rb->jops->stop (rb);
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
    /* Nobody sweeps any more: answer every sync still waiting (once
     * a failed sync has put back to dirty what it dropped).
     */
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    while (rb->redirtying > 0)
      rb_cond_wait (&rb->flusher_cond, &rb->lock);
    rb->flusher_running = false;
    rbi_sync_answer_locked (rb, rb->sync_requested,
                            chunkmap_dirty (&rb->map) == 0 &&
                            rb->unsynced.len == 0 ? 0 : EIO);
  }
  if (chunkmap_dirty (&rb->map) > 0) {
    rb_set_error (EIO, "%" PRIu64 " dirty chunks were not written back",
                  chunkmap_dirty (&rb->map));
    return -1;
  }
  return 0;
}

void
rbi_flusher_kick (struct rb *rb)
{
  if (rb_atomic_load (&rb->flusher_idle)) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_cond_signal (&rb->flusher_cond);
  }
}

void
rb_begin_stop_drain (struct rb *rb)
{
  if (rb_atomic_load (&rb->stop_drain))
    return;
  rb_atomic_store (&rb->stop_drain, true);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_cond_broadcast (&rb->flusher_cond);      /* out of rate_sleep */
  }
}

void
rbi_flusher_hurry (struct rb *rb)
{
  if (rb_atomic_load (&rb->flusher_idle) ||
      rb_atomic_load (&rb->flusher_delaying)) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_cond_signal (&rb->flusher_cond);
  }
}

uint64_t
rbi_write_begin (struct rb *rb)
{
  return rb_atomic_load (&rb->fail_gen);
}

void
rbi_write_done (struct rb *rb, uint64_t gen, uint64_t offset, uint64_t count,
                uint64_t weight)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    struct rb_extents *x = &rb->unsynced;

    /* A sync failed while this write was in flight: the store may have
     * dropped it with the rest, so it is written again.
     */
    if (gen != rb->fail_gen)
      goto redirty;
    x->bytes += weight;
    rb_atomic_add (&rb->unsynced_bytes, weight);
    if (x->len > 0 && x->v[x->len - 1].offset + x->v[x->len - 1].count
        == offset)
      x->v[x->len - 1].count += count;
    else {
      if (x->len == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 64;
        struct rb_extent *v = rb_realloc (x->v, x->cap * sizeof *v,
                                           cap * sizeof *v);
        if (v == NULL) {
          /* Cannot remember it: keep it dirty instead, which is safe. */
          x->bytes -= weight;
          rb_atomic_sub (&rb->unsynced_bytes, weight);
          goto redirty;
        }
        x->v = v;
        x->cap = cap;
      }
      x->v[x->len++] = (struct rb_extent) { offset, count };
    }
  }
  rbi_flusher_kick (rb);
  return;

 redirty:
  rbi_redirty (rb, offset, count);
}

/* Synced, or re-dirtied: no longer unsynced.  Writers may wait for
 * that (the dirty limit counts unsynced bytes).
 */
static void
retire (struct rb *rb, const struct rb_extents *x)
{
  rb_atomic_sub (&rb->unsynced_bytes, x->bytes);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  rb_cond_broadcast (&rb->space_cond);
}

static void
redirty_all (struct rb *rb, struct rb_extents *x)
{
  size_t i;

  for (i = 0; i < x->len; i++)
    rbi_redirty (rb, x->v[i].offset, x->v[i].count);
  retire (rb, x);
  rb_free (x->v);
  memset (x, 0, sizeof *x);
}

/* A sync failed before the first good one (sync_owed): it may have
 * dropped what a process that crashed left in the store's cache, which
 * RAM may hold as CLEAN, loaded from that cache (a read returned it).
 * Every sector RAM holds is dirty again: the valid ones of a partial
 * chunk, all of a whole one (ZERO chunks are written back whole
 * anyway).  Under a range over the device, so that no load that read
 * the cache before the failure marks its sectors valid after the scan.
 * sync_lock held (a range after it: slots.c's order).  O(device), and
 * only when the first sync fails.
 */
static void
redirty_loaded (struct rb *rb)
{
  unsigned shift = rb->map.sect_per_chunk_shift;
  struct rl_node node;
  uint64_t c;

  rangelock_acquire (&rb->rl, &node, 0, rb->size, RL_WRITE);
  for (c = 0; c < rb->nchunks; c++) {
    enum chunk_state st = chunkmap_get (&rb->map, c);

    if (st == CS_EMPTY || st == CS_ZERO)
      continue;
    if (rb->map.part && chunkmap_partial (&rb->map, c)) {
      uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

      while (s < end) {
        unsigned n = RB_MIN (end - s, 64 - s % 64);

        chunkmap_mark_bits (&rb->map, s,
                            chunkmap_valid_bits (&rb->map, s, n));
        s += n;
      }
    }
    else
      rbi_mark_sectors (rb, rbi_chunk_offset (rb, c),
                        rbi_chunks_bytes (rb, c, 1));
    chunkmap_move (&rb->map, c, 1, CS_BIT (CS_CLEAN), CS_DIRTY, NULL);
  }
  rangelock_release (&rb->rl, &node);
  rbi_flusher_kick (rb);
}

int
rbi_sync_store (struct rb *rb, uint64_t gen)
{
  struct rb_extents snap, since;
  bool owed;
  int err;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->sync_lock);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    if (rb->fail_gen != gen) {
      /* What the caller wrote was re-dirtied by that failure: it is not
       * durable, and the next sweep writes it again.
       */
      rb_set_error (EIO, "a sync of the backing store failed meanwhile "
                    "(the data is kept in RAM and will be written again)");
      return -1;
    }
    snap = rb->unsynced;
    memset (&rb->unsynced, 0, sizeof rb->unsynced);
  }
  if (rb->store->ops->flush (rb->store) == 0) {
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
      rb->sync_owed = false;
    }
    rb_atomic_add (&rb->syncs, 1);
    rbi_nb_retire (rb, &snap);
    retire (rb, &snap);
    rb_free (snap.v);
    /* What it covered may be evicted now (ram-size=, slots.c). */
    rbi_slots_notify (rb);
    return 0;
  }
  err = errno ? errno : EIO;
  rb_atomic_add (&rb->sync_errors, 1);
  rb_atomic_store (&rb->store_failing, true);
  rbi_record_error (rb, err, rb_get_error ());
  /* Never trust a retried sync: everything written since the last good
   * one is written again, including what completed while this sync ran
   * (taken now, under the lock that also bumps the generation, so a
   * write is either in 'since' or sees the new generation).
   */
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_atomic_store (&rb->fail_gen, rb->fail_gen + 1);
    rb->redirtying++;
    owed = rb->sync_owed;
    since = rb->unsynced;
    memset (&rb->unsynced, 0, sizeof rb->unsynced);
  }
  redirty_all (rb, &snap);
  redirty_all (rb, &since);
  if (owed)
    redirty_loaded (rb);
  {
    /* Dirty again: a sweep may read the new generation now. */
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->redirtying--;
    rb_cond_broadcast (&rb->flusher_cond);
  }
  rb_set_error (err, "sync of the backing store failed: %s (the data is "
                "kept in RAM and will be written again)", rb_strerror (err));
  rb_set_errno (err);
  return -1;
}

void
rbi_redirty (struct rb *rb, uint64_t offset, uint64_t count)
{
  uint64_t c0 = rbi_chunk_of (rb, offset);
  uint64_t c1 = rbi_chunk_of (rb, offset + count - 1);

  rbi_mark_sectors (rb, offset, count);
  chunkmap_move (&rb->map, c0, c1 - c0 + 1,
                 CS_BIT (CS_EMPTY) | CS_BIT (CS_CLEAN), CS_DIRTY, NULL);
  rbi_flusher_kick (rb);
}

void
rbi_sync_answer_locked (struct rb *rb, uint64_t target, int err)
{
  if (err == 0) {
    if (target > rb->sync_done)
      rb_atomic_store (&rb->sync_done, target);
  }
  else if (target > rb->sync_failed) {
    rb_atomic_store (&rb->sync_failed, target);
    rb->sync_errno = err;
  }
  rb_cond_broadcast (&rb->sync_cond);
}

uint64_t
rbi_sync_request (struct rb *rb)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  rb_cond_signal (&rb->flusher_cond);
  return ++rb->sync_requested;
}

int
rbi_sync_answered (struct rb *rb, uint64_t t)
{
  if (rb_atomic_load (&rb->sync_done) >= t)
    return 1;
  return rb_atomic_load (&rb->sync_failed) >= t ? -1 : 0;
}

int
rb_sync (struct rb *rb, int timeout_ms)
{
  uint64_t deadline = rb_deadline_ms (timeout_ms), t;

  /* With a journal, a ticket is answered once the journal holds the
   * data (a FLUSH's promise); a sync promises the backing store.
   */
  if (rb->jops)
    return rb->jops->wait_applied (rb, deadline, "sync");
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
