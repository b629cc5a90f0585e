/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: a backing store that is a remote NBD export, through libnbd.
 *
 * The point of this store is latency hiding.  A 64 MiB batch from the
 * flusher or the populator is cut into pieces of at most max_request
 * bytes, spread over several connections and kept in flight together,
 * so a link with 10 ms of latency runs at its bandwidth instead of at
 * one request per round trip.
 *
 * Threads.  Every connection has its own I/O thread, and that thread is
 * the only one that ever calls libnbd on the connection's handle: it
 * issues queued pieces, polls the socket and runs the completion
 * callbacks.  Callers of submit()/flush()/next_data() (application
 * threads, the flusher, the populator, all at once) never touch libnbd:
 * they cut their batch into pieces, queue them on the least loaded
 * connection, wake its thread through an eventfd and sleep on their
 * batch's condition variable.  So there is no sharing of a handle
 * between pollers and no lock is held across network I/O.  The threads
 * are started on first use, not in rb_store_nbd_open(), because the
 * store is opened before nbdkit forks and threads do not survive fork.
 *
 * Small batches (demand loads, writethrough writes, block status,
 * flush) go to an "urgent" queue that is issued ahead of bulk pieces
 * and without waiting for an in-flight slot, so an application read is
 * not stuck behind 64 MiB of write back.  Reordering is safe: the core
 * never has two overlapping requests in flight unless both are reads.
 *
 * Lifetime of a piece.  libnbd calls a completion's .free exactly once,
 * even when the aio call fails or the handle is closed with commands
 * still in flight, so a piece is finished ("finalized") from .free:
 * whatever happens to the connection, every caller is woken exactly
 * once with 0 or an errno.
 *
 * Slow is not lost.  A connection is dropped only when it is really
 * gone: the server closed it or reset it, or (TCP) keepalive probes or
 * unacknowledged data went unanswered for about KEEPALIVE_S seconds,
 * which a live server's kernel always answers.  A server that is merely
 * slow to reply is waited for, however long (status shows the age of
 * the oldest request in flight), unless request-timeout= says to give
 * up after that many seconds without any socket activity.
 *
 * Connection loss.  When a connection is lost (or given up) its
 * in-flight pieces fail with EIO, the connection goes down, and the
 * store is OFFLINE once no connection is up.  Nothing here retries a
 * failed write: the core
 * keeps the data dirty and retries with its own backoff.  A down
 * connection reconnects when work arrives for it and an attempt is due
 * (first attempt at once, then exponential backoff up to BACKOFF_MAX),
 * and also on that timer without work, so that status comes back to
 * "ok" by itself.  Each attempt is bounded by
 * CONNECT_TIMEOUT_MS; while no attempt is due, requests fail at once
 * with EIO instead of waiting.  When one connection comes back the
 * others are told to reconnect at once.
 *
 * Writes of a lost connection.  A write in flight when its connection
 * is lost has an unknown outcome: the server may have done it, not
 * done it, or (a server thread that is slow) still be doing it, and
 * then it lands later, over whatever was written since on another
 * connection.  The core rewrites a failed write at once; that is not
 * enough when the old one lands after the rewrite.  So the ranges of
 * such writes are kept as "suspect", per lost connection, until the
 * old requests can no longer be executing, and are then handed to the
 * core (take_suspects) to be written once more.  What the store can
 * know about "no longer executing": it keeps a duplicate of every
 * connection's socket, so that after the loss it can shut down its own
 * side (the server reads end-of-file; on a connection given up by
 * request-timeout= an NBD_CMD_DISC is sent first) and watch for the
 * server to close the other side.  nbdkit closes a client's socket only
 * after the requests it was executing for it have finished, so for
 * nbdkit that moment is exact.  qemu-nbd shuts the socket down at once
 * and lets requests already in its block layer finish afterwards, and
 * nbdkit shutting down (SIGTERM) does the same: there a write can still
 * land after the close, and no NBD client can see that; a proxy between
 * ramback and the server hides it too.  When the end cannot be watched
 * at all (the socket failed with a network error such as a keepalive
 * timeout, or the duplicate could not be made), the ranges are handed
 * over when the connection is next re-established.
 *
 * Durability.  NBD FLUSH covers the writes completed on the connection
 * it is sent on (on all connections if the server advertises
 * multi-conn), so flush() sends one FLUSH on every connection that is
 * up, in parallel, each tagged with the handle it was meant for
 * (epoch): a connection lost and re-established before its FLUSH was
 * sent fails that FLUSH instead of sending it on the new handle, where
 * it would cover nothing of the old one.  A connection that dies with
 * acknowledged but unflushed writes may have lost them in the server's
 * cache: every flush() that began before some flush() has reported that
 * loss (by returning EIO) fails with EIO too, and the core then writes
 * everything since the last good sync again.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <libnbd.h>

#include "ramback.h"
#include "store.h"
#include "error.h"
#include "env.h"
#include "cleanup.h"
#include "json.h"

#define MAX_CONNECTIONS 64          /* as plugin/params.c allows */
#define AUTO_CONNECTIONS 4          /* when the server offers multi-conn */
#define DEFAULT_INFLIGHT 16         /* bulk pieces in flight per connection */
#define MAX_INFLIGHT 1024
#define MAX_REQUEST (1024 * 1024)   /* piece size for reads and writes */
#define MAX_ZERO_REQUEST (32 * 1024 * 1024)
#define URGENT_BYTES (1024 * 1024)  /* batches up to this size jump the queue */
#define BLOCK_STATUS_SPAN (1024 * 1024 * 1024)
#define OPEN_CONNECT_TIMEOUT_MS 15000
#define CONNECT_TIMEOUT_MS 5000
#define DISCONNECT_TIMEOUT_MS 1000
/* TCP keepalive: a peer that answers nothing for about KEEPALIVE_S
 * seconds (a probe after IDLE s of silence, then every INTVL s, CNT
 * times; the same bound for data never acknowledged) is gone.
 */
#define KEEPALIVE_IDLE_S 10
#define KEEPALIVE_INTVL_S 5
#define KEEPALIVE_CNT 6
#define KEEPALIVE_S (KEEPALIVE_IDLE_S + KEEPALIVE_INTVL_S * KEEPALIVE_CNT)
#define MAX_DRAINS 16               /* lost connections watched per conn */
#define DRAIN_BUF 16384
#define BACKOFF_MIN_NS (50 * UINT64_C (1000000))
#define BACKOFF_MAX_NS (5 * UINT64_C (1000000000))

enum piece_op { P_READ, P_WRITE, P_ZERO, P_FLUSH, P_EXTENTS };

static const char *const op_names[] = {
  [P_READ] = "pread", [P_WRITE] = "pwrite", [P_ZERO] = "zero",
  [P_FLUSH] = "flush", [P_EXTENTS] = "block_status",
};

/* What the caller of submit() waits for: all of its pieces. */
struct batch {
  rb_mutex lock;
  rb_cond cond;
  size_t pending;             /* pieces not yet finalized */
  int err;                    /* first error, 0 if none */
  char msg[200];              /* says what the first error was */
};

/* Result of a block status piece, filled in by the extent callback. */
struct extents {
  uint64_t covered;           /* bytes described from the piece's offset */
  uint64_t data_start;        /* first data byte, UINT64_MAX: none */
  uint64_t data_end;          /* end of the data run from data_start */
};

struct conn;

struct piece {
  struct piece *next;         /* queue link (store lock) */
  struct batch *batch;
  struct rb_io *io;           /* NULL for flush and block status */
  struct conn *conn;
  enum piece_op op;
  void *buf;
  uint64_t count;
  uint64_t offset;
  struct extents *ext;
  bool urgent;
  uint64_t epoch;             /* FLUSH: the handle it is for, 0: any */
  /* Owned by the connection's thread once dequeued. */
  bool issued;                /* counted in conn->inflight */
  bool issuing;               /* inside the nbd_aio_* call */
  bool sent;                  /* handed to libnbd: may reach the server */
  bool completed;             /* completion callback ran */
  bool freed;                 /* .free ran */
  int err;
  uint64_t gen;               /* FLUSH: conn->write_gen when issued */
  /* In flight (store lock): the connection's list, oldest first. */
  struct piece *iprev, *inext;
  uint64_t issued_ns;
};

/* Ranges of the store whose last write has an unknown outcome.  If one
 * cannot be remembered on its own (no memory), the catch-all 'wide'
 * range grows to cover it: writing too much again is safe, forgetting
 * is not.
 */
struct ranges {
  struct rb_store_range *v;
  size_t len, cap;
  uint64_t bytes;
  bool wide;
  uint64_t wide_lo, wide_hi;
};

/* A lost connection whose server may still be executing writes of it.
 * Created and freed by its connection's thread; the list and the
 * ranges are changed under the store lock (status reads them).
 */
struct drain {
  struct drain *next;
  int fd;                     /* our duplicate of its socket, -1: none */
  bool unknown;               /* its end cannot be seen: hand the ranges
                                 over at the next reconnect */
  struct ranges r;
};

struct nbd_store;

struct conn {
  struct nbd_store *st;
  int idx;
  /* Only the connection's thread touches the handle once threads run. */
  struct nbd_handle *nbd;
  int sockdup;                /* duplicate of the handle's socket, -1 */
  int wakefd;                 /* eventfd: queue changed or quit */
  rb_thread thread;
  uint64_t last_progress_ns;  /* request-timeout=, connection thread */
  bool drains_full_logged;    /* connection thread */
  /* Writes completed on this connection, and how many of them the last
   * successful FLUSH covered (connection thread only).
   */
  uint64_t write_gen;
  uint64_t flushed_gen;
  /* Protected by the store lock. */
  bool up;
  uint64_t epoch;             /* of the current handle, unique per store */
  bool want_reconnect;        /* a sibling is back: try now */
  struct piece *if_head, *if_tail; /* in flight, oldest first */
  struct ranges susp;         /* writes of the current handle without
                                 a reply when they ended */
  struct drain *drains;       /* lost handles not known to be over */
  unsigned ndrains;
  uint64_t failures;          /* reconnect attempts failed in a row */
  struct piece *u_head, *u_tail;   /* urgent queue */
  struct piece *q_head, *q_tail;   /* bulk queue */
  unsigned queued;
  unsigned inflight;
};

struct nbd_store {
  struct rb_store s;
  char *uri;
  char *tls_certificates;
  char *tls_psk_file;
  char *tls_username;
  int tls_verify_peer;
  bool want_tls;

  /* Export properties, fixed at open (a reconnect must match size). */
  bool multi_conn;
  bool can_flush;
  bool can_trim;
  bool block_status;
  uint64_t max_request;
  void *zero_buf;             /* emulates ZERO when the server cannot */

  int nconns;
  unsigned max_inflight;
  uint64_t request_timeout_ns;  /* 0: never give up on a live connection */
  struct conn conns[MAX_CONNECTIONS];

  rb_mutex lock;              /* protects everything below and the queues */
  bool threads_started;
  pid_t threads_pid;
  bool quit;
  bool failing;               /* the last piece failed with a server error */
  /* Connections lost with acknowledged but unflushed writes, and how
   * many of those losses a flush() has reported by returning EIO.  A
   * flush() that begins while losses > losses_reported fails.
   */
  uint64_t losses, losses_reported;
  uint64_t epochs;            /* last handle epoch given out */
  struct ranges ready;        /* suspects handed to the core next */
  uint64_t next_attempt_ns;   /* when a reconnect may next be tried */
  uint64_t backoff_ns;
  uint64_t reconnects;
  uint64_t disconnects;
  uint64_t inflight_now;
  uint64_t inflight_max;
  uint64_t requests;
};

static const struct rb_store_ops nbd_ops;
static const struct rb_store_ops nbd_ops_no_extents;

bool
rb_store_is_nbd_uri (const char *uri)
{
  static const char *const schemes[] = {
    "nbd://", "nbds://", "nbd+unix://", "nbds+unix://",
    "nbd+vsock://", "nbds+vsock://",
  };
  size_t i;

  if (uri == NULL)
    return false;
  for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strncmp (uri, schemes[i], strlen (schemes[i])) == 0)
      return true;
  return false;
}

/* Called with the store lock held. */
static void
update_state (struct nbd_store *st)
{
  enum rb_store_state state = RB_STORE_OFFLINE;
  int i;

  for (i = 0; i < st->nconns; i++)
    if (st->conns[i].up) {
      state = st->failing ? RB_STORE_FAILING : RB_STORE_OK;
      break;
    }
  rb_atomic_store (&st->s.state, state);
}

static int
count_up (struct nbd_store *st)
{
  int i, n = 0;

  for (i = 0; i < st->nconns; i++)
    n += st->conns[i].up;
  return n;
}

static void
wake (struct conn *c)
{
  uint64_t one = 1;

  /* EAGAIN only if the counter is about to overflow: it is awake. */
  if (write (c->wakefd, &one, sizeof one) == -1 && errno != EAGAIN)
    rb_log ("nbd: eventfd write: %m (ignored)");
}

static void
ranges_add (struct ranges *r, uint64_t offset, uint64_t count)
{
  struct rb_store_range *last = r->len ? &r->v[r->len - 1] : NULL;

  r->bytes += count;
  if (last && last->offset + last->count == offset) {
    last->count += count;
    return;
  }
  if (r->len == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 16;
    struct rb_store_range *v = realloc (r->v, cap * sizeof *v);

    if (v == NULL) {
      if (!r->wide) {
        r->wide = true;
        r->wide_lo = offset;
        r->wide_hi = offset + count;
      }
      r->wide_lo = RB_MIN (r->wide_lo, offset);
      r->wide_hi = RB_MAX (r->wide_hi, offset + count);
      return;
    }
    r->v = v;
    r->cap = cap;
  }
  r->v[r->len++] = (struct rb_store_range) { offset, count };
}

/* Append all of 'from' to 'to' and empty 'from'. */
static void
ranges_move (struct ranges *to, struct ranges *from)
{
  size_t i;

  for (i = 0; i < from->len; i++)
    ranges_add (to, from->v[i].offset, from->v[i].count);
  if (from->wide)
    ranges_add (to, from->wide_lo, from->wide_hi - from->wide_lo);
  free (from->v);
  memset (from, 0, sizeof *from);
}

static bool
ranges_empty (const struct ranges *r)
{
  return r->len == 0 && !r->wide;
}

/* Errors that mean "the connection is gone" are reported as EIO: it is
 * what an NBD client can be told (nbdkit turns unknown errnos into
 * EINVAL) and what the documentation promises for unloaded chunks.
 * The cause is replaced unless it already says more than
 * server_error.
 */
static const char server_error[] = "the server replied with an error";

static int
map_errno (int err, const char **cause)
{
  switch (err) {
  case 0:
    return 0;
  case ENOTCONN:
  case ESHUTDOWN:
  case ECONNRESET:
  case EPIPE:
    if (*cause == NULL || *cause == server_error)
      *cause = "connection to the server lost";
    return EIO;
  default:
    return err;
  }
}

/* A write whose outcome is unknown: sent (as far as we can tell), and
 * no reply from the server (libnbd aborts commands of a dead handle
 * with ENOTCONN, which no server reply maps to).
 */
static bool
outcome_unknown (const struct piece *p)
{
  return (p->op == P_WRITE || p->op == P_ZERO) && p->sent &&
    (!p->completed || p->err == ENOTCONN);
}

/* Finish one piece: tell its batch, account for it.  Runs on the
 * connection's thread (or in submit for pieces never queued).
 */
static void
finalize (struct piece *p, const char *cause)
{
  struct nbd_store *st = p->conn ? p->conn->st : NULL;
  struct batch *b = p->batch;
  int err = map_errno (p->err, &cause);

  if (st) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    struct conn *c = p->conn;

    if (p->issued) {
      c->inflight--;
      st->inflight_now--;
      if (p->iprev)
        p->iprev->inext = p->inext;
      else
        c->if_head = p->inext;
      if (p->inext)
        p->inext->iprev = p->iprev;
      else
        c->if_tail = p->iprev;
      /* Remembered before the caller learns of the failure (and may
       * write the range again elsewhere).
       */
      if (outcome_unknown (p))
        ranges_add (&c->susp, p->offset, p->count);
    }
    /* A server error makes the store "failing"; a lost connection is
     * shown as offline instead, by update_state.  Only a write or flush
     * that succeeds clears it: reads working says nothing about whether
     * the data we must write back can get there.
     */
    if (p->issued && p->err != 0 && p->conn->up && err == p->err)
      st->failing = true;
    else if (p->err == 0 && p->op != P_READ && p->op != P_EXTENTS)
      st->failing = false;
    update_state (st);
  }

  rb_mutex_lock (&b->lock);
  if (err != 0) {
    if (p->io && p->io->err == 0)
      p->io->err = err;
    if (b->err == 0) {
      b->err = err;
      snprintf (b->msg, sizeof b->msg,
                "nbd: %s of %" PRIu64 " bytes at offset %" PRIu64 "%s%s",
                op_names[p->op], p->count, p->offset,
                cause ? ": " : "", cause ? cause : "");
    }
  }
  if (--b->pending == 0)
    rb_cond_broadcast (&b->cond);
  /* After this unlock the waiter may free the piece and the batch. */
  rb_mutex_unlock (&b->lock);
}

static int
piece_complete (void *vp, int *error)
{
  struct piece *p = vp;

  struct conn *c = p->conn;

  p->completed = true;
  p->err = *error;
  c->last_progress_ns = rb_now_ns ();
  if (p->err == 0) {
    if (p->op == P_WRITE || p->op == P_ZERO)
      c->write_gen++;
    else if (p->op == P_FLUSH && p->gen > c->flushed_gen)
      c->flushed_gen = p->gen;
  }
  return 1;                   /* retire the command automatically */
}

static void
piece_free (void *vp)
{
  struct piece *p = vp;

  p->freed = true;
  if (p->issuing)             /* the issuer finalizes after the call */
    return;
  if (!p->completed) {        /* handle closed with the command pending */
    p->err = ENOTCONN;
    finalize (p, "connection to the server lost");
  }
  else
    finalize (p, p->err ? server_error : NULL);
}

/* base:allocation extents.  "Hole" for ramback means "reads as zeroes"
 * (the core leaves such chunks zero in RAM without reading them), which
 * is LIBNBD_STATE_ZERO; an unallocated extent that does not read as zero
 * (e.g. backed by something else) is data.
 */
static int
extent_cb (void *vp, const char *metacontext, uint64_t offset,
           uint32_t *entries, size_t nr_entries, int *error)
{
  struct piece *p = vp;
  struct extents *e = p->ext;
  uint64_t pos = offset;
  size_t i;

  if (strcmp (metacontext, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0)
    return 0;
  for (i = 0; i + 1 < nr_entries; i += 2) {
    uint64_t len = entries[i];
    bool data = (entries[i + 1] & LIBNBD_STATE_ZERO) == 0;

    if (len == 0)
      break;
    if (e->data_start == UINT64_MAX) {
      if (data) {
        e->data_start = pos;
        e->data_end = pos + len;
      }
    }
    else if (data && e->data_end == pos)
      e->data_end = pos + len;
    else
      break;                  /* the data run ended: enough */
    pos += len;
  }
  if (pos - offset > e->covered)
    e->covered = pos - offset;
  return 0;
}

/* Copy libnbd's message for this thread into why, without the
 * trailing ": <strerror>" that rb_set_error() appends again.
 */
static void
nbd_reason (char *why, size_t whylen, int err)
{
  const char *msg = nbd_get_error ();
  const char *es = strerror (err);
  size_t n, m = strlen (es);

  snprintf (why, whylen, "%s", msg ? msg : "unknown error");
  n = strlen (why);
  if (n > m + 2 && strcmp (why + n - m, es) == 0 &&
      strncmp (why + n - m - 2, ": ", 2) == 0)
    why[n - m - 2] = '\0';
}

/* Issue one piece on the connection's handle.  Connection thread only. */
static void
issue (struct conn *c, struct piece *p)
{
  struct nbd_store *st = c->st;
  struct nbd_handle *h = c->nbd;
  nbd_completion_callback cb = {
    .callback = piece_complete, .user_data = p, .free = piece_free,
  };
  int64_t cookie = -1;

  /* Died under an earlier piece of this round: this one never goes
   * out (conn_lost follows).
   */
  if (nbd_aio_is_dead (h) || nbd_aio_is_closed (h)) {
    p->err = ENOTCONN;
    finalize (p, "connection to the server lost");
    return;
  }
  p->issuing = true;
  p->sent = true;
  switch (p->op) {
  case P_READ:
    cookie = nbd_aio_pread (h, p->buf, p->count, p->offset, cb, 0);
    break;
  case P_WRITE:
    cookie = nbd_aio_pwrite (h, p->buf, p->count, p->offset, cb, 0);
    break;
  case P_ZERO:
    /* Without NBD_CMD_FLAG_NO_HOLE the server may trim the range. */
    if (st->s.can_zero)
      cookie = nbd_aio_zero (h, p->count, p->offset, cb, 0);
    else
      cookie = nbd_aio_pwrite (h, st->zero_buf, p->count, p->offset, cb, 0);
    break;
  case P_FLUSH:
    /* Covers the writes completed on this connection before it. */
    p->gen = c->write_gen;
    cookie = nbd_aio_flush (h, cb, 0);
    break;
  case P_EXTENTS:
    cookie = nbd_aio_block_status (h, p->count, p->offset,
                                   (nbd_extent_callback) {
                                     .callback = extent_cb, .user_data = p },
                                   cb, 0);
    break;
  }
  p->issuing = false;

  if (cookie == -1) {
    /* .free has run already; nobody else will finalize it. */
    char cause[160];

    /* Refused by a live handle: it never went out.  If the handle died
     * in the call, part of it may have.
     */
    if (!nbd_aio_is_dead (h) && !nbd_aio_is_closed (h))
      p->sent = false;
    p->err = nbd_get_errno () ? nbd_get_errno () : EIO;
    nbd_reason (cause, sizeof cause, p->err);
    finalize (p, cause);
  }
  else if (p->freed)
    piece_free (p);
}

/* Take pieces off the queues: every urgent one, and bulk ones while
 * there are in-flight slots.  Store lock held.
 */
static struct piece *
dequeue (struct conn *c, bool for_issue)
{
  struct nbd_store *st = c->st;
  struct piece *list = NULL, **tail = &list, *p;
  uint64_t now = for_issue ? rb_now_ns () : 0;

  while ((p = c->u_head) != NULL ||
         ((p = c->q_head) != NULL &&
          (!for_issue || c->inflight < st->max_inflight))) {
    if (p == c->u_head) {
      c->u_head = p->next;
      if (c->u_head == NULL)
        c->u_tail = NULL;
    }
    else {
      c->q_head = p->next;
      if (c->q_head == NULL)
        c->q_tail = NULL;
    }
    p->next = NULL;
    *tail = p;
    tail = &p->next;
    c->queued--;
    if (for_issue) {
      p->issued = true;
      p->issued_ns = now;
      p->inext = NULL;
      p->iprev = c->if_tail;
      if (c->if_tail)
        c->if_tail->inext = p;
      else
        c->if_head = p;
      c->if_tail = p;
      if (c->inflight++ == 0)
        c->last_progress_ns = now;
      st->requests++;
      if (++st->inflight_now > st->inflight_max)
        st->inflight_max = st->inflight_now;
    }
  }
  return list;
}

static void
fail_list (struct piece *list, const char *cause)
{
  struct piece *p, *next;

  for (p = list; p; p = next) {
    next = p->next;
    p->err = EIO;
    finalize (p, cause);
  }
}

/* Bounded wait on a handle until 'done' or the deadline. */
static int
poll_until (struct nbd_handle *h, int (*done) (struct nbd_handle *),
            uint64_t deadline)
{
  while (!done (h)) {
    uint64_t now = rb_now_ns ();
    int r;

    if (nbd_aio_is_dead (h) || nbd_aio_is_closed (h))
      return -1;
    if (now >= deadline) {
      errno = ETIMEDOUT;
      return -1;
    }
    r = nbd_poll (h, (int) ((deadline - now + 999999) / 1000000));
    if (r == -1)
      return -1;
  }
  return 0;
}

/* Open one connection, bounded by timeout_ms.  On failure returns NULL
 * and describes the reason in 'why' (with errno set).
 */
static struct nbd_handle *
connect_one (struct nbd_store *st, int idx, int timeout_ms,
             char *why, size_t whylen)
{
  struct nbd_handle *h;
  char name[32];
  int err;

  h = nbd_create ();
  if (h == NULL) {
    err = nbd_get_errno () ? nbd_get_errno () : ENOMEM;
    nbd_reason (why, whylen, err);
    errno = err;
    return NULL;
  }
  snprintf (name, sizeof name, "ramback-%d", idx);
  if (nbd_set_handle_name (h, name) == -1 ||
      nbd_add_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1 ||
      nbd_set_uri_allow_local_file (h, true) == -1 ||
      /* Buffers are ours and an error means the data is not used. */
      nbd_set_pread_initialize (h, false) == -1)
    goto fail;
  if (st->tls_certificates &&
      nbd_set_tls_certificates (h, st->tls_certificates) == -1)
    goto fail;
  if (st->tls_psk_file && nbd_set_tls_psk_file (h, st->tls_psk_file) == -1)
    goto fail;
  if (st->tls_username && nbd_set_tls_username (h, st->tls_username) == -1)
    goto fail;
  if (st->tls_verify_peer >= 0 &&
      nbd_set_tls_verify_peer (h, st->tls_verify_peer) == -1)
    goto fail;

  if (nbd_aio_connect_uri (h, st->uri) == -1)
    goto fail;
  if (poll_until (h, nbd_aio_is_ready, rb_deadline_ms (timeout_ms)) == -1) {
    if (errno == ETIMEDOUT && !nbd_aio_is_dead (h)) {
      snprintf (why, whylen, "no answer from the server within %d ms",
                timeout_ms);
      nbd_close (h);
      errno = ETIMEDOUT;
      return NULL;
    }
    goto fail;
  }
  return h;

 fail:
  err = nbd_get_errno () ? nbd_get_errno () : EIO;
  nbd_reason (why, whylen, err);
  nbd_close (h);
  errno = err;
  return NULL;
}

/* A reconnected export must still be the same disk. */
static int
check_same_export (struct nbd_store *st, struct nbd_handle *h,
                   char *why, size_t whylen)
{
  int64_t size = nbd_get_size (h);

  if (size != (int64_t) st->s.size) {
    snprintf (why, whylen,
              "export size is now %" PRIi64 ", was %" PRIu64, size,
              st->s.size);
    return -1;
  }
  if (!st->s.read_only && nbd_is_read_only (h) == 1) {
    snprintf (why, whylen, "export is read-only now");
    return -1;
  }
  return 0;
}

/* The socket under a new handle.  TCP: keepalive and a user timeout,
 * so that a peer that is really gone (host down, link cut) is noticed
 * within about KEEPALIVE_S seconds even while we only wait for replies,
 * whereas a live server that is merely slow answers the probes and is
 * waited for.  Returns a duplicate of the socket (see "Writes of a lost
 * connection" at the top), or -1 if none could be made.
 */
static int
sock_setup (struct nbd_store *st, struct nbd_handle *h)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int fd = nbd_aio_get_fd (h), dfd;

  if (fd == -1) {
    rb_log ("nbd: %s: no socket to watch: %s", st->uri, nbd_get_error ());
    return -1;
  }
  if (getsockname (fd, (struct sockaddr *) &ss, &len) == 0 &&
      (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
    int on = 1, idle = KEEPALIVE_IDLE_S, intvl = KEEPALIVE_INTVL_S;
    int cnt = KEEPALIVE_CNT;
    unsigned user_ms = KEEPALIVE_S * 1000;

    if (setsockopt (fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == -1 ||
        setsockopt (fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) == -1 ||
        setsockopt (fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl,
                    sizeof intvl) == -1 ||
        setsockopt (fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) == -1 ||
        setsockopt (fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms,
                    sizeof user_ms) == -1)
      rb_log ("nbd: %s: TCP keepalive: %s (ignored)", st->uri,
              rb_strerror (errno));
  }
  dfd = fcntl (fd, F_DUPFD_CLOEXEC, 3);
  if (dfd == -1)
    rb_log ("nbd: %s: duplicating the socket: %s (the end of a lost "
            "connection cannot be watched)", st->uri, rb_strerror (errno));
  return dfd;
}

/* Hand a drain's ranges to the core (through take_suspects) and forget
 * it.  Store lock held; connection thread.
 */
static void
drain_release (struct conn *c, struct drain *d, const char *how)
{
  struct nbd_store *st = c->st;
  struct drain **pp;

  for (pp = &c->drains; *pp != d; pp = &(*pp)->next)
    ;
  *pp = d->next;
  c->ndrains--;
  c->drains_full_logged = false;
  rb_log ("nbd: connection %d to %s: %s; %" PRIu64 " bytes whose writes "
          "had no reply will be written again", c->idx, st->uri, how,
          d->r.bytes);
  ranges_move (&st->ready, &d->r);
  if (d->fd >= 0)
    close (d->fd);
  free (d);
}

/* Connection thread: bring the connection back. */
static void
reconnect (struct conn *c)
{
  struct nbd_store *st = c->st;
  char why[200];
  struct nbd_handle *h;
  struct drain *d, *next;
  int i, dfd = -1;

  h = connect_one (st, c->idx, CONNECT_TIMEOUT_MS, why, sizeof why);
  if (h && check_same_export (st, h, why, sizeof why) == -1) {
    nbd_close (h);
    h = NULL;
  }
  /* libnbd takes the handle's lock: never under ours (finalize takes
   * ours from libnbd's callbacks).
   */
  if (h)
    dfd = sock_setup (st, h);

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
  if (h == NULL) {
    uint64_t now = rb_now_ns ();

    /* Several connections may fail in the same round: back off once. */
    if (now >= st->next_attempt_ns) {
      st->next_attempt_ns = now + st->backoff_ns;
      st->backoff_ns = RB_MIN (st->backoff_ns * 2, BACKOFF_MAX_NS);
    }
    /* Log the 1st, 2nd, 4th, 8th ... failure: a server that stays
     * away must not flood the log.
     */
    c->failures++;
    if ((c->failures & (c->failures - 1)) == 0)
      rb_log ("nbd: reconnect %d to %s failed (%" PRIu64 " time%s): %s",
              c->idx, st->uri, c->failures, c->failures == 1 ? "" : "s",
              why);
    return;
  }
  c->nbd = h;
  c->sockdup = dfd;
  c->epoch = ++st->epochs;
  c->up = true;
  c->failures = 0;
  st->reconnects++;
  st->backoff_ns = BACKOFF_MIN_NS;
  st->next_attempt_ns = 0;
  st->failing = false;
  update_state (st);
  for (i = 0; i < st->nconns; i++)
    if (!st->conns[i].up && !st->conns[i].want_reconnect) {
      st->conns[i].want_reconnect = true;
      wake (&st->conns[i]);
    }
  rb_log ("nbd: connection %d to %s is back (%d of %d up)",
          c->idx, st->uri, count_up (st), st->nconns);
  /* Lost connections whose end could not be watched: the server is
   * reachable again, which is all we will ever know.
   */
  for (d = c->drains; d; d = next) {
    next = d->next;
    if (d->unknown)
      drain_release (c, d, "reconnected (the end of the old connection "
                     "could not be seen)");
  }
}

/* Errors after which the socket says nothing more about the server:
 * the network is gone, the server may still be running our requests.
 */
static bool
end_unknowable (int err)
{
  switch (err) {
  case ETIMEDOUT:
  case EHOSTUNREACH:
  case ENETUNREACH:
  case EHOSTDOWN:
  case ENETDOWN:
    return true;
  default:
    return false;
  }
}

/* Connection thread: the handle died, or we give up on it (give_up:
 * request-timeout=).  Closing it runs .free for every command still in
 * flight, which fails those pieces and notes the writes among them as
 * suspect (finalize); they move to a drain that watches for the server
 * to close its end.
 */
static void
conn_lost (struct conn *c, const char *why, bool give_up)
{
  struct nbd_store *st = c->st;
  struct nbd_handle *h = c->nbd;
  int err = give_up ? 0 : nbd_get_errno ();
  int fd = c->sockdup;
  struct drain *d = NULL;
  uint64_t bytes = 0;

  /* Before anything changes: tests/test-store-nbd.c acts on this line
   * to queue work on a connection that is dead but still counted up.
   */
  rb_log ("nbd: connection %d to %s lost: %s", c->idx, st->uri, why);
  /* A connection given up is alive: ask the server to end it (it then
   * finishes what it is executing and closes).
   */
  if (give_up && !nbd_aio_is_dead (h) && !nbd_aio_is_closed (h) &&
      nbd_aio_disconnect (h, 0) == -1)
    rb_log ("nbd: connection %d: disconnect: %s", c->idx, nbd_get_error ());
  c->nbd = NULL;
  c->sockdup = -1;
  nbd_close (h);
  /* Our side is done: the server reads end-of-file. */
  if (fd >= 0)
    shutdown (fd, SHUT_WR);

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    c->up = false;
    st->disconnects++;
    /* Writes acknowledged but not flushed may have died with the
     * server (its cache): flushes must say so.
     */
    if (c->write_gen > c->flushed_gen)
      st->losses++;
    c->write_gen = c->flushed_gen = 0;
    if (!ranges_empty (&c->susp)) {
      d = calloc (1, sizeof *d);
      if (d == NULL)              /* cannot watch: hand them over now */
        ranges_move (&st->ready, &c->susp);
      else {
        ranges_move (&d->r, &c->susp);
        bytes = d->r.bytes;
        d->fd = fd;
        fd = -1;
        d->unknown = d->fd < 0 || end_unknowable (err);
        if (d->unknown && d->fd >= 0) {
          close (d->fd);
          d->fd = -1;
        }
        d->next = c->drains;
        c->drains = d;
        c->ndrains++;
      }
    }
    if (count_up (st) == 0) {
      /* The first attempt may be made at once. */
      st->next_attempt_ns = 0;
      st->backoff_ns = BACKOFF_MIN_NS;
    }
    update_state (st);
  }
  if (fd >= 0)
    close (fd);
  if (d)
    rb_log ("nbd: connection %d: %" PRIu64 " bytes of writes without a "
            "reply stay suspect until %s", c->idx, bytes,
            d->unknown ? "the connection is re-established"
            : "the server has closed the old connection");
}

/* Connection thread: read and drop what servers still send on lost
 * connections; end-of-file (or a reset) means the server has closed
 * its end, so its requests are over.  fds[i] belongs to dv[i].
 */
static void
drain_events (struct conn *c, const struct pollfd *fds, struct drain **dv,
              size_t n)
{
  struct nbd_store *st = c->st;
  char buf[DRAIN_BUF];
  size_t i;

  for (i = 0; i < n; i++) {
    int err = 0;
    bool open = true;

    if (fds[i].revents == 0)
      continue;
    for (;;) {
      ssize_t r = recv (dv[i]->fd, buf, sizeof buf, MSG_DONTWAIT);

      if (r > 0)
        continue;
      if (r == -1 && errno == EINTR)
        continue;
      if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
        break;
      open = false;
      err = r == 0 ? 0 : errno;
      break;
    }
    if (open)
      continue;
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);

      if (!end_unknowable (err))
        drain_release (c, dv[i], err ? "the server reset the old connection"
                       : "the server closed the old connection");
      else if (c->up)
        drain_release (c, dv[i], "the old connection failed and the "
                       "connection is back");
      else {
        close (dv[i]->fd);
        dv[i]->fd = -1;
        dv[i]->unknown = true;
      }
    }
  }
}

/* The drains' sockets to poll; returns how many (at most MAX_DRAINS). */
static size_t
drain_fds (struct conn *c, struct pollfd *fds, struct drain **dv)
{
  struct drain *d;
  size_t n = 0;

  for (d = c->drains; d && n < MAX_DRAINS; d = d->next)
    if (d->fd >= 0) {
      fds[n] = (struct pollfd) { .fd = d->fd, .events = POLLIN };
      dv[n++] = d;
    }
  return n;
}

static void
drain_wakefd (struct conn *c)
{
  uint64_t v;

  if (read (c->wakefd, &v, sizeof v) == -1 && errno != EAGAIN)
    rb_log ("nbd: eventfd read: %m (ignored)");
}

/* Sleep until woken or timeout_ms (-1: forever), watching the drains.
 * Used while down.
 */
static void
wait_wake (struct conn *c, int timeout_ms)
{
  struct pollfd fds[1 + MAX_DRAINS];
  struct drain *dv[MAX_DRAINS];
  size_t n;

  fds[0] = (struct pollfd) { .fd = c->wakefd, .events = POLLIN };
  n = drain_fds (c, fds + 1, dv);
  if (poll (fds, 1 + n, timeout_ms) > 0) {
    if (fds[0].revents & POLLIN)
      drain_wakefd (c);
    drain_events (c, fds + 1, dv, n);
  }
}

static void *
conn_thread (void *vp)
{
  struct conn *c = vp;
  struct nbd_store *st = c->st;

  for (;;) {
    struct piece *list, *p, *next;
    bool attempt = false;
    int timeout_ms = -1;
    uint64_t epoch;

    if (c->nbd == NULL) {
      /* Down: reconnect when work is waiting and an attempt is due,
       * else fail the work at once so that nobody waits for a dead
       * server.
       */
      {
        ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
        uint64_t now = rb_now_ns ();

        if (st->quit && c->queued == 0)
          break;
        /* Also retry on the backoff timer without work, so that the
         * state comes back to ok and a lone lost connection returns.
         */
        if (c->want_reconnect || now >= st->next_attempt_ns)
          attempt = !st->quit;
        else
          timeout_ms = (st->next_attempt_ns - now) / 1000000 + 1;
        c->want_reconnect = false;
      }
      if (attempt)
        reconnect (c);
      if (c->nbd == NULL) {
        {
          ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
          list = dequeue (c, false);
        }
        fail_list (list, "backing store offline, reconnecting");
        if (!attempt)
          wait_wake (c, timeout_ms);
        continue;
      }
    }

    /* Up: issue what is queued, then wait for the socket or a wake. */
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
      if (st->quit && c->queued == 0 && c->inflight == 0)
        break;
      list = dequeue (c, true);
      epoch = c->epoch;
    }
    for (p = list; p; p = next) {
      next = p->next;
      /* A FLUSH meant for a handle that is gone covers nothing of it
       * on this one.
       */
      if (p->op == P_FLUSH && p->epoch != 0 && p->epoch != epoch) {
        p->err = ENOTCONN;
        finalize (p, "the connection it was to flush was lost before "
                  "it was sent");
      }
      else
        issue (c, p);
    }
    if (nbd_aio_is_dead (c->nbd) || nbd_aio_is_closed (c->nbd)) {
      conn_lost (c, nbd_get_error () ? nbd_get_error ()
                 : "the server closed the connection", false);
      continue;
    }

    {
      struct pollfd fds[2 + MAX_DRAINS];
      struct drain *dv[MAX_DRAINS];
      unsigned dir = nbd_aio_get_direction (c->nbd);
      unsigned inflight;
      size_t nd;
      int r;

      fds[0].fd = nbd_aio_get_fd (c->nbd);
      fds[0].events = 0;
      if (dir & LIBNBD_AIO_DIRECTION_READ)
        fds[0].events |= POLLIN;
      if (dir & LIBNBD_AIO_DIRECTION_WRITE)
        fds[0].events |= POLLOUT;
      fds[0].revents = 0;
      fds[1].fd = c->wakefd;
      fds[1].events = POLLIN;
      fds[1].revents = 0;
      nd = drain_fds (c, fds + 2, dv);
      {
        ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
        inflight = c->inflight;
      }
      if (inflight > 0 && st->request_timeout_ns > 0)
        timeout_ms = 1000;
      r = poll (fds, 2 + nd, timeout_ms);
      if (r == -1 && errno != EINTR) {
        conn_lost (c, "poll failed", false);
        continue;
      }
      if (fds[1].revents & POLLIN)
        drain_wakefd (c);
      if (r > 0)
        drain_events (c, fds + 2, dv, nd);
      if (fds[0].revents)       /* the socket moves: the server lives */
        c->last_progress_ns = rb_now_ns ();
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR))
        nbd_aio_notify_read (c->nbd);
      else if (fds[0].revents & POLLOUT)
        nbd_aio_notify_write (c->nbd);
      if (nbd_aio_is_dead (c->nbd) || nbd_aio_is_closed (c->nbd)) {
        conn_lost (c, nbd_get_error () ? nbd_get_error ()
                   : "the server closed the connection", false);
        continue;
      }
      /* request-timeout=: give up on a server that stops answering.
       * It measures time without any socket activity while requests
       * are in flight, and only a poll that found the socket idle
       * counts, so that a stall of this thread (a loaded machine, a
       * sanitizer) with replies waiting is not taken for a dead server,
       * and a slow link that keeps moving bytes is not either.  The
       * connection is closed gracefully and watched as a drain; with
       * MAX_DRAINS of those still open we wait instead.
       */
      if (st->request_timeout_ns > 0 && fds[0].revents == 0 &&
          inflight > 0 && nbd_aio_in_flight (c->nbd) > 0 &&
          rb_now_ns () - c->last_progress_ns > st->request_timeout_ns) {
        if (c->ndrains < MAX_DRAINS) {
          char why[80];

          snprintf (why, sizeof why, "no reply from the server for %" PRIu64
                    " s (request-timeout)",
                    st->request_timeout_ns / 1000000000);
          conn_lost (c, why, true);
          continue;
        }
        if (!c->drains_full_logged) {
          c->drains_full_logged = true;
          rb_log ("nbd: connection %d to %s: no reply for %" PRIu64 " s, "
                  "but %d lost connections are still open on the server: "
                  "waiting", c->idx, st->uri,
                  st->request_timeout_ns / 1000000000, MAX_DRAINS);
        }
      }
    }
  }
  return NULL;
}

/* Start the connection threads on first use, and again in a child of
 * fork (the threads do not exist there).
 */
static int
ensure_threads (struct nbd_store *st)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
  pid_t pid = getpid ();
  int i;

  if (st->threads_started && st->threads_pid == pid)
    return 0;
  for (i = 0; i < st->nconns; i++) {
    if (rb_thread_create (&st->conns[i].thread, conn_thread,
                          &st->conns[i]) == -1) {
      int err = errno;

      /* Threads already started keep running; close() joins them. */
      st->nconns = i;
      st->threads_started = i > 0;
      st->threads_pid = pid;
      rb_set_error (err, "nbd: starting connection thread");
      return -1;
    }
  }
  st->threads_started = true;
  st->threads_pid = pid;
  return 0;
}

/* Pick the connection for the next piece: the least loaded one that is
 * up; if none is up, spread over all (each will attempt a reconnect).
 * Store lock held.
 */
static struct conn *
pick_conn (struct nbd_store *st, unsigned *rr)
{
  struct conn *best = NULL;
  int i;

  for (i = 0; i < st->nconns; i++) {
    struct conn *c = &st->conns[i];

    if (c->up &&
        (best == NULL || c->queued + c->inflight < best->queued + best->inflight))
      best = c;
  }
  if (best == NULL)
    best = &st->conns[(*rr)++ % st->nconns];
  return best;
}

static void
enqueue (struct conn *c, struct piece *p)
{
  p->conn = c;
  if (p->urgent) {
    if (c->u_tail)
      c->u_tail->next = p;
    else
      c->u_head = p;
    c->u_tail = p;
  }
  else {
    if (c->q_tail)
      c->q_tail->next = p;
    else
      c->q_head = p;
    c->q_tail = p;
  }
  c->queued++;
}

/* Queue the pieces (on piece->conn if set, else on the least loaded
 * connection) and wait for all of them.  Returns 0 or -1 with the
 * error recorded.  If every connection is down and no reconnect attempt
 * is due yet, fails at once with EIO.
 */
static int
run_pieces (struct nbd_store *st, struct piece *pieces, size_t n)
{
  struct batch b = { .pending = n };
  bool woken[MAX_CONNECTIONS] = { false };
  unsigned rr = 0;
  size_t i;
  int r = 0;

  if (n == 0)
    return 0;
  if (ensure_threads (st) == -1)
    return -1;

  rb_mutex_init (&b.lock);
  rb_cond_init (&b.cond);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    uint64_t now = rb_now_ns ();

    if (count_up (st) == 0 && now < st->next_attempt_ns) {
      unsigned long ms = (st->next_attempt_ns - now) / 1000000;

      for (i = 0; i < n; i++)
        if (pieces[i].io)
          pieces[i].io->err = EIO;
      rb_set_error (EIO, "nbd: %s: backing store offline "
                    "(next reconnect attempt in %lu ms)", st->uri, ms);
      r = -1;
      goto out;
    }
    for (i = 0; i < n; i++) {
      struct conn *c;

      pieces[i].batch = &b;
      c = pieces[i].conn ? pieces[i].conn : pick_conn (st, &rr);
      enqueue (c, &pieces[i]);
      woken[c->idx] = true;
    }
  }
  for (i = 0; i < (size_t) st->nconns; i++)
    if (woken[i])
      wake (&st->conns[i]);

  rb_mutex_lock (&b.lock);
  while (b.pending > 0)
    rb_cond_wait (&b.cond, &b.lock);
  rb_mutex_unlock (&b.lock);
  if (b.err != 0) {
    rb_set_error (b.err, "%s", b.msg);
    r = -1;
  }

 out:
  rb_cond_destroy (&b.cond);
  rb_mutex_destroy (&b.lock);
  return r;
}

static int
nbd_store_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct nbd_store *st = s->handle;
  CLEANUP_FREE struct piece *pieces = NULL;
  size_t i, npieces = 0, k = 0;
  uint64_t total = 0;
  int first_err = 0;

  /* Check everything first, count the pieces. */
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];
    uint64_t step = io->op == RB_IO_ZERO && s->can_zero
      ? MAX_ZERO_REQUEST : st->max_request;

    io->err = 0;
    if (io->count == 0)
      continue;
    if (io->offset > s->size || io->count > s->size - io->offset) {
      io->err = EINVAL;
      if (!first_err) {
        first_err = EINVAL;
        rb_set_error (EINVAL, "nbd: request of %" PRIu64 " bytes at offset %"
                      PRIu64 " beyond the end of the export (%" PRIu64 ")",
                      io->count, io->offset, s->size);
      }
      continue;
    }
    if (io->op != RB_IO_READ && s->read_only) {
      io->err = EROFS;
      if (!first_err) {
        first_err = EROFS;
        rb_set_error (EROFS, "nbd: %s", st->uri);
      }
      continue;
    }
    npieces += (io->count + step - 1) / step;
    total += io->count;
  }
  if (first_err) {
    errno = first_err;
    return -1;
  }
  if (npieces == 0)
    return 0;

  pieces = calloc (npieces, sizeof *pieces);
  if (pieces == NULL) {
    rb_set_error (errno, "nbd: calloc");
    return -1;
  }
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];
    uint64_t step = io->op == RB_IO_ZERO && s->can_zero
      ? MAX_ZERO_REQUEST : st->max_request;
    uint64_t done;

    for (done = 0; done < io->count; done += step) {
      struct piece *p = &pieces[k++];

      p->io = io;
      p->op = io->op == RB_IO_READ ? P_READ
        : io->op == RB_IO_WRITE ? P_WRITE : P_ZERO;
      p->buf = io->op == RB_IO_ZERO ? NULL : (char *) io->buf + done;
      p->offset = io->offset + done;
      p->count = RB_MIN (step, io->count - done);
      p->urgent = total <= URGENT_BYTES;
    }
  }
  return run_pieces (st, pieces, npieces);
}

static int
nbd_store_flush (struct rb_store *s)
{
  struct nbd_store *st = s->handle;
  struct piece pieces[MAX_CONNECTIONS];
  size_t n = 0;
  uint64_t seen;
  bool lost;
  int i, r;

  memset (pieces, 0, sizeof pieces);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);

    /* A connection was lost with unflushed writes and no flush() has
     * reported it yet: this flush covers those writes (everything
     * written before it) and cannot make them durable.  Every flush
     * that begins before the first one returns with the error fails,
     * not only the first to look.
     */
    seen = st->losses;
    lost = st->losses > st->losses_reported;

    /* One FLUSH on every connection that is up, pinned to its handle;
     * if none is up, one on the first, for any handle, which makes it
     * reconnect (a new connection has no unflushed writes of its own,
     * and any lost one was counted in 'losses' when it went down).
     * Still sent when 'lost': whatever can be made durable is.
     */
    if (st->can_flush) {
      for (i = 0; i < st->nconns; i++)
        if (st->conns[i].up) {
          pieces[n].conn = &st->conns[i];
          pieces[n].epoch = st->conns[i].epoch;
          n++;
        }
      if (n == 0)
        pieces[n++].conn = &st->conns[0];
    }
  }
  for (i = 0; i < (int) n; i++) {
    pieces[i].op = P_FLUSH;
    pieces[i].urgent = true;
  }
  r = run_pieces (st, pieces, n);
  if (lost) {
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
      if (seen > st->losses_reported)
        st->losses_reported = seen;
    }
    /* The core writes everything since the last good sync again when
     * a sync fails, which is exactly what is needed.
     */
    rb_set_error (EIO, "nbd: %s: a connection was lost before its writes "
                  "were flushed; they must be written again", st->uri);
    return -1;
  }
  return r;
}

/* Suspect ranges whose lost connection is over, for the core to write
 * again (store.h).
 */
static size_t
nbd_store_take_suspects (struct rb_store *s, struct rb_store_range *out,
                         size_t max, bool *pending)
{
  struct nbd_store *st = s->handle;
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
  struct ranges *r = &st->ready;
  size_t n = 0, i;
  int c;

  while (n < max && r->len > 0) {
    size_t k = RB_MIN (max - n, r->len);

    memcpy (out + n, r->v, k * sizeof *out);
    memmove (r->v, r->v + k, (r->len - k) * sizeof *r->v);
    r->len -= k;
    for (i = n; i < n + k; i++)
      r->bytes -= out[i].count;
    n += k;
  }
  if (n < max && r->wide) {
    out[n++] = (struct rb_store_range) {
      r->wide_lo, r->wide_hi - r->wide_lo,
    };
    r->wide = false;
  }
  if (r->len == 0 && !r->wide)
    r->bytes = 0;
  /* Also the writes noted on a connection that is being lost right
   * now (finalize notes them before their caller learns of the
   * failure; conn_lost moves them to a drain just after).
   */
  *pending = !ranges_empty (r);
  for (c = 0; c < st->nconns; c++)
    if (st->conns[c].drains || !ranges_empty (&st->conns[c].susp))
      *pending = true;
  return n;
}

static int
nbd_store_next_data (struct rb_store *s, uint64_t offset,
                     uint64_t *data, uint64_t *hole)
{
  struct nbd_store *st = s->handle;
  uint64_t pos = offset;

  while (pos < s->size) {
    struct extents e = { .covered = 0, .data_start = UINT64_MAX };
    struct piece p = {
      .op = P_EXTENTS, .offset = pos, .ext = &e, .urgent = true,
      .count = RB_MIN (s->size - pos, (uint64_t) BLOCK_STATUS_SPAN),
    };

    if (run_pieces (st, &p, 1) == -1)
      return -1;
    if (e.data_start != UINT64_MAX) {
      *data = RB_MIN (e.data_start, s->size);
      *hole = RB_MIN (e.data_end, s->size);
      return 0;
    }
    if (e.covered == 0) {     /* the server said nothing: assume data */
      *data = pos;
      *hole = RB_MIN (pos + p.count, s->size);
      return 0;
    }
    pos += e.covered;
  }
  *data = *hole = s->size;
  return 0;
}

static size_t
nbd_store_status (struct rb_store *s, bool json, char *buf, size_t len)
{
  struct nbd_store *st = s->handle;
  uint64_t reconnects, disconnects, inflight_max, requests;
  uint64_t oldest_ms = 0, suspect = 0, now = rb_now_ns ();
  unsigned queued = 0, draining = 0;
  int up, r, i;
  size_t n = 0;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    up = count_up (st);
    suspect = st->ready.bytes;
    for (i = 0; i < st->nconns; i++) {
      struct conn *c = &st->conns[i];
      struct drain *d;

      queued += c->queued;
      if (c->if_head && now > c->if_head->issued_ns)
        oldest_ms = RB_MAX (oldest_ms,
                            (now - c->if_head->issued_ns) / 1000000);
      for (d = c->drains; d; d = d->next) {
        draining++;
        suspect += d->r.bytes;
      }
    }
    reconnects = st->reconnects;
    disconnects = st->disconnects;
    inflight_max = st->inflight_max;
    requests = st->requests;
  }

#define ADVANCE(r) do { if ((r) > 0) n += (size_t) (r); if (n >= len) return len ? len - 1 : 0; } while (0)
  if (json) {
    r = snprintf (buf + n, len - n, ",\"store_uri\":");
    ADVANCE (r);
    r = rb_json_string (buf + n, len - n, st->uri);
    ADVANCE (r);
    r = snprintf (buf + n, len - n,
                  ",\"store_connections_up\":%d"
                  ",\"store_multi_conn\":%s"
                  ",\"store_block_status\":%s"
                  ",\"store_reconnects\":%" PRIu64
                  ",\"store_disconnects\":%" PRIu64
                  ",\"store_requests\":%" PRIu64
                  ",\"store_queued\":%u"
                  ",\"store_oldest_request_ms\":%" PRIu64
                  ",\"store_suspect_bytes\":%" PRIu64
                  ",\"store_draining\":%u"
                  ",\"store_inflight_max\":%" PRIu64
                  ",\"store_inflight_limit\":%u"
                  ",\"store_max_request\":%" PRIu64,
                  up, st->multi_conn ? "true" : "false",
                  st->block_status ? "true" : "false",
                  reconnects, disconnects, requests, queued, oldest_ms,
                  suspect, draining, inflight_max,
                  st->max_inflight, st->max_request);
    ADVANCE (r);
  }
  else {
    r = snprintf (buf + n, len - n,
                  "store_uri: %s\n"
                  "store_connections_up: %d\n"
                  "store_multi_conn: %s\n"
                  "store_block_status: %s\n"
                  "store_reconnects: %" PRIu64 "\n"
                  "store_disconnects: %" PRIu64 "\n"
                  "store_requests: %" PRIu64 "\n"
                  "store_queued: %u\n"
                  "store_oldest_request_ms: %" PRIu64 "\n"
                  "store_suspect_bytes: %" PRIu64 "\n"
                  "store_draining: %u\n"
                  "store_inflight_max: %" PRIu64 "\n"
                  "store_inflight_limit: %u\n"
                  "store_max_request: %" PRIu64 "\n",
                  st->uri, up, st->multi_conn ? "true" : "false",
                  st->block_status ? "true" : "false",
                  reconnects, disconnects, requests, queued, oldest_ms,
                  suspect, draining, inflight_max,
                  st->max_inflight, st->max_request);
    ADVANCE (r);
  }
#undef ADVANCE
  return n;
}

/* Polite disconnect, bounded: a dead server must not stall shutdown. */
static void
disconnect_one (struct nbd_handle *h)
{
  if (nbd_aio_is_ready (h) && nbd_aio_disconnect (h, 0) == 0)
    poll_until (h, nbd_aio_is_closed, rb_deadline_ms (DISCONNECT_TIMEOUT_MS));
  nbd_close (h);
}

static void
nbd_store_close (struct rb_store *s)
{
  struct nbd_store *st;
  bool joined;
  int i;

  if (s == NULL)
    return;
  st = s->handle;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    st->quit = true;
    joined = st->threads_started && st->threads_pid == getpid ();
  }
  for (i = 0; i < st->nconns; i++)
    wake (&st->conns[i]);
  if (joined)
    for (i = 0; i < st->nconns; i++)
      rb_thread_join (st->conns[i].thread);
  for (i = 0; i < MAX_CONNECTIONS; i++) {
    struct conn *c = &st->conns[i];
    struct drain *d, *next;

    if (c->nbd)
      disconnect_one (c->nbd);
    if (c->sockdup >= 0)
      close (c->sockdup);
    if (c->wakefd >= 0)
      close (c->wakefd);
    for (d = c->drains; d; d = next) {
      next = d->next;
      /* The core waits for these before a clean stop (take_suspects
       * says pending); here only if it could not.
       */
      rb_log ("nbd: %s: closing while the server may still run writes "
              "of a lost connection (%" PRIu64 " bytes)", st->uri,
              d->r.bytes);
      if (d->fd >= 0)
        close (d->fd);
      free (d->r.v);
      free (d);
    }
    free (c->susp.v);
  }
  free (st->ready.v);
  rb_mutex_destroy (&st->lock);
  free (st->zero_buf);
  free (st->uri);
  free (st->tls_certificates);
  free (st->tls_psk_file);
  free (st->tls_username);
  free (st);
}

static char *
dup_or_null (const char *str, bool *failed)
{
  char *r;

  if (str == NULL)
    return NULL;
  r = strdup (str);
  if (r == NULL)
    *failed = true;
  return r;
}

struct rb_store *
rb_store_nbd_open (const struct rb_store_params *params)
{
  struct nbd_store *st;
  struct nbd_handle *h;
  bool failed = false;
  char why[200];
  int64_t size, maxb;
  int i, want;

  if (!rb_store_is_nbd_uri (params->uri)) {
    rb_set_error (EINVAL, "nbd: '%s' is not an NBD URI", params->uri);
    return NULL;
  }
  if (params->connections < 0 || params->connections > MAX_CONNECTIONS) {
    rb_set_error (EINVAL, "nbd: connections=%d must be 1..%d",
                  params->connections, MAX_CONNECTIONS);
    return NULL;
  }
  if (params->request_timeout < 0) {
    rb_set_error (EINVAL, "nbd: request-timeout=%d must be positive",
                  params->request_timeout);
    return NULL;
  }
  if (params->max_inflight < 0 || params->max_inflight > MAX_INFLIGHT) {
    rb_set_error (EINVAL, "nbd: inflight=%d must be 1..%d",
                  params->max_inflight, MAX_INFLIGHT);
    return NULL;
  }
  if (strncmp (params->uri, "nbds", 4) != 0 &&
      (params->tls_certificates || params->tls_psk_file ||
       params->tls_username || params->tls_verify_peer >= 0)) {
    rb_set_error (EINVAL, "nbd: tls-* parameters need an nbds:// or "
                  "nbds+unix:// URI, not '%s'", params->uri);
    return NULL;
  }

  st = calloc (1, sizeof *st);
  if (st == NULL) {
    rb_set_error (errno, "nbd: calloc");
    return NULL;
  }
  rb_mutex_init (&st->lock);
  for (i = 0; i < MAX_CONNECTIONS; i++) {
    st->conns[i].st = st;
    st->conns[i].idx = i;
    st->conns[i].wakefd = -1;
    st->conns[i].sockdup = -1;
  }
  st->s.ops = &nbd_ops;
  st->s.handle = st;
  st->uri = dup_or_null (params->uri, &failed);
  st->tls_certificates = dup_or_null (params->tls_certificates, &failed);
  st->tls_psk_file = dup_or_null (params->tls_psk_file, &failed);
  st->tls_username = dup_or_null (params->tls_username, &failed);
  st->tls_verify_peer = params->tls_verify_peer;
  st->backoff_ns = BACKOFF_MIN_NS;
  if (failed) {
    rb_set_error (ENOMEM, "nbd: strdup");
    goto fail;
  }

  /* The first connection tells us what the export is. */
  h = connect_one (st, 0, OPEN_CONNECT_TIMEOUT_MS, why, sizeof why);
  if (h == NULL) {
    rb_set_error (errno, "nbd: %s: %s", params->uri, why);
    goto fail;
  }
  st->conns[0].nbd = h;
  st->conns[0].sockdup = sock_setup (st, h);
  st->conns[0].epoch = ++st->epochs;
  st->conns[0].up = true;
  st->nconns = 1;

  size = nbd_get_size (h);
  if (size <= 0) {
    rb_set_error (size == 0 ? EINVAL : nbd_get_errno (),
                  "nbd: %s: export size: %s", params->uri,
                  size == 0 ? "the export is empty" : nbd_get_error ());
    goto fail;
  }
  st->s.size = size;
  st->s.read_only = params->read_only || nbd_is_read_only (h) == 1;
  st->s.can_zero = nbd_can_zero (h) == 1;
  st->can_trim = nbd_can_trim (h) == 1;
  st->can_flush = nbd_can_flush (h) == 1;
  st->multi_conn = nbd_can_multi_conn (h) == 1;
  st->block_status =
    nbd_can_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
  maxb = nbd_get_block_size (h, LIBNBD_SIZE_MAXIMUM);
  st->max_request = MAX_REQUEST;
  if (maxb > 0 && (uint64_t) maxb < st->max_request)
    st->max_request = maxb;
  if (!st->block_status)
    st->s.ops = &nbd_ops_no_extents;
  if (!st->s.can_zero) {
    st->zero_buf = calloc (1, st->max_request);
    if (st->zero_buf == NULL) {
      rb_set_error (errno, "nbd: calloc");
      goto fail;
    }
  }
  st->max_inflight = params->max_inflight > 0
    ? params->max_inflight : DEFAULT_INFLIGHT;
  st->request_timeout_ns = params->request_timeout * UINT64_C (1000000000);

  want = params->connections;
  if (want == 0)
    want = st->multi_conn ? AUTO_CONNECTIONS : 1;
  else if (want > 1 && !st->multi_conn)
    rb_log ("nbd: %s does not advertise multi-conn; using %d connections "
            "as asked (each is flushed on sync)", params->uri, want);

  for (i = 1; i < want; i++) {
    h = connect_one (st, i, OPEN_CONNECT_TIMEOUT_MS, why, sizeof why);
    if (h == NULL) {
      /* With connections=auto a server that limits its clients just
       * gets fewer; an explicit count is a promise we cannot keep.
       */
      if (params->connections == 0) {
        rb_log ("nbd: %s: connection %d: %s; using %d", params->uri, i,
                why, i);
        break;
      }
      rb_set_error (errno, "nbd: %s: connection %d of %d: %s",
                    params->uri, i + 1, want, why);
      goto fail;
    }
    if (check_same_export (st, h, why, sizeof why) == -1) {
      nbd_close (h);
      rb_set_error (EIO, "nbd: %s: connection %d: %s", params->uri, i, why);
      goto fail;
    }
    st->conns[i].nbd = h;
    st->conns[i].sockdup = sock_setup (st, h);
    st->conns[i].epoch = ++st->epochs;
    st->conns[i].up = true;
    st->nconns = i + 1;
  }
  for (i = 0; i < st->nconns; i++) {
    st->conns[i].wakefd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (st->conns[i].wakefd == -1) {
      rb_set_error (errno, "nbd: eventfd");
      goto fail;
    }
  }
  st->s.connections = st->nconns;
  update_state (st);
  rb_log ("nbd: %s: size %" PRIu64 ", %d connection%s%s, inflight %u, "
          "request %" PRIu64 "%s%s%s", params->uri, st->s.size, st->nconns,
          st->nconns == 1 ? "" : "s", st->multi_conn ? " (multi-conn)" : "",
          st->max_inflight, st->max_request,
          st->s.can_zero ? ", zero" : "", st->can_trim ? ", trim" : "",
          st->block_status ? ", block status" : "");
  return &st->s;

 fail:
  {
    int err = errno;

    nbd_store_close (&st->s);
    errno = err;
  }
  return NULL;
}

static const struct rb_store_ops nbd_ops = {
  .name = "nbd",
  .submit = nbd_store_submit,
  .flush = nbd_store_flush,
  .next_data = nbd_store_next_data,
  .status = nbd_store_status,
  .take_suspects = nbd_store_take_suspects,
  .close = nbd_store_close,
};

/* Without base:allocation every byte counts as data (store.h). */
static const struct rb_store_ops nbd_ops_no_extents = {
  .name = "nbd",
  .submit = nbd_store_submit,
  .flush = nbd_store_flush,
  .next_data = NULL,
  .status = nbd_store_status,
  .take_suspects = nbd_store_take_suspects,
  .close = nbd_store_close,
};
