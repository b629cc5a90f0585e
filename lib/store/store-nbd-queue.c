/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the NBD store's pieces (design notes in store-nbd.c, state
 * and locking in store-nbd.h).  A batch is cut into pieces, queued on
 * the least loaded connection (urgent ones ahead of bulk), issued by
 * that connection's thread, and finalized exactly once from libnbd's
 * .free, which wakes the batch's caller.
 */

#include <config.h>

#include "store-nbd.h"

static const char *const op_names[] = {
  [P_READ] = "pread", [P_WRITE] = "pwrite", [P_ZERO] = "zero",
  [P_FLUSH] = "flush", [P_EXTENTS] = "block_status",
};


/* Called with the store lock held. */
void
nbdstore_update_state (struct nbd_store *st)
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

int
nbdstore_count_up (struct nbd_store *st)
{
  int i, n = 0;

  for (i = 0; i < st->nconns; i++)
    n += st->conns[i].up;
  return n;
}

void
nbdstore_wake (struct conn *c)
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
void
nbdstore_ranges_move (struct ranges *to, struct ranges *from)
{
  size_t i;

  for (i = 0; i < from->len; i++)
    ranges_add (to, from->v[i].offset, from->v[i].count);
  if (from->wide)
    ranges_add (to, from->wide_lo, from->wide_hi - from->wide_lo);
  free (from->v);
  memset (from, 0, sizeof *from);
}

bool
nbdstore_ranges_empty (const struct ranges *r)
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
void
nbdstore_finalize (struct piece *p, const char *cause)
{
  struct nbd_store *st = p->conn ? p->conn->st : NULL;
  struct batch *b = p->batch;
  int err = map_errno (p->err, &cause);

  if (st) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    struct conn *c = p->conn;

    if (p->issued) {
      rb_inflight_end (&c->inflight, &st->counts, &p->ireq, p->err != 0);
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
    nbdstore_update_state (st);
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
    nbdstore_finalize (p, "connection to the server lost");
  }
  else
    nbdstore_finalize (p, p->err ? server_error : NULL);
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
void
nbdstore_nbd_reason (char *why, size_t whylen, int err)
{
  const char *msg = nbd_get_error ();
  const char *es = rb_strerror (err);
  size_t n, m = strlen (es);

  snprintf (why, whylen, "%s", msg ? msg : "unknown error");
  n = strlen (why);
  if (n > m + 2 && strcmp (why + n - m, es) == 0 &&
      strncmp (why + n - m - 2, ": ", 2) == 0)
    why[n - m - 2] = '\0';
}

/* Issue one piece on the connection's handle.  Connection thread only. */
void
nbdstore_issue (struct conn *c, struct piece *p)
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
    nbdstore_finalize (p, "connection to the server lost");
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
    nbdstore_nbd_reason (cause, sizeof cause, p->err);
    nbdstore_finalize (p, cause);
  }
  else if (p->freed)
    piece_free (p);
}

/* Take pieces off the queues: every urgent one, and bulk ones while
 * there are in-flight slots.  Store lock held.
 */
struct piece *
nbdstore_dequeue (struct conn *c, bool for_issue)
{
  struct nbd_store *st = c->st;
  struct piece *list = NULL, **tail = &list, *p;
  uint64_t now = for_issue ? rb_now_ns () : 0;

  while ((p = c->u_head) != NULL ||
         ((p = c->q_head) != NULL &&
          (!for_issue || c->inflight.n < st->max_inflight))) {
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
      if (c->inflight.n == 0)
        c->last_progress_ns = now;
      rb_inflight_issue (&c->inflight, &st->counts, &p->ireq, now);
    }
  }
  return list;
}

void
nbdstore_fail_list (struct piece *list, const char *cause)
{
  struct piece *p, *next;

  for (p = list; p; p = next) {
    next = p->next;
    p->err = EIO;
    nbdstore_finalize (p, cause);
  }
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
        (best == NULL || c->queued + c->inflight.n <
         best->queued + best->inflight.n))
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
int
nbdstore_run_pieces (struct nbd_store *st, struct piece *pieces, size_t n)
{
  struct batch b = { .pending = n };
  bool woken[MAX_CONNECTIONS] = { false };
  unsigned rr = 0;
  size_t i;
  int r = 0;

  if (n == 0)
    return 0;
  if (nbdstore_ensure_threads (st) == -1)
    return -1;

  rb_mutex_init (&b.lock);
  rb_cond_init (&b.cond);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    uint64_t now = rb_now_ns ();

    if (nbdstore_count_up (st) == 0 && now < st->next_attempt_ns) {
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
      nbdstore_wake (&st->conns[i]);

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
