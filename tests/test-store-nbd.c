/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit test of the NBD backing store (lib/store-nbd.c), driven directly
 * through struct rb_store_ops against a real server started by
 * test-remote-store.sh:
 *
 *   test-store-nbd URI SIZE
 *
 * Environment:
 *   CONNECTIONS=N        connections= to ask for (default 0: auto)
 *   EXPECT_CONNECTIONS=N fail unless the store opened N connections
 *   EXPECT_EXTENTS=0|1   whether the server reports holes (default 1)
 *   EXPECT_ZERO=0|1      whether the server offers WRITE_ZEROES
 *   KILL_CMD, START_CMD  shell commands that kill and restart the
 *                        server (data must survive); enables the
 *                        reconnect checks
 *   FAULTDISK_DIR=DIR    the server is tests/faultdisk-plugin.c with
 *                        dir=DIR (needs KILL_CMD and START_CMD too):
 *                        enables the checks that need a server holding
 *                        a FLUSH, and those that lose a connection at a
 *                        chosen moment (through the store's log)
 *
 * Every check compares data against a model kept in memory.
 *
 * Why one file of over 700 lines: one program, one check per function,
 * all sharing the model and the server control above.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ramback.h"
#include "store.h"
#include "json.h"
#include "cleanup.h"
#include "env.h"

#define MiB (1024 * 1024)

static struct rb_store *s;
static uint8_t *model;
static uint64_t size;

#define FAIL(fmt, ...) do {                                             \
    fprintf (stderr, "test-store-nbd: FAIL: %s:%d: " fmt "\n",          \
             __FILE__, __LINE__, ##__VA_ARGS__);                        \
    exit (EXIT_FAILURE);                                                \
  } while (0)
#define CHECK(cond) do { if (!(cond)) FAIL ("%s", #cond); } while (0)

static uint64_t
rnd (uint64_t *state)
{
  /* xorshift64*: reproducible, no global state, one per thread. */
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * UINT64_C (2685821657736338717);
}

static void
fill (uint8_t *buf, size_t len, uint64_t *seed)
{
  size_t i;

  for (i = 0; i < len; i++)
    buf[i] = rnd (seed) >> 56;
}

static int
env_int (const char *name, int def)
{
  const char *v = getenv (name);

  return v && *v ? atoi (v) : def;
}

/* Read [off, off+len) back in one batch of 'parts' pieces and compare. */
static void
check_range (uint64_t off, uint64_t len, int parts)
{
  uint8_t *buf = malloc (len);
  struct rb_io ios[64];
  uint64_t step = (len + parts - 1) / parts;
  int i, n = 0;

  CHECK (buf != NULL && parts <= 64);
  memset (buf, 0xee, len);
  for (i = 0; i < parts && (uint64_t) i * step < len; i++) {
    ios[n] = (struct rb_io) {
      .op = RB_IO_READ, .buf = buf + i * step,
      .count = RB_MIN (step, len - i * step),
      .offset = off + i * step,
    };
    n++;
  }
  if (s->ops->submit (s, ios, n) == -1)
    FAIL ("read back: %s", rb_get_error ());
  if (memcmp (buf, model + off, len) != 0) {
    uint64_t j;
    for (j = 0; j < len && buf[j] == model[off + j]; j++)
      ;
    FAIL ("data differs at %" PRIu64 ": %02x, model %02x", off + j,
          buf[j], model[off + j]);
  }
  free (buf);
}

/* A batch of writes of mixed sizes, 4K to 8M, non-overlapping. */
static void
test_batch_write (void)
{
  static const uint64_t sizes[] = {
    4096, 8 * MiB, 65536, 3 * MiB + 4096, 512 * 1024, 1 * MiB, 7 * MiB,
  };
  struct rb_io ios[16];
  uint64_t seed = 42, off = 0;
  int n = 0, i;

  for (i = 0; i < 7 && off + sizes[i] <= size / 2; i++) {
    fill (model + off, sizes[i], &seed);
    ios[n++] = (struct rb_io) {
      .op = RB_IO_WRITE, .buf = model + off, .count = sizes[i], .offset = off,
    };
    off += sizes[i] + 4096;     /* leave gaps: they stay zero */
  }
  if (s->ops->submit (s, ios, n) == -1)
    FAIL ("batch write: %s", rb_get_error ());
  for (i = 0; i < n; i++)
    CHECK (ios[i].err == 0);
  if (s->ops->flush (s) == -1)
    FAIL ("flush: %s", rb_get_error ());
  check_range (0, off, 7);
  check_range (0, size / 2, 33);
  printf ("batch write of %d requests, %" PRIu64 " bytes: ok\n", n, off);
}

static void
test_zero (void)
{
  uint64_t off = 2 * MiB, len = 3 * MiB;
  struct rb_io io = { .op = RB_IO_ZERO, .count = len, .offset = off };

  CHECK (s->can_zero == (bool) env_int ("EXPECT_ZERO", s->can_zero));
  if (s->ops->submit (s, &io, 1) == -1)
    FAIL ("zero: %s", rb_get_error ());
  memset (model + off, 0, len);
  check_range (0, size / 2, 16);
  printf ("zero (can_zero=%d): ok\n", s->can_zero);
}

/* The top half was never written: it must show as a hole, unless the
 * server reports no holes (EXPECT_EXTENTS=0: no base:allocation, or
 * nbdkit's noextents filter, which says "all data"); the data at 0 must
 * show as data.
 */
static void
test_next_data (void)
{
  uint64_t data, hole;
  int expect = env_int ("EXPECT_EXTENTS", 1);

  if (s->ops->next_data == NULL) {
    CHECK (expect == 0);
    printf ("next_data: not offered by the server\n");
    return;
  }
  if (s->ops->next_data (s, 0, &data, &hole) == -1)
    FAIL ("next_data: %s", rb_get_error ());
  CHECK (data == 0 && hole > 0 && hole <= size);
  if (s->ops->next_data (s, size / 2, &data, &hole) == -1)
    FAIL ("next_data: %s", rb_get_error ());
  if (expect)
    CHECK (data == size && hole == size);
  else
    CHECK (data == size / 2 && hole > data && hole <= size);
  printf ("next_data: ok\n");
}

/* Many threads at once, each on its own 1 MiB slice of the top half. */
struct worker {
  pthread_t t;
  int id;
  int failed;
};

static void *
worker_main (void *vp)
{
  struct worker *w = vp;
  uint64_t base = size / 2 + (uint64_t) w->id * MiB;
  uint64_t seed = 1000 + w->id;
  uint8_t *buf = malloc (MiB);
  int i;

  for (i = 0; i < 40; i++) {
    uint64_t len = 4096 * (1 + rnd (&seed) % 64);
    uint64_t off = base + 4096 * (rnd (&seed) % ((MiB - len) / 4096 + 1));
    struct rb_io io = {
      .op = RB_IO_WRITE, .buf = model + off, .count = len, .offset = off,
    };

    fill (model + off, len, &seed);
    if (s->ops->submit (s, &io, 1) == -1) {
      w->failed = 1;
      break;
    }
    io = (struct rb_io) {
      .op = RB_IO_READ, .buf = buf, .count = MiB, .offset = base,
    };
    if (s->ops->submit (s, &io, 1) == -1 ||
        memcmp (buf, model + base, MiB) != 0) {
      w->failed = 2;
      break;
    }
  }
  free (buf);
  return NULL;
}

static void
test_threads (void)
{
  struct worker w[8];
  int i;

  CHECK (size / 2 >= 8 * MiB);
  for (i = 0; i < 8; i++) {
    w[i].id = i;
    w[i].failed = 0;
    CHECK (pthread_create (&w[i].t, NULL, worker_main, &w[i]) == 0);
  }
  for (i = 0; i < 8; i++) {
    pthread_join (w[i].t, NULL);
    if (w[i].failed)
      FAIL ("worker %d: %s", i, w[i].failed == 1 ? "write failed"
            : "read back differs or failed");
  }
  if (s->ops->flush (s) == -1)
    FAIL ("flush: %s", rb_get_error ());
  printf ("8 threads: ok\n");
}

/* The store's fields as they follow the core's in a status reply: the
 * writer (json.h) in the state the core's fields leave it in.
 */
static void
status_of (struct rb_store *st, char *buf, size_t len, bool json)
{
  struct rb_status_out o = { .buf = buf, .len = len, .json = json,
                             .fields = 1 };

  CHECK (st->ops->status != NULL);
  buf[0] = '\0';
  st->ops->status (st, &o);
  CHECK (o.pos < len);
  buf[o.pos] = '\0';
}

static void
status (char *buf, size_t len, bool json)
{
  status_of (s, buf, len, json);
}

static uint64_t
status_num_of (struct rb_store *st, const char *key)
{
  char buf[2048], pat[64];
  const char *p;

  status_of (st, buf, sizeof buf, false);
  snprintf (pat, sizeof pat, "%s: ", key);
  p = strstr (buf, pat);
  if (p == NULL)
    FAIL ("status has no %s:\n%s", key, buf);
  return strtoull (p + strlen (pat), NULL, 10);
}

static uint64_t
status_num (const char *key)
{
  return status_num_of (s, key);
}

static void
sleep_ms (int ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

  nanosleep (&ts, NULL);
}

/* After START_CMD: poll until a read works and every connection is up. */
static void
wait_back (void)
{
  uint8_t *buf = malloc (MiB);
  struct rb_io io;
  int i;

  for (i = 0; i < 300; i++) {   /* backoff is at most 5 s */
    io = (struct rb_io) {
      .op = RB_IO_READ, .buf = buf, .count = MiB, .offset = 0,
    };
    if (s->ops->submit (s, &io, 1) == 0)
      break;
    sleep_ms (100);
  }
  CHECK (io.err == 0);
  CHECK (memcmp (buf, model, MiB) == 0);
  /* One connection reconnected; the others follow. */
  for (i = 0; i < 100; i++) {
    if (status_num ("store_connections_up") == (uint64_t) s->connections)
      break;
    sleep_ms (100);
  }
  CHECK (status_num ("store_connections_up") == (uint64_t) s->connections);
  CHECK (rb_atomic_load (&s->state) == RB_STORE_OK);
  free (buf);
}

/* Kill the server: requests fail with EIO, not hang; state offline.
 * Restart it: the store comes back by itself and the data is there.
 */
static void
test_reconnect (void)
{
  const char *kill_cmd = getenv ("KILL_CMD");
  const char *start_cmd = getenv ("START_CMD");
  uint8_t *buf = malloc (MiB);
  struct rb_io io;
  int i, r = -1;

  if (!kill_cmd || !start_cmd) {
    printf ("reconnect: not tested (no KILL_CMD/START_CMD)\n");
    free (buf);
    return;
  }

  /* A write acknowledged but never flushed when the server dies. */
  fill (model + 8 * MiB, 65536, &(uint64_t) { 7 });
  io = (struct rb_io) {
    .op = RB_IO_WRITE, .buf = model + 8 * MiB, .count = 65536,
    .offset = 8 * MiB,
  };
  CHECK (s->ops->submit (s, &io, 1) == 0);

  CHECK (system (kill_cmd) == 0);
  /* The first request after the loss may still be the one that finds
   * out; within a few tries every request must fail with EIO quickly.
   */
  for (i = 0; i < 50; i++) {
    io = (struct rb_io) {
      .op = RB_IO_READ, .buf = buf, .count = MiB, .offset = 0,
    };
    r = s->ops->submit (s, &io, 1);
    if (r == -1 && rb_get_errno () == EIO &&
        rb_atomic_load (&s->state) == RB_STORE_OFFLINE)
      break;
    sleep_ms (20);
  }
  CHECK (r == -1);
  CHECK (io.err == EIO);
  CHECK (rb_atomic_load (&s->state) == RB_STORE_OFFLINE);
  printf ("offline: reads fail with EIO (%s)\n", rb_get_error ());

  /* A write while offline fails too. */
  io = (struct rb_io) {
    .op = RB_IO_WRITE, .buf = buf, .count = 4096, .offset = 0,
  };
  CHECK (s->ops->submit (s, &io, 1) == -1 && io.err == EIO);

  CHECK (system (start_cmd) == 0);
  wait_back ();
  check_range (0, size, 64);
  /* The unflushed write may have died in the server's cache: the first
   * flush says so, once; the caller writes again, then it succeeds.
   */
  CHECK (s->ops->flush (s) == -1 && errno == EIO);
  printf ("flush after losing unflushed writes: %s\n", rb_get_error ());
  io = (struct rb_io) {
    .op = RB_IO_WRITE, .buf = model + 8 * MiB, .count = 65536,
    .offset = 8 * MiB,
  };
  CHECK (s->ops->submit (s, &io, 1) == 0);
  if (s->ops->flush (s) == -1)
    FAIL ("flush after reconnect: %s", rb_get_error ());

  /* Second time, with nothing unflushed: flush fails while offline,
   * works once back.
   */
  CHECK (system (kill_cmd) == 0);
  for (i = 0; i < 50; i++) {
    if (s->ops->flush (s) == -1 && errno == EIO &&
        rb_atomic_load (&s->state) == RB_STORE_OFFLINE)
      break;
    sleep_ms (20);
  }
  CHECK (rb_atomic_load (&s->state) == RB_STORE_OFFLINE);
  CHECK (s->ops->flush (s) == -1);
  CHECK (system (start_cmd) == 0);
  wait_back ();
  if (s->ops->flush (s) == -1)
    FAIL ("flush after reconnect: %s", rb_get_error ());
  check_range (0, size, 64);
  CHECK (status_num ("store_reconnects") >= 2 * (uint64_t) s->connections);
  printf ("reconnect: ok (%" PRIu64 " reconnects)\n",
          status_num ("store_reconnects"));
  free (buf);
}


/* ---- Losing a connection at a chosen moment ----
 *
 * faultdisk commands (FAULTDISK_DIR): see the top of faultdisk-plugin.c.
 * Returns the value of 'key' in the reply (0 if absent); an error reply
 * or no reply within 30 s fails the test.
 */
static uint64_t
fd_cmd (const char *cmd, const char *key)
{
  static int seq;
  const char *dir = getenv ("FAULTDISK_DIR");
  char tmp[4096], path[4096], rep[4096], buf[4096], pat[64];
  const char *p;
  ssize_t n;
  int fd, i;

  CHECK (dir != NULL);
  seq++;
  snprintf (tmp, sizeof tmp, "%s/t%d-%04d.tmp", dir, (int) getpid (), seq);
  snprintf (path, sizeof path, "%s/t%d-%04d.cmd", dir, (int) getpid (), seq);
  snprintf (rep, sizeof rep, "%s/t%d-%04d.reply", dir, (int) getpid (), seq);
  fd = open (tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK (fd >= 0);
  CHECK (write (fd, cmd, strlen (cmd)) == (ssize_t) strlen (cmd));
  close (fd);
  CHECK (rename (tmp, path) == 0);
  for (i = 0; i < 3000 && (fd = open (rep, O_RDONLY)) == -1; i++)
    sleep_ms (10);
  if (fd == -1)
    FAIL ("faultdisk: no reply to '%s'", cmd);
  n = read (fd, buf, sizeof buf - 1);
  close (fd);
  unlink (rep);
  CHECK (n > 0);
  buf[n] = '\0';
  if (strncmp (buf, "ok\n", 3) != 0)
    FAIL ("faultdisk: '%s': %s", cmd, buf);
  if (key == NULL)
    return 0;
  snprintf (pat, sizeof pat, "\n%s=", key);
  p = strstr (buf, pat);
  return p ? strtoull (p + strlen (pat), NULL, 10) : 0;
}

/* The store's log, watched so that a test can act at the moment a
 * connection is found dead: store-nbd.c logs "connection N to URI
 * lost: ..." on the connection's thread before it marks the connection
 * down.  While armed, the first such line holds that thread there until
 * the test says go.  Set once before any store exists; the state is
 * behind sink_lock.
 */
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sink_cond = PTHREAD_COND_INITIALIZER;
static enum { SINK_IDLE, SINK_ARMED, SINK_HOLDING, SINK_GO } sink_state;

static void
log_sink (enum rb_log_level level, const char *msg)
{
  fprintf (stderr, "ramback: %s\n", msg);
  pthread_mutex_lock (&sink_lock);
  if (sink_state == SINK_ARMED && strstr (msg, " lost: ") != NULL) {
    sink_state = SINK_HOLDING;
    pthread_cond_broadcast (&sink_cond);
    while (sink_state == SINK_HOLDING)
      pthread_cond_wait (&sink_cond, &sink_lock);
    sink_state = SINK_IDLE;
  }
  pthread_mutex_unlock (&sink_lock);
}

static void
sink_wait_holding (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_REALTIME, &ts);
  ts.tv_sec += 30;
  pthread_mutex_lock (&sink_lock);
  while (sink_state != SINK_HOLDING)
    if (pthread_cond_timedwait (&sink_cond, &sink_lock, &ts) == ETIMEDOUT)
      FAIL ("the connection was not found lost within 30 s");
  pthread_mutex_unlock (&sink_lock);
}

static void
sink_set (int state)
{
  pthread_mutex_lock (&sink_lock);
  sink_state = state;
  pthread_cond_broadcast (&sink_cond);
  pthread_mutex_unlock (&sink_lock);
}

struct flusher {
  pthread_t t;
  struct rb_store *st;
  int r, err;
  char msg[256];
  bool done;                  /* atomic */
};

static void *
flusher_main (void *vp)
{
  struct flusher *f = vp;

  f->r = f->st->ops->flush (f->st);
  f->err = errno;
  snprintf (f->msg, sizeof f->msg, "%s",
            f->r == 0 ? "" : rb_get_error ());
  rb_atomic_store (&f->done, true);
  return NULL;
}

static void
flush_start (struct flusher *f, struct rb_store *st)
{
  f->st = st;
  f->done = false;
  CHECK (pthread_create (&f->t, NULL, flusher_main, f) == 0);
}

/* A store of one connection, with one acknowledged write not yet
 * flushed (at 'off', from the model).
 */
static struct rb_store *
open_one_with_unflushed (const char *uri, uint64_t off, uint64_t seed)
{
  struct rb_store_params p = {
    .uri = uri, .connections = 1, .tls_verify_peer = -1,
  };
  struct rb_store *st = rb_store_open (&p);
  struct rb_io io = {
    .op = RB_IO_WRITE, .buf = model + off, .count = 65536, .offset = off,
  };

  if (st == NULL)
    FAIL ("open %s: %s", uri, rb_get_error ());
  fill (model + off, 65536, &seed);
  CHECK (st->ops->submit (st, &io, 1) == 0);
  return st;
}

/* Write the model's range again and flush: the caller's answer to a
 * failed flush.  A flush may fail once more (a loss reported late is
 * reported, not hidden); it must work within a few tries.
 */
static void
rewrite_and_flush (struct rb_store *st, uint64_t off)
{
  struct rb_io io;
  int i;

  for (i = 0; i < 5; i++) {
    io = (struct rb_io) {
      .op = RB_IO_WRITE, .buf = model + off, .count = 65536, .offset = off,
    };
    if (st->ops->submit (st, &io, 1) == 0 && st->ops->flush (st) == 0)
      return;
  }
  FAIL ("flush after writing again: %s", rb_get_error ());
}

/* A FLUSH queued for a connection that is lost before the FLUSH is
 * sent must not be sent on the connection that replaces it: it would
 * cover none of the lost connection's writes, yet succeed.  The log
 * sink holds the connection's thread at "lost" (still counted up), a
 * flush is queued on it, then the thread goes on and reconnects.
 */
static void
test_flush_pinned (const char *uri)
{
  const char *kill_cmd = getenv ("KILL_CMD");
  const char *start_cmd = getenv ("START_CMD");
  struct rb_store *s1;
  struct flusher f;
  int i;

  s1 = open_one_with_unflushed (uri, 12 * MiB, 77);
  sink_set (SINK_ARMED);
  CHECK (system (kill_cmd) == 0);
  sink_wait_holding ();
  CHECK (system (start_cmd) == 0);
  flush_start (&f, s1);
  for (i = 0; i < 3000 && status_num_of (s1, "store_queued") == 0; i++)
    sleep_ms (10);
  CHECK (status_num_of (s1, "store_queued") > 0);
  sink_set (SINK_GO);
  pthread_join (f.t, NULL);
  if (f.r == 0)
    FAIL ("a FLUSH queued for a connection lost with an unflushed write "
          "was sent on the new connection and succeeded");
  CHECK (f.err == EIO);
  printf ("flush queued for a lost connection: %s\n", f.msg);
  /* Failed by its pin, not by luck (the loss came after it began). */
  CHECK (strstr (f.msg, "lost before it was sent") != NULL);
  rewrite_and_flush (s1, 12 * MiB);
  rb_store_close (s1);
  printf ("flush pinned to its connection: ok\n");
}

/* After a connection is lost with unflushed writes, every flush that
 * started before that was reported (by a flush returning the error)
 * fails, not just the first to look.  The server holds the first
 * flush's FLUSH so that the second starts while the first is running.
 */
static void
test_flush_every_after_loss (const char *uri)
{
  const char *kill_cmd = getenv ("KILL_CMD");
  const char *start_cmd = getenv ("START_CMD");
  struct rb_store *s1;
  struct flusher f1;
  uint8_t buf[4096];
  struct rb_io io;
  int i, r2, err2;

  s1 = open_one_with_unflushed (uri, 13 * MiB, 78);
  CHECK (system (kill_cmd) == 0);
  CHECK (system (start_cmd) == 0);
  /* Back: a read works (the loss has been seen by then). */
  for (i = 0; i < 300; i++) {
    io = (struct rb_io) {
      .op = RB_IO_READ, .buf = buf, .count = 4096, .offset = 0,
    };
    if (status_num_of (s1, "store_disconnects") > 0 &&
        s1->ops->submit (s1, &io, 1) == 0)
      break;
    sleep_ms (100);
  }
  CHECK (io.err == 0);

  fd_cmd ("stall flush", NULL);
  flush_start (&f1, s1);
  for (i = 0; i < 3000; i++) {
    if (rb_atomic_load (&f1.done) || fd_cmd ("status", "held") > 0)
      break;
    sleep_ms (10);
  }
  if (rb_atomic_load (&f1.done))
    fd_cmd ("release all", NULL);     /* never sent: disarm the stall */
  r2 = s1->ops->flush (s1);
  err2 = errno;
  fd_cmd ("release all apply", NULL);
  pthread_join (f1.t, NULL);
  CHECK (f1.r == -1 && f1.err == EIO);
  printf ("first flush after a loss: %s\n", f1.msg);
  if (r2 == 0)
    FAIL ("a flush that started before the loss of unflushed writes was "
          "reported succeeded");
  CHECK (err2 == EIO);
  printf ("two flushes after a loss: both fail (%s)\n", rb_get_error ());
  rewrite_and_flush (s1, 13 * MiB);
  rb_store_close (s1);
  printf ("every flush after a loss: ok\n");
}

int
main (int argc, char *argv[])
{
  struct rb_store_params p = { .tls_verify_peer = -1 };
  char buf[2048];
  int want;

  if (argc != 3) {
    fprintf (stderr, "usage: test-store-nbd URI SIZE\n");
    exit (EXIT_FAILURE);
  }
  setvbuf (stdout, NULL, _IOLBF, 0);
  rb_set_log (log_sink);
  p.uri = argv[1];
  p.connections = env_int ("CONNECTIONS", 0);
  size = strtoull (argv[2], NULL, 0);
  model = calloc (1, size);
  CHECK (model != NULL);

  CHECK (rb_store_is_nbd_uri (p.uri));
  CHECK (!rb_store_is_nbd_uri ("/dev/sda"));
  CHECK (!rb_store_is_nbd_uri ("nbdfoo://x"));

  /* TLS parameters on a plain URI are a configuration error. */
  {
    struct rb_store_params bad = p;
    bad.tls_username = "alice";
    CHECK (rb_store_open (&bad) == NULL && errno == EINVAL);
  }

  s = rb_store_open (&p);
  if (s == NULL)
    FAIL ("open %s: %s", p.uri, rb_get_error ());
  CHECK (strcmp (s->ops->name, "nbd") == 0);
  CHECK (s->size == size);
  want = env_int ("EXPECT_CONNECTIONS", 0);
  if (want)
    CHECK (s->connections == want);
  printf ("opened %s: %d connection(s)\n", p.uri, s->connections);

  /* Out of range requests are refused before reaching the server. */
  {
    struct rb_io io = { .op = RB_IO_READ, .buf = buf, .count = 1024,
                        .offset = size - 512 };
    CHECK (s->ops->submit (s, &io, 1) == -1 && io.err == EINVAL);
  }

  test_batch_write ();
  test_zero ();
  test_next_data ();
  test_threads ();

  status (buf, sizeof buf, true);
  CHECK (strstr (buf, ",\"store_uri\":\"") == buf);
  CHECK (strstr (buf, "\"store_inflight_max\":") != NULL);
  /* The batches above kept several requests in flight at once. */
  CHECK (status_num ("store_inflight_max") > 1);
  printf ("status: %s\n", buf);

  test_reconnect ();
  rb_store_close (s);

  if (getenv ("FAULTDISK_DIR")) {
    test_flush_pinned (p.uri);
    test_flush_every_after_loss (p.uri);
  }

  free (model);
  printf ("all ok\n");
  return 0;
}
