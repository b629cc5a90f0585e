/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the NBD store's connections (design notes in store-nbd.c,
 * state and locking in store-nbd.h): connecting and checking that a
 * reconnect reaches the same export, the socket options that tell a
 * dead peer from a slow one, and the I/O thread of each connection,
 * the only caller of libnbd on its handle.
 */

#include <config.h>

#include <pthread.h>
#include <time.h>
#include <netdb.h>
#include <arpa/inet.h>

#include "store-nbd.h"

/* Bounded wait on a handle until 'done' or the deadline. */
int
nbdstore_poll_until (struct nbd_handle *h, int (*done) (struct nbd_handle *),
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

/* Name lookups off the request path.  getaddrinfo has no deadline of
 * its own: a name server that drops queries holds it for the
 * resolver's whole timeout (resolv.conf: timeout x attempts x
 * servers), and nbd_aio_connect_uri calls it before there is anything
 * to poll.  So the host name of an nbd:// or nbds:// URI is looked up
 * in a detached thread and the connecting thread waits for the answer
 * only until its connect deadline.  A lookup given up on finishes
 * alone: 'refs' (the thread and the waiter) says who frees the state.
 *
 * nbd://: the URI is then connected with the host name replaced by the
 * address found, so libnbd does not look it up again; the port, export
 * name and query (TLS settings) are kept as written.  nbds://: the
 * name stays in the URI, since libnbd checks the server's certificate
 * against it and (1.14) has no call to give that name separately; the
 * bounded lookup has just answered, so libnbd's own lookup of the same
 * name is answered too unless the name server stops between the two.
 */
struct lookup {
  pthread_mutex_t lock;         /* protects refs, done, gai, addr */
  pthread_cond_t cond;          /* signalled when done */
  int refs;
  bool done;
  int gai;                      /* getaddrinfo's result */
  bool v6;
  char addr[INET6_ADDRSTRLEN];
  char host[256];
  char port[16];
};

static void
lookup_put (struct lookup *l)
{
  bool last;

  pthread_mutex_lock (&l->lock);
  last = --l->refs == 0;
  pthread_mutex_unlock (&l->lock);
  if (last) {
    pthread_cond_destroy (&l->cond);
    pthread_mutex_destroy (&l->lock);
    free (l);
  }
}

static void *
lookup_thread (void *arg)
{
  struct lookup *l = arg;
  struct addrinfo hints = { .ai_family = AF_UNSPEC,
                            .ai_socktype = SOCK_STREAM };
  struct addrinfo *res = NULL;
  char addr[INET6_ADDRSTRLEN] = "";
  bool v6 = false;
  int r;

  r = getaddrinfo (l->host, l->port, &hints, &res);
  if (r == 0) {
    v6 = res->ai_family == AF_INET6;
    if (getnameinfo (res->ai_addr, res->ai_addrlen, addr, sizeof addr,
                     NULL, 0, NI_NUMERICHOST) != 0)
      r = EAI_FAIL;
    freeaddrinfo (res);
  }
  pthread_mutex_lock (&l->lock);
  l->gai = r;
  l->v6 = v6;
  memcpy (l->addr, addr, sizeof addr);
  l->done = true;
  pthread_cond_broadcast (&l->cond);
  pthread_mutex_unlock (&l->lock);
  lookup_put (l);
  return NULL;
}

/* Where the host name sits in an nbd:// or nbds:// URI: [*hs, *he).
 * Returns false when there is nothing to look up (other schemes, an
 * address literal, no host).
 */
static bool
uri_host (const char *uri, const char **hs, const char **he, bool *tls)
{
  const char *a, *ae, *p;
  struct in_addr in;
  char host[256];

  if (strncmp (uri, "nbd://", 6) == 0) {
    a = uri + 6;
    *tls = false;
  }
  else if (strncmp (uri, "nbds://", 7) == 0) {
    a = uri + 7;
    *tls = true;
  }
  else
    return false;
  ae = a + strcspn (a, "/?#");
  for (p = a; p < ae; p++)      /* user@host: the host is after the @ */
    if (*p == '@')
      a = p + 1;
  if (a == ae || *a == '[')     /* no host, or an IPv6 literal */
    return false;
  for (p = a; p < ae && *p != ':'; p++)
    ;
  if (p == a || (size_t) (p - a) >= sizeof host)
    return false;
  memcpy (host, a, p - a);
  host[p - a] = '\0';
  if (inet_pton (AF_INET, host, &in) == 1)
    return false;
  *hs = a;
  *he = p;
  return true;
}

/* Look up the host of st->uri, bounded by 'deadline'.  Returns the URI
 * to connect to (malloc'd; NULL with errno and 'why' set on failure).
 */
static char *
nbdstore_resolve_uri (struct nbd_store *st, uint64_t deadline,
                      char *why, size_t whylen)
{
  const char *uri = st->uri, *hs, *he, *pe;
  struct lookup *l;
  pthread_t tid;
  pthread_attr_t attr;
  struct timespec ts;
  char *out;
  bool tls;
  int err, r = 0;

  if (!uri_host (uri, &hs, &he, &tls))
    return strdup (uri);

  l = calloc (1, sizeof *l);
  if (l == NULL)
    return NULL;
  pthread_mutex_init (&l->lock, NULL);
  {
    pthread_condattr_t ca;
    pthread_condattr_init (&ca);
    pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
    pthread_cond_init (&l->cond, &ca);
    pthread_condattr_destroy (&ca);
  }
  memcpy (l->host, hs, he - hs);
  l->host[he - hs] = '\0';
  pe = he;
  if (*pe == ':') {
    size_t n = strcspn (pe + 1, "/?#");
    if (n == 0 || n >= sizeof l->port)
      n = 0;
    memcpy (l->port, pe + 1, n);
    l->port[n] = '\0';
    pe += 1 + strcspn (pe + 1, "/?#");
  }
  if (l->port[0] == '\0')
    strcpy (l->port, "10809");
  l->refs = 2;

  pthread_attr_init (&attr);
  pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED);
  err = pthread_create (&tid, &attr, lookup_thread, l);
  pthread_attr_destroy (&attr);
  if (err != 0) {
    l->refs = 1;
    lookup_put (l);
    snprintf (why, whylen, "cannot start a name lookup: %s", strerror (err));
    errno = err;
    return NULL;
  }

  ts.tv_sec = deadline / 1000000000;
  ts.tv_nsec = deadline % 1000000000;
  pthread_mutex_lock (&l->lock);
  while (!l->done && r != ETIMEDOUT)
    r = pthread_cond_timedwait (&l->cond, &l->lock, &ts);
  pthread_mutex_unlock (&l->lock);

  if (!l->done) {
    snprintf (why, whylen,
              "name lookup of %s did not answer in time (check the name "
              "server, or give an address in back=)", l->host);
    lookup_put (l);
    errno = ETIMEDOUT;
    return NULL;
  }
  if (l->gai != 0) {
    snprintf (why, whylen, "cannot look up %s: %s", l->host,
              gai_strerror (l->gai));
    lookup_put (l);
    errno = EHOSTUNREACH;
    return NULL;
  }
  if (tls)
    out = strdup (uri);
  else if (asprintf (&out, "%.*s%s%s%s:%s%s", (int) (hs - uri), uri,
                     l->v6 ? "[" : "", l->addr, l->v6 ? "]" : "",
                     l->port, pe) == -1)
    out = NULL;
  lookup_put (l);
  return out;
}

/* Open one connection, bounded by timeout_ms (the name lookup
 * included).  On failure returns NULL
 * and describes the reason in 'why' (with errno set).
 */
struct nbd_handle *
nbdstore_connect_one (struct nbd_store *st, int idx, int timeout_ms,
             char *why, size_t whylen)
{
  struct nbd_handle *h;
  char name[32];
  uint64_t deadline = rb_deadline_ms (timeout_ms);
  char *uri;
  int err, r;

  h = nbd_create ();
  if (h == NULL) {
    err = nbd_get_errno () ? nbd_get_errno () : ENOMEM;
    nbdstore_nbd_reason (why, whylen, err);
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

  uri = nbdstore_resolve_uri (st, deadline, why, whylen);
  if (uri == NULL) {
    err = errno;
    nbd_close (h);
    errno = err;
    return NULL;
  }
  r = nbd_aio_connect_uri (h, uri);
  free (uri);
  if (r == -1)
    goto fail;
  if (nbdstore_poll_until (h, nbd_aio_is_ready, deadline) == -1) {
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
  nbdstore_nbd_reason (why, whylen, err);
  nbd_close (h);
  errno = err;
  return NULL;
}

/* A reconnected export must still be the same disk. */
int
nbdstore_check_same_export (struct nbd_store *st, struct nbd_handle *h,
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
int
nbdstore_sock_setup (struct nbd_store *st, struct nbd_handle *h)
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
  n = nbdstore_drain_fds (c, fds + 1, dv);
  if (poll (fds, 1 + n, timeout_ms) > 0) {
    if (fds[0].revents & POLLIN)
      drain_wakefd (c);
    nbdstore_drain_events (c, fds + 1, dv, n);
  }
}

/* Has c a read in flight? */
static bool
read_in_flight (struct conn *c)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&c->st->lock);
  struct rb_inflight_req *r;

  for (r = c->inflight.head; r; r = r->next)
    if (RB_INFLIGHT_ENTRY (r, struct piece, ireq)->op == P_READ)
      return true;
  return false;
}

static void *
conn_thread (void *vp)
{
  struct conn *c = vp;
  struct nbd_store *st = c->st;

  for (;;) {
    struct piece *list, *p, *next;
    bool attempt = false, abandon;
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
        nbdstore_reconnect (c);
      if (c->nbd == NULL) {
        {
          ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
          list = nbdstore_dequeue (c, false);
        }
        nbdstore_fail_list (list, "backing store offline, reconnecting");
        if (!attempt)
          wait_wake (c, timeout_ms);
        continue;
      }
    }

    /* Up: issue what is queued, then wait for the socket or a wake. */
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
      if (st->quit && c->queued == 0 && c->inflight.n == 0)
        break;
      list = nbdstore_dequeue (c, true);
      epoch = c->epoch;
      abandon = st->abandon_reads;
    }
    for (p = list; p; p = next) {
      next = p->next;
      /* A FLUSH meant for a handle that is gone covers nothing of it
       * on this one.
       */
      if (p->op == P_FLUSH && p->epoch != 0 && p->epoch != epoch) {
        p->err = ENOTCONN;
        nbdstore_finalize (p, "the connection it was to flush was lost before "
                  "it was sent");
      }
      else if (p->op == P_READ && abandon) {
        p->err = ECANCELED;
        nbdstore_finalize (p, "the store is stopping: the read is no longer "
                           "needed");
      }
      else
        nbdstore_issue (c, p);
    }
    /* A stop does not wait for a read in flight (the server may never
     * answer it): give the connection up, as request-timeout= does.
     */
    if (abandon && read_in_flight (c)) {
      nbdstore_conn_lost (c, "the store is stopping and a read in flight "
                          "is no longer needed", true);
      continue;
    }
    if (nbd_aio_is_dead (c->nbd) || nbd_aio_is_closed (c->nbd)) {
      nbdstore_conn_lost (c, nbd_get_error () ? nbd_get_error ()
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
      nd = nbdstore_drain_fds (c, fds + 2, dv);
      {
        ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
        inflight = c->inflight.n;
      }
      if (inflight > 0 && st->request_timeout_ns > 0)
        timeout_ms = 1000;
      timeout_ms = nbdstore_conn_proven (c, timeout_ms);
      r = poll (fds, 2 + nd, timeout_ms);
      if (r == -1 && errno != EINTR) {
        nbdstore_conn_lost (c, "poll failed", false);
        continue;
      }
      if (fds[1].revents & POLLIN)
        drain_wakefd (c);
      if (r > 0)
        nbdstore_drain_events (c, fds + 2, dv, nd);
      if (fds[0].revents)       /* the socket moves: the server lives */
        c->last_progress_ns = rb_now_ns ();
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR))
        nbd_aio_notify_read (c->nbd);
      else if (fds[0].revents & POLLOUT)
        nbd_aio_notify_write (c->nbd);
      if (nbd_aio_is_dead (c->nbd) || nbd_aio_is_closed (c->nbd)) {
        nbdstore_conn_lost (c, nbd_get_error () ? nbd_get_error ()
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
          nbdstore_conn_lost (c, why, true);
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
int
nbdstore_ensure_threads (struct nbd_store *st)
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
