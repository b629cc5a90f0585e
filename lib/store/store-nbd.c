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
 *
 * Files.  This one: the operations of the store (submit, flush,
 * next_data, status, take_suspects, close) and open; its state and lock
 * rules are in store-nbd.h, pieces in store-nbd-queue.c, connections in
 * store-nbd-conn.c, a lost connection in store-nbd-loss.c.  Over 600
 * lines because of the design notes above, which belong to all four.
 */


#include <config.h>

#include "store-nbd.h"

static const struct rb_store_ops nbd_ops;

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

/* A batch whose requests keep to the server's minimum block size (see
 * nbd_store_submit).
 */
static int
submit_aligned (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct nbd_store *st = s->handle;
  CLEANUP_FREE struct piece *pieces = NULL;
  /* Pieces of max_request (a multiple of the minimum block), from the
   * request's own start, or with a minimum block at the multiples of
   * the step, so that no piece splits a block.
   */
  struct rb_store_cut cut = {
    .rw_step = st->max_request,
    .zero_step = s->can_zero ? MAX_ZERO_REQUEST : st->max_request,
    .aligned = s->min_block > 1,
  };
  uint64_t total;
  ssize_t npieces;
  size_t k = 0;

  pieces = rb_store_cut_plan (&cut, s, ios, n, sizeof *pieces, &npieces,
                              &total, "nbd", st->uri);
  if (pieces == NULL)
    return npieces;
  while (rb_store_cut_next (&cut, ios, n)) {
    struct piece *p = &pieces[k++];

    p->op = cut.io->op == RB_IO_READ ? P_READ
      : cut.io->op == RB_IO_WRITE ? P_WRITE : P_ZERO;
    p->io = cut.io;
    p->buf = cut.buf;
    p->offset = cut.offset;
    p->count = cut.count;
    p->urgent = total <= URGENT_BYTES;
  }
  return nbdstore_run_pieces (st, pieces, npieces);
}

/* A server that advertises a minimum block size may refuse smaller or
 * misaligned requests: those are widened to whole blocks (widen.c).
 */
static int
nbd_store_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  return rb_store_submit_widened (s, s->min_block, ios, n, submit_aligned);
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
  r = nbdstore_run_pieces (st, pieces, n);
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
  *pending = !nbdstore_ranges_empty (r);
  for (c = 0; c < st->nconns; c++)
    if (st->conns[c].drains || !nbdstore_ranges_empty (&st->conns[c].susp))
      *pending = true;
  return n;
}

/* Without base:allocation every byte counts as data, as when a store
 * has no next_data (store.h).
 */
static int
nbd_store_next_data (struct rb_store *s, uint64_t offset,
                     uint64_t *data, uint64_t *hole)
{
  struct nbd_store *st = s->handle;
  uint64_t pos = offset;

  if (!st->block_status) {
    *data = RB_MIN (offset, s->size);
    *hole = s->size;
    return 0;
  }
  while (pos < s->size) {
    struct extents e = { .covered = 0, .data_start = UINT64_MAX };
    struct piece p = {
      .op = P_EXTENTS, .offset = pos, .ext = &e, .urgent = true,
      .count = RB_MIN (s->size - pos, (uint64_t) BLOCK_STATUS_SPAN),
    };

    if (nbdstore_run_pieces (st, &p, 1) == -1)
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

static void
nbd_store_status (struct rb_store *s, struct rb_status_out *o)
{
  struct nbd_store *st = s->handle;
  uint64_t reconnects, disconnects;
  uint64_t oldest_ms = 0, suspect = 0, now = rb_now_ns ();
  struct rb_inflight_counts counts;
  unsigned queued = 0, draining = 0;
  int up, i;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    up = nbdstore_count_up (st);
    suspect = st->ready.bytes;
    for (i = 0; i < st->nconns; i++) {
      struct conn *c = &st->conns[i];
      struct drain *d;

      queued += c->queued;
      oldest_ms = RB_MAX (oldest_ms,
                          rb_inflight_oldest_ms (&c->inflight, now));
      for (d = c->drains; d; d = d->next) {
        draining++;
        suspect += d->r.bytes;
      }
    }
    reconnects = st->reconnects;
    disconnects = st->disconnects;
    counts = st->counts;
  }

  rb_status_str (o, "store_uri", st->uri);
  rb_status_u64 (o, "store_connections_up", up);
  rb_status_bool (o, "store_multi_conn", st->multi_conn);
  rb_status_bool (o, "store_block_status", st->block_status);
  rb_status_u64 (o, "store_min_block", s->min_block);
  rb_status_u64 (o, "store_reconnects", reconnects);
  rb_status_u64 (o, "store_disconnects", disconnects);
  rb_status_u64 (o, "store_queued", queued);
  rb_status_u64 (o, "store_suspect_bytes", suspect);
  rb_status_u64 (o, "store_draining", draining);
  rb_status_u64 (o, "store_max_request", st->max_request);
  rb_inflight_status (o, &counts, st->max_inflight, oldest_ms);
}

/* Polite disconnect, bounded: a dead server must not stall shutdown. */
static void
disconnect_one (struct nbd_handle *h)
{
  if (nbd_aio_is_ready (h) && nbd_aio_disconnect (h, 0) == 0)
    nbdstore_poll_until (h, nbd_aio_is_closed, rb_deadline_ms (DISCONNECT_TIMEOUT_MS));
  nbd_close (h);
}

static void
nbd_store_abandon_reads (struct rb_store *s)
{
  struct nbd_store *st = s->handle;
  int i;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    st->abandon_reads = true;
  }
  for (i = 0; i < st->nconns; i++)
    nbdstore_wake (&st->conns[i]);
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
    nbdstore_wake (&st->conns[i]);
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
  int64_t size, maxb, minb;
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
  h = nbdstore_connect_one (st, 0, OPEN_CONNECT_TIMEOUT_MS, why, sizeof why);
  if (h == NULL) {
    rb_set_error (errno, "nbd: %s: %s", params->uri, why);
    goto fail;
  }
  st->conns[0].nbd = h;
  st->conns[0].sockdup = nbdstore_sock_setup (st, h);
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
  minb = nbd_get_block_size (h, LIBNBD_SIZE_MINIMUM);
  /* The protocol allows a minimum of a power of two up to 64 KiB. */
  st->s.min_block = minb > 1 && minb <= 65536 && !(minb & (minb - 1))
    ? (uint32_t) minb : 1;
  st->max_request = MAX_REQUEST;
  if (maxb > 0 && (uint64_t) maxb < st->max_request)
    st->max_request = maxb;
  st->max_request = st->max_request / st->s.min_block * st->s.min_block;
  if (st->max_request == 0) {
    rb_set_error (EINVAL, "nbd: %s: the server's maximum block size (%"
                  PRIi64 ") is below its minimum (%" PRIu32 ")",
                  params->uri, maxb, st->s.min_block);
    goto fail;
  }
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
    h = nbdstore_connect_one (st, i, OPEN_CONNECT_TIMEOUT_MS, why, sizeof why);
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
    if (nbdstore_check_same_export (st, h, why, sizeof why) == -1) {
      nbd_close (h);
      rb_set_error (EIO, "nbd: %s: connection %d: %s", params->uri, i, why);
      goto fail;
    }
    st->conns[i].nbd = h;
    st->conns[i].sockdup = nbdstore_sock_setup (st, h);
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
  nbdstore_update_state (st);
  rb_log ("nbd: %s: size %" PRIu64 ", %d connection%s%s, inflight %u, "
          "request %" PRIu64 ", minimum block %" PRIu32 "%s%s%s",
          params->uri, st->s.size, st->nconns,
          st->nconns == 1 ? "" : "s", st->multi_conn ? " (multi-conn)" : "",
          st->max_inflight, st->max_request, st->s.min_block,
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
  .abandon_reads = nbd_store_abandon_reads,
  .close = nbd_store_close,
};
