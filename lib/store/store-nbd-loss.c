/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: a lost NBD connection (design notes in store-nbd.c, state
 * and locking in store-nbd.h): its in-flight pieces fail, its writes
 * of unknown outcome are kept as suspect until the server can no longer
 * be executing them (the "drains"), and the connection comes back with
 * backoff.
 */

#include <config.h>

#include "store-nbd.h"

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
  nbdstore_ranges_move (&st->ready, &d->r);
  if (d->fd >= 0)
    close (d->fd);
  free (d);
}

/* A connection that stayed up this long counts as healthy when it is
 * lost (a server restarted, a network blip): the first reconnect
 * attempt is made at once.  One lost sooner makes the back-off grow.
 */
#define HEALTHY_NS (UINT64_C (2) * 1000000000)

/* Ask every connection that is down to reconnect now.  Store lock. */
static void
wake_down_locked (struct nbd_store *st)
{
  int i;

  st->next_attempt_ns = 0;
  for (i = 0; i < st->nconns; i++)
    if (!st->conns[i].up && !st->conns[i].want_reconnect) {
      st->conns[i].want_reconnect = true;
      nbdstore_wake (&st->conns[i]);
    }
}

/* Connection thread: c has been up for HEALTHY_NS (or, with timeout,
 * the milliseconds until then, which the caller's poll may wait at
 * most).  The server keeps connections: the back-off starts again from
 * its minimum and the connections still down come back now.
 */
int
nbdstore_conn_proven (struct conn *c, int timeout_ms)
{
  struct nbd_store *st = c->st;
  uint64_t now = rb_now_ns (), age = now - c->up_since_ns;

  if (c->proven)
    return timeout_ms;
  if (age < HEALTHY_NS) {
    int left = (int) ((HEALTHY_NS - age) / 1000000) + 1;
    return timeout_ms < 0 || left < timeout_ms ? left : timeout_ms;
  }
  c->proven = true;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    if (st->backoff_ns != BACKOFF_MIN_NS) {
      st->backoff_ns = BACKOFF_MIN_NS;
      wake_down_locked (st);
    }
  }
  return timeout_ms;
}

/* Connection thread: bring the connection back. */
void
nbdstore_reconnect (struct conn *c)
{
  struct nbd_store *st = c->st;
  char why[200];
  struct nbd_handle *h;
  struct drain *d, *next;
  int dfd = -1;

  h = nbdstore_connect_one (st, c->idx, CONNECT_TIMEOUT_MS, why, sizeof why);
  if (h && nbdstore_check_same_export (st, h, why, sizeof why) == -1) {
    nbd_close (h);
    h = NULL;
  }
  /* libnbd takes the handle's lock: never under ours (finalize takes
   * ours from libnbd's callbacks).
   */
  if (h)
    dfd = nbdstore_sock_setup (st, h);

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
  if (h == NULL) {
    uint64_t now = rb_now_ns ();

    /* Several connections may fail in the same round: back off once. */
    if (now >= st->next_attempt_ns) {
      st->next_attempt_ns = now + st->backoff_ns;
      st->backoff_ns = rbi_backoff_next_ns (st->backoff_ns);
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
  c->up_since_ns = rb_now_ns ();
  c->proven = false;
  st->reconnects++;
  st->failing = false;
  nbdstore_update_state (st);
  /* The back-off is kept until the connection has stayed up a while
   * (nbdstore_conn_proven): a handshake is not enough.  Without young
   * losses, the others come back now too.
   */
  if (st->backoff_ns == BACKOFF_MIN_NS)
    wake_down_locked (st);
  rb_log ("nbd: connection %d to %s is back (%d of %d up)",
          c->idx, st->uri, nbdstore_count_up (st), st->nconns);
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
void
nbdstore_conn_lost (struct conn *c, const char *why, bool give_up)
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
    if (!nbdstore_ranges_empty (&c->susp)) {
      d = calloc (1, sizeof *d);
      if (d == NULL)              /* cannot watch: hand them over now */
        nbdstore_ranges_move (&st->ready, &c->susp);
      else {
        nbdstore_ranges_move (&d->r, &c->susp);
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
    {
      uint64_t now = rb_now_ns ();

      if (c->proven || now - c->up_since_ns >= HEALTHY_NS) {
        /* It was healthy: the first attempt may be made at once. */
        if (nbdstore_count_up (st) == 0) {
          st->next_attempt_ns = 0;
          st->backoff_ns = BACKOFF_MIN_NS;
        }
      }
      else if (now >= st->next_attempt_ns) {
        /* Lost young: the server drops what it accepts.
         * The back-off goes on growing, as for a failed connect.
         */
        st->next_attempt_ns = now + st->backoff_ns;
        st->backoff_ns = rbi_backoff_next_ns (st->backoff_ns);
      }
    }
    nbdstore_update_state (st);
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
void
nbdstore_drain_events (struct conn *c, const struct pollfd *fds, struct drain **dv,
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
size_t
nbdstore_drain_fds (struct conn *c, struct pollfd *fds, struct drain **dv)
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
