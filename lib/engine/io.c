/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: application I/O.
 *
 * Three paths:
 *
 *  - Fast path: every chunk touched is loaded and the mode is writeback.
 *    No lock: copy to or from RAM, then (writes) move the chunks to
 *    DIRTY.  The order matters: data first, state second, so the
 *    flusher, which clears the state before it captures the data, either
 *    sees the new data or sees the chunk dirty again afterwards.  When
 *    the map lives in a ram= file (resume.c), the chunks are also moved
 *    to DIRTY *before* the copy, so a crash in the middle of it finds
 *    them dirty; the move after the copy stays (the flusher race).
 *    A zero is the exception: it turns whole loaded chunks into ZERO
 *    chunks ("write back as a hole") *before* it zeroes RAM.  Moved
 *    after, it could overwrite the DIRTY of a write that landed in RAM
 *    after the zero, and the store would get a hole where RAM holds
 *    that write's data.  Moved before, any later write moves the chunk
 *    on to DIRTY after its own copy, so the chunk is written back as
 *    whatever RAM ends up holding.  But a write can also land between
 *    the mark and the zeroing of RAM: it moves the chunk ZERO -> DIRTY,
 *    the flusher stores its data and marks the chunk CLEAN, and only
 *    then are those bytes zeroed: CLEAN over a store that holds the
 *    write's data.  So after zeroing RAM the zero also does what every
 *    writer does after its copy: it moves its whole chunks that are
 *    CLEAN now to DIRTY (all sectors: the store may hold anything
 *    there).  Only CLEAN: DIRTY and ZERO are written back as RAM is,
 *    and never to ZERO, which could mark as a hole a chunk that a
 *    later write filled and the flusher stored.  A chunk the flusher
 *    wrote back as a hole in between is written once more as data
 *    (zeroes): wasteful, never wrong, and only when the flusher
 *    catches the chunk within that window.
 *
 *  - Slow path: some chunk is still EMPTY (populate has not reached it)
 *    or partial (loaded in part, chunkmap.h).  Take a range, load what
 *    the request needs ahead of the background scan, do the request,
 *    release.  Holding the range is what keeps a background load from
 *    landing on top of the write (the populate race).  It is a RAM
 *    range, as a read's is: a write back in flight does not hold it
 *    back (rangelock.h), since the write changes RAM only, as on the
 *    fast path.  With partial
 *    chunks (userspace: sector bits finer than the chunk) a miss costs
 *    what it asks for: a read loads the sectors it touches that are not
 *    valid, under a range over those sectors only (misses elsewhere in
 *    the chunk load in parallel), and reads ahead when it is
 *    sequential; a write loads only a head or tail sector it covers in
 *    part, marks the chunks it covers in part partial before the copy
 *    (part_prepare) and its sectors valid after it (part_done), under
 *    a range over its chunks.  Without (the kernel target, 4K chunks) a
 *    read loads its chunks, a write its partially covered head and
 *    tail chunks.
 *
 *  - Writethrough: take a range (ordered after any store or writethrough
 *    already in flight on those chunks: the flush race, and arrival
 *    order for overlapping writes), load head and tail if needed, update
 *    RAM, write the same bytes to the store, release.  Writes to other
 *    chunks proceed in parallel.  A chunk dirty from before stays dirty
 *    and drains in the background.  If the store fails, the range is
 *    left dirty in RAM (RAM is the truth) and the write fails with the
 *    store's errno.  The store gets the bytes from RAM, not from the
 *    caller's buffer: a caller that changes its buffer while the write
 *    is in flight (a racy application under the kernel target) cannot
 *    make the store and RAM differ.  A store that can (can_fua: the
 *    kernel target's bios) writes them with FUA, durable on completion,
 *    so the write needs no sync and is not noted for one.
 *
 * Both forms run these paths, each in its own environment (env.h).  A
 * request's data is one flat buffer (the plugin: rb_pread, rb_pwrite)
 * or whatever a struct rb_data copies from and to (the kernel target:
 * a bio's pages).  The fast path never waits, so it also exists on its
 * own (rbi_try_pread, rbi_try_pwrite) for a caller that must not sleep,
 * the kernel target's map(): it does the request if it needs no wait,
 * or does nothing and says so, and the caller makes the waiting call
 * from a context where sleeping is fine (its workqueue).  Both end in
 * the same functions below; the only difference is how an idle flusher
 * is woken (rb->kick_nowait, a work item in the kernel).
 *
 * Why one file of over 600 lines: the three paths above share the
 * request's checks, its chunk range and the order rules; each is a few
 * functions, and the caller picks one per request.
 */

#include "env.h"
#include "cleanup.h"
#include "error.h"
#include "internal.h"

enum op { OP_WRITE, OP_ZERO };

struct req {
  enum op op;
  const void *buf;              /* OP_WRITE: a flat buffer, or */
  struct rb_data *data;         /* OP_WRITE: the caller's copy (buf NULL) */
  uint64_t offset, count;
  uint64_t c0, c1;              /* first and last chunk touched */
  unsigned flags;
  bool nowait;                  /* rbi_try_pwrite: must not sleep */
};

static void
req_init (struct rb *rb, struct req *r, enum op op, const void *buf,
          struct rb_data *data, uint32_t count, uint64_t offset,
          unsigned flags)
{
  r->op = op;
  r->buf = buf;
  r->data = data;
  r->offset = offset;
  r->count = count;
  r->c0 = rbi_chunk_of (rb, offset);
  r->c1 = rbi_chunk_of (rb, offset + count - 1);
  r->flags = flags;
  r->nowait = false;
}

/* Misses load sectors, not chunks (partial chunks, chunkmap.h): with
 * sector bits finer than the chunk, in userspace.  The kernel target
 * has no sector bits: it loads whole chunks.
 */
static inline bool
sectored (const struct rb *rb)
{
  return rb->map.part != NULL;
}

/* Every chunk of [c0, c1] whole (loaded, not partial). */
static bool
loaded (struct rb *rb, uint64_t c0, uint64_t c1)
{
  return rb_atomic_load (&rb->populated) ||
    (chunkmap_all (&rb->map, c0, c1 - c0 + 1, CS_LOADED) &&
     !chunkmap_any_partial (&rb->map, c0, c1 - c0 + 1));
}

static void
range_of (struct rb *rb, uint64_t c0, uint64_t c1, uint64_t *start,
          uint64_t *end)
{
  *start = rbi_chunk_offset (rb, c0);
  *end = *start + rbi_chunks_bytes (rb, c0, c1 - c0 + 1);
}

/* Is chunk c only partly covered by the request? */
static bool
partial (struct rb *rb, const struct req *r, uint64_t c)
{
  uint64_t s = rbi_chunk_offset (rb, c), e = s + rbi_chunks_bytes (rb, c, 1);
  return r->offset > s || r->offset + r->count < e;
}

/* Load the head and tail chunks if the request covers them partly (the
 * rest of those chunks must come from the store).  With partial chunks
 * only the head and tail sectors, if the request covers them in part:
 * the sectors it covers whole become valid by the request itself
 * (part_prepare, part_done).  Range held.
 */
static int
load_edges (struct rb *rb, const struct req *r)
{
  if (sectored (rb)) {
    uint64_t sz = UINT64_C (1) << rb->sector_shift, mask = sz - 1;
    uint64_t end = r->offset + r->count;

    if ((r->offset & mask) &&
        rbi_load_sectors (rb, r->offset & ~mask, (r->offset & ~mask) + sz,
                          true) == -1)
      return -1;
    if ((end & mask) && end < rb->size &&
        rbi_load_sectors (rb, end & ~mask, (end & ~mask) + sz, true) == -1)
      return -1;
    return 0;
  }
  if (partial (rb, r, r->c0) && rbi_load_chunks (rb, r->c0, 1) == -1)
    return -1;
  if (r->c1 != r->c0 && partial (rb, r, r->c1) &&
      rbi_load_chunks (rb, r->c1, 1) == -1)
    return -1;
  return 0;
}

/* Fully covered chunks: [*f, *l]; returns false if there are none. */
static bool
full_chunks (struct rb *rb, const struct req *r, uint64_t *f, uint64_t *l)
{
  *f = r->c0 + (partial (rb, r, r->c0) ? 1 : 0);
  *l = r->c1 - (partial (rb, r, r->c1) ? 1 : 0);
  return *f <= *l && !(r->c0 == r->c1 && partial (rb, r, r->c0));
}

/* Is chunk c whole (loaded, and not partial)? */
static bool
whole (struct rb *rb, uint64_t c)
{
  return chunkmap_get (&rb->map, c) != CS_EMPTY &&
    !chunkmap_partial (&rb->map, c);
}

/* Before RAM changes (range held, edges loaded): a chunk the request
 * covers in part and that is not whole is partial from now on
 * (chunkmap.h: before it leaves EMPTY).  Chunks it covers whole need
 * nothing: an EMPTY one becomes whole by the copy (move_dirty), a
 * partial one after it (part_done).
 */
static void
part_prepare (struct rb *rb, const struct req *r)
{
  uint64_t c;

  if (!sectored (rb))
    return;
  for (c = r->c0; c <= r->c1; c++)
    if (partial (rb, r, c) && !whole (rb, c))
      chunkmap_set_partial (&rb->map, c);
}

/* After RAM changed, before the chunks are marked dirty: the sectors
 * the request wrote are valid (those it covers in part were loaded),
 * and a partial chunk it covered whole is whole.  Valid only after the
 * copy: write back never stores a dirty sector whose V is not set yet
 * (flush.c), and a resume after a crash in the middle loads it again.
 */
static void
part_done (struct rb *rb, const struct req *r)
{
  uint64_t c, end = r->offset + r->count;
  unsigned ss = rb->sector_shift;

  if (!sectored (rb))
    return;
  for (c = r->c0; c <= r->c1; c++) {
    uint64_t lo, hi;

    if (!chunkmap_partial (&rb->map, c))
      continue;
    if (!partial (rb, r, c)) {
      chunkmap_make_whole (&rb->map, c);
      continue;
    }
    lo = RB_MAX (r->offset, rbi_chunk_offset (rb, c)) >> ss;
    hi = (RB_MIN (end, rbi_chunk_offset (rb, c + 1)) - 1) >> ss;
    chunkmap_set_valid (&rb->map, lo, hi - lo + 1);
    chunkmap_complete (&rb->map, c);
  }
}

/* Change RAM for the request. */
static inline __attribute__ ((__always_inline__)) void
apply (struct rb *rb, const struct req *r)
{
  if (r->op == OP_ZERO)
    ramimage_zero (&rb->ram, r->offset, r->count);
  else if (r->data)
    r->data->copy (r->data, rb->ram.base + r->offset, r->count, true);
  else
    ramimage_copy_in (&rb->ram, r->offset, r->buf, r->count);
}

/* Copy RAM out to a read's buffer or data. */
static void
copy_out (struct rb *rb, void *buf, struct rb_data *data, uint32_t count,
          uint64_t offset)
{
  if (data)
    data->copy (data, rb->ram.base + offset, count, false);
  else
    ramimage_copy_out (&rb->ram, offset, buf, count);
}

/* Wake an idle flusher, without waiting if the caller must not.  Not
 * inlined: rare on the hot path (the chunks are mostly DIRTY already).
 * (The attributes' __x__ spellings: the kernel defines noinline and
 * always_inline as macros.)
 */
static void __attribute__ ((__noinline__))
kick (struct rb *rb, const struct req *r)
{
  if (r->nowait && rb->kick_nowait)
    rb->kick_nowait (rb);
  else
    rbi_flusher_kick (rb);
}

/* Mark the touched chunks dirty.  A partial zero leaves a ZERO chunk
 * ZERO.  'empty' is CS_BIT (CS_EMPTY) after RAM changed (fully covered
 * chunks that were never loaded now hold the data; a zero makes them
 * ZERO), 0 before.  Loaded chunks a zero covers fully were made ZERO
 * before RAM changed (zero_full_chunks); after it, those the flusher
 * cleaned meanwhile are dirtied again (the top of the file).
 */
static uint64_t
move_dirty (struct rb *rb, const struct req *r, unsigned empty)
{
  uint64_t f, l, n = r->c1 - r->c0 + 1, end = r->offset + r->count;
  uint64_t moved;
  /* With resume the sectors were marked before RAM changed too: this
   * mark is no rewrite (chunkmap.h, hot bits).
   */
  bool again = empty && rb->nb;

  /* The sector bits before the state (chunkmap.h). */
  if (r->op == OP_WRITE) {
    rbi_mark_sectors_as (rb, r->offset, r->count, again);
    moved = chunkmap_move (&rb->map, r->c0, n,
                           empty | CS_BIT (CS_CLEAN) | CS_BIT (CS_ZERO),
                           CS_DIRTY, NULL);
  }
  else {
    moved = 0;
    if (empty && full_chunks (rb, r, &f, &l)) {
      moved += chunkmap_move (&rb->map, f, l - f + 1, empty, CS_ZERO, NULL);
      moved += chunkmap_dirty_whole (&rb->map, f, l - f + 1,
                                     CS_BIT (CS_CLEAN));
    }
    if (partial (rb, r, r->c0)) {
      rbi_mark_sectors_as (rb, r->offset,
                           RB_MIN (end, rbi_chunk_offset (rb, r->c0 + 1)) -
                           r->offset, again);
      moved += chunkmap_move (&rb->map, r->c0, 1,
                              CS_BIT (CS_CLEAN) | empty, CS_DIRTY, NULL);
    }
    if (r->c1 != r->c0 && partial (rb, r, r->c1)) {
      rbi_mark_sectors_as (rb, rbi_chunk_offset (rb, r->c1),
                           end - rbi_chunk_offset (rb, r->c1), again);
      moved += chunkmap_move (&rb->map, r->c1, 1,
                              CS_BIT (CS_CLEAN) | empty, CS_DIRTY, NULL);
    }
  }
  return moved;
}

/* After RAM changed.  premoved: what premark_dirty() moved (the
 * flusher is kicked if either moved a chunk).
 */
static inline __attribute__ ((__always_inline__)) void
mark_dirty (struct rb *rb, const struct req *r, uint64_t premoved)
{
  if (move_dirty (rb, r, CS_BIT (CS_EMPTY)) + premoved)
    kick (rb, r);
  if (rb->nb && r->op == OP_ZERO)
    rb_atomic_sub (&rb->zeros_changing, 1);
}

/* Before a zero changes RAM: the loaded chunks it covers fully become
 * ZERO (see the top of the file for why not after).
 */
static uint64_t
zero_full_chunks (struct rb *rb, const struct req *r)
{
  uint64_t f, l;

  if (r->op != OP_ZERO || !full_chunks (rb, r, &f, &l))
    return 0;
  return chunkmap_move (&rb->map, f, l - f + 1,
                        CS_BIT (CS_CLEAN) | CS_BIT (CS_DIRTY), CS_ZERO, NULL);
}

/* Before RAM changes.  A zero's whole chunks, and if the map outlives
 * us (resume.c) everything: a crash in the middle of the copy must find
 * the chunks dirty.  EMPTY chunks stay EMPTY until the copy is complete
 * (a resume loads them again; a reader must not take them as loaded).
 */
static uint64_t
premark_dirty (struct rb *rb, const struct req *r)
{
  /* With resume, a zero's whole chunks are ZERO before RAM changes: the
   * flusher may store and sync the zeroes while RAM still holds the old
   * data, and a crash then must find NB set (resume.c, rbi_nb_retire).
   */
  if (rb->nb && r->op == OP_ZERO)
    rb_atomic_add (&rb->zeros_changing, 1);
  return zero_full_chunks (rb, r) + (rb->nb ? move_dirty (rb, r, 0) : 0);
}

/* Writers wait while dirty + in-flight + unsynced data is over the
 * limit (all of it must be made durable to drain).  Checked before the
 * write, so the limit can be exceeded by at most the writes in progress
 * at once (nbdkit threads x request size).  A write whose sectors are
 * all dirty already (all_dirty) adds nothing to it and does not wait.
 *
 * What counts is what write back still has to send and sync, so that
 * scattered small writes into large chunks are not held back as if
 * they had dirtied the chunks whole:
 *   - dirty: with sector bits (chunkmap.h), the dirty sectors (the bits
 *     set, exact under races: chunkmap_sectors_set) and a sector per
 *     ZERO chunk (written back with one zero request, and a sector is
 *     the smallest thing write back sends), capped at the dirty chunks
 *     whole (stale bits on chunks no longer dirty, chunkmap.h
 *     "Counting", overcount at most up to that, and never hold writers
 *     back once nothing is dirty);
 *     without them (the kernel target) the dirty chunks whole, which is
 *     what its write back sends;
 *   - in flight: what the flusher took of that (flush.c, weights): the
 *     dirty sectors, not the bytes it sends for them (a dense chunk goes
 *     out whole, a short gap between dirty sectors is written over), so
 *     that taking data in flight never raises the sum (a writer that
 *     passed the throttle stays within it);
 *   - unsynced: what was written back and not yet synced, weighed the
 *     same way (rbi_write_done).
 * A failed store or sync puts back to dirty every sector it wrote, so
 * the sum may rise then (as it does when the limit drops).
 * With journal= the same, the committer in the flusher's place: what
 * the transactions not yet in place hold counts in flight, each sector
 * once however many of them hold it (txn.c, "Held chunks").
 */
uint64_t
rbi_dirty_bytes (struct rb *rb)
{
  uint64_t whole = chunkmap_dirty (&rb->map) << rb->chunk_shift, s;

  if (rb->map.sect == NULL)
    return whole;
  s = (chunkmap_sectors_set (&rb->map) + chunkmap_zero (&rb->map))
    << rb->sector_shift;
  return RB_MIN (s, whole);
}

uint64_t
rbi_inflight_bytes (struct rb *rb)
{
  return rb_atomic_load (&rb->inflight_bytes);
}

uint64_t
rbi_zero_weight (struct rb *rb, uint64_t offset, uint64_t count)
{
  uint64_t c0, c1;

  if (rb->map.sect == NULL || count == 0)
    return count;
  c0 = rbi_chunk_of (rb, offset);
  c1 = rbi_chunk_of (rb, offset + count - 1);
  return RB_MIN ((c1 - c0 + 1) << rb->sector_shift, count);
}

static bool
over (struct rb *rb, uint64_t limit)
{
  return rbi_dirty_bytes (rb) + rbi_inflight_bytes (rb) +
    rb_atomic_load (&rb->unsynced_bytes) >= limit;
}

bool
rbi_over_dirty_limit (struct rb *rb)
{
  uint64_t limit = rb_atomic_load (&rb->dirty_limit);

  return limit != 0 && over (rb, limit);
}

bool
rbi_dirty_pressure (struct rb *rb)
{
  uint64_t limit = rb_atomic_load (&rb->dirty_limit);

  return limit != 0 && over (rb, limit / 2);
}

/* Is every sector of [offset, offset+count) dirty already (its chunk
 * DIRTY, and with sector bits its bit set)?  Then writing it again adds
 * nothing to what the dirty limit counts.  A hint: write back may take
 * the sectors meanwhile, and the write then dirties them again, which
 * passes the limit by that write, as a write in progress when the
 * limit is reached does.
 */
static bool
all_dirty (struct rb *rb, uint64_t offset, uint64_t count)
{
  uint64_t c0 = rbi_chunk_of (rb, offset);
  uint64_t c1 = rbi_chunk_of (rb, offset + count - 1);

  if (!chunkmap_all (&rb->map, c0, c1 - c0 + 1, CS_BIT (CS_DIRTY)))
    return false;
  if (rb->map.sect) {
    uint64_t s = offset >> rb->sector_shift;
    uint64_t end = ((offset + count - 1) >> rb->sector_shift) + 1;

    while (s < end) {
      unsigned n = RB_MIN (end - s, 64 - s % 64);

      if (chunkmap_peek_bits (&rb->map, s, n) != chunkmap_bit_range (0, n))
        return false;
      s += n;
    }
  }
  return true;
}

void
rbi_throttle (struct rb *rb, uint64_t offset, uint64_t count)
{
  uint64_t limit = rb_atomic_load (&rb->dirty_limit);

#define OVER() over (rb, limit)
  /* flush-delay=: past half the limit, write back waits no more. */
  if (limit != 0 && rb_atomic_load (&rb->flusher_delaying) &&
      over (rb, limit / 2))
    rbi_flusher_hurry (rb);
  if (limit == 0 || !OVER ())
    return;
  /* A rewrite of dirty sectors adds no dirty data: a skewed load's hot
   * sectors, rewritten far more often than it dirties new ones, do not
   * wait for write back.
   */
  if (all_dirty (rb, offset, count)) {
    rb_atomic_add (&rb->rewrites_passed, 1);
    return;
  }
  rb_atomic_add (&rb->throttled, 1);
  if (rb->jops)                 /* the dirty data drains by commits */
    rb->jops->hurry (rb, false);
  else
    rbi_flusher_hurry (rb);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  while (!rb->stopping && OVER ()) {
    rb_cond_wait (&rb->space_cond, &rb->lock);
    limit = rb_atomic_load (&rb->dirty_limit);
    if (limit == 0)
      break;
  }
#undef OVER
}

static int
writethrough (struct rb *rb, const struct req *r)
{
  struct rl_node node;
  struct rb_io io;
  uint64_t start, end, f, l, gen = 0;
  bool fua = r->op == OP_WRITE && rb->store->can_fua;
  int ret = 0;

  range_of (rb, r->c0, r->c1, &start, &end);
  rangelock_acquire (&rb->rl, &node, start, end, RL_WRITE);
  if (load_edges (rb, r) == -1) {
    rangelock_release (&rb->rl, &node);
    return -1;
  }
  /* The map may say CLEAN (a writethrough leaves it so): NB says that
   * RAM may differ from the store until a sync (resume.c).
   */
  part_prepare (rb, r);
  if (rb->nb)
    rbi_nb_set (rb, r->c0, r->c1 - r->c0 + 1);
  apply (rb, r);
  part_done (rb, r);
  /* A ZERO chunk that now holds data must not be written back as a
   * hole later: it is plain dirty now.  The flusher may have collected
   * it into a zero run already, but it takes such a run chunk by chunk
   * under its own range, after ours, and sends zero requests only over
   * chunks still ZERO then (flush.c, take_zero).
   */
  if (r->op == OP_WRITE)
    chunkmap_move (&rb->map, r->c0, r->c1 - r->c0 + 1, CS_BIT (CS_ZERO),
                   CS_DIRTY, NULL);
  /* From RAM (see the top of the file); durable at once with FUA. */
  io = (struct rb_io) {
    .op = r->op == OP_WRITE ? RB_IO_WRITE : RB_IO_ZERO,
    .buf = r->op == OP_WRITE ? rb->ram.base + r->offset : NULL,
    .count = r->count, .offset = r->offset, .fua = fua,
  };
  if (!fua)
    gen = rbi_write_begin (rb);
  if (rb->store->ops->submit (rb->store, &io, 1) == 0) {
    /* Fully covered chunks that were never loaded now match the store,
     * and so do the valid sectors of partial ones still EMPTY (the
     * request's, and its edges, loaded).  (A DIRTY chunk stays DIRTY: a
     * racing writeback-mode write may have changed bytes we did not
     * just store.)
     */
    if (full_chunks (rb, r, &f, &l))
      chunkmap_move (&rb->map, f, l - f + 1, CS_BIT (CS_EMPTY), CS_CLEAN,
                     NULL);
    if (sectored (rb))
      chunkmap_move (&rb->map, r->c0, r->c1 - r->c0 + 1, CS_BIT (CS_EMPTY),
                     CS_CLEAN, NULL);
    rb_atomic_add (r->op == OP_WRITE ? &rb->stored_bytes
                   : &rb->zeroed_bytes, r->count);
    if (r->op == OP_WRITE)
      rb_atomic_add (&rb->written_through, 1);
    if (!fua)
      rbi_write_done (rb, gen, r->offset, r->count,
                      r->op == OP_WRITE ? r->count
                      : rbi_zero_weight (rb, r->offset, r->count));
    rangelock_release (&rb->rl, &node);
    /* FUA: durable only if no sync failed since this write began. */
    if (!fua && (r->flags & RB_FUA) && rb->cfg.fsync_wait &&
        rbi_sync_store (rb, gen) == -1)
      ret = -1;
  }
  else {
    /* The kernel has no errno: the request carries the error. */
    int err = io.err ? io.err : errno;

    rbi_redirty (rb, r->offset, r->count);
    rangelock_release (&rb->rl, &node);
    rb_atomic_store (&rb->store_failing, true);
    rbi_record_store_error (rb, err, "writethrough", r->count, r->offset);
    rb_set_error (err, "writethrough to the backing store failed "
                  "(the data is kept in RAM and will be retried)");
    ret = -1;
  }
  rbi_check_populated (rb);
  return ret;
}

static int
slow_path (struct rb *rb, const struct req *r)
{
  struct rl_node node;
  uint64_t start, end, pre;

  rbi_note_miss (rb);
  range_of (rb, r->c0, r->c1, &start, &end);
  /* RAM only: not held back by a write back in flight (rangelock.h). */
  rangelock_acquire (&rb->rl, &node, start, end, RL_RAM);
  if (load_edges (rb, r) == -1) {
    rangelock_release (&rb->rl, &node);
    return -1;
  }
  part_prepare (rb, r);
  pre = premark_dirty (rb, r);
  apply (rb, r);
  part_done (rb, r);
  mark_dirty (rb, r, pre);
  rangelock_release (&rb->rl, &node);
  rbi_check_populated (rb);
  return 0;
}

static inline __attribute__ ((__always_inline__)) void
trace_write (struct rb *rb, const struct req *r)
{
  if (rbi_tracing (rb))
    rb_log ("%s %" PRIu64 "@%" PRIu64 "%s", r->op == OP_WRITE ? "write" : "zero",
            r->count, r->offset, (r->flags & RB_FUA) ? " fua" : "");
}

/* The fast path: every chunk loaded (checked by the caller), writeback
 * mode, nothing to wait for.  No lock.  Inlined, with apply(), into
 * each caller: it is the plugin's hot path.
 */
static inline __attribute__ ((__always_inline__)) void
fast_write (struct rb *rb, const struct req *r)
{
  uint64_t pre;

  pre = premark_dirty (rb, r);
  apply (rb, r);
  mark_dirty (rb, r, pre);
}

/* With journal=: always into RAM, inside the journal's write gate
 * (txn.c); writethrough and FUA wait for the transaction that holds
 * the write.
 */
static int
journal_into_ram (struct rb *rb, const struct req *r)
{
  uint64_t reserved;
  int ret = 0;

  if (rb->jops->write_begin (rb, r->c0, r->c1, &reserved) == -1)
    return -1;
  /* ram-size=: no lock-free path (a chunk may leave RAM). */
  if (rb->slotted || !loaded (rb, r->c0, r->c1))
    ret = slow_path (rb, r);
  else
    fast_write (rb, r);
  rb->jops->write_end (rb, reserved);
  return ret;
}

/* Then writethrough and FUA wait for the transaction (with ram-size=,
 * holding no slots: reservers may wait for the same applier).
 */
static int
journal_wait (struct rb *rb, const struct req *r)
{
  if (rb_atomic_load (&rb->mode) == RB_MODE_WRITETHROUGH)
    return rb->jops->wait_applied (rb, rb_deadline_ms (-1), "writethrough");
  if ((r->flags & RB_FUA) && rb->cfg.fsync_wait)
    return rb->jops->sync (rb);
  return 0;
}

static int
journal_write (struct rb *rb, const struct req *r)
{
  rbi_throttle (rb, r->offset, r->count);
  if (journal_into_ram (rb, r) == -1)
    return -1;
  return journal_wait (rb, r);
}

/* ram-size= smaller than the device (slots.c): no lock-free path, as
 * a chunk may leave RAM; every request holds a range over its chunks,
 * which the evictor takes too.  A request goes in pieces of at most
 * rb->piece_chunks chunks, each of which first reserves a slot for
 * each of its sectors (chunks, without partial ones) not valid at the
 * check (rbi_slots_reserve_range): what it may load, or a write may
 * fill.  A piece is a hit if it needs no load (a read: all its sectors
 * valid; a write: all its
 * chunks resident, and the sectors it covers in part valid); every
 * resident chunk it touches counts as used again (evict.h).  Writes
 * take the slow path (or writethrough) piece by piece: NBD promises
 * no atomicity for a write, and each piece is done in full before the
 * next begins.  Not with journal=: a transaction holds whole writes
 * (slotted_journal_write).
 */

/* The chunks of [c0, c1] that are not resident.  A hint. */
static uint64_t
empty_chunks (struct rb *rb, uint64_t c0, uint64_t c1)
{
  uint64_t c, n = 0;

  for (c = c0; c <= c1; c++)
    n += chunkmap_get (&rb->map, c) == CS_EMPTY;
  return n;
}

/* The slots a piece [off, end) may load: its sectors not valid, whole
 * sectors (a write's edges are loaded, its other sectors written).
 */
static int
reserve_piece (struct rb *rb, uint64_t off, uint64_t end, uint64_t *n)
{
  uint64_t sz = UINT64_C (1) << rb->slot_shift;

  return rbi_slots_reserve_range (rb, off & ~(sz - 1),
                                  RB_MIN ((end + sz - 1) & ~(sz - 1),
                                          rb->size), n);
}

/* Is every sector of [off, end) valid in RAM?  Without sector bits,
 * are its chunks loaded?  A hint without a range over it.
 */
static bool
all_valid (struct rb *rb, uint64_t off, uint64_t end)
{
  if (!sectored (rb)) {
    uint64_t c0 = rbi_chunk_of (rb, off), c1 = rbi_chunk_of (rb, end - 1);

    return chunkmap_all (&rb->map, c0, c1 - c0 + 1, CS_LOADED);
  }
  return chunkmap_count_invalid (&rb->map, off >> rb->sector_shift,
                                 (end - 1) >> rb->sector_shift, 1) == 0;
}

/* Would write r load nothing: its chunks resident, and the sectors it
 * covers in part (its head and tail) valid?
 */
static bool
write_in_ram (struct rb *rb, const struct req *r)
{
  uint64_t sz = UINT64_C (1) << rb->sector_shift, end = r->offset + r->count;

  if (empty_chunks (rb, r->c0, r->c1) > 0)
    return false;
  if (!sectored (rb))
    return all_valid (rb, r->offset, end);
  return ((r->offset & (sz - 1)) == 0 ||
          all_valid (rb, r->offset, r->offset + 1)) &&
    ((end & (sz - 1)) == 0 || end >= rb->size || all_valid (rb, end - 1, end));
}

/* Chunks [c0, c1] were used: every resident one counts (the access
 * that loads a chunk does not, evict.h).
 */
static void
touch (struct rb *rb, uint64_t c0, uint64_t c1)
{
  uint64_t c;

  for (c = c0; c <= c1; c++)
    if (chunkmap_get (&rb->map, c) != CS_EMPTY)
      evict_touch (&rb->evict, c);
}

static void
hit (struct rb *rb, uint64_t c0, uint64_t c1)
{
  rb_atomic_add (&rb->hits, 1);
  touch (rb, c0, c1);
}

static void
miss (struct rb *rb, uint64_t c0, uint64_t c1)
{
  rb_atomic_add (&rb->misses, 1);
  touch (rb, c0, c1);
}

/* The end of the piece of [offset, end) that starts at offset. */
static uint64_t
piece_end (struct rb *rb, uint64_t offset, uint64_t end)
{
  uint64_t lim = rbi_chunk_offset (rb, rbi_chunk_of (rb, offset) +
                                   rb->piece_chunks);

  return RB_MIN (end, lim);
}

/* Does write r go to the store before it completes (writethrough mode,
 * or FUA with fsync=wait)?
 */
static inline bool
writes_through (struct rb *rb, const struct req *r)
{
  return rb_atomic_load (&rb->mode) == RB_MODE_WRITETHROUGH ||
    ((r->flags & RB_FUA) && rb->cfg.fsync_wait);
}

/* A fast zero written through must not turn into a write of zeroes:
 * true, with the error set, when the store cannot zero.
 */
static inline bool
fast_zero_refused (struct rb *rb, const struct req *r)
{
  if (r->op == OP_ZERO && (r->flags & RB_FAST_ZERO) && !rb->store->can_zero) {
    rb_set_error (ENOTSUP, "fast zero: the backing store cannot zero "
                  "without writing zeroes");
    return true;
  }
  return false;
}

/* Reserve slots for write r: one for each of its sectors (chunks,
 * without partial ones) not valid at the check, which a hit may have
 * too (sectors of a partial chunk it fills); *n says how many, for
 * rbi_slots_unreserve.  Before any range or the journal's gate
 * (slots.c).
 */
static int
write_reserve (struct rb *rb, const struct req *r, uint64_t *n)
{
  if (write_in_ram (rb, r))
    hit (rb, r->c0, r->c1);
  else
    miss (rb, r->c0, r->c1);
  /* A hit too may fill sectors of a partial chunk not valid yet. */
  return reserve_piece (rb, r->offset, r->offset + r->count, n);
}

static int
slotted_write (struct rb *rb, const struct req *r)
{
  uint64_t off = r->offset, end = r->offset + r->count;

  while (off < end) {
    uint64_t pend = piece_end (rb, off, end), n;
    struct req p = *r;
    bool wt = writes_through (rb, r);
    int ret;

    p.offset = off;
    p.count = pend - off;
    p.c0 = rbi_chunk_of (rb, off);
    p.c1 = rbi_chunk_of (rb, pend - 1);
    if (r->buf)
      p.buf = (const char *) r->buf + (off - r->offset);
    if (wt) {
      if (fast_zero_refused (rb, r))
        return -1;
    }
    else
      rbi_throttle (rb, p.offset, p.count);
    if (write_reserve (rb, &p, &n) == -1)
      return -1;
    ret = wt ? writethrough (rb, &p) : slow_path (rb, &p);
    rbi_slots_unreserve (rb, n);
    if (ret == -1)
      return -1;
    off = pend;
  }
  return 0;
}

/* ram-size= with journal=: the whole request in one piece, so that it
 * is in one transaction or the next, never split by a commit point
 * between two pieces.  Its slots first, for all of it, then the
 * journal's gate once (a reserver may wait for a commit point, which
 * takes the gate exclusively).  rb->write_max_chunks (slots.c,
 * rbi_slots_journal_fit) keeps every request within what the budget
 * can give it.
 */
static int
slotted_journal_write (struct rb *rb, const struct req *r)
{
  uint64_t n;
  int ret;

  if (r->c1 - r->c0 + 1 > rb->write_max_chunks) {
    rb_set_error (EINVAL, "a request of %" PRIu64 " bytes at offset %"
                  PRIu64 " spans %" PRIu64 " chunks; with journal= and "
                  "ram-size=%" PRIu64 " a request goes into RAM whole and "
                  "may span at most %" PRIu64 " (requests of up to %"
                  PRIu64 " bytes always fit): send smaller requests, or "
                  "give a larger ram-size= (or a smaller dirty-max=, or a "
                  "larger journal)", r->count, r->offset, r->c1 - r->c0 + 1,
                  rb->cfg.ram_size, rb->write_max_chunks, rb->write_max);
    return -1;
  }
  rbi_throttle (rb, r->offset, r->count);
  if (write_reserve (rb, r, &n) == -1)
    return -1;
  ret = journal_into_ram (rb, r);
  rbi_slots_unreserve (rb, n);
  if (ret == -1)
    return -1;
  return journal_wait (rb, r);
}

static int
do_write (struct rb *rb, const struct req *r)
{
  trace_write (rb, r);
  if (rb->store->read_only) {
    rb_set_error (EROFS, "the backing store is read-only");
    return -1;
  }
  if (rb->slotted && rb->jops)
    return slotted_journal_write (rb, r);
  if (rb->slotted)
    return slotted_write (rb, r);
  if (rb->jops)
    return journal_write (rb, r);
  if (writes_through (rb, r)) {
    if (fast_zero_refused (rb, r))
      return -1;
    return writethrough (rb, r);
  }

  rbi_throttle (rb, r->offset, r->count);
  if (!loaded (rb, r->c0, r->c1))
    return slow_path (rb, r);
  fast_write (rb, r);
  return 0;
}

/* do_write when it would not wait: false (nothing done) if it would. */
static bool
try_write (struct rb *rb, struct req *r)
{
  if (rb->store->read_only || rb->jops || rb->slotted ||
      rb_atomic_load (&rb->mode) != RB_MODE_WRITEBACK ||
      ((r->flags & RB_FUA) && rb->cfg.fsync_wait) ||
      !loaded (rb, r->c0, r->c1) ||
      (rbi_over_dirty_limit (rb) && !all_dirty (rb, r->offset, r->count)))
    return false;
  r->nowait = true;
  trace_write (rb, r);
  fast_write (rb, r);
  return true;
}

/* A miss with partial chunks: load the sectors [offset, offset+count)
 * touches that are not valid; a miss that starts where the last one's
 * load ended is sequential and reads ahead, to the end of its last
 * chunk (not further: a sparse copy, which reads what block status
 * calls data, must not read the holes after it).  Only the sectors loaded
 * are held, so misses on other sectors, of the same chunk too, load
 * in parallel.
 */
static int
load_miss (struct rb *rb, uint64_t offset, uint64_t count)
{
  struct rl_node node;
  uint64_t sz = UINT64_C (1) << rb->sector_shift;
  uint64_t start = offset & ~(sz - 1);
  uint64_t end = RB_MIN ((offset + count + sz - 1) & ~(sz - 1), rb->size);
  int r;

  if (rb_atomic_load (&rb->readahead_next) == offset)
    end = RB_MIN (rbi_chunk_offset (rb, rbi_chunk_of (rb, end - 1) + 1),
                  rb->size);
  rb_atomic_store (&rb->readahead_next,
                   end > offset + count ? end : offset + count);
  rangelock_acquire (&rb->rl, &node, start, end, RL_RAM);
  r = rbi_load_sectors (rb, start, end, true);
  rangelock_release (&rb->rl, &node);
  rbi_check_populated (rb);
  return r;
}

/* A read (or NBD_CMD_CACHE, buf and data NULL) with ram-size=: piece
 * by piece, each under a range over its chunks, loaded if need be with
 * slots reserved, and copied out before the range goes.
 */
static int
slotted_read (struct rb *rb, void *buf, struct rb_data *data,
              uint32_t count, uint64_t offset)
{
  uint64_t off = offset, end = offset + count;

  while (off < end) {
    uint64_t pend = piece_end (rb, off, end), n = 0, start, rend;
    uint64_t c0 = rbi_chunk_of (rb, off), c1 = rbi_chunk_of (rb, pend - 1);
    struct rl_node node;
    bool reserved;
    int r = 0;

    range_of (rb, c0, c1, &start, &rend);
    for (reserved = false;; reserved = true) {
      rangelock_acquire (&rb->rl, &node, start, rend, RL_RAM);
      if (reserved || all_valid (rb, off, pend))
        break;
      /* Sectors not in RAM: reserve slots, without holding the range
       * (none if they came meanwhile, or their chunks hold their slots:
       * whole-chunk slots).
       */
      rangelock_release (&rb->rl, &node);
      if (reserve_piece (rb, off, pend, &n) == -1)
        return -1;
    }
    if (!all_valid (rb, off, pend)) {
      miss (rb, c0, c1);
      rbi_note_miss (rb);
      if (sectored (rb)) {
        uint64_t sz = UINT64_C (1) << rb->sector_shift;

        r = rbi_load_sectors (rb, off & ~(sz - 1),
                              RB_MIN ((pend + sz - 1) & ~(sz - 1), rb->size),
                              true);
      }
      else
        r = rbi_load_chunks (rb, c0, c1 - c0 + 1);
    }
    else
      hit (rb, c0, c1);
    if (r == 0 && buf)
      copy_out (rb, (char *) buf + (off - offset), NULL, pend - off, off);
    else if (r == 0 && data)
      rb_assert (!"ram-size= with a struct rb_data");
    rangelock_release (&rb->rl, &node);
    rbi_slots_unreserve (rb, n);
    if (r == -1)
      return -1;
    off = pend;
  }
  return 0;
}

/* Make sure [offset, offset+count) is loaded (reads, NBD_CMD_CACHE). */
static int
ensure_loaded (struct rb *rb, uint64_t offset, uint64_t count)
{
  struct rl_node node;
  uint64_t start, end;
  uint64_t c0 = rbi_chunk_of (rb, offset);
  uint64_t c1 = rbi_chunk_of (rb, offset + count - 1);
  int r;

  if (loaded (rb, c0, c1))
    return 0;
  rbi_note_miss (rb);
  if (sectored (rb))
    return load_miss (rb, offset, count);
  range_of (rb, c0, c1, &start, &end);
  rangelock_acquire (&rb->rl, &node, start, end, RL_RAM);
  r = rbi_load_chunks (rb, c0, c1 - c0 + 1);
  rangelock_release (&rb->rl, &node);
  rbi_check_populated (rb);
  return r;
}

static void
trace_read (struct rb *rb, uint32_t count, uint64_t offset)
{
  if (rbi_tracing (rb))
    rb_log ("read %" PRIu32 "@%" PRIu64, count, offset);
}

static int
do_read (struct rb *rb, void *buf, struct rb_data *data, uint32_t count,
         uint64_t offset)
{
  if (count == 0)
    return 0;
  trace_read (rb, count, offset);
  if (rb->slotted)
    return slotted_read (rb, buf, data, count, offset);
  if (ensure_loaded (rb, offset, count) == -1)
    return -1;
  copy_out (rb, buf, data, count, offset);
  return 0;
}

int
rb_pread (struct rb *rb, void *buf, uint32_t count, uint64_t offset)
{
  return do_read (rb, buf, NULL, count, offset);
}

int
rbi_pread_data (struct rb *rb, struct rb_data *data, uint32_t count,
                uint64_t offset)
{
  return do_read (rb, NULL, data, count, offset);
}

/* Loaded chunks never go back to EMPTY: no range needed to copy. */
bool
rbi_try_pread (struct rb *rb, struct rb_data *data, uint32_t count,
               uint64_t offset)
{
  if (count == 0)
    return true;
  if (rb->slotted || !loaded (rb, rbi_chunk_of (rb, offset),
              rbi_chunk_of (rb, offset + count - 1)))
    return false;
  trace_read (rb, count, offset);
  copy_out (rb, NULL, data, count, offset);
  return true;
}

static int
write_data (struct rb *rb, const void *buf, struct rb_data *data,
            uint32_t count, uint64_t offset, unsigned flags)
{
  struct req r;

  if (count == 0)
    return 0;
  req_init (rb, &r, OP_WRITE, buf, data, count, offset, flags);
  if (do_write (rb, &r) == -1)
    return -1;
  /* stored_bytes / written_bytes is the write amplification. */
  rb_atomic_add (&rb->written_bytes, count);
  return 0;
}

int
rb_pwrite (struct rb *rb, const void *buf, uint32_t count, uint64_t offset,
           unsigned flags)
{
  return write_data (rb, buf, NULL, count, offset, flags);
}

int
rbi_pwrite_data (struct rb *rb, struct rb_data *data, uint32_t count,
                 uint64_t offset, unsigned flags)
{
  return write_data (rb, NULL, data, count, offset, flags);
}

bool
rbi_try_pwrite (struct rb *rb, struct rb_data *data, uint32_t count,
                uint64_t offset, unsigned flags)
{
  struct req r;

  if (count == 0)
    return true;
  req_init (rb, &r, OP_WRITE, NULL, data, count, offset, flags);
  if (!try_write (rb, &r))
    return false;
  rb_atomic_add (&rb->written_bytes, count);
  return true;
}

/* With journal=, a zero or trim goes into one transaction whole only
 * up to rb->zero_piece_chunks chunks (what the journal, and with
 * ram-size= the RAM beside the dirty data, takes at once: core.c); a
 * longer one (mkfs and fstrim discard the whole device, and NBD lets
 * a request without payload exceed the maximum block size) goes in
 * pieces of whole chunks, each in one transaction, the FUA flag on
 * the last one only (its sync covers the others).  NBD promises no
 * atomicity for a request: a commit point between two pieces holds
 * the device as it was in the middle of a zero that was not yet
 * acknowledged, which a crash there may return, as a disk that lost
 * power during the zero does.
 */
static int
zero_pieces (struct rb *rb, uint32_t count, uint64_t offset, unsigned flags)
{
  uint64_t end = offset + count, n = rb->zero_piece_chunks;
  struct req r;

  while (n && rbi_chunk_of (rb, end - 1) - rbi_chunk_of (rb, offset) >= n) {
    uint64_t pend = rbi_chunk_offset (rb, rbi_chunk_of (rb, offset) + n);

    req_init (rb, &r, OP_ZERO, NULL, NULL, pend - offset, offset,
              flags & ~RB_FUA);
    if (do_write (rb, &r) == -1)
      return -1;
    offset = pend;
  }
  req_init (rb, &r, OP_ZERO, NULL, NULL, end - offset, offset, flags);
  return do_write (rb, &r);
}

int
rb_zero (struct rb *rb, uint32_t count, uint64_t offset, unsigned flags)
{
  if (count == 0)
    return 0;
  return zero_pieces (rb, count, offset, flags);
}

/* Trimmed data reads back as zeroes, which NBD allows, and the store
 * gets a hole punched: the same as zero.
 */
int
rb_trim (struct rb *rb, uint32_t count, uint64_t offset, unsigned flags)
{
  return rb_zero (rb, count, offset, flags);
}

int
rb_cache (struct rb *rb, uint32_t count, uint64_t offset)
{
  if (count == 0)
    return 0;
  if (rb->slotted)
    return slotted_read (rb, NULL, NULL, count, offset);
  return ensure_loaded (rb, offset, count);
}

int
rb_flush (struct rb *rb)
{
  if (!rb->cfg.fsync_wait) {
    if (rb->jops)               /* a commit point, without waiting */
      rb->jops->request_commit (rb);
    return 0;
  }
  if (rb->jops)
    return rb->jops->sync (rb);
  return rb_sync (rb, -1);
}
