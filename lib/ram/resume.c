/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: resuming from a RAM image file after a crash or a clean stop.
 *
 * With ram= (ramimage.h, format 2) the chunk state map and the NB ("not
 * durable") bitmap live in the file, which outlives the process: a
 * kill -9, an OOM kill or an upgrade leaves them, and the image, in
 * shared memory.  This file owns what makes them trustworthy at that
 * moment, and what a start does with them.
 *
 * The invariant, at every instant, for every chunk c that is not EMPTY:
 *
 *   if RAM[c] may differ from what the backing store durably holds,
 *   then state[c] is DIRTY or ZERO, or NB[c] is set.
 *
 * (EMPTY chunks are never trusted: a resume loads them from the store,
 * whatever NB says.)  Everything that changes RAM or the store keeps it:
 *
 *   - A writer in writeback mode (io.c) moves the chunks it changes to
 *     DIRTY/ZERO *before* the first byte of RAM changes, and again after
 *     (the post-copy move is what makes the flusher race safe: the
 *     flusher moves DIRTY -> CLEAN before it captures the data).  Fully
 *     covered EMPTY chunks stay EMPTY until the copy is complete: a copy
 *     cut short by a crash then leaves them EMPTY, to be loaded again,
 *     rather than DIRTY with a mixture of new data and stale RAM.  The
 *     move is an atomic read-modify-write, ordered before the copy.
 *   - A writethrough write sets NB on its chunks before it changes RAM;
 *     the chunk may stay CLEAN in the map.
 *   - The flusher sets NB on a run's chunks before it moves them
 *     DIRTY -> CLEAN.
 *   - A zero marks its whole chunks ZERO before it changes RAM, and the
 *     flusher may store and sync its zeroes in between: while any zero
 *     is between its first state change and its last (zeros_changing),
 *     NB is not retired at all.
 *   - NB is retired (rbi_nb_retire) only after a successful sync, for
 *     the chunks of the extents that sync covered, and only for a chunk
 *     that is CLEAN now, has no store write in flight, and is in no
 *     newer unsynced extent (written again after the sync began).  For
 *     each run of such chunks it takes an RL_STORE range, which waits
 *     for the flusher and writethrough stores in flight over it and
 *     holds off new ones; under it a chunk can only leave CLEAN through
 *     a writeback writer, which has made it DIRTY (persistently) before
 *     it copies, so clearing NB at that moment is harmless.  A failed
 *     sync retires nothing (flush.c re-dirties what it covered).
 *
 * Why after a sync and not after the write: the store's own cache (the
 * page cache of a file, an NBD server's) survives our process, but a
 * write-back error may drop it (fsyncgate), and an NBD server may drop
 * unflushed writes when our connection dies.
 *
 * At start (rbi_resume_map), for a resumed map: EMPTY chunks lose their
 * NB bit and are populated, their RAM zeroed first (populate marks a
 * hole of the store CLEAN without reading it, taking RAM for zeroes
 * there, and a crash may have left anything under an EMPTY state: the
 * copy of a write cut short, which keeps the chunks it covers whole
 * EMPTY until it is complete (io.c), or the data of a chunk whose
 * eviction was cut short between its move to EMPTY and the return of
 * its memory); ZERO chunks are zeroed in RAM again (a zero
 * cut short by the crash may have left old bytes under a ZERO state);
 * CLEAN chunks with NB become DIRTY, every sector of them, and so do
 * the sector bits of DIRTY chunks with NB (a writethrough write into a
 * dirty chunk changes RAM and the store without setting bits); those of
 * the other dirty chunks come from the file (format 3), or are all set
 * (format 2).
 *
 * With journal= the chunks with NB are compared with the store instead
 * (resume_compare), sector by sector, and only the sectors that differ
 * become dirty (a whole chunk of zeroes that differs becomes ZERO, one
 * zero extent, as the zero request that made it was).  There the whole
 * chunks could be refused: the journal
 * must take everything dirty at the first commit point in one
 * transaction, and a running ramback bounds the dirty data in sectors
 * (txn.c), so a commit point that held one sector of each of many
 * chunks and was lost with the process (its chunks CLEAN with NB)
 * could add up, in whole chunks, to more than the journal holds.  What
 * RAM holds and the store does not is only the sectors of the dirty
 * bits and of that lost transaction, which the running bound counted.
 * The compare is exact once the store is synced (rb_open has replayed
 * the journal onto it): the store's own cache may hold writes of the
 * process that died, and what a sync made durable needs no write back.
 * If the sync or a read fails, those chunks go dirty whole, as without
 * a journal.  (Without one the whole chunks always fit: they are
 * written back in any number of passes, and a read of each chunk would
 * cost about what its write does.)
 *
 * The flusher then writes back every
 * DIRTY and ZERO chunk, as always, while I/O is served from the start.
 * A clean stop (rbi_nb_clear_all) clears NB: everything is synced.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "error.h"
#include "internal.h"
#include "iszero.h"

#define NB_BIT(c) (UINT64_C (1) << ((c) % 64))

void
rbi_nb_set (struct rb *rb, uint64_t c, uint64_t n)
{
  uint64_t end = c + n;

  while (c < end) {
    uint64_t w = c / 64, lo = c % 64;
    uint64_t hi = end - w * 64 < 64 ? end - w * 64 : 64;
    uint64_t m = chunkmap_bit_range (lo, hi - lo);

    /* A sequentially consistent RMW even when the bits are set
     * already: ordered before the caller's next step (the move to
     * CLEAN, the copy into RAM), as a fence would be, and unlike a
     * standalone fence something ThreadSanitizer understands.
     */
    rb_atomic_or (&rb->nb[w], m);
    c = (w + 1) * 64;
  }
}

static bool
nb_test (struct rb *rb, uint64_t c)
{
  return (rb_atomic_load (&rb->nb[c / 64]) & NB_BIT (c)) != 0;
}

static void
nb_clear (struct rb *rb, uint64_t c)
{
  if (nb_test (rb, c))
    rb_atomic_and (&rb->nb[c / 64], ~NB_BIT (c));
}

void
rbi_nb_clear_all (struct rb *rb)
{
  if (rb->nb)
    memset (rb->nb, 0, (rb->nchunks + 63) / 64 * sizeof (uint64_t));
}

/* A chunk span [first, end). */
struct span {
  uint64_t first, end;
};

static int
cmp_span (const void *a, const void *b)
{
  const struct span *x = a, *y = b;

  return x->first < y->first ? -1 : x->first > y->first;
}

/* Extents (byte ranges) as sorted, merged chunk spans; *n gets their
 * number.  NULL (and *n = 0) if there are none or no memory.
 */
static struct span *
to_spans (struct rb *rb, const struct rb_extent *v, size_t len, size_t *n)
{
  struct span *s;
  size_t i, k = 0;

  *n = 0;
  if (len == 0 || (s = malloc (len * sizeof *s)) == NULL)
    return NULL;
  for (i = 0; i < len; i++) {
    s[i].first = rbi_chunk_of (rb, v[i].offset);
    s[i].end = rbi_chunk_of (rb, v[i].offset + v[i].count - 1) + 1;
  }
  qsort (s, len, sizeof *s, cmp_span);
  for (i = 1; i < len; i++) {
    if (s[i].first <= s[k].end) {
      if (s[i].end > s[k].end)
        s[k].end = s[i].end;
    }
    else
      s[++k] = s[i];
  }
  *n = k + 1;
  return s;
}

/* First span of the sorted, disjoint v[0..n) that ends after c. */
static size_t
span_after (const struct span *v, size_t n, uint64_t c)
{
  size_t lo = 0, hi = n;

  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].end <= c)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

#define RETIRE_BATCH 64

void
rbi_nb_retire (struct rb *rb, const struct rb_extents *synced)
{
  struct span *spans, *newer = NULL;
  struct rl_node nodes[RETIRE_BATCH];
  size_t nspans, i, j, k, nnewer = 0;

  if (rb->nb == NULL)
    return;
  spans = to_spans (rb, synced->v, synced->len, &nspans);
  if (spans == NULL)
    return;                     /* nothing, or no memory: NB stays, safe */

  for (i = 0; i < nspans; i += k) {
    k = nspans - i < RETIRE_BATCH ? nspans - i : RETIRE_BATCH;
    for (j = 0; j < k; j++) {
      uint64_t off = rbi_chunk_offset (rb, spans[i + j].first);
      nodes[j] = (struct rl_node) {
        .start = off,
        .end = off + rbi_chunks_bytes (rb, spans[i + j].first,
                                   spans[i + j].end - spans[i + j].first),
        .kind = RL_STORE,
      };
    }
    /* Wait for the stores in flight over these chunks; hold off new
     * ones.  Then what was written since the sync began is in the
     * unsynced list, and nothing more can be added to it here.
     */
    rangelock_acquire_batch (&rb->rl, nodes, k);
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
      free (newer);
      newer = to_spans (rb, rb->unsynced.v, rb->unsynced.len, &nnewer);
      if (newer == NULL && rb->unsynced.len > 0)
        nnewer = SIZE_MAX;      /* no memory: retire nothing */
    }
    /* A zero between its ZERO mark and its change of RAM: the store may
     * hold its zeroes while RAM still holds the old data (lock-free,
     * no range to wait for): retire nothing now, a later sync will.
     */
    if (rb_atomic_load (&rb->zeros_changing) > 0)
      nnewer = SIZE_MAX;
    for (j = 0; j < k && nnewer != SIZE_MAX; j++) {
      uint64_t c = spans[i + j].first, end = spans[i + j].end;
      size_t x = span_after (newer, nnewer, c);

      for (; c < end; c++) {
        while (x < nnewer && newer[x].end <= c)
          x++;
        if (x < nnewer && newer[x].first <= c)
          continue;             /* written again since: not yet */
        if (chunkmap_get (&rb->map, c) == CS_CLEAN)
          nb_clear (rb, c);
      }
    }
    for (j = 0; j < k; j++)
      rangelock_release (&rb->rl, &nodes[j]);
  }
  free (newer);
  free (spans);
}

/* Does the state word hold a ZERO chunk? */
static bool
word_has_zero (uint64_t word)
{
  return (word & (word >> 1) & UINT64_C (0x5555555555555555)) != 0;
}

/* Partial chunks (chunkmap.h) of a resumed map: a ZERO one was zeroed
 * whole again (above), so it is whole; of the others, only the valid
 * sectors may be written back.  A dirty sector that is not valid
 * belongs to a write cut short by the crash (it marks dirty before its
 * copy and valid after it, io.c): never acknowledged, and its RAM is
 * loaded again from the store, so it is not dirty.  (The marks above
 * set every sector of a chunk; this takes those not valid off again.)
 * A DIRTY chunk left with no bit holds nothing the store lacks: it
 * becomes CLEAN, as the flusher makes such a chunk (chunkmap.h).  Left
 * DIRTY, the journal's commit point would take it with no data, which
 * its capture does not expect (txn.c).
 */
static void
resume_partial (struct rb *rb)
{
  unsigned shift = rb->map.sect_per_chunk_shift;
  uint64_t c = 0;

  while ((c = chunkmap_next_partial (&rb->map, c)) != UINT64_MAX) {
    uint64_t s = c << shift, end = s + (UINT64_C (1) << shift), left = 0;

    if (chunkmap_get (&rb->map, c) == CS_ZERO) {
      chunkmap_make_whole (&rb->map, c);
      c++;
      continue;
    }
    while (s < end) {
      unsigned n = RB_MIN (end - s, 64 - s % 64);
      uint64_t inval = ~chunkmap_valid_bits (&rb->map, s, n);
      uint64_t keep = chunkmap_take_bits (&rb->map, s, n) & ~inval;

      chunkmap_mark_bits (&rb->map, s, keep);
      left |= keep;
      s += n;
    }
    if (left == 0)
      chunkmap_move (&rb->map, c, 1, CS_BIT (CS_DIRTY), CS_CLEAN, NULL);
    c++;
  }
}

/* What resume does to chunk c with NB when it cannot tell which of its
 * sectors differ from the store: all of them.
 */
static void
resume_whole (struct rb *rb, uint64_t c)
{
  if (chunkmap_get (&rb->map, c) == CS_CLEAN)
    chunkmap_dirty_whole (&rb->map, c, 1, CS_BIT (CS_CLEAN));
  else
    chunkmap_mark (&rb->map, c << rb->map.sect_per_chunk_shift,
                   UINT64_C (1) << rb->map.sect_per_chunk_shift);
}

/* Chunk c (CLEAN or DIRTY, NB set) against 'stored', what the synced
 * store holds for it: the sectors that differ (the valid ones of a
 * partial chunk; the others are loaded again) get their bits, and a
 * CLEAN chunk with any moves to DIRTY; one with none matches the
 * durable store and loses its NB bit.  A DIRTY chunk keeps its bits.
 *
 * A whole chunk of zeroes in RAM that differs moves to ZERO instead,
 * written back as one zero extent, as a zero request's chunk is: a
 * lost commit point took a chunk zeroed whole as an extent of a few
 * bytes, and its sectors as data could be many times what the journal
 * holds (a discard of the device, then a crash before the commit
 * reached the journal).  It writes the same zeroes.
 */
static void
compare_chunk (struct rb *rb, uint64_t c, const uint8_t *stored)
{
  unsigned shift = rb->map.sect_per_chunk_shift;
  uint64_t off = rbi_chunk_offset (rb, c), len = rbi_chunks_bytes (rb, c, 1);
  uint64_t sect = (uint64_t) rb->chunk_size >> shift, s0 = c << shift, i;
  const uint8_t *ram = rb->ram.base + off;
  bool part = chunkmap_partial (&rb->map, c), differs = false;
  bool zero = !part && rb_is_zero (ram, len);

  for (i = 0; i * sect < len; i++) {
    uint64_t n = RB_MIN (sect, len - i * sect);

    if (part && !(chunkmap_valid_bits (&rb->map, s0 + i, 1) & 1))
      continue;
    if (memcmp (ram + i * sect, stored + i * sect, n) != 0) {
      differs = true;
      if (!zero)
        chunkmap_mark (&rb->map, s0 + i, 1);
    }
  }
  if (differs && zero) {
    chunkmap_move (&rb->map, c, 1, CS_BIT (CS_CLEAN) | CS_BIT (CS_DIRTY),
                   CS_ZERO, NULL);
    return;
  }
  if (chunkmap_get (&rb->map, c) != CS_CLEAN)
    return;
  if (!differs)
    nb_clear (rb, c);
  else if (rb->map.sect)
    chunkmap_move (&rb->map, c, 1, CS_BIT (CS_CLEAN), CS_DIRTY, NULL);
  else
    chunkmap_dirty_whole (&rb->map, c, 1, CS_BIT (CS_CLEAN));
}

#define COMPARE_BUF (4 * 1024 * 1024)   /* bytes read per batch */
#define COMPARE_IOS 16                  /* requests per batch, at most */

/* The chunks v[0..n) (ascending, each CLEAN or DIRTY with NB) against
 * the store, which is synced first (see the top).  Runs of them in a
 * row are read in batches of up to COMPARE_BUF bytes in COMPARE_IOS
 * requests, which a remote store runs in parallel.  What cannot be
 * compared goes dirty whole.
 */
static void
resume_compare (struct rb *rb, const uint64_t *v, size_t n)
{
  uint64_t cap = RB_MAX ((uint64_t) COMPARE_BUF, rb->chunk_size);
  uint8_t *buf = NULL;
  size_t i = 0, j;
  bool ok;

  if (n == 0)
    return;
  ok = rb->store->ops->flush (rb->store) == 0;
  if (!ok)
    rb_warn ("resume: the backing store could not be synced (%s): %zu "
             "chunks that may not be durable there are written back whole",
             rb_get_error (), n);
  else if (posix_memalign ((void **) &buf, 4096, cap) != 0) {
    rb_warn ("resume: no memory to compare with the backing store: %zu "
             "chunks that may not be durable there are written back whole",
             n);
    buf = NULL;
    ok = false;
  }
  if (!ok) {
    for (; i < n; i++)
      resume_whole (rb, v[i]);
    return;
  }
  while (i < n) {
    struct rb_io ios[COMPARE_IOS];
    size_t k = 0, first = i;
    uint64_t used = 0;

    /* A batch: runs of chunks in a row, while they fit. */
    while (i < n && k < COMPARE_IOS) {
      uint64_t c0 = v[i], bytes = rbi_chunks_bytes (rb, c0, 1);

      if (used + bytes > cap)
        break;
      j = i + 1;
      while (j < n && v[j] == v[j - 1] + 1 &&
             used + bytes + rbi_chunks_bytes (rb, v[j], 1) <= cap) {
        bytes += rbi_chunks_bytes (rb, v[j], 1);
        j++;
      }
      ios[k++] = (struct rb_io) {
        .op = RB_IO_READ, .buf = buf + used, .count = bytes,
        .offset = rbi_chunk_offset (rb, c0),
      };
      used += bytes;
      i = j;
    }
    if (ok && rb->store->ops->submit (rb->store, ios, k) == -1) {
      rb_warn ("resume: reading the backing store to compare (%s): the "
               "chunks that may not be durable there are written back "
               "whole", rb_get_error ());
      ok = false;
    }
    /* The batch holds its chunks one after the other. */
    for (j = first, used = 0; j < i; j++) {
      if (ok)
        compare_chunk (rb, v[j], buf + used);
      else
        resume_whole (rb, v[j]);
      used += rbi_chunks_bytes (rb, v[j], 1);
    }
  }
  free (buf);
}

void
rbi_resume_map (struct rb *rb)
{
  uint64_t w, nwords = rb->map.nwords, to_write, c;
  /* Chunks with NB to compare with the store (journal= only, above). */
  bool compare = rb->txns != NULL && !rb->ram.rewrite_all;
  uint64_t *cmp = NULL;
  size_t ncmp = 0, cmp_cap = 0;

  if (rb->ram.rewrite_all)
    chunkmap_dirty_whole (&rb->map, 0, rb->nchunks, CS_BIT (CS_CLEAN));
  for (w = 0; w < nwords; w++) {
    uint64_t word = rb->map.words[w];
    uint32_t nb = rb->nb[w / 2] >> (w % 2 * 32);
    uint64_t first = w * 32, last = first + 32;

    if (nb == 0 && !word_has_zero (word))
      continue;
    if (last > rb->nchunks)
      last = rb->nchunks;
    for (c = first; c < last; c++) {
      switch (chunkmap_get (&rb->map, c)) {
      case CS_EMPTY:
        nb_clear (rb, c);       /* never trusted: populated */
        break;
      case CS_ZERO: {
        uint64_t off = rbi_chunk_offset (rb, c);
        ramimage_zero (&rb->ram, off, rbi_chunks_bytes (rb, c, 1));
        break;
      }
      case CS_CLEAN:
      case CS_DIRTY:
        /* NB: RAM may differ from the store anywhere in the chunk,
         * beyond a DIRTY one's sector bits (a writethrough write into a
         * dirty chunk sets none): compared, or all of it.
         */
        if (!nb_test (rb, c))
          break;
        if (compare && ncmp == cmp_cap) {
          size_t ncap = cmp_cap ? 2 * cmp_cap : 1024;
          uint64_t *p = realloc (cmp, ncap * sizeof *cmp);
          if (p == NULL)
            compare = false;    /* the rest whole; those so far compared */
          else {
            cmp = p;
            cmp_cap = ncap;
          }
        }
        if (compare)
          cmp[ncmp++] = c;
        else
          resume_whole (rb, c);
        break;
      }
    }
  }
  resume_compare (rb, cmp, ncmp);
  free (cmp);
  /* EMPTY chunks hold zeroes, as in a new image (see the top). */
  for (c = 0; (c = chunkmap_next (&rb->map, c, CS_BIT (CS_EMPTY))) <
         rb->nchunks; ) {
    uint64_t n = chunkmap_run (&rb->map, c, rb->nchunks - c,
                               CS_BIT (CS_EMPTY));

    if (n == 0) {
      c++;
      continue;
    }
    ramimage_zero (&rb->ram, rbi_chunk_offset (rb, c),
                   rbi_chunks_bytes (rb, c, n));
    c += n;
  }
  resume_partial (rb);
  to_write = chunkmap_dirty (&rb->map);
  rb->resumed_chunks = chunkmap_loaded (&rb->map);
  rb->resumed_to_write = to_write;
  rb_info ("resume: %" PRIu64 " of %" PRIu64 " chunks taken from the RAM "
          "image, %" PRIu64 " of them to write back, %" PRIu64 " to load "
          "from the backing store", rb->resumed_chunks, rb->nchunks,
          to_write, rb->nchunks - rb->resumed_chunks);
}
