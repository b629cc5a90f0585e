/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the chunk state map.
 *
 * Owns the state of every chunk of the RAM image, 2 bits each, 32 per
 * 64-bit word, changed only with compare-and-swap: there is no lock per
 * chunk and no lock at all on this map.  It also owns the hints that let
 * the flusher find dirty chunks and the populator find empty ones in
 * O(found) (sumbits.h), and the dirty and loaded counters.  A move to
 * DIRTY or ZERO sets the dirty hint even when it changes nothing: two
 * writers may dirty one chunk at once, and the one whose move finds it
 * dirty already may be acknowledged before the other has set the hint.
 *
 *   EMPTY  00  not loaded from the backing store yet
 *   CLEAN  01  RAM == backing store (once written and synced)
 *   DIRTY  10  RAM is newer than the backing store
 *   ZERO   11  dirty, and RAM is known to be all zero: written back
 *              with a cheap zero/punch-hole request instead of data
 *
 * Transitions (who makes them):
 *   EMPTY -> CLEAN        populate or demand load, holding the range
 *   EMPTY -> DIRTY/ZERO   a write or zero covering the whole chunk,
 *                         holding the range (so no load can land on it)
 *   CLEAN -> DIRTY/ZERO   application write/zero/trim (after RAM changed;
 *                         a zero marks its whole chunks ZERO before)
 *   DIRTY <-> ZERO        application write/zero/trim
 *   CLEAN -> DIRTY        a zero, after RAM changed, for whole chunks
 *                         the flusher cleaned since it marked them
 *                         ZERO (io.c): what it stored may predate the
 *                         zero's change of RAM
 *   DIRTY/ZERO -> CLEAN   the flusher, *before* it captures the data, so
 *                         a write that races with the store re-dirties
 *                         the chunk and it is stored again
 *   CLEAN -> DIRTY        a failed store or sync puts it back
 * Nothing returns to EMPTY while the whole device fits in RAM: once a
 * chunk is loaded it stays loaded, which is what lets the I/O fast path
 * skip all locking.  The one exception is eviction (ram-size= smaller
 * than the device, engine/slots.c):
 *   CLEAN -> EMPTY        the evictor, holding a range over the chunk,
 *                         after the chunk's last write back was synced
 *                         (chunkmap_evict); the I/O fast path is off
 *                         then, and every access to RAM holds a range.
 *
 * Sector bits (optional, chunkmap_init_sectors): one bit per sector
 * (4 KiB, or the chunk if smaller) in a flat bitmap, 32 MiB per TiB,
 * saying which sectors of a DIRTY chunk differ from the backing store,
 * so that write-back costs what was written rather than whole chunks.
 * Changed only with atomic RMWs, lock-free like the states.  Rules:
 *   - a writer sets the bits of the sectors it changed *before* it
 *     moves the chunk to DIRTY (after its copy, like the state; with
 *     resume also before the copy, like the state);
 *   - anyone else who dirties a range (a failed store or sync: the
 *     range it wrote; resume: whole chunks) sets its bits before the
 *     move, too;
 *   - a move ZERO -> DIRTY sets all the chunk's bits before its CAS
 *     (chunkmap_move does it): the store still holds the old data
 *     everywhere, not only where the write landed; so does a zero's
 *     CLEAN -> DIRTY of its whole chunks (chunkmap_dirty_whole);
 *   - the flusher, after its CAS DIRTY -> CLEAN, clears the bits with
 *     a fetch-and-clear (chunkmap_take_bits) and writes back what it
 *     took, from RAM.  A racing write either set its bits before the
 *     clear (so its data, copied before that, is in what is written)
 *     or after it (so its move comes after the flusher's CAS, sees
 *     CLEAN, and dirties the chunk again with its bits set);
 *   - a ZERO chunk is written back whole (a zero request) and keeps
 *     its bits: stale bits on a CLEAN chunk only cost extra write-back
 *     later, while clearing them could drop a racing write's.
 * So the bits of a DIRTY chunk always cover every sector where RAM may
 * differ from the store; a DIRTY chunk with no bits (a write that raced
 * a flusher which already stored its data) just becomes CLEAN.  The
 * dirty counters and hints stay per chunk.  journal= (txn.c) takes the
 * bits at its commit points instead, under its write gate held
 * exclusively (no writer between its mark and its move), for DIRTY and
 * ZERO chunks alike.  Without sector bits (the kernel target), a DIRTY
 * chunk is written back whole.
 *
 * Counting (the dirty limit, engine/io.c): sect_set counts the bits
 * set, by what each RMW changed, so it is exact under any race: a bit
 * set by a writer and taken by the flusher counts once, whichever comes
 * first, and a bit set twice (a write racing the flusher's capture)
 * once.  It is the dirty sectors but for bits left on chunks that are
 * not DIRTY, which nothing can take without racing a writer:
 *   - a writer's own, between its mark and its move (transient);
 *   - a ZERO chunk's from before it was zeroed whole, which a zero
 *     request leaves on the CLEAN chunk (above): stale until the chunk
 *     is next written back, when they are taken with the rest.  A zero
 *     cannot drop them itself: a write moving the chunk ZERO -> DIRTY
 *     sets every bit before its CAS, and a drop between the two would
 *     see ZERO still and take them, leaving a DIRTY chunk with none.
 * So the limit counts min (dirty chunks whole, (sect_set + ZERO
 * chunks) sectors): stale bits only ever overcount, never past what
 * whole chunks counted, and not at all once nothing is dirty.  ZERO
 * chunks count a sector each (one zero request).  A resumed map
 * without bits marks its DIRTY chunks whole, not its ZERO ones (a
 * ZERO chunk is written back whole, and a move to DIRTY sets all of
 * its bits).
 *
 * Partial chunks (optional, chunkmap_init_partial, with sector bits):
 * a chunk may be loaded a sector at a time, so that a miss costs what
 * it asks for.  Two more bitmaps:
 *   P  one bit per chunk: the chunk is partial, only some of its
 *      sectors hold valid data in RAM;
 *   V  one bit per sector (numbered like the sector bits): with P set,
 *      the sector holds valid data (loaded from the store, or written
 *      whole by the application).  Without P, V is set on every
 *      sector of a loaded chunk (the count below) and read by nobody.
 * States with P:
 *   EMPTY, no P    nothing valid (and no V bit set)
 *   EMPTY, P       transient: a load or write is making it partial,
 *                  under its range
 *   CLEAN, P       the valid sectors equal the store
 *   DIRTY, P       the dirty sectors (sector bits) are valid sectors
 *   ZERO           never partial (a zero makes a chunk whole first)
 *   not EMPTY, no P: every sector valid ("whole")
 * Rules:
 *   - P is set (chunkmap_set_partial) only on a chunk that is EMPTY or
 *     partial, before its first V bit, and before it leaves EMPTY;
 *     once cleared (chunkmap_complete, chunkmap_make_whole) it is never
 *     set again, and V bits are never cleared while serving (so they
 *     may be read in any order against P);
 *   - V and P change only under a range (rangelock.h) over the sectors
 *     concerned: the I/O fast path never touches a partial chunk (it
 *     takes it for not loaded), so nothing lock-free reads a sector
 *     whose V is changing;
 *   - a dirty sector is always valid, so write back (which writes only
 *     dirty sectors of a partial chunk, never the chunk whole) and the
 *     journal never store bytes that were not loaded.
 * The loaded counter counts chunks not EMPTY, partial or not; the
 * partial counter those with P.
 *
 * Resident sectors (the ram-size= budget, engine/slots.c): with partial
 * chunks, V is also set on every sector of a whole chunk, so that the
 * sectors holding data in RAM are exactly the V bits set, and their
 * count (chunkmap_resident) changes only where a V bit does:
 *   - set by a load or a write of part of a chunk (chunkmap_set_valid),
 *     counted by what its CAS set, so loads meeting on a sector (the
 *     one word) count it once;
 *   - set on all of a chunk's sectors where it becomes whole: when it
 *     leaves EMPTY without P (chunkmap_move) and when P is cleared
 *     (chunkmap_make_whole, before the clear);
 *   - cleared by an eviction (chunkmap_evict), counted the same way.
 * A resumed image rebuilds them from the states and P (a whole chunk:
 * every sector; an EMPTY one: none) and counts them again.
 *
 * Hot bits (optional, chunkmap_init_hot, with sector bits): one more
 * bit per sector, 32 MiB per TiB of 4 KiB sectors, set when a sector
 * bit is set that was set already (chunkmap_mark: a write landed on a
 * sector still dirty): the sector was rewritten before write back took
 * it.  Not by a writer's own second mark (chunkmap_mark_again: with
 * resume it marks before its copy and after it), or every sector
 * written once would be hot.  Write back under pressure (flush.c, "Cold first") leaves those
 * dirty, and clears their hot bit when it gives them a second chance;
 * it clears the hot bits of the sectors it takes.  A hint and nothing more: a hot bit
 * never keeps a sector from being dirty or taken, only decides which
 * sweep takes it, so the bits change with plain atomic ORs and ANDs
 * without ordering against the sector bits, and a race only moves a
 * sector from one sweep to the next.  Never in a RAM image file: a
 * resumed map starts with none.
 */

#ifndef RAMBACK_CHUNKMAP_H
#define RAMBACK_CHUNKMAP_H

#include "env.h"
#include "sumbits.h"

enum chunk_state {
  CS_EMPTY = 0,
  CS_CLEAN = 1,
  CS_DIRTY = 2,
  CS_ZERO = 3,
};

#define CS_BIT(s) (1u << (s))
#define CS_ANY_DIRTY (CS_BIT (CS_DIRTY) | CS_BIT (CS_ZERO))
#define CS_LOADED (CS_BIT (CS_CLEAN) | CS_ANY_DIRTY)

struct chunkmap {
  uint64_t nchunks;
  uint64_t nwords;
  uint64_t *words;
  struct sumbits dirty_hint;     /* words that may hold DIRTY/ZERO */
  struct sumbits empty_hint;     /* words that may hold EMPTY */
  uint64_t dirty;                /* DIRTY + ZERO chunks (atomic) */
  uint64_t zero;                 /* ZERO chunks (atomic) */
  uint64_t loaded;               /* chunks not EMPTY (atomic) */
  bool words_external;           /* words belong to the caller */
  uint64_t *sect;                /* sector bits, NULL: none (see above) */
  bool sect_external;            /* sect belongs to the caller */
  uint64_t sect_set;             /* sector bits set (atomic) */
  unsigned sect_per_chunk_shift; /* log2 (sectors per chunk) */
  uint64_t *part;                /* P bits, NULL: no partial chunks */
  uint64_t *valid;               /* V bits (see above) */
  bool part_external;            /* part and valid are the caller's */
  uint64_t npartial;             /* chunks with P (atomic) */
  uint64_t resident;             /* V bits set (atomic, see above) */
  uint64_t nsect;                /* sectors of the device: no sector bit
                                    past them; they count as valid */
  uint64_t *hot;                 /* hot bits, NULL: none (see above) */
};

extern int chunkmap_init (struct chunkmap *cm, uint64_t nchunks);

/* The same, with the state words in the caller's memory (nwords =
 * (nchunks + 31) / 32 of them), which outlives the map: a RAM image
 * file keeps them, so the states survive a crash of the process.
 * existing: the words hold a map from before (they are kept, and the
 * counters and hints are rebuilt from them); else they are set to all
 * EMPTY.  Either way the fields past the last chunk are parked in CLEAN.
 * chunkmap_free() leaves the words alone.
 */
extern int chunkmap_init_at (struct chunkmap *cm, uint64_t nchunks,
                             uint64_t *words, bool existing);
extern void chunkmap_free (struct chunkmap *cm);

/* Add the sector bits, 2^per_chunk_shift per chunk: in 'words' (the
 * caller's, e.g. a RAM image file's), or allocated if words is NULL.
 * existing: words hold the bits from before (a resumed image), kept as
 * they are, with every sector set of a DIRTY chunk that has none.
 * Otherwise every sector of the chunks DIRTY now is set (a resumed map
 * without its bits: nothing finer is known); ZERO chunks need none.
 * nsect: the device's sectors (the last chunk may have fewer); no bit
 * past them is ever set, whole-chunk marks included.
 */
extern int chunkmap_init_sectors (struct chunkmap *cm,
                                  unsigned per_chunk_shift,
                                  uint64_t *words, bool existing,
                                  uint64_t nsect);

/* Add partial chunks (after chunkmap_init_sectors, with at least two
 * sectors per chunk): P and V in the caller's memory ('part':
 * (nchunks + 63) / 64 words, 'valid': as many as the sector bits), or
 * allocated if part is NULL.  existing: they hold P and V from before
 * (a resumed image): kept, except that EMPTY chunks lose theirs (an
 * EMPTY chunk is never trusted), whole chunks get every V bit, and the
 * resident sectors are counted again; else they are cleared (every
 * chunk must be EMPTY then).  The sectors past the device (the last
 * chunk may have fewer, chunkmap_init_sectors) count as valid.
 */
extern int chunkmap_init_partial (struct chunkmap *cm, uint64_t *part,
                                  uint64_t *valid, bool existing);

/* Is chunk c partial?  False without partial chunks. */
static inline bool
chunkmap_partial (const struct chunkmap *cm, uint64_t c)
{
  return cm->part &&
    ((rb_atomic_load (&cm->part[c / 64]) >> (c % 64)) & 1);
}

/* Is any chunk of [c, c+n) partial? */
extern bool chunkmap_any_partial (const struct chunkmap *cm, uint64_t c,
                                  uint64_t n);

/* First partial chunk >= from, or UINT64_MAX. */
extern uint64_t chunkmap_next_partial (const struct chunkmap *cm,
                                       uint64_t from);

/* Chunks with P now. */
static inline uint64_t
chunkmap_npartial (const struct chunkmap *cm)
{
  return rb_atomic_load (&cm->npartial);
}

/* Mark chunk c partial (it is EMPTY or partial; range held). */
extern void chunkmap_set_partial (struct chunkmap *cm, uint64_t c);

/* Set the V bits [s, s+n) (their chunks are partial; range held),
 * counting those newly set as resident.
 */
extern void chunkmap_set_valid (struct chunkmap *cm, uint64_t s, uint64_t n);

/* The V bits [s, s+n), n <= 64, within one word (as chunkmap_peek_bits):
 * which sectors are valid, for the caller to combine with P and the
 * state (chunkmap_invalid).
 */
extern uint64_t chunkmap_valid_bits (const struct chunkmap *cm, uint64_t s,
                                     unsigned n);

/* The sectors of [s, s+n) (n <= 64, one word) that are not valid in
 * RAM: all of them in an EMPTY chunk that is not partial, those
 * without V in a partial chunk, none in a whole chunk.  All in one
 * chunk.  Range held over them.
 */
extern uint64_t chunkmap_invalid (const struct chunkmap *cm, uint64_t s,
                                  unsigned n);

/* chunkmap_invalid over sectors [s, s1], any number of chunks: how
 * many are not valid, counted up to max (the walk stops there; max 1
 * asks whether any is).  A hint without a range over them.
 */
extern uint64_t chunkmap_count_invalid (const struct chunkmap *cm,
                                        uint64_t s, uint64_t s1,
                                        uint64_t max);

/* If partial chunk c has every V bit, it is whole now: clear P.
 * Returns true if c is whole (or was).
 */
extern bool chunkmap_complete (struct chunkmap *cm, uint64_t c);

/* Chunk c is whole from now on (a write or zero covers all of it): clear
 * P.  Range held.
 */
extern void chunkmap_make_whole (struct chunkmap *cm, uint64_t c);

/* Chunk c leaves RAM (evict.h, engine/slots.c): CLEAN -> EMPTY, and
 * its sector bits, P and V cleared (the rules above about P and V
 * that keep lock-free readers safe do not apply: with eviction every
 * access holds a range).  The caller holds a range over the chunk.
 * False (nothing changed) if c is not CLEAN.
 */
extern bool chunkmap_evict (struct chunkmap *cm, uint64_t c);

/* The mask of n bits from bit lo of a word (lo + n <= 64): bit
 * operations on a word of sector bits (or of any per-chunk bitmap).
 */
static inline uint64_t
chunkmap_bit_range (unsigned lo, unsigned n)
{
  return (n >= 64 ? ~UINT64_C (0) : (UINT64_C (1) << n) - 1) << lo;
}

/* Set the sector bits [s, s+n) (sector numbers).  No-op without them. */
extern void chunkmap_mark (struct chunkmap *cm, uint64_t s, uint64_t n);
/* The same, but a bit set already does not make its sector hot: a
 * writer marking its own sectors a second time (above: with resume,
 * before its copy and after it), which is no rewrite.
 */
extern void chunkmap_mark_again (struct chunkmap *cm, uint64_t s,
                                 uint64_t n);

/* Set the sector bits of bitmap b (bit 0: sector s; one word of
 * sectors, as chunkmap_take_bits returns them).
 */
extern void chunkmap_mark_bits (struct chunkmap *cm, uint64_t s, uint64_t b);

/* Clear and return the sector bits [s, s+n), n <= 64, within one
 * 64-bit word (s % 64 + n <= 64); bit 0 of the result is sector s.
 * chunkmap_peek_bits: the same without clearing (a hint).
 */
extern uint64_t chunkmap_take_bits (struct chunkmap *cm, uint64_t s,
                                    unsigned n);
extern uint64_t chunkmap_peek_bits (const struct chunkmap *cm, uint64_t s,
                                    unsigned n);

/* chunkmap_take_bits, but for the sectors in 'keep' (bit 0: sector s),
 * which stay set.
 */
extern uint64_t chunkmap_take_bits_but (struct chunkmap *cm, uint64_t s,
                                        unsigned n, uint64_t keep);

/* Add the hot bits (after chunkmap_init_sectors; above).  -1 with
 * errno ENOMEM if they cannot be allocated.
 */
extern int chunkmap_init_hot (struct chunkmap *cm);

/* The hot bits [s, s+n), n <= 64, in one word (as chunkmap_peek_bits);
 * 0 without them.
 */
static inline uint64_t
chunkmap_peek_hot (const struct chunkmap *cm, uint64_t s, unsigned n)
{
  unsigned lo = s % 64;

  if (cm->hot == NULL)
    return 0;
  return (rb_atomic_load_relaxed (&cm->hot[s / 64]) &
          chunkmap_bit_range (lo, n)) >> lo;
}

/* Clear the hot bits of bitmap b (bit 0: sector s, one word). */
extern void chunkmap_cool (struct chunkmap *cm, uint64_t s, uint64_t b);

extern enum chunk_state chunkmap_get (const struct chunkmap *cm, uint64_t c);
extern const char *rbi_chunk_state_name (enum chunk_state s);

/* Move every chunk of [first, first+n) whose state is in the set 'from'
 * (CS_BIT()s) to 'to'.  Returns how many moved; if 'moved' is not NULL,
 * moved[s] counts those that were in state s.  Keeps the counters and
 * hints right.
 *
 * A move to a dirty state reads each state word with an atomic
 * read-modify-write, even when no chunk moves (the chunk was already
 * DIRTY).  That orders the caller's earlier stores to the chunk's data
 * before the state check: a writer does "copy data; move to DIRTY", the
 * flusher does "CAS DIRTY -> CLEAN; read data", and with a plain load on
 * the writer's side both could read the old value (store-load
 * reordering), leaving new data in a chunk marked CLEAN.  With the RMW
 * the two operations on the word are totally ordered: either the writer
 * sees CLEAN and re-dirties, or the flusher's CAS comes after it and
 * so reads the new data.
 */
extern uint64_t chunkmap_move (struct chunkmap *cm, uint64_t first,
                               uint64_t n, unsigned from,
                               enum chunk_state to, uint64_t moved[4]);

/* Move every chunk of [first, first+n) whose state is in 'from' to
 * DIRTY, setting all of its sector bits before its CAS, as for ZERO ->
 * DIRTY: for a caller that cannot tell which sectors differ from the
 * store (a zero that re-dirties its whole chunks).  Returns how many
 * moved.
 */
extern uint64_t chunkmap_dirty_whole (struct chunkmap *cm, uint64_t first,
                                      uint64_t n, unsigned from);

/* First chunk >= from whose state is in 'mask', or UINT64_MAX.  'mask'
 * must be CS_ANY_DIRTY or CS_BIT (CS_EMPTY) (the two hinted sets).
 */
extern uint64_t chunkmap_next (struct chunkmap *cm, uint64_t from,
                               unsigned mask);

/* Length of the run of chunks starting at c whose state is in 'mask'
 * (any set), at most max.
 */
extern uint64_t chunkmap_run (const struct chunkmap *cm, uint64_t c,
                              uint64_t max, unsigned mask);

/* True if every chunk of [first, first+n) is in 'mask'. */
extern bool chunkmap_all (const struct chunkmap *cm, uint64_t first,
                          uint64_t n, unsigned mask);

static inline uint64_t
chunkmap_dirty (const struct chunkmap *cm)
{
  return rb_atomic_load (&cm->dirty);
}

/* ZERO chunks now (of chunkmap_dirty). */
static inline uint64_t
chunkmap_zero (const struct chunkmap *cm)
{
  return rb_atomic_load (&cm->zero);
}

/* Sector bits set now: the dirty sectors (chunkmap_mark), what write
 * back still has to send of the DIRTY chunks (the dirty limit counts
 * them, engine/io.c), plus stale bits ("Counting" above).  Exact: each
 * bit is counted by the RMW that set or cleared it, whatever the races.
 */
static inline uint64_t
chunkmap_sectors_set (const struct chunkmap *cm)
{
  return rb_atomic_load (&cm->sect_set);
}

static inline uint64_t
chunkmap_loaded (const struct chunkmap *cm)
{
  return rb_atomic_load (&cm->loaded);
}

/* What RAM holds: with partial chunks, sectors (V bits set); without,
 * chunks (not EMPTY).
 */
static inline uint64_t
chunkmap_resident (const struct chunkmap *cm)
{
  return cm->part ? rb_atomic_load (&cm->resident) : chunkmap_loaded (cm);
}

#endif /* RAMBACK_CHUNKMAP_H */
