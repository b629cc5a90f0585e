/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: a device larger than its RAM (ram-size=).
 *
 * The RAM image keeps the device's size in address space (ramimage.h:
 * anonymous memory mapped MAP_NORESERVE, or a sparse ram= file), and a
 * chunk lives at its own offset in it.  What is bounded is how much
 * of it is resident (the budget, below).  An evicted chunk's
 * memory is given back to the system (ramimage_zero: MADV_DONTNEED, or
 * a hole punched in the ram= file, which tmpfs frees), so the page
 * tables are the chunk-to-slot table: no indirection on the I/O path,
 * no copy to move a chunk, and a ram= file needs no slot table of its
 * own to resume (its holes are the free slots, the chunk map says what
 * the rest holds).
 *
 * The budget counts what RAM holds, a slot being its unit: a sector
 * with partial chunks (chunkmap.h), a chunk without (the kernel
 * target, or 4 KiB chunks) or where memory comes in pages larger than
 * a sector (a ram= file on hugetlbfs).  Memory is given per page
 * (MAP_NORESERVE, a sparse file), and a miss loads the sectors it asks
 * for, so a chunk loaded in part takes only its loaded sectors: small
 * random reads
 * spread over the device, one sector per chunk, fill the budget with
 * as many chunks as it has sectors, not chunks.  nslots = ram-size /
 * slot; resident slots are the V bits set (chunkmap_resident), counted
 * where they are set and cleared, not here.  A ZERO chunk counts whole
 * though its pages were given back: the budget errs on the safe side.
 *
 * Reservations.  Whoever is about to load (a miss, a write to sectors
 * not in RAM, the prefetch) first reserves as many slots as the
 * request's sectors (chunks) not resident at the check, a bound on what
 * it may load (rbi_slots_reserve_range), so that resident + reserved
 * <= nslots, evicting clean chunks to make room; what it loaded counts
 * as resident before the reservation goes back.  Always before taking
 * a range, and released after the range: the evictor takes ranges, so
 * nobody may wait for slots while holding one.  A hit (every sector
 * valid at the check) reserves nothing; a chunk evicted between that
 * check and the request's range is loaded without a reservation, so
 * the budget can be passed by the requests in flight at that moment,
 * until the next reservation evicts again.
 *
 * Eviction (evict_some), the one way back to EMPTY (chunkmap.h), of
 * whole chunks (the policy's unit) until the slots asked for are free.
 * The victim comes from the policy (ds/evict.h) and must be CLEAN, with
 * its last write back synced: a sync that fails re-dirties everything
 * written since the last good one (flush.c, fsyncgate), and a store
 * that lost a connection hands back writes that may land late
 * (take_suspects) to be written again from RAM; either needs the data
 * in RAM.  So the evictor holds, in this order, slot_lock, and for
 * each victim sync_lock (no sync runs: every write not yet synced is
 * in rb->unsynced, and a write still running holds its range), checks
 * that the store has no suspects pending, takes the victim's range
 * (RL_WRITE: no reader, writer, load or write back is on it) if no
 * range over it is held, else passes it over (waiting there, for a
 * write back in flight over a slow link say, would hold every reserver
 * behind slot_lock for as long), then
 * checks under rb->lock that the chunk is CLEAN and in no unsynced
 * extent, moves it to EMPTY (chunkmap_evict) and gives its memory
 * back.  A crash after the move finds it EMPTY: loaded again from the
 * store, which holds its data.
 * Its NB bit (resume.c) may still be set: a FUA write (can_fua) is
 * durable without a sync that would retire it.  Under these locks NB
 * is stale, and resume ignores NB on an EMPTY chunk; waiting for it
 * to clear instead would wait for good (every resident chunk clean
 * with NB, nothing to write back or sync).
 *
 * With journal=, CLEAN is not enough: a chunk is CLEAN from its
 * transaction's commit point on, before it is captured, committed, and
 * written in place and synced; until then the journal holds it
 * (jops->holds, counted per chunk in txn.c) and it is kept.  The
 * journal's applier, not the flusher, then wakes the reservers and
 * trims what is over the budget.  And a write goes into RAM whole
 * (io.c, slotted_journal_write), so that a commit point never falls
 * between two pieces of it: it reserves for all its chunks, then takes
 * the journal's gate once.  The gate comes after the slots in the lock
 * order: a reserver may wait for a commit point, which takes the gate
 * exclusively, and nobody waits for slots inside the gate.  So that
 * the reservation can always be met, a request spans at most the slots
 * beyond the dirty limit (rbi_slots_journal_fit: the rest may be dirty
 * or held, and only the journal frees them).
 *
 * A victim not synced yet is kept, and the search goes on, for a
 * bounded number of steps (evict_some): sync_lock is the victim's
 * only, so the sync that would free it can run meanwhile.
 *
 * Over the budget.  A resumed ram= image may hold more than ram-size=
 * (a start with a larger one, or none, wrote it), and the requests in
 * flight may pass it for a moment (hits, above).  Reads of resident
 * chunks never reserve, so nothing would evict: the flusher does
 * (rbi_slots_trim), after each pass, once what it wrote back is synced.
 *
 * Waiting.  When nothing can be evicted (every resident chunk dirty,
 * being written back, or not synced yet), a reserver hurries the
 * flusher and waits on rb->space_cond for slot_gen to change: a good
 * sync, a reservation given back, a write-back batch, a stop.  Writers
 * never fail for want of RAM.  dirty-max= defaults to half of
 * ram-size= (rbi_recompute_limit), so that reads find clean chunks to
 * evict while write back catches up.  The limit counts dirty sectors
 * (io.c), and a chunk is evicted whole, so chunks with a few dirty
 * sectors among resident clean ones may hold more of the budget than
 * the limit says: then reservers wait here, as above, rather than
 * writers at the limit.
 *
 * Lock order: slot_lock, sync_lock, a range, rb->lock; a reservation
 * is taken before the journal's gate, and the gate before a range.
 * Nothing that holds a range, sync_lock or the gate takes slot_lock.
 */

#include "env.h"
#include "cleanup.h"
#include "error.h"
#include "internal.h"

#define SUSPECT_WAIT_NS (100 * UINT64_C (1000000))

/* With journal= a request goes into RAM whole (io.c), its slots
 * reserved for all of it at once: it must fit beside dirty-max= (the
 * dirty data and the chunks of transactions not in place, which
 * eviction cannot touch until the applier has put them in place), and
 * in the journal.  The limit counts sectors (io.c), so chunks holding
 * a few of them can take more of the budget than dirty-max= for a
 * while: the reservation then waits for the committer and the applier
 * (see "Waiting" above), which need no slots.  A request of write_max
 * bytes spans at most write_max_chunks chunks wherever it starts (one
 * more than its length in chunks).
 */
static uint64_t
journal_room (const struct rb *rb)
{
  uint64_t nslots = rb->cfg.ram_size >> rb->chunk_shift;
  uint64_t dirty = rb->cfg.dirty_max ? rb->cfg.dirty_max
    : (nslots << rb->chunk_shift) / 2;  /* rbi_recompute_limit */
  uint64_t dchunks = (dirty + rb->chunk_size - 1) >> rb->chunk_shift;

  return nslots > dchunks ? nslots - dchunks : 0;
}

int
rbi_slots_check (const struct rb *rb)
{
  uint64_t ram = rb->cfg.ram_size, n;

  if (ram == 0 || ram >= rb->size)
    return 0;
  if (ram % rb->chunk_size != 0) {
    rb_set_error (EINVAL, "ram-size=%" PRIu64 " is not a multiple of the "
                  "chunk size (chunk=%" PRIu32 "): give ram-size=%" PRIu64
                  " or %" PRIu64, ram, rb->chunk_size,
                  ram / rb->chunk_size * rb->chunk_size,
                  (ram / rb->chunk_size + 1) * rb->chunk_size);
    return -1;
  }
  n = ram >> rb->chunk_shift;
  /* In chunks: a request may need that many whole ones at once. */
  if (n < RB_MIN_SLOTS) {
    rb_set_error (EINVAL, "ram-size=%" PRIu64 ": too small, it holds %"
                  PRIu64 " chunks of %" PRIu32 " bytes and needs at least "
                  "%d (room for the requests of every connection): give "
                  "ram-size=%" PRIu64 " or more, or a smaller chunk=",
                  ram, n, rb->chunk_size, RB_MIN_SLOTS,
                  (uint64_t) RB_MIN_SLOTS << rb->chunk_shift);
    return -1;
  }
  if (rb->cfg.dirty_max >= ram) {
    rb_set_error (EINVAL, "dirty-max=%" PRIu64 " must be smaller than "
                  "ram-size=%" PRIu64 " (dirty chunks stay in RAM until "
                  "written back, and reads need room too): leave dirty-max= "
                  "out (it is then half of ram-size=) or make it smaller",
                  rb->cfg.dirty_max, ram);
    return -1;
  }
  if (rb->cfg.journal && journal_room (rb) < 2) {
    rb_set_error (EINVAL, "journal= with ram-size=%" PRIu64 ": a request "
                  "goes into RAM whole, and room for only %" PRIu64
                  " chunk(s) of %" PRIu32 " bytes is left beside dirty-max=%"
                  PRIu64 ", too few for a request of one chunk at any "
                  "offset: give a larger ram-size=, a smaller dirty-max= or "
                  "a smaller chunk=", ram, journal_room (rb), rb->chunk_size,
                  rb->cfg.dirty_max);
    return -1;
  }
  return 0;
}

int
rbi_slots_journal_fit (struct rb *rb)
{
  uint64_t jmax = rbi_txn_max_chunks (rb);
  uint64_t n = RB_MIN (journal_room (rb), jmax);

  if (n < 2) {
    rb_set_error (EINVAL, "journal=%s holds transactions of only %" PRIu64
                  " chunk(s) of %" PRIu32 " bytes, too few for a request of "
                  "one chunk at any offset: use a larger journal or a "
                  "smaller chunk=", rb->cfg.journal, jmax, rb->chunk_size);
    return -1;
  }
  rb->write_max_chunks = n;
  rb->write_max = RB_MIN ((n - 1) << rb->chunk_shift,
                          (uint64_t) UINT32_MAX >> rb->chunk_shift
                          << rb->chunk_shift);
  rb_log ("journal= with ram-size=: requests of up to %" PRIu64 " bytes "
          "(%" PRIu64 " chunks at most)", rb->write_max, n);
  return 0;
}

int
rbi_slots_init (struct rb *rb)
{
  uint64_t ram = rb->cfg.ram_size;

  if (ram == 0 || ram >= rb->size)
    return 0;
  /* Sectors, unless memory comes in larger pages (hugetlbfs): a
   * sector loaded there takes a whole page.
   */
  rb->slot_shift = rb->map.part &&
    rb->ram.block <= (UINT64_C (1) << rb->sector_shift)
    ? rb->sector_shift : rb->chunk_shift;
  rb->nslots = ram >> rb->slot_shift;
  if (evict_init (&rb->evict, rb->nchunks) == -1)
    return -1;
  rb_mutex_init (&rb->slot_lock);
  rb->slotted = true;
  rb->piece_chunks = RB_MAX ((ram >> rb->chunk_shift) / RB_PIECES_PER_BUDGET,
                             UINT64_C (1));
  rb_log ("ram-size=%" PRIu64 ": %" PRIu64 " %s of %" PRIu64 " bytes may "
          "be in RAM at once", ram, rb->nslots,
          rb->slot_shift < rb->chunk_shift ? "sectors" : "chunks",
          UINT64_C (1) << rb->slot_shift);
  return 0;
}

void
rbi_slots_free (struct rb *rb)
{
  if (!rb->slotted)
    return;
  evict_free (&rb->evict);
  rb_mutex_destroy (&rb->slot_lock);
  rb->slotted = false;
}

void
rbi_slots_notify (struct rb *rb)
{
  if (!rb->slotted)
    return;
  rb_atomic_add (&rb->slot_gen, 1);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  rb_cond_broadcast (&rb->space_cond);
}

/* Slots resident or reserved now [slot_lock]. */
static uint64_t
used_slots (struct rb *rb)
{
  return rbi_slots_resident (rb) + rb->slots_reserved;
}

/* Free slots now [slot_lock]. */
static uint64_t
free_slots (struct rb *rb)
{
  uint64_t used = used_slots (rb);

  return used >= rb->nslots ? 0 : rb->nslots - used;
}

/* The slots chunk c holds: its valid sectors, with partial chunks
 * (the budget's unit, slots.c's top), else 1; 0 if it is not resident.
 */
static uint64_t
resident_slots (void *opaque, uint64_t c)
{
  struct rb *rb = opaque;
  uint64_t s0, s1, spc;

  if (chunkmap_get (&rb->map, c) == CS_EMPTY)
    return 0;
  if (rb->slot_shift == rb->chunk_shift)
    return 1;
  s0 = rbi_chunk_offset (rb, c) >> rb->sector_shift;
  spc = (rbi_chunks_bytes (rb, c, 1) + (UINT64_C (1) << rb->sector_shift) - 1)
    >> rb->sector_shift;
  s1 = s0 + spc - 1;
  return RB_MAX (spc - chunkmap_count_invalid (&rb->map, s0, s1, UINT64_MAX),
                 UINT64_C (1));
}

/* The policy's pre-check, without the range (rechecked under it).  With
 * journal=, a CLEAN chunk may still be in a transaction not in place
 * yet (txn.c): the state first, then the journal's count.
 */
static bool
may_evict (void *opaque, uint64_t c)
{
  struct rb *rb = opaque;

  return chunkmap_get (&rb->map, c) == CS_CLEAN &&
    !(rb->jops && rb->jops->holds (rb, c));
}

/* Does [off, off+len) overlap a write not synced yet?  rb->lock held. */
static bool
unsynced_locked (struct rb *rb, uint64_t off, uint64_t len)
{
  size_t i;

  for (i = 0; i < rb->unsynced.len; i++) {
    const struct rb_extent *e = &rb->unsynced.v[i];

    if (e->offset < off + len && off < e->offset + e->count)
      return true;
  }
  return false;
}

/* Suspects pending (store.h, take_suspects): writes of a lost
 * connection that may still land; they are written again from RAM.
 */
static bool
suspects_pending (struct rb *rb)
{
  bool pending = false;

  if (rb->store->ops->take_suspects == NULL)
    return false;
  rb->store->ops->take_suspects (rb->store, NULL, 0, &pending);
  return pending;
}

/* What became of a victim. */
enum evicted { EV_GONE, EV_KEPT, EV_SUSPECTS };

/* Evict chunk c if it may go (the top of the file) [slot_lock].
 * sync_lock is taken for this one chunk, not for the whole search: a
 * search over chunks not synced yet must not hold off the sync that
 * frees them.
 */
static enum evicted
evict_one (struct rb *rb, uint64_t c)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->sync_lock);
  struct rl_node node;
  uint64_t off = rbi_chunk_offset (rb, c), len = rbi_chunks_bytes (rb, c, 1);
  bool ok;

  if (suspects_pending (rb))
    return EV_SUSPECTS;
  /* Busy (loaded, written, written back): passed over, not waited for. */
  if (!rangelock_try_acquire (&rb->rl, &node, off, off + len, RL_WRITE))
    return EV_KEPT;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    ok = may_evict (rb, c) && !unsynced_locked (rb, off, len);
  }
  if (ok)
    ok = chunkmap_evict (&rb->map, c);
  if (ok) {
    ramimage_zero (&rb->ram, off, len);
    evict_forget (&rb->evict, c);
    rb_atomic_add (&rb->evictions, 1);
  }
  rangelock_release (&rb->rl, &node);
  return ok ? EV_GONE : EV_KEPT;
}

/* Evict chunks until want slots are free (want 0: until the used ones
 * fit the budget) [slot_lock].  The policy's
 * pre-check cannot tell a chunk not synced yet (that needs rb->lock),
 * so a victim may be kept, and picked again on the next turn of the
 * hand: the search ends after at most two turns of the hand the normal
 * way, then one desperate, however many were kept.  The policy
 * weighs a chunk by its slots against the mean slots of a resident
 * chunk now (evict.h).
 */
static void
evict_some (struct rb *rb, uint64_t want)
{
  uint64_t steps = 2 * rb->nchunks;
  uint64_t loaded = chunkmap_loaded (&rb->map);
  bool desperate = false;

  /* The policy weighs a chunk's slots against the mean (evict.h). */
  rb->evict.mean_w = loaded ? rbi_slots_resident (rb) * 256 / loaded : 0;
  while (used_slots (rb) + want > rb->nslots) {
    uint64_t c = evict_pick (&rb->evict, &steps, desperate, resident_slots,
                             may_evict, rb);

    if (c == UINT64_MAX) {
      if (desperate)
        break;
      desperate = true;
      steps = rb->nchunks;
      continue;
    }
    if (evict_one (rb, c) == EV_SUSPECTS)
      return;
  }
}

/* Evict in batches: a miss that must evict makes room for a few more. */
static uint64_t
batch (struct rb *rb, uint64_t need)
{
  return RB_MIN (need + RB_MAX (rb->nslots / 64, UINT64_C (1)), rb->nslots);
}

void
rbi_slots_trim (struct rb *rb)
{
  if (!rb->slotted || rbi_slots_resident (rb) <= rb->nslots)
    return;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->slot_lock);
  if (rbi_slots_resident (rb) + rb->slots_reserved > rb->nslots)
    evict_some (rb, 0);
}

int
rbi_slots_reserve (struct rb *rb, uint64_t n)
{
  for (;;) {
    uint64_t gen;

    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->slot_lock);
      gen = rb_atomic_load (&rb->slot_gen);
      if (free_slots (rb) < n)
        evict_some (rb, batch (rb, n));
      if (free_slots (rb) >= n) {
        rb->slots_reserved += n;
        return 0;
      }
    }
    /* Every resident chunk is dirty or not synced yet: write back. */
    rb_atomic_add (&rb->slot_waits, 1);
    if (rb->jops)               /* a commit point, and all in place now */
      rb->jops->hurry (rb, true);
    else
      rbi_flusher_hurry (rb);
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
      /* The deadline only bounds a wait for a store's suspects
       * (take_suspects), which nobody announces.
       */
      uint64_t deadline = rb_now_ns () + SUSPECT_WAIT_NS;

      while (!rb->stopping && rb_atomic_load (&rb->slot_gen) == gen &&
             rb_cond_wait_until (&rb->space_cond, &rb->lock, deadline))
        ;
      if (rb->stopping) {
        rb_set_error (ESHUTDOWN, "shutting down");
        return -1;
      }
    }
  }
}

uint64_t
rbi_slots_try_reserve (struct rb *rb, uint64_t n)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->slot_lock);
  n = RB_MIN (n, free_slots (rb));
  rb->slots_reserved += n;
  return n;
}

void
rbi_slots_unreserve (struct rb *rb, uint64_t n)
{
  if (n == 0)
    return;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->slot_lock);
    rb->slots_reserved -= n;
  }
  rbi_slots_notify (rb);
}

uint64_t
rbi_slots_missing (struct rb *rb, uint64_t off, uint64_t end)
{
  uint64_t n = 0, c;

  if (off >= end)
    return 0;
  if (rb->slot_shift == rb->chunk_shift) {
    for (c = rbi_chunk_of (rb, off); c <= rbi_chunk_of (rb, end - 1); c++)
      n += chunkmap_get (&rb->map, c) == CS_EMPTY;
    return n;
  }
  return chunkmap_count_invalid (&rb->map, off >> rb->sector_shift,
                                 (end - 1) >> rb->sector_shift, UINT64_MAX);
}

int
rbi_slots_reserve_range (struct rb *rb, uint64_t off, uint64_t end,
                         uint64_t *n)
{
  *n = rbi_slots_missing (rb, off, end);
  if (*n == 0)
    return 0;
  if (rbi_slots_reserve (rb, *n) == -1) {
    *n = 0;
    return -1;
  }
  return 0;
}
