/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback glue: the control socket server (control-server.h).
 *
 * One thread per client.  The UPS path must always get through, however
 * many clients there are, so:
 *   - 16 ordinary slots serve anything;
 *   - while they are all taken, a connection gets one of 4 reserved
 *     slots, which serve only what a mode switch needs
 *     (rb_control_reserved_refusal): a "status --watch" or a "sync"
 *     cannot settle there;
 *   - while the reserved slots are all taken too, the reserved
 *     connection that has waited longest for its next request is shed
 *     to make room; only if all of them are executing a request is a
 *     connection refused (ERR EBUSY; ramback mode/ups retry);
 *   - a client that sends no complete request for IDLE_TIMEOUT_S after
 *     its last reply (or its connect) is disconnected; one whose
 *     request is executing (a long sync) is not idle.  A client that
 *     does not read its replies is disconnected after as long (a send
 *     timeout), so it cannot hold a thread either.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <nbdkit-plugin.h>

#include "cleanup.h"
#include "control.h"
#include "control-server.h"

#define MAX_CLIENTS 16          /* ordinary slots */
#define RESERVED_CLIENTS 4      /* slots for mode changes only */
#define IDLE_TIMEOUT_S 30

static int listen_fd = -1;
static char *sock_path;
static dev_t sock_dev;          /* the socket we created, to remove at */
static ino_t sock_ino;          /* stop only if it is still there */
static struct rb *the_rb;
static pthread_t accept_thread;
static bool accept_running;
static int wake_pipe[2] = { -1, -1 };   /* tells the accept thread to quit */

/* A client and its thread.  The thread is joined (reap_clients, or the
 * stop) before the struct is freed: a detached thread could still be
 * running the plugin's code when nbdkit unloads it.
 */
struct client {
  struct client *next;          /* [lock] */
  pthread_t thread;
  int fd;                       /* [lock] -1 once closed */
  bool reserved;                /* in a reserved slot */
  bool busy;                    /* [lock] executing a request */
  bool counted;                 /* [lock] holds its slot (false: shed) */
  bool done;                    /* [lock] its thread is ending */
  uint64_t idle_since;          /* [lock] ns: last reply, or connect */
  struct rb_control_reserved rsv;       /* its thread's */
};

/* Clients [lock]. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t clients_gone = PTHREAD_COND_INITIALIZER;
static struct client *clients;  /* every client not yet joined */
static unsigned nthreads;       /* client threads not done */
static unsigned nordinary, nreserved;   /* slots in use */
static bool stopping;

static uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * UINT64_C (1000000000) + ts.tv_nsec;
}

/* control=PATH replaces only what is ours to remove: a stream socket of
 * our uid that nobody listens on (connect fails with ECONNREFUSED), left
 * by an nbdkit that died.  Anything else may be in use or belong to
 * someone else, so it is refused with what it is and what to do: a
 * regular file, a directory, a symbolic link (never followed), another
 * uid's socket, a socket something listens on (checked without
 * blocking: a full backlog is "in use", not a hang), a datagram socket,
 * or one we cannot check.
 */
static int
remove_stale (const char *path, const struct sockaddr_un *addr)
{
  struct stat st, again;
  int fd, r, e;

  if (lstat (path, &st) == -1) {
    if (errno == ENOENT)
      return 0;
    nbdkit_error ("control=%s: %m", path);
    return -1;
  }
  if (S_ISLNK (st.st_mode)) {
    nbdkit_error ("control=%s is a symbolic link, which is never followed "
                  "or replaced; give the path of the socket itself, or "
                  "remove the link", path);
    return -1;
  }
  if (S_ISDIR (st.st_mode)) {
    nbdkit_error ("control=%s is a directory; give the path of the socket "
                  "to create, e.g. control=%s/control.sock", path, path);
    return -1;
  }
  if (!S_ISSOCK (st.st_mode)) {
    nbdkit_error ("control=%s exists and is not a socket; remove it or "
                  "choose another path", path);
    return -1;
  }
  if (st.st_uid != geteuid ()) {
    nbdkit_error ("control=%s is a socket of uid %u, not of this nbdkit "
                  "(uid %u), so it is not ours to remove; its owner may "
                  "remove it, or choose another path", path,
                  (unsigned) st.st_uid, (unsigned) geteuid ());
    return -1;
  }
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd == -1) {
    nbdkit_error ("socket: %m");
    return -1;
  }
  r = connect (fd, (const struct sockaddr *) addr, sizeof *addr);
  e = errno;
  close (fd);
  if (r == 0 || e == EAGAIN || e == EINPROGRESS) {
    nbdkit_error ("control=%s is in use: something listens on it (another "
                  "ramback?); stop it or choose another path", path);
    return -1;
  }
  if (e == EPROTOTYPE) {
    nbdkit_error ("control=%s is a datagram socket, not a control socket "
                  "left behind; remove it or choose another path", path);
    return -1;
  }
  if (e != ECONNREFUSED) {
    errno = e;
    nbdkit_error ("control=%s: cannot tell whether it is in use (connect: "
                  "%m); remove it if it is stale, or choose another path",
                  path);
    return -1;
  }
  /* Stale.  Remove it only if it is still the socket we checked. */
  if (lstat (path, &again) == -1 || again.st_dev != st.st_dev ||
      again.st_ino != st.st_ino) {
    nbdkit_error ("control=%s changed while it was being checked; "
                  "try again", path);
    return -1;
  }
  if (unlink (path) == -1) {
    nbdkit_error ("control=%s: cannot remove the stale socket: %m", path);
    return -1;
  }
  nbdkit_debug ("control=%s: removed a stale socket", path);
  return 0;
}

/* Remove the socket at path if it is still the one we created: one
 * that somebody put in its place is not ours.
 */
static void
unlink_ours (const char *path)
{
  struct stat st;

  if (lstat (path, &st) == 0 && S_ISSOCK (st.st_mode) &&
      st.st_dev == sock_dev && st.st_ino == sock_ino)
    unlink (path);
  else
    nbdkit_debug ("control=%s: not removed, it is no longer the socket "
                  "this nbdkit created", path);
}

int
control_server_bind (const char *path)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  struct stat st;
  mode_t old_umask;
  int r;

  if (strlen (path) >= sizeof addr.sun_path) {
    nbdkit_error ("control=%s: path too long for a Unix socket "
                  "(at most %zu bytes)", path, sizeof addr.sun_path - 1);
    return -1;
  }
  strcpy (addr.sun_path, path);
  if (remove_stale (path, &addr) == -1)
    return -1;

  listen_fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd == -1) {
    nbdkit_error ("socket: %m");
    return -1;
  }
  /* Created 0600 from the start: status and mode control are for the
   * owner only.  (Still single-threaded here, so umask is safe.)
   */
  old_umask = umask (0177);
  r = bind (listen_fd, (struct sockaddr *) &addr, sizeof addr);
  umask (old_umask);
  if (r == -1) {
    nbdkit_error ("control=%s: bind: %m", path);
    goto fail;
  }
  if (lstat (path, &st) == -1) {
    nbdkit_error ("control=%s: lstat after bind: %m", path);
    goto fail;
  }
  sock_dev = st.st_dev;
  sock_ino = st.st_ino;
  if ((sock_path = strdup (path)) == NULL) {
    nbdkit_error ("strdup: %m");
    goto fail_unlink;
  }
  if (listen (listen_fd, 8) == -1) {
    nbdkit_error ("control=%s: listen: %m", path);
    goto fail_unlink;
  }
  return 0;

 fail_unlink:
  unlink_ours (path);
 fail:
  close (listen_fd);
  listen_fd = -1;
  free (sock_path);
  sock_path = NULL;
  return -1;
}

static int
write_all (int fd, const char *s, size_t n)
{
  while (n > 0) {
    ssize_t r = send (fd, s, n, MSG_NOSIGNAL);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    s += r;
    n -= r;
  }
  return 0;
}

/* The client's thread ends: give back its slot (unless it was shed)
 * and close the connection.  The struct stays for reap_clients.
 */
static void
forget_client (struct client *c)
{
  pthread_mutex_lock (&lock);
  if (c->counted) {
    if (c->reserved)
      nreserved--;
    else
      nordinary--;
    c->counted = false;
  }
  close (c->fd);
  c->fd = -1;
  c->done = true;
  nthreads--;
  pthread_cond_broadcast (&clients_gone);
  pthread_mutex_unlock (&lock);
}

/* Join and free the clients whose threads have ended (all = every
 * client, once none is running).
 */
static void
reap_clients (void)
{
  struct client **p, *done = NULL, *c;

  pthread_mutex_lock (&lock);
  for (p = &clients; *p; )
    if ((*p)->done) {
      c = *p;
      *p = c->next;
      c->next = done;
      done = c;
    }
    else
      p = &(*p)->next;
  pthread_mutex_unlock (&lock);
  while ((c = done) != NULL) {
    done = c->next;
    pthread_join (c->thread, NULL);
    free (c);
  }
}

/* Read requests line by line; each gets its whole reply before the next
 * is read.  A line over the limit, a refused request in a reserved
 * slot, or IDLE_TIMEOUT_S without a complete request ends the
 * connection.
 */
static void *
client_main (void *arg)
{
  struct client *c = arg;
  char line[RB_CONTROL_MAX_LINE + 2];
  size_t len = 0;
  uint64_t idle_since = now_ns ();
  const uint64_t idle_ns = IDLE_TIMEOUT_S * UINT64_C (1000000000);

  for (;;) {
    char *nl;
    ssize_t r;
    size_t n;

    while ((nl = memchr (line, '\n', len)) == NULL) {
      struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
      uint64_t now = now_ns ();

      if (len > RB_CONTROL_MAX_LINE) {
        write_all (c->fd, rb_control_too_long (),
                   strlen (rb_control_too_long ()));
        goto out;
      }
      if (now - idle_since >= idle_ns) {
        nbdkit_debug ("control: closing a connection idle for %d s",
                      IDLE_TIMEOUT_S);
        goto out;
      }
      r = poll (&pfd, 1, (idle_ns - (now - idle_since)) / 1000000 + 1);
      if (r == -1 && errno != EINTR)
        goto out;
      if (r <= 0)
        continue;
      r = recv (c->fd, line + len, sizeof line - len, 0);
      if (r == -1 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (r <= 0)
        goto out;
      len += r;
    }
    n = nl - line;
    if (n > 0 && line[n - 1] == '\r')
      n--;
    if (c->reserved) {
      const char *refusal = rb_control_reserved_refusal (&c->rsv, line, n);
      if (refusal) {
        write_all (c->fd, refusal, strlen (refusal));
        goto out;
      }
    }
    pthread_mutex_lock (&lock);
    if (!c->counted) {                  /* shed meanwhile */
      pthread_mutex_unlock (&lock);
      goto out;
    }
    c->busy = true;
    pthread_mutex_unlock (&lock);
    {
      CLEANUP_FREE char *reply = rb_control_request (the_rb, line, n);
      const char *out = reply ? reply : "ERR ENOMEM out of memory\n";

      if (write_all (c->fd, out, strlen (out)) == -1)
        goto out;
    }
    idle_since = now_ns ();
    pthread_mutex_lock (&lock);
    c->busy = false;
    c->idle_since = idle_since;
    pthread_mutex_unlock (&lock);
    len -= nl + 1 - line;
    memmove (line, nl + 1, len);
  }
 out:
  forget_client (c);
  return NULL;
}

/* Find a slot for a new client [lock]: an ordinary one, else a reserved
 * one, else the reserved slot of the connection that has waited longest
 * for its next request (it is shut down; its thread gives up when it
 * wakes).  False if every slot is executing a request.
 */
static bool
take_slot (bool *reserved)
{
  struct client *c, *victim = NULL;

  if (nordinary < MAX_CLIENTS) {
    nordinary++;
    *reserved = false;
    return true;
  }
  *reserved = true;
  if (nreserved < RESERVED_CLIENTS) {
    nreserved++;
    return true;
  }
  for (c = clients; c; c = c->next)
    if (c->reserved && c->counted && !c->busy && !c->done &&
        (victim == NULL || c->idle_since < victim->idle_since))
      victim = c;
  if (victim == NULL)
    return false;
  nbdkit_debug ("control: every slot is taken: closing the reserved "
                "connection that waited longest for a request");
  victim->counted = false;
  shutdown (victim->fd, SHUT_RDWR);
  return true;
}

static void
accept_one (void)
{
  static const char busy[] = "ERR EBUSY too many control connections\n";
  struct timeval tv = { .tv_sec = IDLE_TIMEOUT_S };
  struct client *c, **p;
  bool reserved;
  int fd, err;

  reap_clients ();
  fd = accept4 (listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd == -1) {
    if (errno != EINTR && errno != EAGAIN)
      nbdkit_debug ("control: accept: %m (ignored)");
    return;
  }
  /* A client that does not read its replies cannot hold a thread. */
  if (setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == -1)
    nbdkit_debug ("control: SO_SNDTIMEO: %m (ignored)");
  c = calloc (1, sizeof *c);
  pthread_mutex_lock (&lock);
  if (c == NULL || stopping || !take_slot (&reserved)) {
    bool full = c && !stopping;

    pthread_mutex_unlock (&lock);
    if (full)
      nbdkit_debug ("control: refused a connection: all %d slots and the "
                    "%d reserved for mode changes are executing requests",
                    MAX_CLIENTS, RESERVED_CLIENTS);
    write_all (fd, busy, sizeof busy - 1);
    close (fd);
    free (c);
    return;
  }
  c->fd = fd;
  c->reserved = reserved;
  c->counted = true;
  c->idle_since = now_ns ();
  c->next = clients;
  clients = c;
  nthreads++;

  /* Under the lock: c->thread is set before anyone may join it. */
  err = pthread_create (&c->thread, NULL, client_main, c);
  if (err) {
    for (p = &clients; *p != c; p = &(*p)->next)
      ;
    *p = c->next;
    if (reserved)
      nreserved--;
    else
      nordinary--;
    nthreads--;
  }
  pthread_mutex_unlock (&lock);
  if (err) {
    errno = err;
    nbdkit_error ("control: pthread_create: %m");
    close (fd);
    free (c);
  }
}

static void *
accept_main (void *arg)
{
  struct pollfd fds[2] = {
    { .fd = listen_fd, .events = POLLIN },
    { .fd = wake_pipe[0], .events = POLLIN },
  };

  for (;;) {
    if (poll (fds, 2, -1) == -1) {
      if (errno == EINTR)
        continue;
      nbdkit_error ("control: poll: %m");
      return NULL;
    }
    if (fds[1].revents)
      return NULL;
    if (fds[0].revents & POLLIN)
      accept_one ();
  }
}

int
control_server_start (struct rb *rb)
{
  int err;

  if (listen_fd == -1)
    return 0;
  the_rb = rb;
  if (pipe2 (wake_pipe, O_CLOEXEC) == -1) {
    nbdkit_error ("pipe2: %m");
    return -1;
  }
  err = pthread_create (&accept_thread, NULL, accept_main, NULL);
  if (err) {
    errno = err;
    nbdkit_error ("control: pthread_create: %m");
    return -1;
  }
  accept_running = true;
  return 0;
}

void
control_server_stop (void)
{
  struct client *c;
  int i;

  if (accept_running) {
    if (write (wake_pipe[1], "x", 1) != 1)
      nbdkit_debug ("control: wake: %m");
    pthread_join (accept_thread, NULL);
    accept_running = false;
  }
  /* Only reading is shut down: a request still executing (a sync the
   * final drain has just answered) gets its reply; then its thread, like
   * an idle one at once, reads end-of-file and ends.
   */
  pthread_mutex_lock (&lock);
  stopping = true;
  for (c = clients; c; c = c->next)
    if (c->fd >= 0)
      shutdown (c->fd, SHUT_RD);
  while (nthreads > 0)
    pthread_cond_wait (&clients_gone, &lock);
  pthread_mutex_unlock (&lock);
  reap_clients ();              /* every thread has ended: join them all */

  if (listen_fd >= 0) {
    close (listen_fd);
    listen_fd = -1;
  }
  if (sock_path) {
    unlink_ours (sock_path);
    free (sock_path);
    sock_path = NULL;
  }
  for (i = 0; i < 2; i++)
    if (wake_pipe[i] >= 0) {
      close (wake_pipe[i]);
      wake_pipe[i] = -1;
    }
}
