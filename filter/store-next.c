/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback filter: the backing store is the next plugin in nbdkit's chain.
 *
 * Contexts.  Client connections never open a context into the plugin
 * (the filter's .open does not call next_open): clients are served from
 * RAM, and the plugin sees only this store's own contexts.  They are
 * opened in .after_fork with nbdkit_next_context_open (backend, 0, "",
 * shared=1): shared, so that they belong to no client connection and
 * outlive every one of them; after the fork, because a plugin may start
 * threads when it is opened (the nbd plugin does) and threads do not
 * survive nbdkit's fork into the background.  Each is prepared at once
 * and asked every capability once: nbdkit caches them per context and
 * asserts that they were asked before the matching request.  They stay
 * open until the filter's .cleanup, which nbdkit 1.32 calls after every
 * client connection is gone and before the plugin's .cleanup and any
 * .unload: the clean stop's final drain and sync run through them
 * there, then they are finalized and closed (store close).
 *
 * Thread model.  nbdkit enforces the thread model only around client
 * requests (its server/connections.c); calls on manual contexts from
 * threads of our own are not serialised by anybody, so this store does
 * it, from the final thread model given to .get_ready:
 *   - parallel: any number of calls at once, on 'contexts' contexts
 *     (default 1: a parallel plugin needs no more), by up to 'inflight'
 *     worker threads (default 16);
 *   - serialize_requests: one call at a time per context (a mutex each),
 *     so parallelism comes from several contexts (default 4, e.g. four
 *     ssh sessions), one worker each;
 *   - serialize_all_requests / serialize_connections: one context, one
 *     call at a time in all (a global mutex), no workers.
 *
 * Batches.  The core submits batches (a populate batch of up to 8 runs,
 * a write-back batch of up to 32, each up to 8 MiB).  They are cut into
 * pieces of at most PIECE_BYTES (and the plugin's maximum block size)
 * and run in parallel by the calling thread and the workers, which
 * hides the latency of a remote plugin (nbd, ssh) the way store-nbd.c's
 * requests in flight do.  Workers are woken one by one as long as
 * pieces are left and the plugin makes threads wait for it (see
 * worker_main); a plugin that only keeps the CPU busy, like the file
 * plugin writing into the page cache, is driven by the calling thread
 * alone, in pieces of up to SERIAL_PIECE_BYTES (the core's own request
 * size), so write back does not take both CPUs from client requests.
 * A batch of one piece (a demand load, a writethrough write) runs on
 * the calling thread alone.
 * The core never has two overlapping requests in flight unless both
 * are reads or one is a populate read whose data it drops (store.h),
 * so pieces may run in any order.
 *
 * Capabilities, honestly:
 *   - can_write false: the store is read-only; the filter serves a
 *     read-only export.
 *   - can_zero: NATIVE or EMULATE use next->zero (with MAY_TRIM, so a
 *     file keeps its holes); NONE (e.g. the nozero filter's
 *     zeromode=none) writes zeroes from a zeroed buffer.  Only NATIVE,
 *     with can_fast_zero, counts as a cheap zero for the core's
 *     fast-zero rule.
 *   - can_flush false: there is nothing to sync, flush succeeds without
 *     a call, and the filter refuses fsync=wait (no write could ever be
 *     confirmed durable).
 *   - flush covers, with multi-conn, every context from one of them;
 *     without it, every context written since its last flush is flushed
 *     (NBD's rule: a flush covers the writes completed on its own
 *     connection).
 *   - can_extents: next_data() asks next->extents; an extent with
 *     NBDKIT_EXTENT_ZERO reads as zeroes and is skipped by populate (a
 *     HOLE without ZERO, say over a backing file, is read).
 *   - block size: pieces stay within the plugin's maximum; the chunk
 *     size must be a multiple of its minimum.  A request that is not
 *     aligned to the minimum (a writethrough write of a few bytes) is
 *     widened to whole blocks by reading them, patching and writing
 *     them back.  That is safe: the core holds a range over the whole
 *     chunks concerned, so no other request touches those blocks
 *     meanwhile; and a request is cut into pieces at multiples of the
 *     piece size (itself a multiple of the minimum), so its own pieces,
 *     which run in parallel, never share a block either.
 *
 * Liveness: every call into the plugin is listed while it runs
 * (inflight.h), as the NBD and RBD stores list their requests, so a
 * plugin that waits on a server that is gone (the nbd plugin's, an ssh
 * host) shows in status: the calls in flight and the age of the oldest,
 * and state "offline" once that is over RB_INFLIGHT_STALL_MS.  Nothing
 * is failed for being slow: the next batch that completes sets the
 * state again.
 *
 * Errors: the plugin's errno comes back in *err (from our worker
 * threads, which have no nbdkit thread-local state, a plugin that does
 * not preserve errno reports EIO); its own message is in nbdkit's log.
 * Like every store, a failure is returned to the core, which keeps the
 * data dirty, counts it and retries; state goes FAILING on a failed
 * request and back to OK on the next good one.
 *
 * Why one file of over 1,000 lines: the contexts, the thread model's
 * locks and the workers that run pieces share one state and one set of
 * rules (above); split, each part would need all of it.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <nbdkit-filter.h>

#include "cleanup.h"
#include "env.h"
#include "error.h"
#include "inflight.h"
#include "json.h"
#include "ramback.h"
#include "store.h"
#include "store-next.h"

#define MAX_CONTEXTS 64
#define MAX_WORKERS 64
#define DEFAULT_WORKERS 16
#define DEFAULT_SERIAL_CONTEXTS 4
#define PIECE_BYTES (1024 * 1024)
#define SERIAL_PIECE_BYTES (8 * 1024 * 1024)
#define ZERO_PIECE_BYTES (32 * 1024 * 1024)
#define EXTENTS_SPAN (1024 * 1024 * 1024)
#define BLOCK_ONE 256               /* 'blocking': every piece waited */
#define BLOCK_WAKE (BLOCK_ONE / 4)  /* wake workers above this */

enum serialize {
  SER_NONE,                   /* parallel plugin */
  SER_CONTEXT,                /* one call at a time per context */
  SER_ALL,                    /* one call at a time in all */
};

struct piece;

/* One submit(): its pieces, shared out between the caller and the
 * workers, and what the caller waits for (all of them done).
 */
struct batch {
  struct batch *next;         /* queue link [st->qlock] */
  struct piece *pieces;
  size_t n;
  size_t claimed;             /* [st->qlock] pieces taken to run */
  rb_mutex lock;
  rb_cond cond;
  size_t pending;             /* [lock] pieces not yet done */
  int err;                    /* [lock] first error, 0 if none */
  char msg[200];              /* [lock] what the first error was */
};

struct piece {
  struct batch *batch;
  struct rb_io *io;
  enum rb_io_op op;
  char *buf;                  /* READ, WRITE */
  uint64_t offset;
  uint32_t count;
};

struct ctx {
  nbdkit_next *next;
  rb_mutex lock;              /* held around each call with SER_CONTEXT */
  bool written;               /* [atomic] written since its last flush */
};

struct next_store {
  struct rb_store *s;
  struct ctx ctx[MAX_CONTEXTS];
  int nctx;
  int thread_model;
  enum serialize ser;
  rb_mutex all_lock;          /* held around each call with SER_ALL */
  unsigned rr;                /* [atomic] round robin for inline calls */

  /* What the plugin can do (asked once on every context). */
  int can_flush, can_fua, can_zero, can_fast_zero, can_extents;
  int can_multi_conn, can_trim;
  uint32_t min_block;         /* 1 if the plugin has no minimum */
  uint32_t max_piece;         /* READ, WRITE, run in parallel */
  uint32_t max_serial;        /* READ, WRITE, run by the caller alone */
  uint32_t max_zero;          /* ZERO */
  char *zero_buf;             /* max_piece zeroes, for can_zero NONE */

  /* Workers [qlock]: batches with pieces not yet claimed. */
  rb_mutex qlock;
  rb_cond qcond;
  struct batch *head;
  bool quit;
  int nworkers;
  rb_thread workers[MAX_WORKERS];

  /* Calls into the plugin running now, and counters (inflight.h). */
  rb_mutex ilock;
  struct rb_inflight_list inflight;     /* [ilock] */
  struct rb_inflight_counts counts;     /* [ilock] */
  unsigned blocking;          /* [atomic] moving average, 0..BLOCK_ONE,
                                 of pieces during which the plugin made
                                 the thread wait (see worker_main) */
};

static const char *
op_name (enum rb_io_op op)
{
  switch (op) {
  case RB_IO_READ: return "pread";
  case RB_IO_WRITE: return "pwrite";
  case RB_IO_ZERO: return "zero";
  default: return "?";
  }
}

static void
ctx_lock (struct next_store *st, struct ctx *c)
{
  if (st->ser == SER_ALL)
    rb_mutex_lock (&st->all_lock);
  else if (st->ser == SER_CONTEXT)
    rb_mutex_lock (&c->lock);
}

static void
ctx_unlock (struct next_store *st, struct ctx *c)
{
  if (st->ser == SER_ALL)
    rb_mutex_unlock (&st->all_lock);
  else if (st->ser == SER_CONTEXT)
    rb_mutex_unlock (&c->lock);
}

/* A call into the plugin begins, and ends (failed or not): listed for
 * status while it runs.
 */
static void
call_begin (struct next_store *st, struct rb_inflight_req *r)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->ilock);
  rb_inflight_issue (&st->inflight, &st->counts, r, rb_now_ns ());
}

static void
call_end (struct next_store *st, struct rb_inflight_req *r, bool failed)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->ilock);
  rb_inflight_end (&st->inflight, &st->counts, r, failed);
}

/* One aligned call into the plugin.  Context lock held. */
static int
call_plugin (struct next_store *st, struct ctx *c, enum rb_io_op op,
             char *buf, uint32_t count, uint64_t offset, int *err)
{
  nbdkit_next *next = c->next;
  int r;

  switch (op) {
  case RB_IO_READ:
    return next->pread (next, buf, count, offset, 0, err);
  case RB_IO_WRITE:
    r = next->pwrite (next, buf, count, offset, 0, err);
    break;
  case RB_IO_ZERO:
    if (st->can_zero != NBDKIT_ZERO_NONE)
      r = next->zero (next, count, offset, NBDKIT_FLAG_MAY_TRIM, err);
    else {
      /* The plugin cannot zero at all: write zeroes. */
      uint32_t done = 0, n;

      r = 0;
      for (; r == 0 && done < count; done += n) {
        n = RB_MIN (count - done, st->max_piece);
        r = next->pwrite (next, st->zero_buf, n, offset + done, 0, err);
      }
    }
    break;
  default:
    *err = EINVAL;
    return -1;
  }
  if (r == 0)
    rb_atomic_store (&c->written, true);
  return r;
}

static int
call (struct next_store *st, struct ctx *c, enum rb_io_op op, char *buf,
      uint32_t count, uint64_t offset, int *err)
{
  struct rb_inflight_req ireq;
  int r;

  call_begin (st, &ireq);
  r = call_plugin (st, c, op, buf, count, offset, err);
  call_end (st, &ireq, r == -1);
  return r;
}

/* One block [b, b + len) that the request covers only partly: read it,
 * patch it (with the request's data or zeroes), write it back (or, for
 * a read, copy the part out).  The core holds a range over the whole
 * chunks around it (see the top of the file).
 */
static int
partial_block (struct next_store *st, struct ctx *c, enum rb_io_op op,
               char *buf, uint64_t offset, uint32_t count, uint64_t b,
               uint32_t len, int *err)
{
  CLEANUP_FREE char *bounce = malloc (len);

  if (bounce == NULL) {
    *err = errno;
    return -1;
  }
  if (call (st, c, RB_IO_READ, bounce, len, b, err) == -1)
    return -1;
  if (op == RB_IO_READ) {
    memcpy (buf, bounce + (offset - b), count);
    return 0;
  }
  if (op == RB_IO_WRITE)
    memcpy (bounce + (offset - b), buf, count);
  else
    memset (bounce + (offset - b), 0, count);
  return call (st, c, RB_IO_WRITE, bounce, len, b, err);
}

/* Run one piece on context c: the aligned middle directly, unaligned
 * edges block by block.  Returns 0 or -1 with *err.
 */
static int
run_on (struct next_store *st, struct ctx *c, enum rb_io_op op, char *buf,
        uint32_t count, uint64_t offset, int *err)
{
  uint64_t m = st->min_block, pos = offset, end = offset + count;
  int r = 0;

  struct rusage ru0, ru1;
  unsigned old, sample;

  ctx_lock (st, c);
  getrusage (RUSAGE_THREAD, &ru0);
  if (m == 1 || (offset % m == 0 && (count % m == 0 || end == st->s->size)))
    r = call (st, c, op, buf, count, offset, err);
  else {
    while (r == 0 && pos < end) {
      uint64_t b = pos / m * m;
      uint64_t bend = RB_MIN (b + m, st->s->size);

      if (pos == b && (end >= bend)) {
        /* Whole blocks from pos on. */
        uint64_t n = end == st->s->size ? end - pos : (end - pos) / m * m;
        r = call (st, c, op, buf ? buf + (pos - offset) : NULL, n, pos, err);
        pos += n;
      }
      else {
        uint64_t n = RB_MIN (end, bend) - pos;
        r = partial_block (st, c, op, buf ? buf + (pos - offset) : NULL,
                           pos, n, b, bend - b, err);
        pos += n;
      }
    }
  }
  /* Did the plugin make us wait (a voluntary context switch: a reply
   * from a server, a disk)?  Preemption by a busy machine does not
   * count.
   */
  getrusage (RUSAGE_THREAD, &ru1);
  ctx_unlock (st, c);
  sample = ru1.ru_nvcsw > ru0.ru_nvcsw ? BLOCK_ONE : 0;
  old = rb_atomic_load_relaxed (&st->blocking);
  rb_atomic_store_relaxed (&st->blocking, old - old / 8 + sample / 8);
  return r;
}

/* Wake (another) worker only while the plugin makes threads wait. */
static bool
want_parallel (struct next_store *st)
{
  return rb_atomic_load_relaxed (&st->blocking) > BLOCK_WAKE;
}

static void
piece_done (struct piece *p, int r, int err)
{
  struct batch *b = p->batch;

  if (r == -1 && err == 0)
    err = EIO;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b->lock);
  if (r == -1)
    p->io->err = err;         /* several pieces of one io: any error */
  if (r == -1 && b->err == 0) {
    b->err = err;
    snprintf (b->msg, sizeof b->msg, "plugin %s of %" PRIu32 " bytes at %"
              PRIu64, op_name (p->op), p->count, p->offset);
  }
  if (--b->pending == 0)
    rb_cond_broadcast (&b->cond);
}

static void
run_piece (struct next_store *st, struct ctx *c, struct piece *p)
{
  int err = 0;
  int r = run_on (st, c, p->op, p->buf, p->count, p->offset, &err);

  piece_done (p, r, err);
}

struct worker_arg {
  struct next_store *st;
  int index;
};

/* Take the next piece of batch b (NULL: all taken).  A batch leaves
 * the queue when its last piece is taken.  qlock held.
 */
static struct piece *
claim (struct next_store *st, struct batch *b)
{
  struct batch **pp;
  struct piece *p;

  if (b->claimed == b->n)
    return NULL;
  p = &b->pieces[b->claimed++];
  if (b->claimed == b->n) {
    for (pp = &st->head; *pp; pp = &(*pp)->next)
      if (*pp == b) {
        *pp = b->next;
        break;
      }
  }
  return p;
}

/* Workers are woken one at a time: a worker that takes a piece wakes
 * another if pieces are left, so all of them are busy within
 * microseconds.  But only while the plugin makes threads wait for it
 * (a remote server, a disk: 'blocking', the share of recent pieces
 * during which the thread waited, measured as voluntary context
 * switches).  A plugin that only keeps the CPU busy (the file plugin
 * copying into the page cache) gains nothing from more threads on it
 * and would take the CPUs from client requests: then the calling
 * thread runs the whole batch alone, as the plugin form's file store
 * does.  Every piece is measured, so a change either way is seen
 * within a few pieces.
 */
static void *
worker_main (void *arg)
{
  struct worker_arg *wa = arg;
  struct next_store *st = wa->st;
  struct ctx *c = &st->ctx[wa->index % st->nctx];

  free (wa);
  /* Write back and populate: background work, like the flusher's. */
  rb_thread_background ();
  for (;;) {
    struct piece *p;

    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->qlock);
      while (!st->quit && st->head == NULL)
        rb_cond_wait (&st->qcond, &st->qlock);
      if (st->head == NULL)
        return NULL;          /* quit, and nothing left */
      p = claim (st, st->head);
      if (st->head && want_parallel (st))
        rb_cond_signal (&st->qcond);
    }
    run_piece (st, c, p);
  }
}

static struct ctx *
inline_ctx (struct next_store *st)
{
  return &st->ctx[rb_atomic_add (&st->rr, 1) % st->nctx];
}

static int
next_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct next_store *st = s->handle;
  CLEANUP_FREE struct piece *pieces = NULL;
  struct batch b = { .pending = 0 };
  struct rb_store_cut cut = {
    /* Small pieces to run in parallel, or the core's own large requests
     * when the caller runs them alone (see worker_main).
     */
    .rw_step = want_parallel (st) ? st->max_piece : st->max_serial,
    .zero_step = st->max_zero,
    /* At multiples of the step (a multiple of the minimum block size),
     * so no two pieces share a block: two read-modify-writes of one
     * block in parallel would lose one of them.
     */
    .aligned = true,
  };
  ssize_t npieces;
  size_t k = 0;

  pieces = rb_store_cut_plan (&cut, s, ios, n, sizeof *pieces, &npieces,
                              NULL, "plugin", "the plugin is read-only");
  if (pieces == NULL)
    return npieces;
  while (rb_store_cut_next (&cut, ios, n)) {
    struct piece *p = &pieces[k++];

    p->op = cut.io->op;
    p->batch = &b;
    p->io = cut.io;
    p->buf = cut.buf;
    p->offset = cut.offset;
    p->count = cut.count;
  }

  rb_mutex_init (&b.lock);
  rb_cond_init (&b.cond);
  b.pieces = pieces;
  b.n = b.pending = npieces;
  if (npieces == 1 || st->nworkers == 0) {
    struct ctx *c = inline_ctx (st);
    for (k = 0; k < npieces; k++)
      run_piece (st, c, &pieces[k]);
  }
  else {
    struct ctx *c = inline_ctx (st);

    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->qlock);
      struct batch **pp = &st->head;

      while (*pp)
        pp = &(*pp)->next;
      *pp = &b;
      if (want_parallel (st))
        rb_cond_signal (&st->qcond);
    }
    /* The caller runs pieces of its own batch too. */
    for (;;) {
      struct piece *p;
      {
        ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->qlock);
        p = claim (st, &b);
      }
      if (p == NULL)
        break;
      run_piece (st, c, p);
    }
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&b.lock);
    while (b.pending > 0)
      rb_cond_wait (&b.cond, &b.lock);
  }
  rb_cond_destroy (&b.cond);
  rb_mutex_destroy (&b.lock);

  rb_atomic_store (&s->state, b.err ? RB_STORE_FAILING : RB_STORE_OK);
  if (b.err) {
    rb_set_error (b.err, "%s", b.msg);
    return -1;
  }
  return 0;
}

/* Flush context c: 0, or -1 with *err. */
static int
flush_ctx (struct next_store *st, struct ctx *c, int *err)
{
  struct rb_inflight_req ireq;
  int r;

  ctx_lock (st, c);
  call_begin (st, &ireq);
  r = c->next->flush (c->next, 0, err);
  call_end (st, &ireq, r == -1);
  ctx_unlock (st, c);
  return r;
}

static int
next_flush (struct rb_store *s)
{
  struct next_store *st = s->handle;
  int i, first_err = 0;

  if (!st->can_flush)
    return 0;                 /* nothing can be synced (see the top) */
  if (st->can_multi_conn) {
    /* One flush covers the writes completed on every context. */
    bool any = false;
    int err = 0;

    for (i = 0; i < st->nctx; i++)
      if (rb_atomic_xchg (&st->ctx[i].written, false))
        any = true;
    if (!any)
      return 0;
    if (flush_ctx (st, &st->ctx[0], &err) == -1)
      first_err = err ? err : EIO;
    if (first_err)
      rb_atomic_store (&st->ctx[0].written, true);
  }
  else {
    for (i = 0; i < st->nctx; i++) {
      struct ctx *c = &st->ctx[i];
      int err = 0, r;

      if (!rb_atomic_xchg (&c->written, false))
        continue;
      r = flush_ctx (st, c, &err);
      if (r == -1) {
        rb_atomic_store (&c->written, true);
        if (!first_err)
          first_err = err ? err : EIO;
      }
    }
  }
  if (first_err) {
    rb_set_error (first_err, "plugin flush");
    rb_atomic_store (&s->state, RB_STORE_FAILING);
    return -1;
  }
  return 0;
}

static int
next_next_data (struct rb_store *s, uint64_t offset, uint64_t *data,
                uint64_t *hole)
{
  struct next_store *st = s->handle;
  uint64_t pos = offset;

  if (!st->can_extents) {     /* no map of holes: all data */
    *data = offset;
    *hole = s->size;
    return 0;
  }
  while (pos < s->size) {
    uint32_t count = RB_MIN (s->size - pos, (uint64_t) EXTENTS_SPAN);
    struct nbdkit_extents *exts = nbdkit_extents_new (pos, s->size);
    struct ctx *c = inline_ctx (st);
    uint64_t covered = pos, dstart = UINT64_MAX, dend = 0;
    size_t i, ne;
    int err = 0, r;

    if (exts == NULL) {
      rb_set_error (errno, "plugin: nbdkit_extents_new");
      return -1;
    }
    {
      struct rb_inflight_req ireq;

      ctx_lock (st, c);
      call_begin (st, &ireq);
      r = c->next->extents (c->next, count, pos, 0, exts, &err);
      call_end (st, &ireq, r == -1);
      ctx_unlock (st, c);
    }
    if (r == -1) {
      nbdkit_extents_free (exts);
      rb_set_error (err ? err : EIO, "plugin extents of %" PRIu32
                    " bytes at %" PRIu64, count, pos);
      return -1;
    }
    ne = nbdkit_extents_count (exts);
    for (i = 0; i < ne; i++) {
      struct nbdkit_extent e = nbdkit_get_extent (exts, i);

      covered = e.offset + e.length;
      if (e.type & NBDKIT_EXTENT_ZERO) {
        if (dstart != UINT64_MAX)
          break;              /* end of the data run */
        continue;
      }
      if (dstart == UINT64_MAX)
        dstart = e.offset;
      dend = e.offset + e.length;
    }
    nbdkit_extents_free (exts);
    if (dstart != UINT64_MAX) {
      *data = RB_MIN (dstart, s->size);
      *hole = RB_MIN (dend, s->size);
      return 0;
    }
    if (covered <= pos) {     /* the plugin said nothing: assume data */
      *data = pos;
      *hole = RB_MIN (pos + count, s->size);
      return 0;
    }
    pos = covered;
  }
  *data = *hole = s->size;
  return 0;
}

static const char *
model_name (int m)
{
  switch (m) {
  case NBDKIT_THREAD_MODEL_SERIALIZE_CONNECTIONS: return "serialize_connections";
  case NBDKIT_THREAD_MODEL_SERIALIZE_ALL_REQUESTS: return "serialize_all_requests";
  case NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS: return "serialize_requests";
  case NBDKIT_THREAD_MODEL_PARALLEL: return "parallel";
  default: return "unknown";
  }
}

static const char *
zero_name (int z)
{
  return z == NBDKIT_ZERO_NATIVE ? "native"
    : z == NBDKIT_ZERO_EMULATE ? "emulate" : "none";
}

static void
next_status (struct rb_store *s, struct rb_status_out *o)
{
  struct next_store *st = s->handle;
  unsigned waiting = rb_atomic_load_relaxed (&st->blocking) * 100 / BLOCK_ONE;
  struct rb_inflight_counts counts;
  uint64_t oldest_ms;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->ilock);
    oldest_ms = rb_inflight_oldest_ms (&st->inflight, rb_now_ns ());
    counts = st->counts;
  }
  /* A plugin that waits, however long, fails nothing: say so. */
  if (oldest_ms >= RB_INFLIGHT_STALL_MS)
    rb_atomic_store (&s->state, RB_STORE_OFFLINE);

  rb_status_bool (o, "store_read_only", s->read_only);
  rb_status_str (o, "store_thread_model", model_name (st->thread_model));
  rb_status_u64 (o, "store_workers", st->nworkers);
  rb_status_bool (o, "store_multi_conn", st->can_multi_conn);
  rb_status_bool (o, "store_can_flush", st->can_flush);
  rb_status_str (o, "store_zero", zero_name (st->can_zero));
  rb_status_bool (o, "store_block_status", st->can_extents);
  rb_status_u64 (o, "store_min_block", st->min_block);
  rb_status_u64 (o, "store_waiting", waiting);
  /* The thread model bounds the calls at once: one in all, one per
   * context, or (a parallel plugin) nothing of ours (0).
   */
  rb_inflight_status (o, &counts, st->ser == SER_ALL ? 1
                      : st->ser == SER_CONTEXT ? (unsigned) st->nctx : 0,
                      oldest_ms);
}

static void
stop_workers (struct next_store *st)
{
  int i;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->qlock);
    st->quit = true;
    rb_cond_broadcast (&st->qcond);
  }
  for (i = 0; i < st->nworkers; i++)
    rb_thread_join (st->workers[i]);
  st->nworkers = 0;
}

static void
next_close (struct rb_store *s)
{
  struct next_store *st = s->handle;
  int i;

  if (st) {
    stop_workers (st);
    for (i = 0; i < st->nctx; i++) {
      nbdkit_next *next = st->ctx[i].next;

      if (next) {
        if (next->finalize (next) == -1)
          nbdkit_error ("ramback: finalizing a context to the plugin failed");
        nbdkit_next_context_close (next);
      }
      rb_mutex_destroy (&st->ctx[i].lock);
    }
    rb_cond_destroy (&st->qcond);
    rb_mutex_destroy (&st->qlock);
    rb_mutex_destroy (&st->ilock);
    rb_mutex_destroy (&st->all_lock);
    free (st->zero_buf);
    free (st);
  }
  free (s);
}

static const struct rb_store_ops next_ops = {
  .name      = "plugin",
  .submit    = next_submit,
  .flush     = next_flush,
  .next_data = next_next_data,
  .status    = next_status,
  .close     = next_close,
};

bool
rb_store_next_can_flush (struct rb_store *s)
{
  struct next_store *st = s->handle;

  return st->can_flush;
}

/* Ask one capability; -1 is an error from the plugin. */
#define ASK(var, call, what)                                            \
  do {                                                                  \
    int v_ = (call);                                                    \
    if (v_ == -1) {                                                     \
      rb_set_error (EIO, "plugin: %s failed (see the plugin's message " \
                    "above)", what);                                    \
      return -1;                                                        \
    }                                                                   \
    if (i == 0)                                                         \
      (var) = v_;                                                       \
  } while (0)

/* Open, prepare and question context i. */
static int
open_ctx (struct next_store *st, const struct rb_store_next_params *p, int i)
{
  struct rb_store *s = st->s;
  nbdkit_next *next;
  int64_t size;
  int can_write = 0;

  rb_mutex_init (&st->ctx[i].lock);
  next = nbdkit_next_context_open (p->backend, 0, "", 1);
  if (next == NULL) {
    rb_set_error (EIO, "cannot open a context to the plugin (see the "
                  "plugin's message above)");
    return -1;
  }
  st->nctx = i + 1;
  if (next->prepare (next) == -1) {
    nbdkit_next_context_close (next);
    rb_set_error (EIO, "cannot prepare a context to the plugin (see the "
                  "plugin's message above)");
    return -1;
  }
  st->ctx[i].next = next;

  size = next->get_size (next);
  if (size == -1) {
    rb_set_error (EIO, "plugin: get_size failed (see the plugin's "
                  "message above)");
    return -1;
  }
  if (i == 0)
    s->size = size;
  else if ((uint64_t) size != s->size) {
    rb_set_error (EIO, "plugin: two contexts report different sizes "
                  "(%" PRIu64 " and %" PRId64 ")", s->size, size);
    return -1;
  }
  ASK (can_write, next->can_write (next), "can_write");
  if (i == 0)
    s->read_only = !can_write;
  ASK (st->can_flush, next->can_flush (next), "can_flush");
  ASK (st->can_fua, next->can_fua (next), "can_fua");
  ASK (st->can_trim, next->can_trim (next), "can_trim");
  ASK (st->can_zero, next->can_zero (next), "can_zero");
  ASK (st->can_fast_zero, next->can_fast_zero (next), "can_fast_zero");
  ASK (st->can_extents, next->can_extents (next), "can_extents");
  ASK (st->can_multi_conn, next->can_multi_conn (next), "can_multi_conn");
  if (i == 0) {
    uint32_t minimum = 0, preferred = 0, maximum = 0;

    if (next->block_size (next, &minimum, &preferred, &maximum) == -1) {
      rb_set_error (EIO, "plugin: block_size failed (see the plugin's "
                    "message above)");
      return -1;
    }
    st->min_block = minimum > 1 ? minimum : 1;
    if (maximum > 0 && maximum < st->max_piece)
      st->max_piece = maximum / st->min_block * st->min_block;
    if (maximum > 0 && maximum < st->max_serial)
      st->max_serial = maximum / st->min_block * st->min_block;
    if (maximum > 0 && maximum < st->max_zero)
      st->max_zero = maximum / st->min_block * st->min_block;
  }
  return 0;
}

struct opener {
  struct next_store *st;
  const struct rb_store_next_params *p;
  int n;
  int r, err;
  char msg[256];
};

static void *
opener_main (void *arg)
{
  struct opener *o = arg;
  int i;

  rb_thread_background ();
  o->r = 0;
  for (i = 0; i < o->n; i++)
    if (open_ctx (o->st, o->p, i) == -1) {
      o->r = -1;
      o->err = errno;
      snprintf (o->msg, sizeof o->msg, "%s",
                rb_get_error () ? rb_get_error () : "open failed");
      break;
    }
  return NULL;
}

/* The contexts are opened on a thread of background priority: threads
 * that a plugin starts for a context (the nbd plugin's reader) inherit
 * it, and they carry write back and populate, as the plugin form's own
 * NBD connection threads do at that priority.
 */
static int
open_contexts (struct next_store *st, const struct rb_store_next_params *p,
               int n)
{
  struct opener o = { .st = st, .p = p, .n = n };
  rb_thread t;

  if (rb_thread_create (&t, opener_main, &o) == -1) {
    rb_set_error (errno, "cannot start a thread");
    return -1;
  }
  rb_thread_join (t);
  if (o.r == -1) {
    /* The message is that thread's; it ends in ": strerror", which
     * rb_set_error adds again.
     */
    const char *e = rb_strerror (o.err);
    size_t lm = strlen (o.msg), le = strlen (e);

    if (lm > le + 2 && strcmp (o.msg + lm - le, e) == 0 &&
        memcmp (o.msg + lm - le - 2, ": ", 2) == 0)
      o.msg[lm - le - 2] = '\0';
    rb_set_error (o.err, "%s", o.msg);
  }
  return o.r;
}

struct rb_store *
rb_store_next_open (const struct rb_store_next_params *p)
{
  struct rb_store *s = calloc (1, sizeof *s);
  struct next_store *st = calloc (1, sizeof *st);
  int want_ctx, want_workers, i;

  if (s == NULL || st == NULL) {
    rb_set_error (errno, "calloc");
    free (s);
    free (st);
    return NULL;
  }
  s->ops = &next_ops;
  s->handle = st;
  st->s = s;
  st->thread_model = p->thread_model;
  st->max_piece = PIECE_BYTES;
  st->max_serial = SERIAL_PIECE_BYTES;
  st->max_zero = ZERO_PIECE_BYTES;
  st->blocking = BLOCK_ONE;   /* until measured: assume a remote plugin */
  rb_mutex_init (&st->all_lock);
  rb_mutex_init (&st->qlock);
  rb_mutex_init (&st->ilock);
  rb_cond_init (&st->qcond);

  switch (p->thread_model) {
  case NBDKIT_THREAD_MODEL_PARALLEL:
    st->ser = SER_NONE;
    want_ctx = p->contexts ? p->contexts : 1;
    want_workers = p->inflight ? p->inflight : DEFAULT_WORKERS;
    break;
  case NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS:
    st->ser = SER_CONTEXT;
    want_ctx = p->contexts ? p->contexts : DEFAULT_SERIAL_CONTEXTS;
    want_workers = want_ctx;
    break;
  default:
    st->ser = SER_ALL;
    want_ctx = 1;
    want_workers = 0;
    break;
  }
  want_ctx = RB_MIN (want_ctx, MAX_CONTEXTS);
  want_workers = RB_MIN (want_workers, MAX_WORKERS);

  if (open_contexts (st, p, want_ctx) == -1)
    goto fail;
  s->connections = st->nctx;

  if (s->size == 0) {
    rb_set_error (EINVAL, "the plugin's export is empty (0 bytes)");
    goto fail;
  }
  if (p->chunk_size % st->min_block != 0) {
    rb_set_error (EINVAL, "chunk=%" PRIu32 ": the plugin's minimum block "
                  "size is %" PRIu32 " bytes; use chunk=%" PRIu32 " or "
                  "larger", p->chunk_size, st->min_block, st->min_block);
    goto fail;
  }
  if (st->max_piece < st->min_block || st->max_serial < st->min_block ||
      st->max_zero < st->min_block) {
    rb_set_error (EINVAL, "the plugin's maximum block size is smaller "
                  "than its minimum");
    goto fail;
  }
  /* Only a cheap zero counts as one (the core's fast-zero rule): the
   * plugin zeroes natively and says itself that it can zero fast.
   */
  s->can_zero = !s->read_only && st->can_zero == NBDKIT_ZERO_NATIVE &&
    st->can_fast_zero;
  if (!s->read_only && st->can_zero == NBDKIT_ZERO_NONE) {
    st->zero_buf = calloc (1, st->max_piece);
    if (st->zero_buf == NULL) {
      rb_set_error (errno, "calloc");
      goto fail;
    }
  }

  for (i = 0; i < want_workers; i++) {
    struct worker_arg *wa = malloc (sizeof *wa);

    if (wa == NULL) {
      rb_set_error (errno, "malloc");
      goto fail;
    }
    wa->st = st;
    wa->index = i;
    if (rb_thread_create (&st->workers[i], worker_main, wa) == -1) {
      free (wa);
      rb_set_error (errno, "cannot start a worker thread");
      goto fail;
    }
    st->nworkers = i + 1;
  }

  nbdkit_debug ("ramback: plugin store: %" PRIu64 " bytes, %d context(s), "
                "%d worker(s), thread model %s, %s, flush %s, zero %s, "
                "extents %s, multi-conn %s, block size min %" PRIu32
                " piece %" PRIu32, s->size, st->nctx, st->nworkers,
                model_name (st->thread_model),
                s->read_only ? "read-only" : "writable",
                st->can_flush ? "yes" : "no", zero_name (st->can_zero),
                st->can_extents ? "yes" : "no",
                st->can_multi_conn ? "yes" : "no", st->min_block,
                st->max_piece);
  return s;

 fail:
  {
    int e = errno;
    next_close (s);
    errno = e;
  }
  return NULL;
}
