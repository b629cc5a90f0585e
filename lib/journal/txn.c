/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: write back in transactions through a journal (journal=).
 *
 * Without a journal the flusher writes dirty chunks back in any order
 * and a crash without UPS can leave the backing store a mixture of old
 * and new chunks.  With one, the backing store plus the journal always
 * recover to a point in time: the device's exact content at one commit
 * point T (every write acknowledged before T in full, nothing that
 * began after it).  Design:
 *
 * Commit points.  The committer thread (it runs in the flusher's
 * place) makes a commit point when a client FLUSH waits for one (a
 * sync ticket, flush.c), when asked (a FLUSH with fsync=ignore, a
 * throttled writer), when the oldest uncommitted write is
 * commit-interval= old, and at a clean stop.  A FLUSH with fsync=wait
 * makes it on its own thread instead when no commit is in progress
 * (txn_sync); 'committing' lets one thread at a time commit, so
 * everything below is done by "the committer", whichever thread that
 * is.  At the commit point it
 * holds the write gate exclusively: no application write is between
 * its start and its end, so "written before T" and "written after T"
 * is a clean cut.  Under the gate, every DIRTY and ZERO chunk becomes
 * part of transaction N: it moves to CLEAN (so a later write re-dirties
 * it for N+1), its sector bits (chunkmap.h) are taken, and a DIRTY
 * chunk gets its bit in 'pending' ("RAM still holds N's content, not
 * captured yet").  N's extents are the dirty sectors of its DIRTY
 * chunks, runs of them in a row merged (across chunks too), and its
 * ZERO chunks whole: a 4 KiB random write costs 4 KiB of journal, not
 * a chunk.  The sectors not taken equal what the backing store plus
 * the journal already hold (the sector-bit rules, with the journal's
 * transactions in the store's place), so N holds every byte that
 * changed.  The gate is released at once: the pause is O(dirty
 * chunks) bit operations, not a copy of the data.
 *
 * Capture (copy on write).  The committer then copies the pending
 * chunks' extents from RAM into N's buffer, a batch of chunks at a time
 * under cap_lock, clearing their bits.  An application write that
 * touches a chunk whose bit is still set copies N's extents in that
 * chunk (all of them: a chunk may hold several, and an extent span
 * several chunks) into N's buffer first (under cap_lock), clears the
 * bit, and only then changes RAM: N's buffer ends up holding every
 * sector exactly as it was at T.
 *
 * Commit.  N's extents (data runs from the buffer, zero runs as a
 * length only) are appended to the journal with CRC-32C, then a commit
 * block, and the journal is synced (journal.c): N is committed, and the
 * FLUSHes that asked for it (their tickets were issued before T) are
 * acknowledged.  fsync=wait therefore costs one sequential append and
 * one journal sync; a small transaction (up to RBJ_WHOLE_MAX of data,
 * an fsync-heavy load's) is captured first and appended in one write,
 * descriptor, data and commit block together (every extent has its
 * CRC, so the order of the blocks on the disk does not matter).  The
 * FLUSHes that arrive while N is being synced take tickets above N's
 * target and share the next commit point (group commit): one append
 * and one sync for all of them (the first of them to see no commit in
 * progress commits on its own thread).  Neither thread is woken for nothing:
 * a write does not wake the committer (it wakes once an interval
 * anyway), and a commit wakes the applier only when it has something
 * to do (an empty queue filled, a quarter of the journal used).
 *
 * A failed append (a write or the sync of the journal failed) keeps
 * its transaction: capture is finished first, so the buffer holds the
 * device as of the commit point, and the next commit appends it again
 * as it is, at the same place with the same sequence number, before it
 * makes a new commit point (retry); the FLUSHes it answers fail.  Its
 * chunks stay in flight and its bytes in jused, so the bounds below
 * keep holding.  (Putting them back to dirty instead turned its ZERO
 * chunks, an extent each in the journal, into a chunk of data each:
 * dirty data that no longer fitted in the journal, which the committer
 * then waited for room for forever.)
 *
 * The buffer is page aligned (rbj_alloc), and so is each run's data in
 * it when chunks are, so the journal append and the in-place writes can
 * go to a file store with O_DIRECT (store-file.c), without a copy
 * through the page cache.
 *
 * Apply.  The applier thread writes committed transactions in place on
 * the backing store, syncs it, and retires them (the journal's tail
 * moves past them; journal.c persists it before the space is reused).
 * The applier lets commits pile up for up to APPLY_DELAY_NS (50 ms),
 * or until a quarter of the journal is used or somebody waits for
 * space or for the in-place writes, so that an fsync-heavy load costs
 * the backing store a few passes and syncs a second, not one per
 * FLUSH.  When the backing store lags, the applier takes every committed
 * transaction queued at once (or its older part: "Deferred sectors")
 * and writes each sector only in its newest version ('seen' is per
 * sector: two transactions may hold different sectors of one chunk):
 * replay after a crash in the middle writes the
 * older ones and then the newer ones again, so the merge is invisible.
 * Those writes come from the transactions' buffers, never from RAM (RAM
 * may already hold N+1), so the memory this costs is bounded by the
 * journal's size.  A pass goes in offset order, in segments of about an
 * eighth of the dirty limit, the store synced after each: the chunks
 * below the next segment are then in place for every transaction of
 * the pass, and are released (see "Held chunks") at once, not seconds
 * later with the pass's last request; the transactions are retired
 * when the whole pass is in place and synced, as before.
 *
 * Deferred sectors.  Under an fsync-heavy skewed load every FLUSH
 * makes a transaction of the sectors written since the last, and the
 * hottest are in nearly all of them: merged per pass, they still
 * crossed a slow link to the store once a pass.  So a pass may put in
 * place only the older part of the queue, and leave the newest
 * transactions queued (take_older_locked): of the older ones it writes
 * no sector that a kept one holds (plan), and retires them all.  The
 * store plus the journal still replay to the newest commit point:
 * replay starts at the tail, the first kept transaction, and the
 * newest version of every skipped sector is in a kept one, which
 * replay writes after anything older (a durable tail further back
 * only replays the older ones first, as before).  A hot sector then
 * waits in the local journal, cheap and durable, and crosses the link
 * once it is no longer rewritten within a pass.  Bounds and rules:
 *   - kept: the newest transactions that no pass kept before (each
 *     waits for one pass at most), holding data, at most
 *     1/DEFER_SHARE of the queue's journal bytes, never the whole
 *     queue; and only while the journal is under 1/DEFER_USED full,
 *     so deferred work never holds more than 1/(DEFER_SHARE *
 *     DEFER_USED) of it, and a fuller journal gets a whole pass;
 *   - no deferral while anybody waits for the store, for journal space
 *     or for RAM (apply_all: writethrough writes and rb_sync in
 *     txn_wait_applied, writers waiting for journal space, ram-size=
 *     waiting for a slot, the committer without room), in
 *     writethrough mode (so with a UPS on battery), or at a stop and
 *     its drain (committer_done, stopping): they get everything in
 *     place.  Writers at the dirty limit only hurry (apply_now: no
 *     delay): what they wait for, held sectors released, comes
 *     sooner from shorter passes, and a kept sector is held (once)
 *     by its kept transaction whether or not an older one writes it;
 *   - a pass that skipped a sector does not advance applied_target:
 *     the store alone does not hold its transactions' content, which
 *     is what a writethrough write or rb_sync waits for.  A waiter
 *     that finds such a pass asks for haste again (txn_wait_applied),
 *     and the next pass keeps nothing back;
 *   - a skipped sector's chunk stays held (a kept transaction holds
 *     it): its live count stays above zero (no eviction, txn_holds),
 *     and release_chunks recomputes its held bits from the holders,
 *     the kept ones among them, so held, inflight_bytes and the live
 *     counts stay exact (rbi_txn_check_held);
 *   - the kept ones wait a delay more (queued_since is reset), so
 *     that newer commits join them before the next pass.
 * journal_deferred_bytes counts the bytes skipped.
 *
 * No early commit point.  A commit point made when the dirty data
 * would fill part of the journal (a quarter, then a half, were tried)
 * lets N+1 be appended while N is put in place, but random writes then
 * take more, smaller transactions: randwrite4k with the journal ran
 * at about 0.65x without it on a quiet machine, while a sequential
 * drain through the journal gained nothing measurable, being bound by
 * what ramback takes in over NBD (about the same without a journal).
 *
 * Bounds.  A transaction must fit in the journal.  Writers reserve, before
 * they enter the gate, the journal space their chunks could take
 * (per_chunk each: about a chunk) and wait while the live
 * transactions, the dirty data (dirty_est: by the sector bits set, at
 * most a chunk per dirty chunk), the reservations and their own would
 * exceed the journal; a single write larger than the whole journal
 * fails with a message that says so.  dirty-max= and ups-window= apply
 * as before (rbi_throttle).
 *
 * Writethrough mode with a journal: a write completes once the
 * transaction holding it is on the backing store (applied and synced),
 * so the backing store alone holds it, as in plain writethrough.  If
 * the in-place write fails, the write fails with the store's error at
 * once (apply_failed), as in plain writethrough, instead of waiting for
 * the store to come back; the transaction stays committed in the
 * journal and the applier retries it, so nothing is lost.  FUA with
 * fsync=wait completes once it is committed in the journal.
 *
 * Held chunks.  'live' counts, per chunk, the transactions not yet in
 * place and synced that hold it (rb->inflight_chunks: the chunks with a
 * count).  The dirty limit (io.c) counts what they hold in sectors, as
 * the plain flusher's in flight: 'held' has a bit per sector, the
 * union of what the transactions holding the chunk took from it (its
 * sector bits at the commit point; a ZERO chunk its first sector, as
 * the dirty count weighs it), and rb->inflight_bytes is the bits set.
 * A sector held by several transactions counts once: RAM holds it
 * once, and the applier writes it once for all of them (plan).
 * (Counted once per transaction, an fsync-heavy load rewriting a hot
 * set, every FLUSH a transaction holding the hot sectors again, filled
 * the limit with copies while the applier waited on a slow backing
 * store, and the writers with it.)  A commit point adds a chunk's new
 * held sectors before it takes its sector bits: the sum never dips
 * below what RAM holds, and never rises, since what it adds is at most
 * what leaves the dirty count (the taken bits, or a ZERO chunk's
 * sector; where the dirty count is capped at the dirty chunks whole,
 * the chunks whole that leave it).  The bits of a chunk are cleared,
 * and their weight leaves inflight_bytes, when its count gets back to
 * zero.  When it does not (a newer transaction holds the chunk too),
 * its bits become exactly the union of what the transactions left
 * hold of it: 'holders' lists the live transactions (from their commit
 * point: the one being captured, a retried append, the queued ones),
 * and a release clears the chunk's bits and sets them again from one
 * pass over the other holders' runs in the released range (their runs
 * are in offset order: bisection finds the first).  They only shrink
 * by this (the sum never rises), and still cover every sector a live
 * transaction holds (it never dips below what RAM holds).  (Kept
 * whole until the count got back to zero, an fsync-heavy load's hot
 * chunks, each FLUSH a transaction holding them again while the
 * applier put older ones in place, never got there: their bits grew to
 * every sector ever taken from them, and writers waited at a dirty
 * limit filled with sectors already in place.)  'held_lock' makes a
 * release and a commit point's additions one step each.  (Counting
 * held chunks whole, a 4 KiB random write held 64 KiB of the limit
 * with 64 KiB chunks until the applier had put its transaction in
 * place.)
 *
 * With ram-size= smaller than the device (slots.c): a chunk taken at
 * a commit point is CLEAN in RAM long before the backing store holds
 * it: pending (RAM holds N's content, not captured yet), then in the
 * journal only, then written in place but not synced.  Evicting it in
 * any of these would capture zeroes, or read it back stale from the
 * backing store.  So the evictor keeps a chunk while its 'live' count
 * is not zero (txn_holds).  The count rises before the chunk moves to
 * CLEAN (under the gate held exclusively) and falls once apply_list
 * has synced the store; the evictor, holding the chunk's range (no
 * writer can make it DIRTY again, so no commit point can take it),
 * reads the state first, then the count (all seq_cst): if it sees the
 * CLEAN of a commit point it sees that commit's count too.  When they
 * fall, the applier wakes the reservers and evicts what is over the
 * budget (rbi_slots_trim), as the flusher does after its sync.
 *
 * With ram= (resume.c): a chunk's NB bit is set before it moves to
 * CLEAN at the commit point, and retired once its transaction is
 * committed in the journal (a start replays the journal onto the
 * backing store before it resumes the RAM image).  The committer does
 * both, one commit at a time, so no newer commit point can interleave.
 *
 * Locking (lock order: gate, then cap_lock; rb->lock never held while
 * taking the gate or cap_lock, and neither held across I/O except
 * that a writer holding the gate shared may load its edge chunks):
 *   gate       rwlock; application writes hold it shared from before
 *              their copy-on-write check until their chunks are marked
 *              dirty; the committer holds it exclusively for a commit
 *              point.
 *   cap_lock   the pending bits' clearing and the capturing
 *              transaction's buffer.
 *   pending    [atomic] set only under the gate held exclusively,
 *              cleared only under cap_lock after the chunk was copied.
 *   capturing  [cap_lock] the transaction whose chunks are pending.
 *   sector bits (chunkmap.h)  taken (cleared) only under the gate held
 *              exclusively (take_chunks); writers set them under the
 *              gate held shared, before they move their chunks.
 *   queue, commit_now, committing, applied_target, apply_failed, a
 *              transaction's 'kept'  [rb->lock]; the applier reads the
 *              kept ones' runs without it (fixed), and their links only
 *              up to the last kept one (committed() sets that one's)
 *   retry      [committing] only the thread that set 'committing'
 *   dirty_since  written under rb->lock with atomic stores; read
 *              atomically without it (the write path's fast check)
 *   reserved, jused, counters  [atomic]
 *   seen       [applier]
 *   spare      [spare_lock], a leaf lock
 *   held       [held_lock], a leaf lock: the bits, and with them the
 *              changes of rb->inflight_bytes and of a chunk's live
 *              count to or from zero
 *   holders, a transaction's hnext/hprev and held_from, redo
 *              [held_lock]; a transaction's runs are fixed from its
 *              commit point on (read under held_lock by a release)
 *
 * Why one file of over 1,600 lines: commit point, capture, commit and
 * apply are the steps of one transaction and share struct rb_txns and
 * the lock rules above, which a split would have to export; the steps
 * are in that order below.  The on-disk format is journal.c.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cleanup.h"
#include "error.h"
#include "internal.h"
#include "journal.h"

#include "backoff.h"
#define CAPTURE_BATCH_BYTES (UINT64_C (1) << 20)
#define APPLY_BATCH 64
#define APPLY_DELAY_NS (50 * UINT64_C (1000000))
#define DEFER_USED 2            /* defer below 1/DEFER_USED of the journal */
#define DEFER_SHARE 2           /* keep at most 1/DEFER_SHARE of the queue */
#define SPARE_MIN (UINT64_C (1) << 20)

/* An extent of a transaction: bytes of the device, in offset order. */
struct txn_run {
  uint64_t off, len;
  enum chunk_state kind;        /* CS_DIRTY (data) or CS_ZERO */
  uint64_t buf_off;             /* CS_DIRTY: where its data is in buf */
};

/* The chunks a transaction took at its commit point (runs of one
 * state): what moved to CLEAN, what NB retires.
 */
struct txn_chunks {
  uint64_t first, n;
  enum chunk_state kind;
};

struct txn {
  struct txn *next;
  uint64_t target;              /* sync tickets it answers */
  struct txn_run *runs;
  size_t nruns, cap;
  struct txn_chunks *cruns;
  size_t ncruns, ccap;
  uint8_t *buf;
  uint64_t buf_cap;             /* bytes allocated at buf */
  uint64_t data_bytes, chunks;
  uint64_t seq, jstart, jlen;   /* where it is in the journal */
  struct txn *hnext, **hprev;   /* [held_lock] in t->holders from its
                                   commit point until in place (hprev
                                   NULL: not in it) */
  uint64_t held_from;           /* [held_lock] its chunks below this one
                                   are released (in place, synced) */
  bool kept;                    /* [rb->lock] a pass left it queued once
                                   ("Deferred sectors"): never again */
};

struct rb_txns {
  struct rb_store *jstore;
  struct rb_journal *j;
  struct rbj_replay replay;
  uint64_t capacity;
  uint64_t interval_ns;
  uint64_t per_chunk;           /* journal bytes a dirty chunk may add
                                   to dirty_est, at most */
  unsigned unit_shift;          /* log2 of the sector: the unit of 'seen' */

  rb_rwlock gate;
  rb_mutex cap_lock;
  uint64_t *pending;            /* [atomic] */
  rb_mutex spare_lock;
  uint8_t *spare;               /* [spare_lock] a large buffer to reuse */
  uint64_t spare_cap;           /* [spare_lock] */
  struct txn *capturing;        /* [cap_lock] */
  struct txn *retry;            /* [committing] its append failed:
                                   appended first, as it is */

  struct txn *q_head, **q_tail; /* [rb->lock] committed, to apply */
  bool commit_now;              /* [rb->lock] */
  bool committing;              /* [rb->lock] a thread is in commit_one
                                   (the committer, or a FLUSH's own) */
  bool committer_blocked;       /* [rb->lock] the committer waits for
                                   'committing' to clear */
  bool apply_now;               /* [rb->lock] somebody waits for space
                                   or for the backing store: no delay */
  bool apply_all;               /* [rb->lock] and needs everything in
                                   place ("Deferred sectors") */
  uint64_t queued_since;        /* [rb->lock] when the queue last
                                   became non-empty */
  bool committer_done;          /* [rb->lock] */
  uint64_t dirty_since;         /* [rb->lock] written, [atomic] read; 0:
                                   nothing uncommitted */
  uint64_t applied_target;      /* [rb->lock] */
  uint64_t apply_failed;        /* [rb->lock] tickets whose in-place
                                   write failed (and is being retried) */
  int apply_errno;              /* [rb->lock] */
  rb_cond applier_cond;
  rb_thread applier;
  bool applier_running;

  uint64_t reserved, jused;     /* [atomic] */
  uint64_t admit_waiters;       /* [atomic] */
  uint64_t commits, applied;    /* [atomic] */
  uint64_t deferred_bytes;      /* [atomic] skipped by a pass: a newer
                                   transaction it left queued holds them */
  uint64_t data_bytes;          /* [atomic] data appended, committed */
  uint64_t last_commit_ns;      /* [atomic] monotonic */
  uint64_t last_commit_wall;    /* [atomic] ns since the epoch */

  uint64_t *seen;               /* [applier] per sector */
  uint32_t *live;               /* [atomic] per chunk: transactions
                                   not in place and synced holding it */
  rb_mutex held_lock;
  uint64_t *held;               /* [held_lock] per sector of the sector
                                   bits: held by a live transaction */
  struct txn *holders;          /* [held_lock] the live transactions */
  uint64_t *redo;               /* [held_lock] per chunk, release_chunks
                                   only: its bits are recomputed */
};

static bool
bit_test (uint64_t *bits, uint64_t c)
{
  return (rb_atomic_load (&bits[c / 64]) >> (c % 64)) & 1;
}

static void
bit_set (uint64_t *bits, uint64_t c)
{
  rb_atomic_or (&bits[c / 64], UINT64_C (1) << (c % 64));
}

static void
bit_clear (uint64_t *bits, uint64_t c)
{
  rb_atomic_and (&bits[c / 64], ~(UINT64_C (1) << (c % 64)));
}

static uint64_t
wall_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_REALTIME, &ts);
  return ts.tv_sec * UINT64_C (1000000000) + ts.tv_nsec;
}

/* A transaction's buffer: the spare one if it is large enough, else a
 * new one (*cap: its size).  A large buffer is faulted in and zeroed by
 * the kernel page by page on first use, which for a stream of writes
 * through the journal cost more CPU than the copy into it; so the
 * buffer of a large transaction put in place is kept (one, the
 * largest) for the next, and large ones are allocated in powers of two
 * so that they fit the next.  Only pages written are resident.
 */
static uint8_t *
buf_get (struct rb_txns *t, uint64_t len, uint64_t *cap)
{
  if (len >= SPARE_MIN) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&t->spare_lock);
    if (t->spare && t->spare_cap >= len) {
      uint8_t *p = t->spare;
      *cap = t->spare_cap;
      t->spare = NULL;
      return p;
    }
    *cap = SPARE_MIN;
    while (*cap < len)
      *cap *= 2;
  }
  else
    *cap = len;
  return rbj_alloc (*cap);
}

static void
buf_put (struct rb_txns *t, uint8_t *p, uint64_t cap)
{
  if (p && cap >= SPARE_MIN) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&t->spare_lock);
    if (t->spare == NULL || t->spare_cap < cap) {
      uint8_t *old = t->spare;
      t->spare = p;
      t->spare_cap = cap;
      p = old;
    }
  }
  free (p);
}

/* No stream of writes: no spare kept. */
static void
buf_drop_spare (struct rb_txns *t)
{
  uint8_t *p;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&t->spare_lock);
    p = t->spare;
    t->spare = NULL;
  }
  free (p);
}

static void
txn_free (struct rb_txns *tx, struct txn *t)
{
  if (t) {
    free (t->runs);
    free (t->cruns);
    buf_put (tx, t->buf, t->buf_cap);
    free (t);
  }
}

/* ---- open, close ---- */

static const struct rb_journal_ops journal_ops;
static uint64_t dirty_est (struct rb *rb);
static void held_of (struct rb *rb, const struct txn *x, uint64_t a,
                     uint64_t b, uint64_t *bits, const uint64_t *only);

int
rbi_txn_open (struct rb *rb)
{
  struct rb_txns *t;
  struct rb_store_params sp;
  uint64_t words = (rb->nchunks + 63) / 64;

  if (rbj_check_not_back (rb->cfg.journal, rb->cfg.store.uri,
                          &rb->store->id) == -1)
    return -1;
  t = calloc (1, sizeof *t);
  if (t == NULL) {
    rb_set_error (errno, "calloc");
    return -1;
  }
  rb->txns = t;
  rb_rwlock_init (&t->gate);
  rb_mutex_init (&t->cap_lock);
  rb_mutex_init (&t->spare_lock);
  rb_mutex_init (&t->held_lock);
  rb_cond_init (&t->applier_cond);
  t->q_tail = &t->q_head;
  t->interval_ns = (rb->cfg.commit_interval_ms
                    ? rb->cfg.commit_interval_ms : RB_DEFAULT_COMMIT_INTERVAL_MS)
    * UINT64_C (1000000);
  t->unit_shift = RB_MIN (rb->chunk_shift, RB_SECTOR_SHIFT);
  /* At least what a chunk adds to either bound of dirty_est (a chunk
   * and an extent; a sector and an extent per sector, and an extent),
   * so that what a writer reserves covers what its chunks add to it.
   */
  t->per_chunk = RB_MAX ((uint64_t) rb->chunk_size + RBJ_EXTENT_BYTES,
                         (((uint64_t) rb->chunk_size >> t->unit_shift) *
                          ((UINT64_C (1) << t->unit_shift) +
                           RBJ_EXTENT_BYTES)) + RBJ_EXTENT_BYTES);
  t->pending = calloc (words, sizeof (uint64_t));
  t->seen = calloc (((rb->nchunks << (rb->chunk_shift - t->unit_shift))
                     + 63) / 64, sizeof (uint64_t));
  t->live = calloc (rb->nchunks, sizeof *t->live);
  t->held = calloc (((rb->nchunks << (rb->chunk_shift - t->unit_shift))
                     + 63) / 64, sizeof (uint64_t));
  t->redo = calloc (words, sizeof (uint64_t));
  if (t->pending == NULL || t->seen == NULL || t->live == NULL ||
      t->held == NULL || t->redo == NULL) {
    rb_set_error (errno, "cannot allocate the journal's chunk bitmaps");
    return -1;
  }

  if (!rb_store_is_remote_uri (rb->cfg.journal)) {
    struct stat st;
    if (stat (rb->cfg.journal, &st) == -1 && errno == ENOENT) {
      rb_set_error (ENOENT, "journal=%s does not exist: create it first, "
                    "written in full (e.g. " RBJ_CREATE_ADVICE "; at least "
                    "1 MiB, and more than is written between two commits)",
                    rb->cfg.journal, rb->cfg.journal);
      return -1;
    }
  }
  sp = rb->cfg.store;
  sp.uri = rb->cfg.journal;
  sp.param = "journal";
  sp.create_size = 0;
  sp.read_only = false;
  t->jstore = rb_store_open (&sp);
  if (t->jstore == NULL) {
    /* A file's messages name journal= already (sp.param). */
    if (rb_store_is_remote_uri (rb->cfg.journal))
      rb_set_error (rb_get_errno (), "journal=%s: %s", rb->cfg.journal,
                    rb_get_error ());
    return -1;
  }
  t->j = rbj_open (t->jstore, rb->cfg.journal, rb->store, &t->replay);
  if (t->j == NULL)
    return -1;
  t->capacity = rbj_capacity (t->j);
  if (t->capacity < RBJ_TXN_FIXED + 4 * t->per_chunk) {
    rb_set_error (EINVAL, "journal=%s holds %" PRIu64 " bytes of "
                  "transactions, too few for chunks of %" PRIu32 " bytes: "
                  "make it at least %" PRIu64 " bytes or use a smaller "
                  "chunk=", rb->cfg.journal, t->capacity, rb->chunk_size,
                  RBJ_AREA_START + RBJ_TXN_FIXED + 4 * t->per_chunk);
    return -1;
  }
  if (t->replay.formatted)
    rb_info ("journal: %s is new: formatted, %" PRIu64 " bytes for "
            "transactions", rb->cfg.journal, t->capacity);
  else if (t->replay.txns)
    rb_info ("journal: replayed %" PRIu64 " transactions (%" PRIu64 " to %"
            PRIu64 ", %" PRIu64 " bytes) onto the backing store%s",
            t->replay.txns, t->replay.first_seq, t->replay.last_seq,
            t->replay.bytes,
            t->replay.torn ? "; ignored a damaged or incomplete one after them"
            : "");
  else
    rb_info ("journal: empty, nothing to replay%s",
            t->replay.torn ? " (ignored a damaged or incomplete transaction)"
            : "");
  rb->jops = &journal_ops;
  return 0;
}

int
rbi_txn_check_fit (struct rb *rb)
{
  struct rb_txns *t = rb->txns;
  uint64_t need = dirty_est (rb) + RBJ_TXN_FIXED;

  if (chunkmap_dirty (&rb->map) > 0 && need > t->capacity) {
    rb_set_error (ENOSPC, "the RAM image holds %" PRIu64 " dirty chunks "
                  "(up to %" PRIu64 " bytes of journal), more than "
                  "journal=%s holds (%" PRIu64 "): use a larger journal, "
                  "or start once without journal= to write it back",
                  chunkmap_dirty (&rb->map), need, rb->cfg.journal,
                  t->capacity);
    return -1;
  }
  return 0;
}

/* The held state against the holders (the simulator's at-rest check):
 * a chunk's count is the number of holders holding it, its bits are
 * exactly the union of what they hold of it (held_of), and the totals
 * are inflight_chunks and inflight_bytes.  At rest (no thread runs, or
 * none that could change them): read without held_lock.
 */
int
rbi_txn_check_held (struct rb *rb)
{
  struct rb_txns *t = rb->txns;
  unsigned shift = rb->chunk_shift - t->unit_shift;
  uint64_t words = ((rb->nchunks << shift) + 63) / 64;
  CLEANUP_FREE uint64_t *want = calloc (words, sizeof *want);
  CLEANUP_FREE uint32_t *count = calloc (rb->nchunks, sizeof *count);
  uint64_t c, s, chunks = 0, bits = 0;
  const struct txn *x;
  size_t i;

  if (want == NULL || count == NULL) {
    rb_set_error (ENOMEM, "out of memory to check the held chunks");
    return -1;
  }
  for (x = t->holders; x; x = x->hnext) {
    held_of (rb, x, x->held_from, rb->nchunks, want, NULL);
    for (i = 0; i < x->ncruns; i++)
      for (c = RB_MAX (x->cruns[i].first, x->held_from);
           c < x->cruns[i].first + x->cruns[i].n; c++)
        count[c]++;
  }
  for (c = 0; c < rb->nchunks; c++) {
    uint64_t b = 0;

    for (s = c << shift; s < (c + 1) << shift; s++) {
      b += (t->held[s / 64] >> (s % 64)) & 1;
      if (((t->held[s / 64] ^ want[s / 64]) >> (s % 64)) & 1) {
        rb_set_error (EINVAL, "chunk %" PRIu64 ": sector %" PRIu64 " is %s "
                      "in flight, but %s transaction holding the chunk "
                      "took it", c, s - (c << shift),
                      (t->held[s / 64] >> (s % 64)) & 1 ? "counted" : "not",
                      (want[s / 64] >> (s % 64)) & 1 ? "a" : "no");
        return -1;
      }
    }
    if (t->live[c] != count[c]) {
      rb_set_error (EINVAL, "chunk %" PRIu64 " is held by %" PRIu32
                    " transactions, but its count is %" PRIu32, c, count[c],
                    t->live[c]);
      return -1;
    }
    if (t->live[c] == 0 && b) {
      rb_set_error (EINVAL, "chunk %" PRIu64 " is held by no transaction "
                    "but %" PRIu64 " of its sectors count in flight", c, b);
      return -1;
    }
    chunks += t->live[c] != 0;
    bits += b;
  }
  if (chunks != rb->inflight_chunks ||
      bits << t->unit_shift != rb->inflight_bytes) {
    rb_set_error (EINVAL, "the transactions hold %" PRIu64 " chunks and %"
                  PRIu64 " sectors of %u bytes, but inflight_chunks is %"
                  PRIu64 " and inflight_bytes %" PRIu64, chunks, bits,
                  1u << t->unit_shift, rb->inflight_chunks,
                  rb->inflight_bytes);
    return -1;
  }
  return 0;
}

uint64_t
rbi_txn_max_chunks (struct rb *rb)
{
  struct rb_txns *t = rb->txns;

  return t->capacity > RBJ_TXN_FIXED
    ? (t->capacity - RBJ_TXN_FIXED) / t->per_chunk : 0;
}

void
rbi_txn_close (struct rb *rb, bool clean)
{
  struct rb_txns *t = rb->txns;
  struct txn *x, *next;

  if (t == NULL)
    return;
  if (t->j && rbj_close (t->j, clean && t->q_head == NULL &&
                         t->retry == NULL) == -1)
    rb_warn ("%s", rb_get_error ());
  txn_free (t, t->retry);
  for (x = t->q_head; x; x = next) {
    next = x->next;
    txn_free (rb->txns, x);
  }
  rb_store_close (t->jstore);
  rb_rwlock_destroy (&t->gate);
  buf_drop_spare (t);
  rb_mutex_destroy (&t->cap_lock);
  rb_mutex_destroy (&t->spare_lock);
  rb_mutex_destroy (&t->held_lock);
  rb_cond_destroy (&t->applier_cond);
  free (t->pending);
  free (t->seen);
  free (t->live);
  free (t->held);
  free (t->redo);
  free (t);
  rb->txns = NULL;
}

/* ---- the write path ---- */

/* The most journal the next commit point can take (without its fixed
 * cost): a chunk and an extent per dirty chunk, or, with sector bits,
 * a sector and an extent per bit set (every data extent holds at least
 * one) plus an extent per dirty chunk (the zero extents), whichever is
 * less.
 */
static uint64_t
dirty_est (struct rb *rb)
{
  struct rb_txns *t = rb->txns;
  uint64_t dirty = chunkmap_dirty (&rb->map), est = dirty * t->per_chunk;

  if (rb->map.sect)
    est = RB_MIN (est, chunkmap_sectors_set (&rb->map) *
                  ((UINT64_C (1) << t->unit_shift) + RBJ_EXTENT_BYTES) +
                  dirty * RBJ_EXTENT_BYTES);
  return est;
}

static uint64_t
pending_est (struct rb *rb)
{
  struct rb_txns *t = rb->txns;

  return rb_atomic_load (&t->jused) + dirty_est (rb) +
    rb_atomic_load (&t->reserved);
}

/* Writers wait: commit now, and put in place now; with 'all' (they
 * wait for the store, for journal space or for RAM), everything,
 * nothing left to newer transactions ("Deferred sectors").
 */
static void
hurry_locked (struct rb *rb, bool all)
{
  struct rb_txns *t = rb->txns;

  t->commit_now = t->apply_now = true;
  if (all)
    t->apply_all = true;
  rb_cond_signal (&rb->flusher_cond);
  rb_cond_signal (&t->applier_cond);
}

static void
txn_hurry (struct rb *rb, bool all)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  hurry_locked (rb, all);
}

/* Copy the data of x that lies in chunk c from RAM into x's buffer
 * (a run may cover several chunks, and a chunk hold several runs).
 * cap_lock held, c pending.
 */
static void
copy_chunk (struct rb *rb, struct txn *x, uint64_t c)
{
  uint64_t cs = rbi_chunk_offset (rb, c), ce = cs + rbi_chunks_bytes (rb, c, 1);
  size_t lo = 0, hi = x->nruns;

  while (hi - lo > 1) {         /* the last run starting at or before cs */
    size_t mid = (lo + hi) / 2;
    if (x->runs[mid].off <= cs)
      lo = mid;
    else
      hi = mid;
  }
  for (; lo < x->nruns && x->runs[lo].off < ce; lo++) {
    const struct txn_run *r = &x->runs[lo];
    uint64_t a = RB_MAX (r->off, cs), b = RB_MIN (r->off + r->len, ce);

    if (r->kind == CS_DIRTY && a < b)
      memcpy (x->buf + r->buf_off + (a - r->off), rb->ram.base + a, b - a);
  }
}

static int
txn_write_begin (struct rb *rb, uint64_t c0, uint64_t c1,
                 uint64_t *reserved)
{
  struct rb_txns *t = rb->txns;
  uint64_t est = (c1 - c0 + 1) * t->per_chunk, c;

  if (est + RBJ_TXN_FIXED > t->capacity) {
    rb_set_error (EINVAL, "a write of %" PRIu64 " chunks needs up to %"
                  PRIu64 " bytes of journal, more than journal=%s holds (%"
                  PRIu64 "): use a larger journal, or smaller requests",
                  c1 - c0 + 1, est + RBJ_TXN_FIXED, rb->cfg.journal,
                  t->capacity);
    return -1;
  }
  if (pending_est (rb) + est + RBJ_TXN_FIXED > t->capacity) {
    rb_atomic_add (&rb->throttled, 1);
    rb_atomic_add (&t->admit_waiters, 1);
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
      while (!rb->stopping &&
             pending_est (rb) + est + RBJ_TXN_FIXED > t->capacity) {
        hurry_locked (rb, true);
        rb_cond_wait (&rb->space_cond, &rb->lock);
      }
    }
    rb_atomic_sub (&t->admit_waiters, 1);
  }
  rb_atomic_add (&t->reserved, est);
  *reserved = est;

  rb_rwlock_rdlock (&t->gate);
  /* Copy on write: chunks of the transaction being captured are copied
   * into it before RAM changes.
   */
  for (c = c0; c <= c1; c++) {
    if (!bit_test (t->pending, c))
      continue;
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&t->cap_lock);
    if (bit_test (t->pending, c)) {
      copy_chunk (rb, t->capturing, c);
      bit_clear (t->pending, c);
    }
  }
  return 0;
}

static void
txn_write_end (struct rb *rb, uint64_t reserved)
{
  struct rb_txns *t = rb->txns;

  rb_rwlock_unlock (&t->gate);
  rb_atomic_sub (&t->reserved, reserved);
  /* The first write after a commit point starts the commit interval.
   * The committer is not woken for it: it wakes at least once an
   * interval (should_commit_locked), before this write's deadline.
   */
  if (rb_atomic_load (&t->admit_waiters) ||
      !rb_atomic_load (&t->dirty_since)) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    if (t->dirty_since == 0 && chunkmap_dirty (&rb->map) > 0)
      rb_atomic_store (&t->dirty_since, rb_now_ns ());
    rb_cond_broadcast (&rb->space_cond);
  }
}

static void
txn_request_commit (struct rb *rb)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  rb->txns->commit_now = true;
  rb_cond_signal (&rb->flusher_cond);
}

static int
txn_wait_applied (struct rb *rb, uint64_t deadline, const char *what)
{
  struct rb_txns *t = rb->txns;
  uint64_t ticket;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  if (!rb->flusher_running) {
    rb_set_error (rb->stopping ? ESHUTDOWN : EINVAL,
                  "%s: the journal's committer is not running", what);
    return -1;
  }
  ticket = ++rb->sync_requested;
  hurry_locked (rb, true);
  while (t->applied_target < ticket && rb->sync_failed < ticket &&
         t->apply_failed < ticket) {
    /* A pass that took its list before this wait began may leave
     * sectors to newer transactions and answer nothing: the next one
     * then keeps nothing back.
     */
    if (!t->apply_all) {
      t->apply_now = t->apply_all = true;
      rb_cond_signal (&t->applier_cond);
    }
    if (!rb_cond_wait_until (&rb->sync_cond, &rb->lock, deadline)) {
      rb_set_error (ETIMEDOUT, "%s: not in place on the backing store "
                    "yet (write back continues)", what);
      return -1;
    }
  }
  if (t->applied_target >= ticket)
    return 0;
  if (rb->sync_failed >= ticket) {
    rb_set_error (rb->sync_errno ? rb->sync_errno : EIO, "%s: the "
                  "transaction holding the data could not be committed "
                  "(the data is kept in RAM and will be retried)", what);
    return -1;
  }
  rb_set_error (t->apply_errno ? t->apply_errno : EIO, "%s: the backing "
                "store failed to take the transaction holding the data (it "
                "is committed in the journal and is written in place when "
                "the store is back)", what);
  return -1;
}

/* ---- commit points (the committer) ---- */

/* Room for one more element in the array V of N elements of SIZE
 * bytes, allocated for *CAP: doubles it when full.  Returns the array
 * (moved, perhaps), or NULL when out of memory (V is left as it was).
 */
static void *
grow (void *v, size_t *cap, size_t n, size_t size)
{
  if (n == *cap) {
    size_t c = *cap ? *cap * 2 : 16;
    void *nv = realloc (v, c * size);
    if (nv == NULL)
      return NULL;
    *cap = c;
    return nv;
  }
  return v;
}

static int
add_run (struct txn *x, uint64_t off, uint64_t len, enum chunk_state kind)
{
  struct txn_run *v = grow (x->runs, &x->cap, x->nruns, sizeof *v);

  if (v == NULL)
    return -1;
  x->runs = v;
  x->runs[x->nruns++] = (struct txn_run) { off, len, kind, 0 };
  return 0;
}

static int
add_chunks (struct txn *x, uint64_t first, uint64_t n, enum chunk_state kind)
{
  struct txn_chunks *v = grow (x->cruns, &x->ccap, x->ncruns, sizeof *v);

  if (v == NULL)
    return -1;
  x->cruns = v;
  x->cruns[x->ncruns++] = (struct txn_chunks) { first, n, kind };
  x->chunks += n;
  return 0;
}

/* Add the data bytes [off, off+len) (clipped to the device): to the
 * last run if they follow it and it has room, else as a new run.
 */
static int
add_data (struct rb *rb, struct txn *x, uint64_t off, uint64_t len)
{
  struct txn_run *last = x->nruns ? &x->runs[x->nruns - 1] : NULL;

  if (off >= rb->size)
    return 0;
  len = RB_MIN (len, rb->size - off);
  if (last && last->kind == CS_DIRTY && last->off + last->len == off &&
      last->len + len <= RB_MAX_STORE_IO)
    last->len += len;
  else {
    if (add_run (x, off, len, CS_DIRTY) == -1)
      return -1;
    x->runs[x->nruns - 1].buf_off = x->data_bytes;
  }
  x->data_bytes += len;
  return 0;
}

/* The data runs of DIRTY chunk c: its dirty sectors (chunkmap.h), in
 * runs, coalesced with the chunks before it; the whole chunk without
 * sector bits.  A DIRTY chunk with no bit set holds nothing the store
 * lacks (chunkmap.h) and adds no data (dirty_est counts on that).  The
 * bits are only read here (the gate is held exclusively, so no writer
 * changes them): take_chunks clears them once the transaction is sure
 * to go ahead.
 */
static int
collect_sectors (struct rb *rb, struct txn *x, uint64_t c)
{
  unsigned shift = rb->map.sect_per_chunk_shift, us = rb->txns->unit_shift;
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

  if (rb->map.sect == NULL)
    return add_data (rb, x, rbi_chunk_offset (rb, c),
                     rbi_chunks_bytes (rb, c, 1));
  while (s < end) {
    unsigned n = RB_MIN (end - s, 64 - s % 64);
    uint64_t b = chunkmap_peek_bits (&rb->map, s, n);

    while (b) {
      unsigned lo = rb_ctz64 (b), len;
      uint64_t v = b >> lo;

      len = v == ~UINT64_C (0) ? 64 - lo : rb_ctz64 (~v);
      if (add_data (rb, x, (s + lo) << us, (uint64_t) len << us) == -1)
        return -1;
      b = lo + len >= 64 ? 0 : b & (~UINT64_C (0) << (lo + len));
    }
    s += n;
  }
  return 0;
}

/* Every dirty chunk: the runs of chunks (x->cruns), and the extents to
 * journal (x->runs): the dirty sectors of DIRTY chunks, ZERO chunks
 * whole.  Gate held exclusively.
 */
static int
collect_all (struct rb *rb, struct txn *x)
{
  uint64_t c = 0, i;
  uint64_t per_io = RB_MAX ((uint64_t) RB_MAX_STORE_IO >> rb->chunk_shift,
                            UINT64_C (1));

  for (;;) {
    enum chunk_state st;
    uint64_t n;

    c = chunkmap_next (&rb->map, c, CS_ANY_DIRTY);
    if (c == UINT64_MAX || c >= rb->nchunks)
      break;
    st = chunkmap_get (&rb->map, c);
    if (st != CS_DIRTY && st != CS_ZERO) {
      c++;
      continue;
    }
    n = chunkmap_run (&rb->map, c, per_io, CS_BIT (st));
    if (n == 0) {
      c++;
      continue;
    }
    if (add_chunks (x, c, n, st) == -1)
      return -1;
    if (st == CS_ZERO) {
      if (add_run (x, rbi_chunk_offset (rb, c), rbi_chunks_bytes (rb, c, n),
                   CS_ZERO) == -1)
        return -1;
    }
    else
      for (i = 0; i < n; i++)
        if (collect_sectors (rb, x, c + i) == -1)
          return -1;
    c += n;
  }
  return 0;
}

/* Transaction x at its commit point holds its chunks (see "Held
 * chunks" at the top): it joins t->holders, their counts rise, and the
 * sectors it takes join their held bits, before the chunks leave DIRTY
 * or ZERO and before their sector bits are taken (the gate is held
 * exclusively: no writer sets bits meanwhile).  One step under
 * held_lock: a release that recomputes a chunk's bits from the holders
 * (release_chunks) sees x hold all of its chunks or none.
 */
static void
hold_chunks (struct rb *rb, struct txn *x)
{
  struct rb_txns *t = rb->txns;
  unsigned shift = rb->chunk_shift - t->unit_shift;
  /* The sectors of the device: a bit past its end (the last chunk's)
   * holds nothing, and x's runs end at the device's end (add_data).
   */
  uint64_t nsect = ((rb->size - 1) >> t->unit_shift) + 1;
  uint64_t c, chunks = 0, added = 0;
  size_t i;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&t->held_lock);

  x->held_from = 0;
  x->hnext = t->holders;
  x->hprev = &t->holders;
  if (t->holders)
    t->holders->hprev = &x->hnext;
  t->holders = x;
  for (i = 0; i < x->ncruns; i++) {
    const struct txn_chunks *r = &x->cruns[i];

    for (c = r->first; c < r->first + r->n; c++) {
      uint64_t s = c << shift;
      uint64_t end = RB_MIN (s + (UINT64_C (1) << shift), nsect);

      if (rb_atomic_add (&t->live[c], 1) == 1)
        chunks++;
      if (r->kind == CS_ZERO || rb->map.sect == NULL) {
        uint64_t b = UINT64_C (1) << (s % 64);    /* weighs a sector */
        if (!(t->held[s / 64] & b)) {
          t->held[s / 64] |= b;
          added++;
        }
        continue;
      }
      while (s < end) {
        unsigned n = RB_MIN (end - s, 64 - s % 64);
        uint64_t b = chunkmap_peek_bits (&rb->map, s, n) << (s % 64);

        added += rb_popcount64 (b & ~t->held[s / 64]);
        t->held[s / 64] |= b;
        s += n;
      }
    }
  }
  rb_atomic_add (&rb->inflight_chunks, chunks);
  rb_atomic_add (&rb->inflight_bytes, added << t->unit_shift);
}

/* The first chunk in [c, end) whose bit is set in bits, or end. */
static uint64_t
next_bit (const uint64_t *bits, uint64_t c, uint64_t end)
{
  while (c < end) {
    uint64_t w = bits[c / 64] >> (c % 64);

    if (w)
      return RB_MIN (c + rb_ctz64 (w), end);
    c = (c / 64 + 1) * 64;
  }
  return end;
}

/* Set in 'bits' (per sector, as t->held) what x holds of chunks
 * [a, b), as hold_chunks took it: the sectors of its data runs; a ZERO
 * chunk (or, without sector bits, any chunk) its first sector.  With
 * 'only' (per chunk), in the chunks whose bit is set there only.  x's
 * runs are in offset order and do not overlap (collect_all): the first
 * in range is found by bisection, so the cost is what x holds in the
 * range, not all it holds.  held_lock held (x->runs are fixed from the
 * commit point on).
 */
static void
held_of (struct rb *rb, const struct txn *x, uint64_t a, uint64_t b,
         uint64_t *bits, const uint64_t *only)
{
  struct rb_txns *t = rb->txns;
  unsigned us = t->unit_shift, shift = rb->chunk_shift - us;
  uint64_t from = rbi_chunk_offset (rb, a);
  size_t lo = 0, hi = x->nruns, i;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;

    if (x->runs[mid].off + x->runs[mid].len <= from)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (i = lo; i < x->nruns; i++) {
    const struct txn_run *r = &x->runs[i];
    uint64_t c = rbi_chunk_of (rb, r->off);
    uint64_t ce = RB_MIN (rbi_chunk_of (rb, r->off + r->len - 1) + 1, b);
    uint64_t s0 = r->off >> us, s1 = ((r->off + r->len - 1) >> us) + 1;
    bool first_only = r->kind == CS_ZERO || rb->map.sect == NULL;

    if (c >= b)
      break;
    for (c = RB_MAX (c, a); c < ce; c++) {
      uint64_t s, end;

      if (only && (c = next_bit (only, c, ce)) == ce)
        break;
      s = c << shift;
      if (first_only) {
        bits[s / 64] |= UINT64_C (1) << (s % 64);
        continue;
      }
      end = RB_MIN (s1, s + (UINT64_C (1) << shift));
      for (s = RB_MAX (s0, s); s < end; ) {
        unsigned n = RB_MIN (end - s, 64 - s % 64);

        bits[s / 64] |= chunkmap_bit_range (s % 64, n);
        s += n;
      }
    }
  }
}

/* The commit point proper, for the collected chunks: each moves to
 * CLEAN (NB set first with resume), its sector bits are cleared, and,
 * with 'pend' (the transaction goes ahead), a DIRTY one becomes
 * pending.  The gate held exclusively keeps writers out, so no bit set
 * by a write that is not in x is cleared here (a writer sets its bits
 * and moves its chunks to DIRTY inside the gate); a ZERO chunk's bits
 * are cleared too (they are stale: x writes it whole), unlike the
 * plain flusher's, which races with writers.
 */
static void
take_chunks (struct rb *rb, struct txn *x, bool pend)
{
  struct rb_txns *t = rb->txns;
  unsigned shift = rb->map.sect_per_chunk_shift;
  size_t i;

  if (pend)                     /* before CLEAN: see the top */
    hold_chunks (rb, x);
  for (i = 0; i < x->ncruns; i++) {
    const struct txn_chunks *r = &x->cruns[i];
    uint64_t c;

    if (rb->nb)
      rbi_nb_set (rb, r->first, r->n);
    chunkmap_move (&rb->map, r->first, r->n, CS_BIT (r->kind), CS_CLEAN,
                   NULL);
    for (c = r->first; c < r->first + r->n; c++) {
      uint64_t took = 1;

      if (rb->map.sect) {
        uint64_t s = c << shift, end = s + (UINT64_C (1) << shift);

        took = 0;
        while (s < end) {
          unsigned n = RB_MIN (end - s, 64 - s % 64);
          took |= chunkmap_take_bits (&rb->map, s, n);
          s += n;
        }
      }
      /* Pending only with data in x: a DIRTY chunk without a bit set
       * has no extent in x (collect_sectors), so no capture would ever
       * clear its bit, and a later write would copy into a capture
       * that has ended.
       */
      if (pend && r->kind == CS_DIRTY && took)
        bit_set (t->pending, c);
    }
  }
}

/* Copy the pending chunks of run i of x from RAM (all of x's data in
 * each, copy_chunk), a batch at a time (a writer waits for cap_lock no
 * longer than one batch).
 */
static void
capture_run (struct rb *rb, struct txn *x, size_t i)
{
  struct rb_txns *t = rb->txns;
  uint64_t batch = RB_MAX (CAPTURE_BATCH_BYTES >> rb->chunk_shift,
                           UINT64_C (1));
  struct txn_run *r = &x->runs[i];
  uint64_t c, end;

  if (r->kind != CS_DIRTY)
    return;
  c = rbi_chunk_of (rb, r->off);
  end = rbi_chunk_of (rb, r->off + r->len - 1) + 1;
  while (c < end) {
    uint64_t stop = RB_MIN (end, c + batch);
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&t->cap_lock);
    for (; c < stop; c++)
      if (bit_test (t->pending, c)) {
        copy_chunk (rb, x, c);
        bit_clear (t->pending, c);
      }
  }
}

/* Capture runs [from, nruns) and end the capture: no chunk is pending
 * any more.
 */
static void
capture_rest (struct rb *rb, struct txn *x, size_t from)
{
  for (; from < x->nruns; from++)
    capture_run (rb, x, from);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->txns->cap_lock);
  rb->txns->capturing = NULL;
}

/* Append x to the journal: a small transaction (an fsync-heavy
 * load's, up to RBJ_WHOLE_MAX of data) is captured first and written
 * in one request with its commit block; a large one streams, each run
 * copied from RAM, then written, while the writers go on (copy on
 * write for the runs not reached yet); then the journal's sync.
 * Returns 0, or -1 with errno: x is then captured whole (no chunk of
 * it pending any more, its buffer holds the device as of its commit
 * point) and is appended again as it is (t->retry).
 */
static int
append (struct rb *rb, struct txn *x)
{
  struct rb_txns *t = rb->txns;
  CLEANUP_FREE struct rbj_extent *ext = NULL;
  uint64_t jlen = x->jlen, pos;
  size_t i;
  int err;

  ext = malloc (x->nruns * sizeof *ext);
  if (ext == NULL) {
    capture_rest (rb, x, 0);
    rb_set_error (ENOMEM, "journal: out of memory");
    errno = ENOMEM;
    return -1;
  }
  for (i = 0; i < x->nruns; i++) {
    struct txn_run *r = &x->runs[i];
    ext[i] = (struct rbj_extent) {
      .offset = r->off,
      .length = r->len,
      .kind = r->kind == CS_DIRTY ? RBJ_DATA : RBJ_ZERO,
      .data = r->kind == CS_DIRTY ? x->buf + r->buf_off : NULL,
    };
  }
  x->seq = rbj_next_seq (t->j);
  if (rbj_begin (t->j, x->nruns, x->data_bytes, &pos) == -1) {
    i = 0;
    goto failed;
  }
  if (x->data_bytes <= RBJ_WHOLE_MAX) {
    capture_rest (rb, x, 0);
    if (rbj_commit_whole (t->j, ext, x->nruns, &x->jstart,
                          &x->jlen) == -1) {
      i = x->nruns;
      goto failed;
    }
  }
  else {
    for (i = 0; i < x->nruns; i++) {
      if (x->runs[i].kind != CS_DIRTY)
        continue;
      capture_run (rb, x, i);
      if (rbj_write (t->j, pos, ext[i].data, ext[i].length) == -1) {
        i++;
        goto failed;
      }
      pos += ext[i].length;
    }
    capture_rest (rb, x, x->nruns);
    if (rbj_commit (t->j, ext, x->nruns, &x->jstart, &x->jlen) == -1) {
      i = x->nruns;
      goto failed;
    }
  }
  /* What the journal actually took (never more than reserved). */
  rb_atomic_sub (&t->jused, jlen - x->jlen);
  return 0;

 failed:
  err = errno;
  capture_rest (rb, x, i);
  x->jlen = jlen;
  errno = err;
  return -1;
}

/* x is committed: count it, retire its chunks' NB bits, and queue it
 * for the applier.
 */
static void
committed (struct rb *rb, struct txn *x)
{
  struct rb_txns *t = rb->txns;
  size_t i;

  rb_atomic_add (&t->commits, 1);
  rb_atomic_add (&t->data_bytes, x->data_bytes);
  rb_atomic_store (&t->last_commit_ns, rb_now_ns ());
  rb_atomic_store (&t->last_commit_wall, wall_ns ());

  /* Committed: the journal replays it after a crash, so a resumed RAM
   * image need not rewrite its chunks (nothing newer was taken since).
   */
  if (rb->nb) {
    struct rb_extents ex = { 0 };
    ex.v = malloc (x->ncruns * sizeof *ex.v);
    if (ex.v) {
      for (i = 0; i < x->ncruns; i++)
        ex.v[i] = (struct rb_extent) {
          rbi_chunk_offset (rb, x->cruns[i].first),
          rbi_chunks_bytes (rb, x->cruns[i].first, x->cruns[i].n)
        };
      ex.len = x->ncruns;
      rbi_nb_retire (rb, &ex);
      free (ex.v);
    }
  }
  if (rbi_tracing (rb))
    rb_log ("journal: committed transaction %" PRIu64 ": %zu runs, %"
            PRIu64 " bytes of data", x->seq, x->nruns, x->data_bytes);

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    bool was_empty = t->q_head == NULL;

    if (was_empty)
      t->queued_since = rb_now_ns ();
    *t->q_tail = x;
    t->q_tail = &x->next;
    /* Wake the applier only for what it waits on (applier_main): a
     * queue that was empty, or a quarter of the journal used; not for
     * every commit while it lets them pile up.
     */
    if (was_empty || rb_atomic_load (&t->jused) >= t->capacity / 4)
      rb_cond_signal (&t->applier_cond);
  }
}

/* The append of x failed: it is kept, whole, for the next commit to
 * append first (t->retry).  The committer retries it at the end of the
 * interval, or a FLUSH does.
 */
static int
append_failed (struct rb *rb, struct txn *x)
{
  struct rb_txns *t = rb->txns;
  int err = errno ? errno : EIO;

  t->retry = x;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    if (t->dirty_since == 0)
      rb_atomic_store (&t->dirty_since, rb_now_ns ());
  }
  rbi_record_error (rb, err, rb_get_error ());
  errno = err;
  return -1;
}

/* A commit point, capture, append.  Returns 0 (committed, or nothing
 * to commit), 1 (no room in the journal yet: wait for the applier), or
 * -1 with errno.  A transaction whose append failed earlier is appended
 * first, as it is: its commit point comes before the new one.
 */
static int
commit_one (struct rb *rb, uint64_t target)
{
  struct rb_txns *t = rb->txns;
  struct txn *x;
  uint64_t free_bytes;

  if (t->retry) {
    x = t->retry;
    t->retry = NULL;
    if (append (rb, x) == -1)
      return append_failed (rb, x);
    committed (rb, x);
  }

  x = calloc (1, sizeof *x);
  if (x == NULL)
    return -1;
  x->target = target;

  rb_rwlock_wrlock (&t->gate);
  if (chunkmap_dirty (&rb->map) > 0) {
    if (collect_all (rb, x) == -1)
      goto nomem;
    if (x->nruns == 0) {
      /* Only DIRTY chunks without a sector bit set: they hold nothing
       * new (collect_sectors), and a transaction without extents would
       * read as the end of the journal: they just become CLEAN.
       */
      take_chunks (rb, x, false);
      x->ncruns = 0;
      x->chunks = 0;
    }
  }
  if (x->nruns == 0) {
    rb_rwlock_unlock (&t->gate);
    buf_drop_spare (t);
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_atomic_store (&t->dirty_since, 0);
    /* Nothing new: what the tickets cover is committed already.  A
     * writethrough waiter also needs it applied: an empty transaction
     * tells the applier, in order.  No haste for it: a waiter asks for
     * that itself (txn_wait_applied), and a FLUSH with nothing new
     * needs none.
     */
    if (target > t->applied_target) {
      if (t->q_head == NULL)
        t->queued_since = rb_now_ns ();
      *t->q_tail = x;
      t->q_tail = &x->next;
      rb_cond_signal (&t->applier_cond);
    }
    else
      txn_free (rb->txns, x);
    return 0;
  }
  x->jlen = rbj_txn_bytes (x->nruns, x->data_bytes);
  free_bytes = t->capacity - rb_atomic_load (&t->jused);
  if (x->jlen > free_bytes) {
    rb_rwlock_unlock (&t->gate);
    if (x->jlen > t->capacity)
      rb_warn ("journal: the dirty data (%" PRIu64 " bytes in the journal) "
               "does not fit in journal=%s (%" PRIu64 " bytes)", x->jlen,
               rb->cfg.journal, t->capacity);
    txn_free (rb->txns, x);
    return 1;
  }
  if (x->data_bytes &&
      (x->buf = buf_get (t, x->data_bytes, &x->buf_cap)) == NULL)
    goto nomem;
  /* take_chunks counts a chunk in flight (if no older transaction
   * does yet) before it leaves DIRTY: the dirty limit's sum (io.c)
   * never dips below what RAM holds meanwhile, so no writer passes the
   * throttle on a dip.
   */
  take_chunks (rb, x, true);
  rb_atomic_add (&t->jused, x->jlen);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&t->cap_lock);
    t->capturing = x;
  }
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_atomic_store (&t->dirty_since, 0);
  }
  rb_rwlock_unlock (&t->gate);

  if (append (rb, x) == -1)
    return append_failed (rb, x);
  committed (rb, x);
  return 0;

 nomem:
  rb_rwlock_unlock (&t->gate);
  txn_free (rb->txns, x);
  rb_set_error (ENOMEM, "journal: out of memory for a transaction");
  errno = ENOMEM;
  return -1;
}

static void apply_list (struct rb *rb, struct txn *list,
                        const struct txn *keep, size_t nkeep);
static struct txn *take_queue_locked (struct rb_txns *t);

static bool
should_commit_locked (struct rb *rb, uint64_t *deadline)
{
  struct rb_txns *t = rb->txns;
  uint64_t now = rb_now_ns ();

  /* Idle, the committer still wakes once an interval: a write that
   * starts the interval meanwhile (txn_write_end does not wake it)
   * has its deadline no earlier than that.
   */
  *deadline = now + t->interval_ns;
  if (rb->stopping || t->commit_now || rb->sync_requested > rb->sync_done)
    return true;
  if (t->dirty_since == 0 && chunkmap_dirty (&rb->map) > 0)
    rb_atomic_store (&t->dirty_since, now);  /* a redirty */
  if (t->dirty_since) {
    *deadline = t->dirty_since + t->interval_ns;
    return now >= *deadline;
  }
  return false;
}

static void *
committer_main (void *arg)
{
  struct rb *rb = arg;
  struct rb_txns *t = rb->txns;
  uint64_t backoff = BACKOFF_MIN_MS;

  for (;;) {
    uint64_t target, deadline;
    int r;

    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
      for (;;) {
        bool go = should_commit_locked (rb, &deadline);
        if (go && !t->committing)
          break;
        if (go) {
          /* A FLUSH commits on its own thread (txn_sync). */
          t->committer_blocked = true;
          rb_cond_wait (&rb->flusher_cond, &rb->lock);
          t->committer_blocked = false;
        }
        else
          rb_cond_wait_until (&rb->flusher_cond, &rb->lock, deadline);
      }
      t->committing = true;
      target = rb->sync_requested;
      t->commit_now = false;
    }
    r = commit_one (rb, target);
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
      t->committing = false;
      if (r == 0) {
        rbi_sync_answer_locked (rb, target, 0);
        backoff = BACKOFF_MIN_MS;
        if (rb->stopping && chunkmap_dirty (&rb->map) == 0)
          break;
        continue;
      }
      if (r == 1 && !t->applier_running) {
        /* Draining on the closing thread (never started): put what is
         * committed in place here; if nothing is, it can never fit.
         */
        struct txn *list = take_queue_locked (t);
        if (list == NULL) {
          rb_warn ("journal: the dirty data does not fit in journal=%s: "
                   "it is not written back", rb->cfg.journal);
          break;
        }
        rb_mutex_unlock (&rb->lock);
        apply_list (rb, list, NULL, 0);
        rb_mutex_lock (&rb->lock);
        continue;
      }
      if (r == 1) {
        /* Wait for the applier to free journal space. */
        t->apply_now = t->apply_all = true;
        rb_cond_signal (&t->applier_cond);
        rb_cond_wait_until (&rb->space_cond, &rb->lock,
                            rb_now_ns () + 100 * UINT64_C (1000000));
        continue;
      }
      rbi_sync_answer_locked (rb, target, errno ? errno : EIO);
      if (rb->stopping)
        rb_warn ("clean stop: the journal cannot take the last %" PRIu64
                 " dirty chunks yet; retrying", chunkmap_dirty (&rb->map));
      {
        uint64_t until = rb_now_ns () + backoff * UINT64_C (1000000);
        backoff = rbi_backoff_next_ms (backoff);
        while (rb_now_ns () < until &&
               rb_cond_wait_until (&rb->flusher_cond, &rb->lock, until))
          ;
      }
    }
  }
  return NULL;
}

/* A FLUSH with fsync=wait (and a FUA write): answered once a commit
 * point after its ticket is committed.  When no commit is in progress
 * the caller makes it on its own thread, at its own priority: no
 * hand-off to the committer and back, which at one FLUSH at a time
 * costs more than the journal's sync on a busy machine.  FLUSHes that
 * come while a commit runs wait for it, and one of them then commits
 * for all (group commit).  If the journal has no room yet, or the
 * server is stopping, the committer thread takes over.
 */
static int
txn_sync (struct rb *rb)
{
  struct rb_txns *t = rb->txns;
  uint64_t ticket;
  bool own = true;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  if (!rb->flusher_running) {
    rb_set_error (rb->stopping ? ESHUTDOWN : EINVAL,
                  "sync: the journal's committer is not running");
    return -1;
  }
  ticket = ++rb->sync_requested;
  while (rb->sync_done < ticket && rb->sync_failed < ticket) {
    uint64_t target;
    int r, err;

    if (!own || t->committing || rb->stopping) {
      rb_cond_wait (&rb->sync_cond, &rb->lock);
      continue;
    }
    t->committing = true;
    target = rb->sync_requested;
    t->commit_now = false;
    rb_mutex_unlock (&rb->lock);
    r = commit_one (rb, target);
    err = errno ? errno : EIO;
    rb_mutex_lock (&rb->lock);
    t->committing = false;
    if (t->committer_blocked)
      rb_cond_signal (&rb->flusher_cond);
    if (r == 0)
      rbi_sync_answer_locked (rb, target, 0);
    else if (r == -1)
      rbi_sync_answer_locked (rb, target, err);
    else {
      /* No room in the journal yet: the committer waits for the
       * applier to free some.
       */
      own = false;
      hurry_locked (rb, true);
    }
  }
  if (rb->sync_done >= ticket)
    return 0;
  rb_set_error (rb->sync_errno ? rb->sync_errno : EIO, "sync: the journal "
                "could not commit the transaction (the data is kept in RAM "
                "and will be retried)");
  return -1;
}

/* ---- in place (the applier) ---- */

static int
cmp_io (const void *a, const void *b)
{
  const struct rb_io *x = a, *y = b;

  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Room for one more request in *io (of *cap). */
static bool
io_room (struct rb_io **io, size_t k, size_t *cap)
{
  if (k == *cap) {
    struct rb_io *n2 = realloc (*io, *cap * 2 * sizeof **io);
    if (n2 == NULL)
      return false;
    *io = n2;
    *cap *= 2;
  }
  return true;
}

/* The sector units [u0, u1) of bytes [off, off+len), as 'seen'
 * numbers them.
 */
static void
run_units (const struct rb_txns *t, uint64_t off, uint64_t len,
           uint64_t *u0, uint64_t *u1)
{
  *u0 = off >> t->unit_shift;
  *u1 = (off + len - 1) / (UINT64_C (1) << t->unit_shift) + 1;
}

/* The I/O that puts the newest version of every sector of the list
 * (oldest first) in place, but for the sectors that one of the nkeep
 * transactions from 'keep' (newer, left queued: see "Deferred
 * sectors") holds: *deferred counts their bytes.  Returns the number
 * of requests in *ios.
 */
static size_t
plan (struct rb *rb, struct txn *list, const struct txn *keep, size_t nkeep,
      struct rb_io **ios, uint64_t *deferred)
{
  struct rb_txns *t = rb->txns;
  struct txn *v[256], *x;
  size_t nt = 0, k = 0, cap = 64, i, r;
  struct rb_io *io = malloc (cap * sizeof *io);
  bool merge;
  unsigned us = t->unit_shift;

  *deferred = 0;
  if (io == NULL)
    return SIZE_MAX;
  for (x = list; x; x = x->next)
    nt++;
  merge = nt > 1 || nkeep > 0;
  /* Newest first: a sector is written from the newest that has it
   * (per sector, not per chunk: two transactions may hold different
   * sectors of one chunk).
   */
  {
    struct txn **order = nt <= 256 ? v : malloc (nt * sizeof *order);
    if (order == NULL) {
      free (io);
      return SIZE_MAX;
    }
    for (i = 0, x = list; x; x = x->next)
      order[nt - 1 - i++] = x;
    for (i = 0; i < nt; i++) {
      x = order[i];
      for (r = 0; r < x->nruns; r++) {
        struct txn_run *run = &x->runs[r];
        uint64_t u, end;

        run_units (t, run->off, run->len, &u, &end);
        while (u < end) {
          uint64_t s, from, to;
          if (merge && bit_test (t->seen, u)) {
            u++;
            continue;
          }
          for (s = u; u < end && !(merge && bit_test (t->seen, u)); u++)
            if (merge)
              bit_set (t->seen, u);
          from = RB_MAX (s << us, run->off);
          to = RB_MIN (u << us, run->off + run->len);
          if (!io_room (&io, k, &cap)) {
            free (io);
            if (order != v)
              free (order);
            return SIZE_MAX;
          }
          io[k++] = (struct rb_io) {
            .op = run->kind == CS_DIRTY ? RB_IO_WRITE : RB_IO_ZERO,
            .buf = run->kind == CS_DIRTY
              ? x->buf + run->buf_off + (from - run->off) : NULL,
            .count = to - from,
            .offset = from,
          };
        }
      }
    }
    if (order != v)
      free (order);
  }
  /* 'seen' holds the list's sectors now.  Those a kept transaction
   * holds leave it (counted once each: the first kept one to hold a
   * sector clears it).
   */
  for (i = 0; i < nkeep; i++, keep = i < nkeep ? keep->next : NULL)
    for (r = 0; r < keep->nruns; r++) {
      const struct txn_run *run = &keep->runs[r];
      uint64_t u, end, from, to;

      run_units (t, run->off, run->len, &u, &end);
      for (; u < end; u++)
        if (bit_test (t->seen, u)) {
          bit_clear (t->seen, u);
          from = RB_MAX (u << us, run->off);
          to = RB_MIN ((u + 1) << us, run->off + run->len);
          *deferred += to - from;
        }
    }
  if (merge) {
    /* Keep of each request the parts still in 'seen' (all of it when
     * nothing was left out), and clear it.
     */
    struct rb_io *out = io;
    size_t n = k, ocap = cap;

    if (*deferred && (out = malloc (ocap * sizeof *out)) == NULL) {
      free (io);
      return SIZE_MAX;
    }
    k = 0;
    for (i = 0; i < n; i++) {
      const struct rb_io q = io[i];
      uint64_t u, end;

      run_units (t, q.offset, q.count, &u, &end);

      if (out == io) {
        for (; u < end; u++)
          bit_clear (t->seen, u);
        out[k++] = q;
        continue;
      }
      while (u < end) {
        uint64_t s, from, to;

        if (!bit_test (t->seen, u)) {
          u++;
          continue;
        }
        for (s = u; u < end && bit_test (t->seen, u); u++)
          bit_clear (t->seen, u);
        from = RB_MAX (s << us, q.offset);
        to = RB_MIN (u << us, q.offset + q.count);
        if (!io_room (&out, k, &ocap)) {
          free (out);
          free (io);
          return SIZE_MAX;
        }
        out[k++] = (struct rb_io) {
          .op = q.op,
          .buf = q.buf ? (uint8_t *) q.buf + (from - q.offset) : NULL,
          .count = to - from,
          .offset = from,
        };
      }
    }
    if (out != io) {
      free (io);
      io = out;
    }
  }
  qsort (io, k, sizeof *io, cmp_io);
  *ios = io;
  return k;
}

/* How many of chunk c's held bits are set; with 'clear', cleared.
 * held_lock held.
 */
static uint64_t
held_count (struct rb_txns *t, uint64_t c, unsigned shift, bool clear)
{
  uint64_t s = c << shift, end = s + (UINT64_C (1) << shift), n = 0;

  while (s < end) {
    unsigned k = RB_MIN (end - s, 64 - s % 64);
    uint64_t m = chunkmap_bit_range (s % 64, k);

    n += rb_popcount64 (t->held[s / 64] & m);
    if (clear)
      t->held[s / 64] &= ~m;
    s += k;
  }
  return n;
}

/* The chunks [c0, c1) of the transactions of list are in place and
 * synced: their counts fall (see the top), and those that no
 * transaction holds any more leave the dirty limit's count (and may be
 * evicted).  A chunk that a newer transaction still holds keeps in its
 * bits what the holders left hold of it, no more: its bits are
 * cleared, marked in t->redo, and set again from one pass over the
 * other holders' runs in [c0, c1) (held_of), all in one step under
 * held_lock, so inflight_bytes changes once, by what the release
 * takes off.  (Kept whole while any transaction held the chunk, its
 * bits grew to every sector ever taken from a chunk that an
 * fsync-heavy load kept rewriting, and filled the dirty limit.)
 */
static void
release_chunks (struct rb *rb, struct txn *list, uint64_t c0, uint64_t c1)
{
  struct rb_txns *t = rb->txns;
  unsigned shift = rb->chunk_shift - t->unit_shift;
  struct txn *x;
  uint64_t c, freed = 0, dropped = 0, kept = 0, redo = 0;
  size_t i;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&t->held_lock);
    for (x = list; x; x = x->next) {
      x->held_from = RB_MAX (x->held_from, c1);
      for (i = 0; i < x->ncruns; i++) {
        uint64_t a = RB_MAX (x->cruns[i].first, c0);
        uint64_t b = RB_MIN (x->cruns[i].first + x->cruns[i].n, c1);

        for (c = a; c < b; c++) {
          bool last = rb_atomic_sub (&t->live[c], 1) == 0;

          freed += last;
          if ((t->redo[c / 64] >> (c % 64)) & 1)
            continue;           /* cleared already */
          dropped += held_count (t, c, shift, true);
          if (!last) {
            t->redo[c / 64] |= UINT64_C (1) << (c % 64);
            redo++;
          }
        }
      }
    }
    if (redo) {
      /* The holders left (the list's hold nothing below c1 now). */
      for (x = t->holders; x; x = x->hnext)
        if (x->held_from < c1)
          held_of (rb, x, RB_MAX (c0, x->held_from), c1, t->held, t->redo);
      for (x = list; x; x = x->next)
        for (i = 0; i < x->ncruns; i++) {
          uint64_t a = RB_MAX (x->cruns[i].first, c0);
          uint64_t b = RB_MIN (x->cruns[i].first + x->cruns[i].n, c1);

          for (c = a; c < b; c++)
            if ((t->redo[c / 64] >> (c % 64)) & 1) {
              t->redo[c / 64] &= ~(UINT64_C (1) << (c % 64));
              kept += held_count (t, c, shift, false);
            }
        }
    }
    if (c1 >= rb->nchunks)
      for (x = list; x; x = x->next)
        if (x->hprev) {
          *x->hprev = x->hnext;
          if (x->hnext)
            x->hnext->hprev = x->hprev;
          x->hnext = NULL;
          x->hprev = NULL;
        }
    /* kept <= dropped: a recomputed chunk holds a subset of what it
     * held.
     */
    rb_atomic_sub (&rb->inflight_bytes, (dropped - kept) << t->unit_shift);
  }
  if (freed) {
    rb_atomic_sub (&rb->inflight_chunks, freed);
    rbi_slots_notify (rb);
  }
  /* Writers wait at the dirty limit (rbi_throttle) for either. */
  if (freed || dropped > kept) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_cond_broadcast (&rb->space_cond);
  }
}

/* Sync the backing store after in-place writes.  Under the core's
 * sync_lock, as every sync of the backing store: a store that reports
 * a loss (a lost NBD connection with unflushed writes) to one flush
 * only must report it to a sync that acts on it.  (The applier holds
 * no range lock here: sync_lock first is the core's order.)
 */
static int
apply_sync (struct rb *rb)
{
  int r;

  rb_mutex_lock (&rb->sync_lock);
  r = rb->store->ops->flush (rb->store);
  rb_mutex_unlock (&rb->sync_lock);
  if (r == -1) {
    int err = errno ? errno : EIO;
    rb_atomic_add (&rb->sync_errors, 1);
    rb_atomic_store (&rb->store_failing, true);
    rbi_record_error (rb, err, rb_get_error ());
    errno = err;
    return -1;
  }
  rb_atomic_add (&rb->syncs, 1);
  return 0;
}

/* Write the list in place and sync.  The requests go in offset order,
 * in segments of about an eighth of the dirty limit (when there is
 * one), each synced on its own: the chunks below the next segment are
 * then in place and synced for every transaction of the list, and are
 * released at once (*released: the chunks below it are), not when the
 * last request of the pass is.  A pass over a slow backing store takes
 * seconds, and its chunks count against the dirty limit until they
 * are released.
 */
static int
apply (struct rb *rb, struct txn *list, const struct txn *keep, size_t nkeep,
       uint64_t *bytes, uint64_t *zeroed, uint64_t *released,
       uint64_t *deferred)
{
  CLEANUP_FREE struct rb_io *io = NULL;
  size_t k = plan (rb, list, keep, nkeep, &io, deferred), i, n, e;
  uint64_t seg = rb_atomic_load (&rb->dirty_limit) / 8, segb = 0;

  if (k == SIZE_MAX) {
    rb_set_error (ENOMEM, "journal: out of memory to write in place");
    return -1;
  }
  if (k == 0)
    return 0;
  if (seg)
    seg = RB_MAX (seg, (uint64_t) rb->chunk_size);
  for (i = 0; i < k; i += n) {
    for (n = 0; i + n < k && n < APPLY_BATCH; ) {
      segb += io[i + n++].count;
      if (seg && segb >= seg)
        break;
    }
    if (rb->store->ops->submit (rb->store, io + i, n) == -1) {
      int err = errno ? errno : EIO;
      char msg[200];
      for (e = i; e < i + n && io[e].err == 0; e++)
        ;
      snprintf (msg, sizeof msg, "write in place of %" PRIu64 " bytes at %"
                PRIu64 ": %s", e < i + n ? io[e].count : 0,
                e < i + n ? io[e].offset : 0, rb_strerror (err));
      rb_atomic_store (&rb->store_failing, true);
      rbi_record_error (rb, err, msg);
      errno = err;
      return -1;
    }
    for (e = i; e < i + n; e++) {
      *bytes += io[e].count;
      if (io[e].op == RB_IO_ZERO)
        *zeroed += io[e].count;
    }
    if (seg && segb >= seg && i + n < k) {
      /* Every request of the chunks below the next one is done. */
      uint64_t below = rbi_chunk_of (rb, io[i + n].offset);

      segb = 0;
      if (below > *released) {
        if (apply_sync (rb) == -1)
          return -1;
        release_chunks (rb, list, *released, below);
        *released = below;
      }
    }
  }
  return apply_sync (rb);
}

/* Write a list of committed transactions in place, sync, retire them.
 * Retries (with backoff) until the backing store takes it.  The nkeep
 * transactions from 'keep' are newer ones left queued (see "Deferred
 * sectors"): the sectors they hold are not written.
 */
static void
apply_list (struct rb *rb, struct txn *list, const struct txn *keep,
            size_t nkeep)
{
  struct rb_txns *t = rb->txns;
  uint64_t backoff = BACKOFF_MIN_MS, bytes = 0, t0 = rb_now_ns (), target = 0;
  uint64_t zeroed = 0;          /* of bytes, zero requests */
  uint64_t released = 0;        /* the chunks below are released */
  uint64_t deferred = 0;        /* bytes left to the kept ones */
  struct txn *x, *next;

  /* An old in-place write with an unknown outcome (a lost NBD
   * connection) may land late: once none can, the whole list is
   * written again over whatever did, before it is retired.
   */
  for (x = list; x; x = x->next)
    if (x->target > target)
      target = x->target;
  for (;;) {
    uint64_t until;
    int err = 0;

    if (apply (rb, list, keep, nkeep, &bytes, &zeroed, &released,
               &deferred) == -1)
      err = errno ? errno : EIO;
    else if (!rbj_settle (rb->store))
      break;
    until = rb_now_ns () + backoff * UINT64_C (1000000);
    backoff = rbi_backoff_next_ms (backoff);
    bytes = zeroed = 0;
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    if (err && target > t->apply_failed) {
      /* Writethrough writers waiting for these fail now; the list is
       * retried, so they are not lost (the journal holds them).
       */
      t->apply_failed = target;
      t->apply_errno = err;
      rb_cond_broadcast (&rb->sync_cond);
    }
    while (rb_now_ns () < until &&
           rb_cond_wait_until (&t->applier_cond, &rb->lock, until))
      ;
  }
  if (rbi_tracing (rb)) {
    unsigned n = 0;
    for (x = list; x; x = x->next)
      n++;
    rb_log ("journal: put %u transactions in place: %" PRIu64 " bytes in %"
            PRIu64 " ms; %" PRIu64 " bytes left to %zu newer ones", n, bytes,
            (rb_now_ns () - t0) / 1000000, deferred, nkeep);
  }
  rb_atomic_add (&t->deferred_bytes, deferred);
  if (bytes) {
    rb_atomic_store (&rb->store_failing, false);
    rbi_bw_sample (&rb->flush_bw, bytes, rb_now_ns () - t0);
    rb_atomic_add (&rb->stored_bytes, bytes - zeroed);
    rb_atomic_add (&rb->zeroed_bytes, zeroed);
  }
  /* In place and synced: the rest of the chunks may be evicted, and
   * are no longer in flight once no newer transaction holds them.
   */
  release_chunks (rb, list, released, rb->nchunks);
  for (x = list; x; x = next) {
    next = x->next;
    if (x->jlen) {
      rbj_retire (t->j, x->seq, x->jstart, x->jlen);
      rb_atomic_sub (&t->jused, x->jlen);
      rb_atomic_add (&t->applied, 1);
    }
    txn_free (rb->txns, x);
  }
  rbi_recompute_limit (rb);
  /* ram-size=: what is in place and synced may leave RAM now. */
  rbi_slots_notify (rb);
  rbi_slots_trim (rb);
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  /* With sectors left to a kept transaction the store alone does not
   * hold the list's content: its tickets are applied once the kept ones
   * are (a waiter hurries the next pass, which keeps nothing).
   */
  if (deferred == 0 && target > t->applied_target)
    t->applied_target = target;
  rb_cond_broadcast (&rb->sync_cond);
  rb_cond_broadcast (&rb->space_cond);
}

/* Everything queued, or NULL.  rb->lock held. */
static struct txn *
take_queue_locked (struct rb_txns *t)
{
  struct txn *list = t->q_head;

  t->q_head = NULL;
  t->q_tail = &t->q_head;
  return list;
}

/* Whether the next pass may leave the newest transactions queued (see
 * "Deferred sectors"): nobody waits for the store or for space, no
 * stop, no writethrough, and the journal under DEFER_USED full.
 * rb->lock held.
 */
static bool
may_defer_locked (struct rb *rb)
{
  struct rb_txns *t = rb->txns;

  return !t->apply_all && !t->committer_done && !rb->stopping &&
    rb_atomic_load (&rb->mode) != RB_MODE_WRITETHROUGH &&
    rb_atomic_load (&t->jused) < t->capacity / DEFER_USED;
}

/* The older part of the queue, for a pass that leaves the newest
 * transactions queued (*keep, *nkeep of them): the longest run of them
 * at the queue's end that no pass left queued before and that holds
 * data, at most 1/DEFER_SHARE of the queue's journal bytes; never the
 * whole queue.  (An empty transaction, a FLUSH's with nothing new,
 * holds nothing and may be left too.)  With 'defer' false, or nothing
 * to leave, everything (*nkeep 0).  rb->lock held.
 */
static struct txn *
take_older_locked (struct rb *rb, bool defer, struct txn **keep,
                   size_t *nkeep)
{
  struct rb_txns *t = rb->txns;
  struct txn *x, *cut = NULL, *last = NULL, *list = t->q_head;
  uint64_t total = 0, after = 0;
  size_t n = 0, i, k = 0;

  *keep = NULL;
  *nkeep = 0;
  if (defer)
    for (x = list; x; x = x->next) {
      total += x->jlen;
      n++;
    }
  if (n < 2)
    return take_queue_locked (t);
  /* The cut: the first of the kept ones.  'after' is the journal bytes
   * from x on; x may start the kept run if every one from it is
   * eligible and they hold at most the share.
   */
  after = total;
  for (i = 0, x = list; x; i++, x = x->next) {
    if (x->kept)
      cut = NULL;
    else if (cut == NULL && i > 0 && after > 0 &&
             after <= total / DEFER_SHARE) {
      cut = x;
      k = n - i;
    }
    after -= x->jlen;
  }
  if (cut == NULL)
    return take_queue_locked (t);
  for (x = list; x != cut; x = x->next)
    last = x;
  last->next = NULL;
  t->q_head = cut;
  for (x = cut, i = 0; i < k; i++, x = x->next)
    x->kept = true;
  /* The kept ones wait a delay more for newer commits to join them. */
  t->queued_since = rb_now_ns ();
  *keep = cut;
  *nkeep = k;
  return list;
}

static void *
applier_main (void *arg)
{
  struct rb *rb = arg;
  struct rb_txns *t = rb->txns;

  /* A resumed ram= image over ram-size=: its clean chunks equal the
   * store (the journal was replayed onto it at open).
   */
  rbi_slots_trim (rb);
  for (;;) {
    struct txn *list, *keep;
    size_t nkeep;

    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
      while (t->q_head == NULL && !t->committer_done)
        rb_cond_wait (&t->applier_cond, &rb->lock);
      if (t->q_head == NULL)
        break;
      /* Let commits pile up a moment, unless somebody waits for the
       * in-place writes or the journal fills (see the top).
       */
      while (!t->apply_now && !t->committer_done && !rb->stopping &&
             rb_atomic_load (&t->jused) < t->capacity / 4 &&
             rb_cond_wait_until (&t->applier_cond, &rb->lock,
                                 t->queued_since + APPLY_DELAY_NS))
        ;
      /* Everything committed so far, merged, perhaps without the
       * newest (see the top).
       */
      list = take_older_locked (rb, may_defer_locked (rb), &keep, &nkeep);
      t->apply_now = t->apply_all = false;
    }
    apply_list (rb, list, keep, nkeep);
  }
  return NULL;
}

static void *
committer_thread (void *arg)
{
  rb_thread_background ();
  return committer_main (arg);
}

static void *
applier_thread (void *arg)
{
  rb_thread_background ();
  return applier_main (arg);
}

static int
txn_start (struct rb *rb)
{
  struct rb_txns *t = rb->txns;

  if (rb_thread_create (&t->applier, applier_thread, rb) == -1) {
    rb_set_error (errno, "cannot start the journal's applier thread");
    return -1;
  }
  t->applier_running = true;
  if (rb_thread_create (&rb->flusher, committer_thread, rb) == -1) {
    rb_set_error (errno, "cannot start the journal's committer thread");
    return -1;
  }
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  rb->flusher_running = true;
  return 0;
}

static int
txn_stop (struct rb *rb)
{
  struct rb_txns *t = rb->txns;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb_atomic_store (&rb->stopping, true);
    rb_cond_broadcast (&rb->flusher_cond);
  }
  if (rb->flusher_running)
    rb_thread_join (rb->flusher);
  else
    committer_main (rb);        /* never started: drain on this thread */
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    t->committer_done = true;
    rb_cond_broadcast (&t->applier_cond);
  }
  if (t->applier_running)
    rb_thread_join (t->applier);
  else
    applier_main (rb);
  t->applier_running = false;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->flusher_running = false;
    rbi_sync_answer_locked (rb, rb->sync_requested,
                            chunkmap_dirty (&rb->map) == 0 ? 0 : EIO);
  }
  if (chunkmap_dirty (&rb->map) > 0) {
    rb_set_error (EIO, "%" PRIu64 " dirty chunks were not written back",
                  chunkmap_dirty (&rb->map));
    return -1;
  }
  return 0;
}

/* ---- status ---- */

void
rbi_txn_stats (struct rb *rb, struct rb_stats *st)
{
  struct rb_txns *t = rb->txns;
  uint64_t last;

  if (t == NULL)
    return;
  st->journal = rb->cfg.journal;
  st->journal_size = t->capacity;
  st->journal_used_bytes = rb_atomic_load (&t->jused);
  st->journal_commits = rb_atomic_load (&t->commits);
  st->journal_applied = rb_atomic_load (&t->applied);
  st->journal_data_bytes = rb_atomic_load (&t->data_bytes);
  st->journal_deferred_bytes = rb_atomic_load (&t->deferred_bytes);
  st->journal_replayed = t->replay.txns;
  st->commit_interval = t->interval_ns / 1e9;
  last = rb_atomic_load (&t->last_commit_ns);
  st->last_commit_age = last ? (rb_now_ns () - last) / 1e9 : -1;
  st->last_commit_time = rb_atomic_load (&t->last_commit_wall) / 1e9;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    st->commit_lag = t->dirty_since
      ? (rb_now_ns () - t->dirty_since) / 1e9 : 0;
  }
}

static bool
txn_holds (struct rb *rb, uint64_t c)
{
  struct rb_txns *t = rb->txns;

  return rb_atomic_load (&t->live[c]) != 0;
}

static const struct rb_journal_ops journal_ops = {
  .start = txn_start,
  .stop = txn_stop,
  .write_begin = txn_write_begin,
  .write_end = txn_write_end,
  .request_commit = txn_request_commit,
  .sync = txn_sync,
  .hurry = txn_hurry,
  .wait_applied = txn_wait_applied,
  .holds = txn_holds,
};
