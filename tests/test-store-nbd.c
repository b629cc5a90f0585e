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
 *
 * Every check compares data against a model kept in memory.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ramback.h"
#include "store.h"
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

static void
status (char *buf, size_t len, bool json)
{
  size_t n;

  CHECK (s->ops->status != NULL);
  n = s->ops->status (s, json, buf, len);
  CHECK (n < len);
  buf[n] = '\0';
}

static uint64_t
status_num (const char *key)
{
  char buf[2048], pat[64];
  const char *p;

  status (buf, sizeof buf, false);
  snprintf (pat, sizeof pat, "%s: ", key);
  p = strstr (buf, pat);
  if (p == NULL)
    FAIL ("status has no %s:\n%s", key, buf);
  return strtoull (p + strlen (pat), NULL, 10);
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
  free (model);
  printf ("all ok\n");
  return 0;
}
