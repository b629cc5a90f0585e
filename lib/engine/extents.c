/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: block status (rb_extents), the map of data and zeroes that
 * NBD_CMD_BLOCK_STATUS reports, so that nbdcopy, qemu-img convert and
 * nbdinfo --map skip what reads as zeroes.
 *
 * Who knows what a byte reads as:
 *   - ZERO chunks (a zero or trim not yet written back): RAM, zeroes.
 *   - DIRTY chunks: RAM, data (it differs from the store; RAM is not
 *     scanned for zeroes).
 *   - EMPTY chunks (never loaded): the store, through its next_data op
 *     (store.h: SEEK_DATA/SEEK_HOLE for a file, base:allocation block
 *     status for an NBD server, the plugin's extents under the filter).
 *   - CLEAN chunks: RAM equals the store, so the store too, and that
 *     keeps the holes a zero or trim punched once it was written back.
 *     Except with a journal: a CLEAN chunk there may still be only in
 *     the journal, not yet in place, so it counts as data.
 * A store without next_data, or one whose next_data fails, says "data"
 * for all it is asked: data is always a true answer, zero never a
 * guess.
 *
 * The race that matters: the flusher moves a chunk DIRTY -> CLEAN
 * before its data reaches the store (flush.c, step 3), so during the
 * write back the store still holds the old bytes, perhaps a hole.
 * Asking the store then could call data a hole, and nbdcopy would copy
 * zeroes in its place.  So a run of chunks is asked about under a LOAD
 * range (rangelock.h): it is granted only after every earlier
 * overlapping range (the flusher's STORE range, a writethrough's WRITE
 * range, both taken before their chunk moves to CLEAN) is released, and
 * it holds back any later one until the store has answered.  The
 * chunks' states are read again under the range; a chunk that changed
 * meanwhile is looked at again.  Writes on the fast path take no range:
 * they race with the block status request as any two NBD requests in
 * flight at once may, and the client cannot expect either order.
 *
 * Extents of the same type in a row are merged; with RB_EXTENTS_REQ_ONE
 * the walk ends after the first.  A run asked of the store under one
 * range is at most RUN_MAX bytes, so writers to it wait for at most one
 * bounded store query.
 */

#include "env.h"
#include "cleanup.h"
#include "error.h"
#include "internal.h"

#define RUN_MAX (UINT64_C (256) * 1024 * 1024)

struct emitter {
  rb_extent_fn fn;
  void *opaque;
  bool req_one;
  bool done;                    /* req_one: the first extent is out */
  int err;                      /* the callback's failure */
  uint64_t offset, length;      /* pending extent (length 0: none) */
  uint32_t type;
};

static void
emit_pending (struct emitter *em)
{
  if (em->length == 0 || em->err)
    return;
  if (em->fn (em->opaque, em->offset, em->length, em->type) == -1)
    em->err = errno ? errno : EIO;
  em->length = 0;
  if (em->req_one)
    em->done = true;
}

static void
add (struct emitter *em, uint64_t offset, uint64_t length, uint32_t type)
{
  if (length == 0 || em->done)
    return;
  if (em->length && em->type == type &&
      em->offset + em->length == offset) {
    em->length += length;
    return;
  }
  emit_pending (em);
  if (em->done)
    return;
  em->offset = offset;
  em->length = length;
  em->type = type;
}

#define ZERO_TYPE (RB_EXTENT_HOLE | RB_EXTENT_ZERO)

/* [pos, end) as the store says (the caller holds a range over it). */
static void
ask_store (struct rb *rb, struct emitter *em, uint64_t pos, uint64_t end)
{
  struct rb_store *s = rb->store;

  while (pos < end && !em->done) {
    uint64_t data, hole;

    if (s->ops->next_data == NULL ||
        s->ops->next_data (s, pos, &data, &hole) == -1) {
      if (s->ops->next_data)
        rb_log ("block status: cannot map the store's holes (%s): "
                "reporting data", rb_get_error ());
      add (em, pos, end - pos, 0);
      return;
    }
    data = RB_MIN (RB_MAX (data, pos), end);
    add (em, pos, data - pos, ZERO_TYPE);
    pos = data;
    if (pos < end) {
      /* A store that names no end of its data extent: data to end. */
      hole = hole > pos ? RB_MIN (hole, end) : end;
      add (em, pos, hole - pos, 0);
      pos = hole;
    }
  }
}

/* The states whose content the store knows (see the top). */
static unsigned
store_knows (const struct rb *rb)
{
  return rb->jops ? CS_BIT (CS_EMPTY)
    : CS_BIT (CS_EMPTY) | CS_BIT (CS_CLEAN);
}

/* The first chunk at or after c, up to limit, whose state is not in
 * the set.
 */
static uint64_t
run_end (struct rb *rb, uint64_t c, uint64_t limit, unsigned set)
{
  while (c < limit && (CS_BIT (chunkmap_get (&rb->map, c)) & set))
    c++;
  return c;
}

int
rb_extents (struct rb *rb, uint32_t count, uint64_t offset, unsigned flags,
            rb_extent_fn fn, void *opaque)
{
  struct emitter em = {
    .fn = fn, .opaque = opaque, .req_one = flags & RB_EXTENTS_REQ_ONE,
  };
  unsigned knows = store_knows (rb);
  uint64_t pos = offset, end = offset + count;

  if (end > rb->size || end < offset) {
    rb_set_error (EINVAL, "block status of %" PRIu32 " bytes at %" PRIu64
                  " is beyond the end of the device (%" PRIu64 " bytes)",
                  count, offset, rb->size);
    return -1;
  }
  while (pos < end && !em.done && !em.err) {
    uint64_t c = rbi_chunk_of (rb, pos), c1, c2, lo, hi, stop;
    enum chunk_state st = chunkmap_get (&rb->map, c);
    struct rl_node node;

    if (!(CS_BIT (st) & knows)) {
      stop = RB_MIN (rbi_chunk_offset (rb, c + 1), end);
      add (&em, pos, stop - pos, st == CS_ZERO ? ZERO_TYPE : 0);
      pos = stop;
      continue;
    }
    /* A run of chunks the store knows about, asked under one range. */
    c1 = run_end (rb, c + 1,
                  rbi_chunk_of (rb, RB_MIN (end - 1, pos + RUN_MAX)) + 1,
                  knows);
    lo = rbi_chunk_offset (rb, c);
    hi = RB_MIN (rbi_chunk_offset (rb, c1), rb->size);
    rangelock_acquire (&rb->rl, &node, lo, hi, RL_LOAD);
    c2 = run_end (rb, c, c1, knows);      /* again, under the range */
    stop = RB_MIN (RB_MIN (rbi_chunk_offset (rb, c2), rb->size), end);
    if (stop > pos)
      ask_store (rb, &em, pos, stop);
    rangelock_release (&rb->rl, &node);
    /* c2 == c: chunk c changed state meanwhile; look at it again. */
    pos = RB_MAX (pos, stop);
  }
  emit_pending (&em);
  if (em.err) {
    rb_set_error (em.err, "block status: cannot add an extent");
    return -1;
  }
  return 0;
}
