/* SPDX-License-Identifier: GPL-2.0-or-later */
/* faultdisk: an nbdkit plugin for tests.  It serves a disk image and
 * injects faults when the test tells it to, so that an interleaving
 * (a write that is still executing on the server after its connection
 * has gone, a FLUSH that fails, a power cut that keeps part of a
 * volatile cache) can be forced instead of hoped for.
 *
 *   nbdkit .../nbdkit-faultdisk-plugin.so file=IMG [dir=DIR]
 *          [durable=DURABLE] [flush-rate=SIZE] [multi-conn=true|false]
 *
 * file=IMG        the image served.  Without durable= every write goes
 *                 straight to it and FLUSH is fdatasync(2).
 * durable=DUR     a volatile write cache in front of DUR: at start IMG
 *                 is made a copy of DUR (the cache is empty after a
 *                 "boot"); a write goes to IMG, which reads see, and is
 *                 remembered as unflushed; FLUSH applies the unflushed
 *                 writes, in order, to DUR and syncs it.  DUR is what
 *                 survives a power cut (see "powercut" below).  FUA is
 *                 a write followed by a FLUSH (nbdkit emulates it).
 * flush-rate=SIZE a FLUSH takes (bytes written since the last FLUSH) /
 *                 SIZE seconds before it does anything: flush-rate=4M
 *                 makes a FLUSH after 8 MiB of writes take 2 s.  It can
 *                 be changed while running ("set").
 * multi-conn=     whether to advertise multi-conn (default true: one
 *                 cache, so a FLUSH covers every connection's writes).
 *
 * Control.  With dir=DIR the test drives the plugin while it runs
 * through files in DIR.  To run a command it writes the command line
 * to DIR/NAME.tmp and renames it to DIR/NAME.cmd (NAME is anything
 * unique); a thread of the plugin looks for *.cmd files every 10 ms,
 * runs them in name order, writes the reply to DIR/NAME.reply (renamed
 * into place, so it appears complete) and removes DIR/NAME.cmd.  The
 * first line of a reply is "ok" or "error: MESSAGE"; data lines follow.
 * tests/remote-functions.sh wraps this (fd_cmd, fd_wait).  Commands:
 *
 *   stall OP [nth=N | offset=OFF] [times=T]
 *       Arm a stall: hold the Nth OP request from now (default the
 *       first) or the first OP request whose range holds byte OFF.  A
 *       held request gets no reply until it is released; the other
 *       requests go on (the thread model is parallel).  Replies
 *       "id=ID".  OP is read, write, zero, flush or store (write or
 *       zero).  times=T arms T such rules at once (one command, so no
 *       request passes between them): "stall flush times=8" holds the
 *       next 8 FLUSHes, as a client that flushes each of its
 *       connections needs; replies the first rule's id.
 *   release ID|all [apply|fail|drop]
 *       Release the request held by stall ID (or all held ones).
 *       apply (default): perform it now, then reply; it lands on the
 *       image even if its connection has been closed meanwhile, as a
 *       slow server thread does.  fail: reply EIO without performing
 *       it.  drop (a FLUSH in durable= mode): fail it with EIO and lose
 *       every unflushed write, including those that arrived while it
 *       was held, as Linux drops the dirty pages whose write-back
 *       failed and reports the error to one fsync only.  A rule (stall
 *       or fail) that has not been hit yet is disarmed.  Replies
 *       "released=N" (held requests released).
 *   fail OP [nth=N | offset=OFF] [errno=EIO|ENOSPC|EPERM|EINVAL]
 *       The matching request fails once with that errno (default EIO),
 *       without being performed.  "fail flush" fails the next FLUSH.
 *   powercut [seed=N] [keep=PCT] [torn=PCT] [tear=any|one]
 *       durable= only.  Each unflushed write, in order, is kept whole
 *       (keep%, default 33), torn (torn%, default 33: each of its
 *       512-byte sectors kept or not at random; with tear=one, exactly
 *       one sector of it, picked at random, is lost and the others
 *       kept: the least damage a checksum must see) or lost (the rest),
 *       with a PRNG seeded by seed= (default 1), so a failing run can
 *       be replayed.  The survivors are written to DUR and synced, IMG
 *       becomes a copy of DUR, held requests are failed, every request
 *       from now on fails with EIO and nbdkit is told to shut down:
 *       the machine lost power.  Replies kept=, torn=, lost=.
 *   set flush-rate=SIZE
 *       Change the FLUSH rate (0: no delay).
 *   status
 *       Counters, one "key=value" per line: requests by type (reads,
 *       writes, zeroes, flushes), held (now), held_ids, stalled, failed
 *       (so far), connections (open now), closed (connections closed so
 *       far), unflushed_writes, unflushed_bytes, last_flush_delay_ms
 *       (what flush-rate= imposed on the last FLUSH), powercut (0/1).
 *
 * A held request keeps nbdkit from exiting (it waits for its threads):
 * tests release everything or kill the server.
 *
 * Locking: one mutex (lock) protects every field of struct state; the
 * condition variable (cond) wakes held requests and rate-delayed
 * FLUSHes.  Data I/O to IMG and DUR happens under the lock in durable
 * mode (so that IMG and the unflushed list stay in the same order);
 * without durable= a write is done outside the lock (the client never
 * has two overlapping writes in flight that it cares about ordering).
 *
 * Why one file of over 1,100 lines: it is one test fixture whose
 * commands, the fault state they arm and the callbacks that obey that
 * state are read together when a test's interleaving is worked out;
 * most of its length is the command reference above.
 */

#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#define NBDKIT_API_VERSION 2
#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#include <nbdkit-plugin.h>

#define MAX_RULES 64
#define SECTOR 512
#define COPY_BUF (1024 * 1024)
#define CMD_MAX 4096
#define POLL_NS (10 * 1000000L)

enum op { OP_READ, OP_WRITE, OP_ZERO, OP_FLUSH, NR_OPS };
static const char *const op_names[NR_OPS] = {
  [OP_READ] = "read", [OP_WRITE] = "write", [OP_ZERO] = "zero",
  [OP_FLUSH] = "flush",
};
#define OPBIT(op) (1u << (op))

enum rule_kind { R_STALL, R_FAIL };
enum rule_state { RS_FREE = 0, RS_ARMED, RS_HELD, RS_RELEASED };
enum release_action { REL_APPLY, REL_FAIL, REL_DROP };

struct rule {
  enum rule_state state;
  enum rule_kind kind;
  int id;
  unsigned ops;                 /* OPBIT mask */
  bool by_offset;
  uint64_t offset;              /* by_offset: the byte to match */
  uint64_t nth, seen;           /* else: the nth match from arming */
  int err;                      /* R_FAIL */
  enum release_action action;   /* R_STALL once released */
};

/* An unflushed write of the volatile cache (durable= mode). */
struct record {
  struct record *next;
  uint64_t seq;                 /* order of arrival, from 1 */
  uint64_t offset;
  uint32_t count;
  unsigned char *data;          /* NULL: zeroes */
};

/* Configuration, fixed after .config_complete. */
static char *file, *durable, *ctldir;
static bool multi_conn = true;

/* Everything below is protected by 'lock'. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static struct state {
  int fd, dfd;                  /* IMG, DUR (-1 without durable=) */
  uint64_t size;
  uint64_t flush_rate;          /* bytes/s, 0: none */
  struct rule rules[MAX_RULES];
  int next_id;
  uint64_t count[NR_OPS];
  uint64_t held, stalled, failed;
  uint64_t connections, closed;
  struct record *head, **tail;  /* unflushed writes, oldest first */
  uint64_t next_seq;
  uint64_t unflushed_writes, unflushed_bytes;
  uint64_t written_since_flush; /* for flush-rate= without durable= */
  uint64_t last_flush_delay_ms;
  bool dead;                    /* after powercut */
  bool quit;                    /* watcher: stop */
} st = { .fd = -1, .dfd = -1, .next_id = 1, .next_seq = 1 };

static pthread_t watcher;
static bool watcher_running;

static int
full_pwrite (int fd, const void *buf, size_t count, uint64_t offset)
{
  const char *p = buf;

  while (count > 0) {
    ssize_t r = pwrite (fd, p, count, offset);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += r;
    count -= r;
    offset += r;
  }
  return 0;
}

static int
full_pread (int fd, void *buf, size_t count, uint64_t offset)
{
  char *p = buf;

  while (count > 0) {
    ssize_t r = pread (fd, p, count, offset);
    if (r == -1) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (r == 0) {             /* beyond EOF of a sparse file: zeroes */
      memset (p, 0, count);
      return 0;
    }
    p += r;
    count -= r;
    offset += r;
  }
  return 0;
}

static int
write_zeroes (int fd, uint64_t count, uint64_t offset)
{
  static const unsigned char zero[65536];

  while (count > 0) {
    size_t n = count < sizeof zero ? count : sizeof zero;
    if (full_pwrite (fd, zero, n, offset) == -1)
      return -1;
    count -= n;
    offset += n;
  }
  return 0;
}

/* Copy the first 'size' bytes of 'from' over 'to'. */
static int
copy_image (int from, int to, uint64_t size)
{
  unsigned char *buf = malloc (COPY_BUF);
  uint64_t off;

  if (buf == NULL)
    return -1;
  for (off = 0; off < size; off += COPY_BUF) {
    size_t n = size - off < COPY_BUF ? size - off : COPY_BUF;
    if (full_pread (from, buf, n, off) == -1 ||
        full_pwrite (to, buf, n, off) == -1) {
      free (buf);
      return -1;
    }
  }
  free (buf);
  if (ftruncate (to, size) == -1)
    return -1;
  return 0;
}

static uint64_t
rnd (uint64_t *s)
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C (2685821657736338717);
}

/* Absolute CLOCK_MONOTONIC deadline 'ns' from now, for timed waits. */
static struct timespec
deadline_ns (uint64_t ns)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  ns += ts.tv_nsec;
  ts.tv_sec += ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  return ts;
}

static bool
before (const struct timespec *a, const struct timespec *b)
{
  return a->tv_sec < b->tv_sec ||
    (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* ---- requests ---- */

/* Match the request against the armed rules.  Lock held.  Returns the
 * rule that fires (its state already updated) or NULL.
 */
static struct rule *
match (enum op op, uint64_t count, uint64_t offset)
{
  int i;

  for (i = 0; i < MAX_RULES; i++) {
    struct rule *r = &st.rules[i];

    if (r->state != RS_ARMED || !(r->ops & OPBIT (op)))
      continue;
    if (r->by_offset) {
      if (op == OP_FLUSH || r->offset < offset || r->offset - offset >= count)
        continue;
    }
    else if (++r->seen < r->nth)
      continue;
    return r;
  }
  return NULL;
}

/* Free the unflushed writes' records; the list is empty after. */
static void
free_records (void)
{
  struct record *rec, *next;

  for (rec = st.head; rec; rec = next) {
    next = rec->next;
    free (rec->data);
    free (rec);
  }
  st.head = NULL;
  st.tail = &st.head;
}

/* A failed FLUSH that loses the cache: every unflushed write is gone
 * and reads see the durable image again.  Lock held.
 */
static void
drop_unflushed (void)
{
  free_records ();
  st.unflushed_writes = st.unflushed_bytes = 0;
  if (copy_image (st.dfd, st.fd, st.size) == -1)
    nbdkit_error ("drop: restoring %s from %s: %m", file, durable);
  nbdkit_debug ("faultdisk: flush failed, unflushed writes dropped");
}

/* Common entry of every request: count it, apply fail and stall rules.
 * Returns 0 to go on, -1 to fail with errno.  Lock held; a stall waits
 * here (the lock is released while waiting).
 */
static int
enter (enum op op, uint64_t count, uint64_t offset)
{
  struct rule *r;

  if (st.dead) {
    errno = EIO;
    return -1;
  }
  st.count[op]++;
  r = match (op, count, offset);
  if (r == NULL)
    return 0;
  if (r->kind == R_FAIL) {
    nbdkit_debug ("faultdisk: rule %d fails %s of %" PRIu64 " at %" PRIu64,
                  r->id, op_names[op], count, offset);
    r->state = RS_FREE;
    st.failed++;
    errno = r->err;
    return -1;
  }
  nbdkit_debug ("faultdisk: rule %d holds %s of %" PRIu64 " at %" PRIu64,
                r->id, op_names[op], count, offset);
  r->state = RS_HELD;
  st.held++;
  st.stalled++;
  while (r->state == RS_HELD)
    pthread_cond_wait (&cond, &lock);
  st.held--;
  r->state = RS_FREE;
  nbdkit_debug ("faultdisk: rule %d: %s of %" PRIu64 " at %" PRIu64
                " released (%s)", r->id, op_names[op], count, offset,
                r->action == REL_APPLY && !st.dead ? "apply" : "fail");
  if (r->action == REL_DROP && op == OP_FLUSH && st.dfd >= 0 && !st.dead)
    drop_unflushed ();
  if (r->action != REL_APPLY || st.dead) {
    errno = EIO;
    return -1;
  }
  return 0;
}

static void *
fd_open (int readonly)
{
  static int handle;

  pthread_mutex_lock (&lock);
  st.connections++;
  pthread_mutex_unlock (&lock);
  return &handle;
}

static void
fd_close (void *h)
{
  pthread_mutex_lock (&lock);
  st.connections--;
  st.closed++;
  pthread_mutex_unlock (&lock);
}

static int64_t
fd_get_size (void *h)
{
  return st.size;               /* fixed after config_complete */
}

static int
fd_can_multi_conn (void *h)
{
  return multi_conn;
}

static int
fd_can_flush (void *h)
{
  return 1;
}

static int
fd_can_fua (void *h)
{
  return NBDKIT_FUA_EMULATE;
}

static int
fd_can_zero (void *h)
{
  return 1;
}

static int
fd_pread (void *h, void *buf, uint32_t count, uint64_t offset,
          uint32_t flags)
{
  int r;

  pthread_mutex_lock (&lock);
  r = enter (OP_READ, count, offset);
  pthread_mutex_unlock (&lock);
  if (r == -1) {
    nbdkit_set_error (errno);
    return -1;
  }
  if (full_pread (st.fd, buf, count, offset) == -1) {
    nbdkit_error ("pread: %m");
    return -1;
  }
  return 0;
}

/* A write or zero, after enter().  Lock held.  In durable mode it is
 * also remembered as unflushed (data NULL: zeroes).
 */
static int
store_locked (const void *buf, uint32_t count, uint64_t offset)
{
  struct record *rec = NULL;

  if (st.dfd >= 0) {
    rec = calloc (1, sizeof *rec);
    if (rec == NULL)
      return -1;
    if (buf) {
      rec->data = malloc (count);
      if (rec->data == NULL) {
        free (rec);
        return -1;
      }
      memcpy (rec->data, buf, count);
    }
    rec->offset = offset;
    rec->count = count;
  }
  if ((buf ? full_pwrite (st.fd, buf, count, offset)
       : write_zeroes (st.fd, count, offset)) == -1) {
    int err = errno;
    if (rec)
      free (rec->data);
    free (rec);
    errno = err;
    return -1;
  }
  if (rec) {
    rec->seq = st.next_seq++;
    *st.tail = rec;
    st.tail = &rec->next;
    st.unflushed_writes++;
    st.unflushed_bytes += count;
  }
  st.written_since_flush += count;
  return 0;
}

static int
do_store (enum op op, const void *buf, uint32_t count, uint64_t offset)
{
  int r;

  pthread_mutex_lock (&lock);
  r = enter (op, count, offset);
  if (r == 0 && st.dfd >= 0)
    r = store_locked (buf, count, offset);
  pthread_mutex_unlock (&lock);
  if (r == 0 && st.dfd < 0) {
    /* The client never has overlapping writes in flight whose order it
     * cares about, so the data goes to the image outside the lock.
     */
    r = buf ? full_pwrite (st.fd, buf, count, offset)
      : write_zeroes (st.fd, count, offset);
    if (r == 0) {
      pthread_mutex_lock (&lock);
      st.written_since_flush += count;
      pthread_mutex_unlock (&lock);
    }
  }
  if (r == -1) {
    int err = errno;

    nbdkit_error ("%s of %" PRIu32 " at %" PRIu64 ": %m", op_names[op],
                  count, offset);
    nbdkit_set_error (err);
  }
  return r;
}

static int
fd_pwrite (void *h, const void *buf, uint32_t count, uint64_t offset,
           uint32_t flags)
{
  return do_store (OP_WRITE, buf, count, offset);
}

static int
fd_zero (void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
  return do_store (OP_ZERO, NULL, count, offset);
}

static int
fd_flush (void *h, uint32_t flags)
{
  struct record *rec;
  uint64_t upto, bytes;
  int fd, err = 0;

  pthread_mutex_lock (&lock);
  if (enter (OP_FLUSH, 0, 0) == -1) {
    err = errno;
    goto out;
  }

  /* What this FLUSH covers: everything written before it. */
  upto = st.next_seq - 1;
  bytes = st.dfd >= 0 ? st.unflushed_bytes : st.written_since_flush;
  if (st.dfd < 0)
    st.written_since_flush = 0;
  st.last_flush_delay_ms = 0;
  if (st.flush_rate > 0 && bytes > 0) {
    uint64_t ns = (uint64_t) ((double) bytes / st.flush_rate * 1e9);
    struct timespec end = deadline_ns (ns), now;

    st.last_flush_delay_ms = ns / 1000000;
    for (;;) {
      clock_gettime (CLOCK_MONOTONIC, &now);
      if (st.dead || !before (&now, &end))
        break;
      pthread_cond_timedwait (&cond, &lock, &end);
    }
  }
  if (st.dead) {
    err = EIO;
    goto out;
  }

  if (st.dfd >= 0) {
    /* Apply the unflushed writes it covers, oldest first (a concurrent
     * FLUSH may have applied some already: they are gone).
     */
    while ((rec = st.head) != NULL && rec->seq <= upto) {
      if ((rec->data ? full_pwrite (st.dfd, rec->data, rec->count,
                                    rec->offset)
           : write_zeroes (st.dfd, rec->count, rec->offset)) == -1) {
        err = errno;
        goto out;             /* the rest stay unflushed */
      }
      st.head = rec->next;
      if (st.head == NULL)
        st.tail = &st.head;
      st.unflushed_writes--;
      st.unflushed_bytes -= rec->count;
      free (rec->data);
      free (rec);
    }
    fd = st.dfd;
  }
  else
    fd = st.fd;
  if (fdatasync (fd) == -1)
    err = errno;

 out:
  pthread_mutex_unlock (&lock);
  if (err) {
    errno = err;
    nbdkit_error ("flush: %m");
    nbdkit_set_error (err);
    return -1;
  }
  return 0;
}

/* ---- commands ---- */

static int
parse_op (const char *s, unsigned *ops)
{
  int i;

  if (strcmp (s, "store") == 0) {
    *ops = OPBIT (OP_WRITE) | OPBIT (OP_ZERO);
    return 0;
  }
  for (i = 0; i < NR_OPS; i++)
    if (strcmp (s, op_names[i]) == 0) {
      *ops = OPBIT (i);
      return 0;
    }
  return -1;
}

static int
parse_u64 (const char *s, uint64_t *v)
{
  char *end;

  if (*s == '\0' || *s == '-')
    return -1;
  errno = 0;
  *v = strtoull (s, &end, 0);
  return errno || *end ? -1 : 0;
}

static int
parse_errno (const char *s)
{
  static const struct { const char *name; int err; } errs[] = {
    { "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EPERM", EPERM },
    { "EINVAL", EINVAL }, { "ENOMEM", ENOMEM }, { "ESHUTDOWN", ESHUTDOWN },
  };
  size_t i;

  for (i = 0; i < sizeof errs / sizeof errs[0]; i++)
    if (strcmp (s, errs[i].name) == 0)
      return errs[i].err;
  return 0;
}

#define REPLY(...) do {                                                 \
    size_t _n = strlen (reply);                                         \
    if (_n < len)                                                       \
      snprintf (reply + _n, len - _n, __VA_ARGS__);                     \
  } while (0)
#define ERROR(...) do {                                                 \
    reply[0] = '\0';                                                    \
    REPLY ("error: ");                                                  \
    REPLY (__VA_ARGS__);                                                \
    REPLY ("\n");                                                       \
    return;                                                             \
  } while (0)

/* stall/fail OP [nth=N | offset=OFF] [errno=E]; lock held. */
static void
cmd_rule (enum rule_kind kind, char **w, int nw, char *reply, size_t len)
{
  struct rule r = { .state = RS_ARMED, .kind = kind, .nth = 1, .err = EIO };
  uint64_t times = 1, t;
  int i, first = -1;

  if (nw < 2 || parse_op (w[1], &r.ops) == -1)
    ERROR ("usage: %s read|write|zero|store|flush [nth=N|offset=OFF]%s",
           w[0], kind == R_FAIL ? " [errno=E]" : "");
  for (i = 2; i < nw; i++) {
    if (strncmp (w[i], "nth=", 4) == 0) {
      if (parse_u64 (w[i] + 4, &r.nth) == -1 || r.nth == 0)
        ERROR ("bad %s: a count from 1 is needed", w[i]);
    }
    else if (strncmp (w[i], "offset=", 7) == 0) {
      if (parse_u64 (w[i] + 7, &r.offset) == -1 || r.offset >= st.size)
        ERROR ("bad %s: an offset inside the disk is needed", w[i]);
      r.by_offset = true;
    }
    else if (kind == R_STALL && strncmp (w[i], "times=", 6) == 0) {
      if (parse_u64 (w[i] + 6, &times) == -1 || times == 0 ||
          times > MAX_RULES)
        ERROR ("bad %s: 1 to %d rules", w[i], MAX_RULES);
    }
    else if (kind == R_FAIL && strncmp (w[i], "errno=", 6) == 0) {
      if ((r.err = parse_errno (w[i] + 6)) == 0)
        ERROR ("bad %s: EIO, ENOSPC, EPERM, EINVAL, ENOMEM or ESHUTDOWN",
               w[i]);
    }
    else
      ERROR ("unknown argument '%s'", w[i]);
  }
  if (r.by_offset && r.ops == OPBIT (OP_FLUSH))
    ERROR ("a flush has no offset");
  for (i = 0, t = 0; i < MAX_RULES; i++)
    if (st.rules[i].state == RS_FREE)
      t++;
  if (t < times)
    ERROR ("too many rules armed or held (%d)", MAX_RULES);
  for (i = 0, t = 0; i < MAX_RULES && t < times; i++)
    if (st.rules[i].state == RS_FREE) {
      r.id = st.next_id++;
      st.rules[i] = r;
      if (first == -1)
        first = r.id;
      t++;
    }
  REPLY ("ok\nid=%d\n", first);
}

static void
cmd_release (char **w, int nw, char *reply, size_t len)
{
  enum release_action action = REL_APPLY;
  uint64_t id = 0, n = 0;
  bool all;
  int i;

  if (nw < 2 || nw > 3)
    ERROR ("usage: release ID|all [apply|fail|drop]");
  all = strcmp (w[1], "all") == 0;
  if (!all && (parse_u64 (w[1], &id) == -1 || id == 0))
    ERROR ("bad rule id '%s'", w[1]);
  if (nw == 3) {
    if (strcmp (w[2], "apply") == 0)
      action = REL_APPLY;
    else if (strcmp (w[2], "fail") == 0)
      action = REL_FAIL;
    else if (strcmp (w[2], "drop") == 0)
      action = REL_DROP;
    else
      ERROR ("release: apply, fail or drop, not '%s'", w[2]);
  }
  for (i = 0; i < MAX_RULES; i++) {
    struct rule *r = &st.rules[i];

    if (r->state == RS_FREE || (!all && (uint64_t) r->id != id))
      continue;
    if (r->state == RS_HELD) {
      r->action = action;
      r->state = RS_RELEASED;
      n++;
    }
    else if (r->state == RS_ARMED)
      r->state = RS_FREE;       /* never hit: disarm */
  }
  pthread_cond_broadcast (&cond);
  REPLY ("ok\nreleased=%" PRIu64 "\n", n);
}

static void
cmd_powercut (char **w, int nw, char *reply, size_t len)
{
  uint64_t seed = 1, keep = 33, torn = 33, nkeep = 0, ntorn = 0, nlost = 0;
  struct record *rec, *next;
  bool tear_one = false;
  int i;

  if (st.dfd < 0)
    ERROR ("powercut needs durable=");
  if (st.dead)
    ERROR ("the power is already off");
  for (i = 1; i < nw; i++) {
    if (strncmp (w[i], "seed=", 5) == 0) {
      if (parse_u64 (w[i] + 5, &seed) == -1)
        ERROR ("bad %s", w[i]);
    }
    else if (strcmp (w[i], "tear=one") == 0 || strcmp (w[i], "tear=any") == 0)
      tear_one = w[i][5] == 'o';
    else if (strncmp (w[i], "keep=", 5) == 0) {
      if (parse_u64 (w[i] + 5, &keep) == -1 || keep > 100)
        ERROR ("bad %s: a percentage", w[i]);
    }
    else if (strncmp (w[i], "torn=", 5) == 0) {
      if (parse_u64 (w[i] + 5, &torn) == -1 || torn > 100)
        ERROR ("bad %s: a percentage", w[i]);
    }
    else
      ERROR ("unknown argument '%s'", w[i]);
  }
  if (keep + torn > 100)
    ERROR ("keep= + torn= is more than 100%%");
  if (seed == 0)
    seed = 1;                   /* xorshift needs a non-zero state */

  for (rec = st.head; rec; rec = next) {
    uint64_t dice = rnd (&seed) % 100;

    next = rec->next;
    if (dice < keep) {
      nkeep++;
      if ((rec->data ? full_pwrite (st.dfd, rec->data, rec->count,
                                    rec->offset)
           : write_zeroes (st.dfd, rec->count, rec->offset)) == -1)
        ERROR ("writing %s: %m", durable);
    }
    else if (dice < keep + torn) {
      uint64_t pos = rec->offset;
      uint64_t nsec = (rec->offset + rec->count + SECTOR - 1) / SECTOR -
        rec->offset / SECTOR;
      uint64_t lose = tear_one ? rnd (&seed) % nsec : 0, sec = 0;

      ntorn++;
      while (pos < rec->offset + rec->count) {
        uint64_t end = (pos / SECTOR + 1) * SECTOR;
        uint64_t n;

        if (end > rec->offset + rec->count)
          end = rec->offset + rec->count;
        n = end - pos;
        if (tear_one ? sec++ != lose : rnd (&seed) & 1) {
          if ((rec->data
               ? full_pwrite (st.dfd, rec->data + (pos - rec->offset), n, pos)
               : write_zeroes (st.dfd, n, pos)) == -1)
            ERROR ("writing %s: %m", durable);
        }
        pos = end;
      }
    }
    else
      nlost++;
  }
  free_records ();
  st.unflushed_writes = st.unflushed_bytes = 0;
  if (fdatasync (st.dfd) == -1 || copy_image (st.dfd, st.fd, st.size) == -1)
    ERROR ("after the cut: %m");
  st.dead = true;
  /* Held requests die with the machine. */
  for (i = 0; i < MAX_RULES; i++)
    if (st.rules[i].state == RS_HELD) {
      st.rules[i].action = REL_FAIL;
      st.rules[i].state = RS_RELEASED;
    }
  pthread_cond_broadcast (&cond);
  nbdkit_debug ("faultdisk: power cut: kept %" PRIu64 ", torn %" PRIu64
                ", lost %" PRIu64, nkeep, ntorn, nlost);
  nbdkit_shutdown ();
  REPLY ("ok\nkept=%" PRIu64 "\ntorn=%" PRIu64 "\nlost=%" PRIu64 "\n",
         nkeep, ntorn, nlost);
}

static void
cmd_set (char **w, int nw, char *reply, size_t len)
{
  int64_t v;

  if (nw != 2 || strncmp (w[1], "flush-rate=", 11) != 0)
    ERROR ("usage: set flush-rate=SIZE");
  if ((v = nbdkit_parse_size (w[1] + 11)) == -1)
    ERROR ("bad %s", w[1]);
  st.flush_rate = v;
  REPLY ("ok\n");
}

static void
cmd_status (char *reply, size_t len)
{
  int i;

  REPLY ("ok\n");
  for (i = 0; i < NR_OPS; i++)
    REPLY ("%s%s=%" PRIu64 "\n", op_names[i],
           i == OP_FLUSH ? "es" : "s", st.count[i]);
  REPLY ("held=%" PRIu64 "\nheld_ids=", st.held);
  for (i = 0; i < MAX_RULES; i++)
    if (st.rules[i].state == RS_HELD)
      REPLY ("%d,", st.rules[i].id);
  REPLY ("\nstalled=%" PRIu64 "\nfailed=%" PRIu64 "\n", st.stalled, st.failed);
  REPLY ("connections=%" PRIu64 "\nclosed=%" PRIu64 "\n", st.connections,
         st.closed);
  REPLY ("unflushed_writes=%" PRIu64 "\nunflushed_bytes=%" PRIu64 "\n",
         st.unflushed_writes, st.unflushed_bytes);
  REPLY ("last_flush_delay_ms=%" PRIu64 "\npowercut=%d\n",
         st.last_flush_delay_ms, st.dead);
}

/* Run one command line; the reply goes to reply[len]. */
static void
run_command (char *line, char *reply, size_t len)
{
  char *w[16], *save = NULL, *tok;
  int nw = 0;

  reply[0] = '\0';
  for (tok = strtok_r (line, " \t\r\n", &save); tok && nw < 16;
       tok = strtok_r (NULL, " \t\r\n", &save))
    w[nw++] = tok;
  if (nw == 0)
    ERROR ("empty command");
  if (tok != NULL)
    ERROR ("too many words");

  pthread_mutex_lock (&lock);
  if (strcmp (w[0], "stall") == 0)
    cmd_rule (R_STALL, w, nw, reply, len);
  else if (strcmp (w[0], "fail") == 0)
    cmd_rule (R_FAIL, w, nw, reply, len);
  else if (strcmp (w[0], "release") == 0)
    cmd_release (w, nw, reply, len);
  else if (strcmp (w[0], "powercut") == 0)
    cmd_powercut (w, nw, reply, len);
  else if (strcmp (w[0], "set") == 0)
    cmd_set (w, nw, reply, len);
  else if (strcmp (w[0], "status") == 0)
    cmd_status (reply, len);
  else {
    reply[0] = '\0';
    REPLY ("error: unknown command '%s'\n", w[0]);
  }
  pthread_mutex_unlock (&lock);
}

/* Read DIR/NAME.cmd, run it, publish DIR/NAME.reply, remove the command. */
static void
handle_file (const char *name)
{
  char path[4096], tmp[4096], out[4096], line[CMD_MAX + 1];
  size_t base = strlen (name) - 4;     /* without ".cmd" */
  ssize_t n;
  int fd;

  snprintf (path, sizeof path, "%s/%s", ctldir, name);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd == -1)
    return;
  n = read (fd, line, CMD_MAX);
  close (fd);
  if (n < 0)
    n = 0;
  line[n] = '\0';
  if (n == CMD_MAX)
    snprintf (out, sizeof out, "error: command longer than %d bytes\n",
              CMD_MAX);
  else
    run_command (line, out, sizeof out);

  snprintf (tmp, sizeof tmp, "%s/%.*s.rtmp", ctldir, (int) base, name);
  fd = open (tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd != -1) {
    size_t len = strlen (out);
    if (write (fd, out, len) != (ssize_t) len)
      nbdkit_error ("faultdisk: writing %s: %m", tmp);
    close (fd);
    snprintf (path, sizeof path, "%s/%.*s.reply", ctldir, (int) base, name);
    if (rename (tmp, path) == -1)
      nbdkit_error ("faultdisk: rename %s: %m", tmp);
  }
  else
    nbdkit_error ("faultdisk: %s: %m", tmp);
  snprintf (path, sizeof path, "%s/%s", ctldir, name);
  unlink (path);
}

static int
cmp_names (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static void *
watcher_main (void *arg)
{
  for (;;) {
    char *names[64];
    size_t n = 0, i;
    struct dirent *d;
    DIR *dir;
    bool quit;

    pthread_mutex_lock (&lock);
    quit = st.quit;
    pthread_mutex_unlock (&lock);
    if (quit)
      break;

    dir = opendir (ctldir);
    if (dir) {
      while ((d = readdir (dir)) != NULL && n < 64) {
        size_t l = strlen (d->d_name);
        if (l > 4 && strcmp (d->d_name + l - 4, ".cmd") == 0 &&
            (names[n] = strdup (d->d_name)) != NULL)
          n++;
      }
      closedir (dir);
    }
    qsort (names, n, sizeof names[0], cmp_names);
    for (i = 0; i < n; i++) {
      handle_file (names[i]);
      free (names[i]);
    }
    nanosleep (&(struct timespec) { 0, POLL_NS }, NULL);
  }
  return NULL;
}

/* ---- lifecycle ---- */

static void
fd_load (void)
{
  pthread_condattr_t ca;

  pthread_condattr_init (&ca);
  pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
  pthread_cond_init (&cond, &ca);
  pthread_condattr_destroy (&ca);
  st.tail = &st.head;
}

static int
fd_config (const char *key, const char *value)
{
  if (strcmp (key, "file") == 0) {
    free (file);
    if ((file = nbdkit_realpath (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "durable") == 0) {
    free (durable);
    if ((durable = nbdkit_realpath (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "dir") == 0) {
    free (ctldir);
    if ((ctldir = nbdkit_realpath (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "flush-rate") == 0) {
    int64_t v = nbdkit_parse_size (value);
    if (v == -1)
      return -1;
    st.flush_rate = v;
  }
  else if (strcmp (key, "multi-conn") == 0) {
    int b = nbdkit_parse_bool (value);
    if (b == -1)
      return -1;
    multi_conn = b;
  }
  else {
    nbdkit_error ("unknown parameter '%s'", key);
    return -1;
  }
  return 0;
}

static int
fd_config_complete (void)
{
  struct stat sb;

  if (file == NULL) {
    nbdkit_error ("file= is required");
    return -1;
  }
  st.fd = open (file, O_RDWR | O_CLOEXEC);
  if (st.fd == -1) {
    nbdkit_error ("%s: %m", file);
    return -1;
  }
  if (durable) {
    if (strcmp (durable, file) == 0) {
      nbdkit_error ("durable= must be another file than file=");
      return -1;
    }
    st.dfd = open (durable, O_RDWR | O_CLOEXEC);
    if (st.dfd == -1) {
      nbdkit_error ("%s: %m", durable);
      return -1;
    }
    if (fstat (st.dfd, &sb) == -1) {
      nbdkit_error ("%s: %m", durable);
      return -1;
    }
    /* Power on: the volatile cache is empty. */
    if (copy_image (st.dfd, st.fd, sb.st_size) == -1) {
      nbdkit_error ("copying %s to %s: %m", durable, file);
      return -1;
    }
  }
  if (fstat (st.fd, &sb) == -1) {
    nbdkit_error ("%s: %m", file);
    return -1;
  }
  st.size = sb.st_size;
  if (ctldir) {
    if (stat (ctldir, &sb) == -1 || !S_ISDIR (sb.st_mode)) {
      nbdkit_error ("dir=%s: not a directory", ctldir);
      return -1;
    }
  }
  return 0;
}

static int
fd_after_fork (void)
{
  int err;

  if (ctldir == NULL)
    return 0;
  err = pthread_create (&watcher, NULL, watcher_main, NULL);
  if (err) {
    errno = err;
    nbdkit_error ("pthread_create: %m");
    return -1;
  }
  watcher_running = true;
  return 0;
}

static void
fd_cleanup (void)
{
  if (watcher_running) {
    pthread_mutex_lock (&lock);
    st.quit = true;
    pthread_mutex_unlock (&lock);
    pthread_join (watcher, NULL);
    watcher_running = false;
  }
}

static void
fd_unload (void)
{
  free_records ();
  if (st.fd >= 0)
    close (st.fd);
  if (st.dfd >= 0)
    close (st.dfd);
  free (file);
  free (durable);
  free (ctldir);
  pthread_cond_destroy (&cond);
}

static struct nbdkit_plugin plugin = {
  .name = "faultdisk",
  .longname = "ramback test disk with injected faults",
  .version = PACKAGE_VERSION,
  .load = fd_load,
  .unload = fd_unload,
  .config = fd_config,
  .config_complete = fd_config_complete,
  .config_help =
    "file=IMG [dir=DIR] [durable=DUR] [flush-rate=SIZE] [multi-conn=BOOL]",
  .after_fork = fd_after_fork,
  .cleanup = fd_cleanup,
  .open = fd_open,
  .close = fd_close,
  .get_size = fd_get_size,
  .can_multi_conn = fd_can_multi_conn,
  .can_flush = fd_can_flush,
  .can_fua = fd_can_fua,
  .can_zero = fd_can_zero,
  .pread = fd_pread,
  .pwrite = fd_pwrite,
  .zero = fd_zero,
  .flush = fd_flush,
  .errno_is_preserved = 1,
};

NBDKIT_REGISTER_PLUGIN (plugin)
