/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the private state of one RAM image, shared by core.c, io.c,
 * populate.c, flush.c and stats.c.
 *
 * Names: what this header and the layer headers declare for use across
 * lib/ (and by dm/, which builds the engine in the kernel) is rbi_*, so
 * that it cannot be taken for the public rb_* API (ramback.h).
 *
 * Lock order and rules:
 *   - The chunk map (chunkmap.h) is lock-free.
 *   - rb->rl (rangelock.h) orders I/O on overlapping ranges; it has its
 *     own internal mutex, never held by callers.
 *   - rb->lock protects the fields marked [lock]: thread control, the
 *     sync tickets, the unsynced list, the last-error text.  It is never
 *     held across backing store I/O, nor while acquiring a range.
 *   - Fields marked [atomic] are read and written with rb_atomic_*.
 *   - Fields marked [flusher] / [populator] belong to that thread.
 *
 * The I/O fast path (a loaded range in writeback mode) takes no lock at
 * all: memcpy, then a CAS on the chunk states.  Everything that can race
 * with it is written to tolerate it (see chunkmap.h for the argument).
 */

#ifndef RAMBACK_INTERNAL_H
#define RAMBACK_INTERNAL_H

#include "env.h"
#include "error.h"
#include "ramback.h"
#include "store.h"
#include "chunkmap.h"
#include "rangelock.h"
#include "evict.h"
#include "ramimage.h"
#include "throttle.h"

/* A range written to the store and not yet covered by a good sync. */
struct rb_extent {
  uint64_t offset, count;
};

struct rb_extents {
  struct rb_extent *v;
  size_t len, cap;
  uint64_t bytes;               /* as the dirty limit counts them: data
                                   bytes, a sector per chunk of a zero
                                   (rbi_write_done's weight) */
};

/* The flusher and the populator are step functions, as in Open CAS
 * Framework's cleaner: each call does one bounded pass and returns the
 * delay before the next, and the thread around them (env-posix threads
 * here; a kernel form uses kthreads) only waits it out and calls again.
 * A delay is 0 (call again at once), nanoseconds, or one of these.
 */
#define RB_STEP_IDLE UINT64_MAX         /* wait until there is work */
#define RB_STEP_DONE (UINT64_MAX - 1)   /* finished: the thread ends */

/* A run of chunks in a flusher batch (flush.c). */
struct rb_run {
  uint64_t first, n;
  enum chunk_state kind;        /* CS_DIRTY (data) or CS_ZERO */
  uint64_t taken;               /* chunks moved to CLEAN by us */
  uint64_t bytes;               /* CS_DIRTY: dirty bytes (an estimate) */
};
#define RB_FLUSH_BATCH_RUNS 32
/* Store requests per batch: a run of chunks with sector bits becomes
 * one request per run of dirty sectors.
 */
#define RB_FLUSH_BATCH_IOS 256
/* The sector bits' sector: 4 KiB (or the chunk, if smaller). */
#define RB_SECTOR_SHIFT 12u

/* The flusher's state [flusher], with its batch (too big for a kernel
 * stack: it lives in struct rb).
 */
struct rb_flusher_state {
  uint64_t backoff;             /* ms before the next pass on failure */
  uint64_t target;              /* the last ticket the last pass covered */
  bool suspects;                /* the store may hand over more suspects */
  bool wakeable;                /* the delay may end early on a kick */
  bool delaying;                /* the delay is flush-delay='s */
  uint64_t pass_start;          /* when the last pass began (ns) */
  /* Cold first (flush.c): */
  bool hold;                    /* this batch holds rewritten sectors back */
  bool force_full;              /* the next sweep holds nothing back */
  bool age;                     /* this sweep clears the hot bits of what
                                   it holds back */
  uint64_t held;                /* sectors held back by this sweep */
  uint64_t held_last;           /* by the last one */
  uint64_t full_start;          /* when the last sweep that held nothing
                                   back began (ns) */
  uint64_t rewind;              /* the sweep goes on from here if lower
                                   than its cursor (a zero run cut short
                                   for want of requests) */
  struct rb_run runs[RB_FLUSH_BATCH_RUNS];
  struct rb_io ios[RB_FLUSH_BATCH_IOS];
  uint64_t weights[RB_FLUSH_BATCH_IOS]; /* what each of ios counts in the
                                           dirty limit (flush.c) */
  struct rl_node nodes[RB_FLUSH_BATCH_RUNS];
};

/* The populator's state between passes [populator]. */
struct rb_populator_state {
  uint64_t c;                   /* where the scan goes on */
  uint64_t backoff;             /* ms before a retry after a failure */
  bool wrapped;                 /* the scan wrapped around once */
  /* The last batch read: its bytes and its own bandwidth (bytes/s), 0
   * before the first; the next batch is sized from them (populate.c).
   */
  uint64_t last_bytes, last_bps;
  uint64_t rtt_ns;              /* the quickest batch so far: about a
                                   round trip of the store */
  void *bounce;                 /* reads land here first (populate.c) */
  uint64_t bounce_size;
};

struct rb {
  struct rb_config cfg;         /* strings owned (strdup'd) */
  struct rb_store *store;
  bool undo_create;             /* a failed start may give back what
                                   opening the store made (rb_abandon):
                                   nothing but rb_open wrote to it */
  struct ramimage ram;
  struct chunkmap map;
  struct rangelock rl;
  uint64_t *nb;                 /* the NB bitmap in a ram= file (resume.c),
                                   NULL: nothing survives us, no NB */
  uint64_t zeros_changing;      /* [atomic] with nb: zeros between their
                                   first chunk state change and their
                                   last; NB is not retired meanwhile */
  uint64_t resumed_chunks;      /* chunks taken from a resumed image */
  uint64_t resumed_to_write;    /* of them, to write back at start */
  struct rb_txns *txns;         /* journal=: write back in transactions
                                   (txn.c); NULL without a journal */
  const struct rb_journal_ops *jops;  /* its hooks, NULL without one */
  /* Wakes an idle flusher without sleeping, for rbi_try_pwrite (io.c):
   * the kernel target's map() cannot take rb->lock, so it queues a work
   * item that calls rbi_flusher_kick.  NULL: rbi_flusher_kick.  Set
   * before any I/O.
   */
  void (*kick_nowait) (struct rb *rb);

  uint64_t size;
  uint32_t chunk_size;
  unsigned chunk_shift;
  uint64_t nchunks;
  unsigned sector_shift;        /* log2 of the sector bits' sector size */

  int mode;                     /* [atomic] enum rb_mode */
  bool trace;                   /* [atomic] */
  bool populated;               /* [atomic] every chunk loaded */
  bool flusher_idle;            /* [atomic] flusher waits for a kick */
  bool flusher_delaying;        /* [atomic] flusher holds dirty data back
                                   (flush-delay=) until hurried */
  uint64_t dirty_limit;         /* [atomic] bytes, 0: none */
  bool store_failing;           /* [atomic] a write or sync failed since
                                   the last clean sweep (read failures
                                   leave no dirty data, so no sweep would
                                   ever clear them: the store's own state
                                   shows those) */

  rb_mutex lock;
  rb_cond flusher_cond;         /* flusher: work arrived, or stop */
  rb_cond populator_cond;       /* populator: mode changed, or stop */
  rb_cond space_cond;           /* writers: dirty fell below the limit */
  rb_cond sync_cond;            /* rb_sync waiters: a sweep finished */
  rb_cond populated_cond;       /* rb_wait_populated waiters */
  bool stopping;                /* [lock] rb_close has begun */
  bool stop_drain;              /* [atomic] rb_begin_stop_drain: a clean
                                 * stop's drain, flush-rate= lifted */
  bool started;                 /* [lock] */
  bool shut_down;               /* [lock] rb_shutdown finished */
  int shutdown_result;          /* [lock] */
  /* Written [lock] by whoever starts or stops the thread; read under
   * the lock, or without it by that same starting and stopping thread.
   */
  bool flusher_running, populator_running;
  rb_thread flusher, populator;

  /* Sync tickets [lock]: rb_sync takes ticket ++sync_requested; every
   * flusher sweep covers the tickets issued before it began, and ends
   * with a store sync.  sync_done/sync_failed are the highest tickets
   * completed or failed (written under the lock with rb_atomic_store,
   * so rbi_sync_answered may read them without it).
   */
  uint64_t sync_requested, sync_done, sync_failed;
  int sync_errno;

  /* Store syncs and the fsyncgate rule (flush.c).
   *   - sync_lock serialises every store sync (flusher, FUA writes), so a
   *     sync error is seen by exactly one sync, and that sync knows which
   *     writes it may have lost.  Lock order: sync_lock before lock.
   *   - unsynced [lock]: writes that completed before no sync started.
   *   - fail_gen [lock, atomic reads]: the number of failed syncs.  A
   *     store write reads it before it starts (rbi_write_begin) and, when
   *     it completes, is noted as unsynced only if it is unchanged; a
   *     write in flight across a failure is re-dirtied instead.  A sync
   *     succeeds for a caller only if fail_gen still has the value the
   *     caller read before its writes: no failure came in between.
   *   - redirtying [lock]: failed syncs between their fail_gen bump and
   *     the end of their re-dirtying (flush.c).  A sweep reads its
   *     generation only when there are none: one that read the new
   *     generation before the data it lost was dirty again would not
   *     store that data, and its sync would answer the tickets for it.
   *   - A good sync retires NB bits (resume.c) under ranges it takes
   *     while holding sync_lock: nobody who holds a range ever waits for
   *     sync_lock (writethrough and the flusher sync after releasing
   *     theirs), so sync_lock before a range is deadlock free.
   */
  rb_mutex sync_lock;
  struct rb_extents unsynced;   /* [lock] */
  bool sync_owed;               /* [lock] no good store sync since the
                                   start: an earlier process that
                                   crashed may have left writes in the
                                   store's cache, so the flusher syncs
                                   once with nothing of ours unsynced */
  uint64_t unsynced_bytes;      /* [atomic] written and not yet synced,
                                   in 'unsynced' or in a sync running
                                   (weighed as the dirty limit counts:
                                   rbi_write_done) */
  uint64_t inflight_bytes;      /* [atomic] write back in flight (flush.c)
                                   as the dirty limit counts it: the
                                   dirty sectors it took, a sector per
                                   chunk of its zero requests; with
                                   journal=, the sectors its
                                   transactions hold (txn.c) */
  uint64_t fail_gen;            /* [lock] written, [atomic] read */
  uint64_t redirtying;          /* [lock] (above) */

  /* Statistics [atomic]. */
  uint64_t loaded_bytes, stored_bytes, inflight_chunks;
  uint64_t demand_loaded_bytes; /* of loaded_bytes, on demand */
  uint64_t last_miss_ns;        /* [atomic] when a client last reached
                                   data not loaded (populate yields) */
  uint64_t readahead_next;      /* [atomic] where the last read miss
                                   ended: a miss starting there is
                                   sequential and reads ahead */
  uint64_t written_bytes;       /* client WRITE bytes that succeeded */
  uint64_t zeroed_bytes;        /* zeroed or punched on the store (ZERO
                                   requests; stored_bytes is data only) */
  uint64_t written_through;     /* client writes written through */
  uint64_t store_errors, sync_errors, syncs, throttled;
  uint64_t held_back;           /* [atomic] flush.c, "Cold first" */
  uint64_t rewrites_passed;     /* [atomic] writes that passed the dirty
                                   limit as rewrites (rbi_throttle) */
  struct rb_bw flush_bw, populate_bw;
  int last_errno;               /* [lock] */
  char last_error[256];         /* [lock] */
  uint64_t start_ns;

  /* ram-size= smaller than the device (slots.c).  Set up in rb_open,
   * read-only after it; slotted false: the whole device fits, none of
   * this is used and the I/O fast path is as without it.
   */
  bool slotted;
  unsigned slot_shift;          /* log2 of a slot: a sector with partial
                                   chunks, else a chunk (slots.c) */
  uint64_t nslots;              /* slots that may be resident */
  uint64_t piece_chunks;        /* chunks a request reserves at a time */
  uint64_t write_max_chunks;    /* with journal=: the most chunks one
                                   write, zero or trim may span (it goes
                                   into RAM whole, slots.c) */
  uint64_t write_max;           /* with journal=: the bytes of a request
                                   that fit at any offset (the maximum
                                   block size advertised); 0 otherwise */
  uint64_t zero_piece_chunks;   /* with journal=: a zero or trim over
                                   more chunks goes in pieces (io.c);
                                   0 otherwise */
  rb_mutex slot_lock;           /* the reservations and the policy */
  uint64_t slots_reserved;      /* [slot_lock] */
  struct evict evict;           /* [slot_lock], but evict_touch */
  uint64_t slot_gen;            /* [atomic] bumped when slots may have
                                   become free or evictable */
  uint64_t hits, misses, evictions, slot_waits; /* [atomic] */
  bool prefetch_done;           /* [atomic] the prefetch filled the
                                   budget and stopped */

  /* Background threads' own state. */
  struct rb_flusher_state flusher_state; /* [flusher] */
  struct rb_rate flush_rate;    /* [flusher] */
  struct rb_rate populate_rate; /* [populator] */
};

/* Chunk arithmetic. */
static inline uint64_t
rbi_chunk_of (const struct rb *rb, uint64_t offset)
{
  return offset >> rb->chunk_shift;
}

static inline uint64_t
rbi_chunk_offset (const struct rb *rb, uint64_t c)
{
  return c << rb->chunk_shift;
}

/* Bytes of [c, c+n) that exist (the last chunk may be partial). */
static inline uint64_t
rbi_chunks_bytes (const struct rb *rb, uint64_t c, uint64_t n)
{
  uint64_t start = rbi_chunk_offset (rb, c), end = rbi_chunk_offset (rb, c + n);
  return (end > rb->size ? rb->size : end) - start;
}

/* Set the sector bits (chunkmap.h) of [offset, offset+count); again:
 * a writer's second mark of its own sectors, no rewrite, so no hot bit
 * (chunkmap_mark_again).
 */
static inline void
rbi_mark_sectors_as (struct rb *rb, uint64_t offset, uint64_t count,
                     bool again)
{
  uint64_t s0 = offset >> rb->sector_shift;
  uint64_t s1 = (offset + count - 1) >> rb->sector_shift;

  if (again)
    chunkmap_mark_again (&rb->map, s0, s1 - s0 + 1);
  else
    chunkmap_mark (&rb->map, s0, s1 - s0 + 1);
}

static inline void
rbi_mark_sectors (struct rb *rb, uint64_t offset, uint64_t count)
{
  rbi_mark_sectors_as (rb, offset, count, false);
}

static inline bool
rbi_tracing (struct rb *rb)
{
  return rb_atomic_load_relaxed (&rb->trace);
}

/* stats.c: the core's fields of a status reply, through the status
 * writer (json.h); the store's follow (ops->status).
 */
struct rb_status_out;
extern void rbi_stats_fields (const struct rb_stats *st,
                              struct rb_status_out *o);
/* stats.c: the symbolic name of an errno ("ENOSPC"; "EOTHER" for one
 * it does not list, "" for 0), for status and the control protocol's
 * error replies.
 */
extern const char *rbi_errno_name (int e);

/* core.c: count a failed backing store request, keep its message for
 * status (last_error) and log it.
 */
extern void rbi_record_error (struct rb *rb, int err, const char *what);

/* The same for a request of count bytes at offset, what naming it
 * ("write back", "populate read", ...): the one form of these messages.
 */
static inline void
rbi_record_store_error (struct rb *rb, int err, const char *what,
                        uint64_t count, uint64_t offset)
{
  char msg[200];

  snprintf (msg, sizeof msg, "%s of %" PRIu64 " bytes at %" PRIu64 ": %s",
            what, count, offset, rb_strerror (err));
  rbi_record_error (rb, err, msg);
}
extern void rbi_recompute_limit (struct rb *rb);

/* populate.c */
extern int rbi_populator_start (struct rb *rb);
extern void rbi_populator_stop (struct rb *rb);
/* Load every EMPTY chunk of [first, first+n) from the store.  The caller
 * holds a range covering them (so no write can land in between).
 */
extern int rbi_load_chunks (struct rb *rb, uint64_t first, uint64_t n);
/* A client request reached data not loaded yet: populate yields to it
 * for a while (populate.c).
 */
static inline void
rbi_note_miss (struct rb *rb)
{
  rb_atomic_store (&rb->last_miss_ns, rb_now_ns ());
}

/* Load the sectors of [start, end) that are not valid in RAM (EMPTY
 * chunks, gaps of partial ones: chunkmap.h), in parallel requests; the
 * chunks they complete become whole.  Needs partial chunks
 * (rb->map.part).  The caller holds a range covering [start, end),
 * which is sector aligned.  demand: counted as loaded on demand.
 */
extern int rbi_load_sectors (struct rb *rb, uint64_t start, uint64_t end,
                             bool demand);
extern void rbi_check_populated (struct rb *rb);
extern void rbi_populator_state_init (struct rb_populator_state *ps);
extern void rbi_populator_state_fini (struct rb_populator_state *ps);
/* One populate pass: a batch of loads (or a hole marked).  The caller
 * does not call it in writethrough mode (populate pauses there).
 */
extern uint64_t rbi_populate_step (struct rb *rb,
                                   struct rb_populator_state *ps);

/* slots.c (ram-size=): all but init are for rb->slotted only. */
/* The smallest budget, in chunks: one per request of nbdkit's default
 * 16 threads.  (Progress needs less: a reserver holds nothing while it
 * waits, and write back needs no slots.)
 */
#define RB_MIN_SLOTS 16
/* A request reserves for at most ram-size / chunk / RB_PIECES_PER_BUDGET
 * chunks at a time (at least one).
 */
#define RB_PIECES_PER_BUDGET 64
/* ram-size= against the device and the other parameters: -1 with a
 * message on the first problem.
 */
extern int rbi_slots_check (const struct rb *rb);
/* With journal= (after rbi_txn_open and rbi_slots_init): the largest
 * request, rb->write_max; -1 with a message if not even two chunks fit.
 */
extern int rbi_slots_journal_fit (struct rb *rb);
extern int rbi_slots_init (struct rb *rb);
extern void rbi_slots_free (struct rb *rb);
/* Slots resident now (slots.c): sectors valid, or chunks loaded. */
static inline uint64_t
rbi_slots_resident (const struct rb *rb)
{
  return rb->slot_shift < rb->chunk_shift ? chunkmap_resident (&rb->map)
    : chunkmap_loaded (&rb->map);
}
/* Reserve n slots, evicting or waiting for write back; -1 at a stop. */
extern int rbi_slots_reserve (struct rb *rb, uint64_t n);
/* The slots of [off, end) not resident now (sectors not valid, or
 * EMPTY chunks): a bound on what a request over it may load.  A hint,
 * without its range.
 */
extern uint64_t rbi_slots_missing (struct rb *rb, uint64_t off,
                                   uint64_t end);
/* Reserve rbi_slots_missing (off, end) slots, *n of them (0 with
 * nothing to load), to give back with rbi_slots_unreserve once the
 * request's range is released; -1 at a stop (*n 0).
 */
extern int rbi_slots_reserve_range (struct rb *rb, uint64_t off,
                                    uint64_t end, uint64_t *n);
/* Reserve up to n free slots without evicting or waiting: how many. */
extern uint64_t rbi_slots_try_reserve (struct rb *rb, uint64_t n);
extern void rbi_slots_unreserve (struct rb *rb, uint64_t n);
/* Evict down to the budget what can be (the flusher, holding nothing). */
extern void rbi_slots_trim (struct rb *rb);
/* Slots may have become free or evictable: wake reservers (no lock
 * held but possibly sync_lock).  No-op unless slotted.
 */
extern void rbi_slots_notify (struct rb *rb);

/* flush.c */
extern int rbi_flusher_start (struct rb *rb);
/* Drain everything and stop the flusher; -1 if data could not be stored. */
extern int rbi_flusher_stop (struct rb *rb);
extern void rbi_flusher_kick (struct rb *rb);
/* The same, and also end a flush-delay= wait: dirty data is wanted on
 * the store now (the dirty limit, writethrough mode).
 */
extern void rbi_flusher_hurry (struct rb *rb);
extern void rbi_flusher_state_init (struct rb_flusher_state *fs);
/* One flusher pass: a sweep over every dirty chunk and the sync. */
extern uint64_t rbi_flush_step (struct rb *rb, struct rb_flusher_state *fs);
/* Wait out the delay rbi_flush_step returned (kicks, stop, coalescing). */
extern void rbi_flusher_wait (struct rb *rb, const struct rb_flusher_state *fs,
                              uint64_t delay);
/* rb_sync in two halves, for a caller that waits its own way (the
 * kernel target waits killably on rb->sync_cond): take a ticket, then
 * ask whether its sweep answered it: 1 done, -1 failed, 0 not yet.
 * rbi_sync_answered takes no lock.
 */
extern uint64_t rbi_sync_request (struct rb *rb);
/* Answer the tickets up to TARGET: done (err 0) or failed with ERR;
 * sync_done/sync_failed only grow, stored atomically (rbi_sync_answered
 * reads them without the lock); wakes the waiters.  rb->lock held.
 * The flusher's and the journal's committer's one way to answer.
 */
extern void rbi_sync_answer_locked (struct rb *rb, uint64_t target, int err);
extern int rbi_sync_answered (struct rb *rb, uint64_t t);
/* Before a store write starts: the failure generation it runs in. */
extern uint64_t rbi_write_begin (struct rb *rb);
/* After a store write of [offset, offset+count) succeeded: remember it
 * for the next sync, or re-dirty it if a sync failed meanwhile.  weight:
 * what it counts against the dirty limit until synced (count for data,
 * rbi_zero_weight for a zero request).
 */
extern void rbi_write_done (struct rb *rb, uint64_t gen, uint64_t offset,
                            uint64_t count, uint64_t weight);
/* Sync the store now.  Returns 0 only if the sync succeeded and no sync
 * failed since 'gen' was read (rbi_write_begin), so every write the caller
 * completed after reading it is durable.  On failure every write that
 * may have been lost is re-dirtied.
 */
extern int rbi_sync_store (struct rb *rb, uint64_t gen);
/* Put [offset, offset+count) back to dirty (a store or sync failed). */
extern void rbi_redirty (struct rb *rb, uint64_t offset, uint64_t count);

/* resume.c (NULL rb->nb: all of these do nothing) */
/* Set NB on chunks [c, c+n), ordered before the caller's next step. */
extern void rbi_nb_set (struct rb *rb, uint64_t c, uint64_t n);
/* After a successful sync of 'synced': clear NB where it is safe. */
extern void rbi_nb_retire (struct rb *rb, const struct rb_extents *synced);
/* A clean stop: everything is synced. */
extern void rbi_nb_clear_all (struct rb *rb);
/* At open, for a resumed map: what may differ from the store is dirty. */
extern void rbi_resume_map (struct rb *rb);

/* io.c */
/* Wait at the dirty limit before a write of [offset, offset+count)
 * (count > 0), unless it only rewrites dirty sectors.
 */
extern void rbi_throttle (struct rb *rb, uint64_t offset, uint64_t count);
/* Would rbi_throttle wait now?  Lock-free (rbi_try_pwrite). */
extern bool rbi_over_dirty_limit (struct rb *rb);
/* Over half the dirty limit: write back should not wait (flush.c). */
extern bool rbi_dirty_pressure (struct rb *rb);
/* What the dirty limit counts (io.c, the top of the dirty limit), also
 * the status's dirty_bytes and inflight_bytes.
 */
extern uint64_t rbi_dirty_bytes (struct rb *rb);
extern uint64_t rbi_inflight_bytes (struct rb *rb);
/* What a zero request over [offset, offset+count) counts: a sector
 * per chunk with sector bits, else its bytes (whole chunks, as before).
 */
extern uint64_t rbi_zero_weight (struct rb *rb, uint64_t offset,
                                 uint64_t count);

/* A request's data when it is not one flat buffer (the kernel target:
 * a bio's pages).  copy() moves all 'count' bytes of the request, from
 * its start, to (to_ram) or from RAM at 'ram', the request's place in
 * the RAM image.  Called once per request, from whatever context called
 * io.c (so from rb_try_* it must not sleep).
 */
struct rb_data {
  void (*copy) (struct rb_data *d, void *ram, uint64_t count, bool to_ram);
};
/* rb_pread and rb_pwrite with the data behind d.  They may wait (loads,
 * range locks, the dirty limit, writethrough).
 */
extern int rbi_pread_data (struct rb *rb, struct rb_data *d, uint32_t count,
                           uint64_t offset);
extern int rbi_pwrite_data (struct rb *rb, struct rb_data *d, uint32_t count,
                            uint64_t offset, unsigned flags);
/* The same requests for a caller that must not sleep: done on the fast
 * path if it needs no wait (every chunk loaded; for a write also the
 * writeback mode, no journal, under the dirty limit, no FUA to wait
 * for), true; else nothing is done, false, and the caller makes the
 * call above from a context that may sleep.  Lock-free; an idle
 * flusher is woken through rb->kick_nowait.
 */
extern bool rbi_try_pread (struct rb *rb, struct rb_data *d, uint32_t count,
                           uint64_t offset);
extern bool rbi_try_pwrite (struct rb *rb, struct rb_data *d, uint32_t count,
                            uint64_t offset, unsigned flags);

/* txn.c (journal=; see the top of txn.c).  Userspace only: the shared
 * flusher and write path (flush.c, io.c, also built into the kernel
 * target) reach it through rb->jops, which is NULL without a journal.
 */
struct rb_journal_ops {
  /* In place of the flusher: the committer and applier threads. */
  int (*start) (struct rb *rb);
  int (*stop) (struct rb *rb);
  /* Around an application write of chunks [c0, c1]: reserve journal
   * space (waiting for it, or failing if the write can never fit),
   * enter the write gate and copy on write; then leave.
   */
  int (*write_begin) (struct rb *rb, uint64_t c0, uint64_t c1,
                      uint64_t *reserved);
  void (*write_end) (struct rb *rb, uint64_t reserved);
  /* A commit point soon, without waiting for it (FLUSH, fsync=ignore). */
  void (*request_commit) (struct rb *rb);
  /* rb_sync for FLUSH and FUA with fsync=wait: until a commit point
   * after the call is committed (made on the caller's thread if none
   * is in progress).
   */
  int (*sync) (struct rb *rb);
  /* Writers wait for space: a commit point and the in-place writes now;
   * with 'all' (they wait for RAM, ram-size=), every sector in place,
   * none left to a newer transaction (txn.c, "Deferred sectors").
   */
  void (*hurry) (struct rb *rb, bool all);
  /* Wait until everything written so far is in place on the backing
   * store and synced there (a writethrough write, rb_sync), up to
   * 'deadline' (rb_deadline_ms); 'what' names the caller in errors.
   */
  int (*wait_applied) (struct rb *rb, uint64_t deadline, const char *what);
  /* ram-size=: is chunk c in a transaction not yet in place and synced
   * on the backing store (it may not be evicted)?  Lock-free; see the
   * top of txn.c for why the evictor's order of reads is enough.
   */
  bool (*holds) (struct rb *rb, uint64_t c);
};
/* Open the journal and replay it onto the backing store; sets rb->jops. */
extern int rbi_txn_open (struct rb *rb);
/* The dirty chunks (a resumed image) must fit in one transaction. */
extern int rbi_txn_check_fit (struct rb *rb);
/* The journal's held sectors agree with their counters (txn.c, "Held
 * chunks"): for a check at rest (the simulator), plain reads.  -1 with
 * the error set if not.
 */
extern int rbi_txn_check_held (struct rb *rb);
/* The most chunks one write may span: its journal estimate must fit
 * in the journal (txn_write_begin).
 */
extern uint64_t rbi_txn_max_chunks (struct rb *rb);
extern void rbi_txn_close (struct rb *rb, bool clean);
extern void rbi_txn_stats (struct rb *rb, struct rb_stats *st);

#endif /* RAMBACK_INTERNAL_H */
