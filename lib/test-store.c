/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests: the gated, failing, logging test store (test-store.h).
 *
 * Locking: one mutex (ts->lock) protects everything in struct tstore
 * and the gates; ts->cond is broadcast on every change (a request
 * arrived, was held, completed; a gate opened; a flush finished).  A
 * request held at a gate waits on ts->cond with the lock released.
 * These are pthread objects, not GMutex/GCond: GLib implements those
 * with raw futexes, which ThreadSanitizer cannot see.
 */

#include <config.h>

#undef NDEBUG
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "ramback.h"
#include "test-store.h"

enum gate_state { GATE_ARMED, GATE_HELD, GATE_OPEN };

struct ts_gate {
  struct tstore *ts;
  struct ts_match m;
  int err;
  enum gate_state state;
  size_t rec;                   /* index in ts->log of the held request */
};

struct tstore {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t size;
  uint8_t *pending, *durable;
  bool holes;                   /* next_data reports holes */
  int fail_writes, fail_syncs;
  unsigned read_latency_ms;     /* [atomic] ts_read_latency */
  bool flushing;                /* a flush is in progress */
  GArray *log;                  /* struct ts_rec, in arrival order */
  uint64_t clock;               /* arrivals and completions */
  GPtrArray *gates;             /* armed or held, in arming order */
  struct rb_store *store;
};

static __thread const char *my_tag;

void
ts_set_tag (const char *tag)
{
  my_tag = tag;
}

bool
ts_skip_known_bug (int known, const char *what)
{
  if (!known || g_getenv ("RAMBACK_RUN_KNOWN_BUGS"))
    return false;
  g_test_skip (what);
  return true;
}

void
ts_sync_until_ok (struct rb *rb)
{
  int i;

  for (i = 0; rb_sync (rb, -1) == -1; i++) {
    g_assert_cmpint (rb_get_errno (), ==, EIO);
    if (i == 100)
      g_error ("rb_sync still failing after 100 tries: %s", rb_get_error ());
  }
}

static struct timespec
deadline (void)
{
  struct timespec t;

  clock_gettime (CLOCK_MONOTONIC, &t);
  t.tv_sec += TS_TIMEOUT_S;
  return t;
}

/* Wait on ts->cond (lock held), failing the test at the deadline. */
static void
wait_locked (struct tstore *ts, struct timespec end, const char *what)
{
  if (pthread_cond_timedwait (&ts->cond, &ts->lock, &end) == ETIMEDOUT)
    g_error ("test store: timed out after %d s waiting for %s",
             TS_TIMEOUT_S, what);
}

static bool
matches (const struct ts_match *m, const struct ts_rec *r)
{
  if (m->ops && !(m->ops & r->op))
    return false;
  if (m->count && r->op != TS_FLUSH &&
      !(r->offset < m->offset + m->count && m->offset < r->offset + r->count))
    return false;
  if (m->tag) {
    if (m->tag[0] == '\0')
      return r->tag == NULL;
    return r->tag != NULL && strcmp (r->tag, m->tag) == 0;
  }
  return true;
}

static struct ts_rec *
rec_at (struct tstore *ts, size_t i)
{
  return &g_array_index (ts->log, struct ts_rec, i);
}

/* Log an arriving request; returns its index. */
static size_t
arrive (struct tstore *ts, enum ts_op op, uint64_t offset, uint64_t count)
{
  struct ts_rec r = {
    .op = op, .offset = offset, .count = count, .tag = my_tag,
    .arrived = ++ts->clock,
  };

  if (op != TS_FLUSH && (count == 0 || offset > ts->size ||
                         count > ts->size - offset))
    g_error ("test store: request %d of %" G_GUINT64_FORMAT " bytes at %"
             G_GUINT64_FORMAT " is outside the store (%" G_GUINT64_FORMAT
             " bytes)", op, count, offset, ts->size);
  g_array_append_val (ts->log, r);
  pthread_cond_broadcast (&ts->cond);
  return ts->log->len - 1;
}

static void
complete (struct tstore *ts, size_t i, int err)
{
  rec_at (ts, i)->done = ++ts->clock;
  rec_at (ts, i)->err = err;
  pthread_cond_broadcast (&ts->cond);
}

/* If an armed gate matches request i, hold it until the gate opens.
 * Returns the error the gate injects (0: none).  Lock held.
 */
static int
gate_phase (struct tstore *ts, size_t i, bool after)
{
  struct ts_gate *g = NULL;
  struct timespec end = deadline ();
  size_t k;
  int err;

  for (k = 0; k < ts->gates->len; k++) {
    struct ts_gate *c = g_ptr_array_index (ts->gates, k);
    if (c->state == GATE_ARMED && c->m.after == after &&
        matches (&c->m, rec_at (ts, i))) {
      g = c;
      break;
    }
  }
  if (g == NULL)
    return 0;
  g->state = GATE_HELD;
  g->rec = i;
  pthread_cond_broadcast (&ts->cond);
  while (g->state != GATE_OPEN)
    wait_locked (ts, end, "the test to open a gate");
  err = g->err;
  g_ptr_array_remove (ts->gates, g);
  g_free (g);
  return err;
}

static int
gate (struct tstore *ts, size_t i)
{
  return gate_phase (ts, i, false);
}

static int
ts_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct tstore *ts = s->handle;
  g_autofree uint8_t **cap = g_new0 (uint8_t *, n);
  int first = 0;
  size_t i;

  /* The data of a write is taken when the request is issued. */
  for (i = 0; i < n; i++)
    if (ios[i].op == RB_IO_WRITE)
      cap[i] = g_memdup2 (ios[i].buf, ios[i].count);
  /* A store far away: one round trip for the reads of a batch. */
  for (i = 0; i < n; i++)
    if (ios[i].op == RB_IO_READ) {
      unsigned ms = __atomic_load_n (&ts->read_latency_ms, __ATOMIC_SEQ_CST);

      if (ms)
        g_usleep (ms * G_USEC_PER_SEC / 1000);
      break;
    }

  pthread_mutex_lock (&ts->lock);
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];
    enum ts_op op = io->op == RB_IO_READ ? TS_READ
      : io->op == RB_IO_WRITE ? TS_WRITE : TS_ZERO;
    size_t r = arrive (ts, op, io->offset, io->count);
    int err = gate (ts, r);

    if (err == 0 && op != TS_READ && ts->fail_writes != 0) {
      if (ts->fail_writes > 0)
        ts->fail_writes--;
      err = EIO;
    }
    if (err == 0) {
      if (op == TS_READ)
        memcpy (io->buf, ts->pending + io->offset, io->count);
      else if (op == TS_WRITE) {
        memcpy (ts->pending + io->offset, cap[i], io->count);
        /* FUA (can_fua, set by the test): durable on completion. */
        if (io->fua) {
          g_assert_true (s->can_fua);
          memcpy (ts->durable + io->offset, cap[i], io->count);
        }
      }
      else
        memset (ts->pending + io->offset, 0, io->count);
      err = gate_phase (ts, r, true);
    }
    io->err = err;
    if (err && !first)
      first = err;
    complete (ts, r, err);
  }
  pthread_mutex_unlock (&ts->lock);
  for (i = 0; i < n; i++)
    g_free (cap[i]);
  if (first) {
    rb_set_error (first, "test store: injected failure");
    return -1;
  }
  return 0;
}

static int
ts_flush (struct rb_store *s)
{
  struct tstore *ts = s->handle;
  struct timespec end = deadline ();
  size_t r;
  int err;

  pthread_mutex_lock (&ts->lock);
  r = arrive (ts, TS_FLUSH, 0, 0);
  while (ts->flushing)
    wait_locked (ts, end, "the flush in progress");
  ts->flushing = true;
  err = gate (ts, r);
  /* Only a flush with something to lose fails by ts_fail_syncs. */
  if (err == 0 && ts->fail_syncs > 0 &&
      memcmp (ts->pending, ts->durable, ts->size) != 0) {
    ts->fail_syncs--;
    err = EIO;
  }
  if (err)
    /* Like Linux after a writeback error: the unsynced data is gone,
     * the pages look clean, and only this flush hears about it.
     */
    memcpy (ts->pending, ts->durable, ts->size);
  else
    memcpy (ts->durable, ts->pending, ts->size);
  ts->flushing = false;
  complete (ts, r, err);
  pthread_mutex_unlock (&ts->lock);
  if (err) {
    rb_set_error (err, "test store: injected flush failure");
    return -1;
  }
  return 0;
}

static void
ts_close (struct rb_store *s)
{
  struct tstore *ts = s->handle;

  pthread_mutex_lock (&ts->lock);
  ts->store = NULL;
  pthread_mutex_unlock (&ts->lock);
  g_free (s);
}

/* next_data: all data, unless ts_report_holes said otherwise; then: what reads sees, in blocks of
 * TS_HOLE_BLOCK bytes; a block of zeroes is a hole.
 */
#define TS_HOLE_BLOCK 4096

static bool
block_is_zero (struct tstore *ts, uint64_t b)
{
  uint64_t off = b * TS_HOLE_BLOCK, n = MIN (TS_HOLE_BLOCK, ts->size - off);
  uint64_t i;

  for (i = 0; i < n; i++)
    if (ts->pending[off + i])
      return false;
  return true;
}

static int
ts_next_data (struct rb_store *s, uint64_t offset, uint64_t *data,
              uint64_t *hole)
{
  struct tstore *ts = s->handle;
  uint64_t nb = (ts->size + TS_HOLE_BLOCK - 1) / TS_HOLE_BLOCK;
  uint64_t b = offset / TS_HOLE_BLOCK;

  pthread_mutex_lock (&ts->lock);
  if (!ts->holes) {
    *data = MIN (offset, ts->size);
    *hole = ts->size;
    pthread_mutex_unlock (&ts->lock);
    return 0;
  }
  while (b < nb && block_is_zero (ts, b))
    b++;
  *data = b < nb ? MAX (offset, b * TS_HOLE_BLOCK) : ts->size;
  while (b < nb && !block_is_zero (ts, b))
    b++;
  *hole = MIN (b * TS_HOLE_BLOCK, ts->size);
  pthread_mutex_unlock (&ts->lock);
  return 0;
}

static const struct rb_store_ops ts_ops = {
  .name = "test", .submit = ts_submit, .flush = ts_flush, .close = ts_close,
  .next_data = ts_next_data,
};

void
ts_report_holes (struct tstore *ts)
{
  pthread_mutex_lock (&ts->lock);
  ts->holes = true;
  pthread_mutex_unlock (&ts->lock);
}

struct tstore *
ts_new (uint64_t size, const uint8_t *init)
{
  struct tstore *ts = g_new0 (struct tstore, 1);
  pthread_condattr_t attr;

  pthread_mutex_init (&ts->lock, NULL);
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&ts->cond, &attr);
  pthread_condattr_destroy (&attr);
  ts->size = size;
  ts->pending = init ? g_memdup2 (init, size) : g_malloc0 (size);
  ts->durable = g_memdup2 (ts->pending, size);
  ts->log = g_array_new (FALSE, TRUE, sizeof (struct ts_rec));
  ts->gates = g_ptr_array_new ();
  ts->store = g_new0 (struct rb_store, 1);
  *ts->store = (struct rb_store) {
    .ops = &ts_ops, .handle = ts, .size = size, .can_zero = true,
    .connections = 1,
  };
  return ts;
}

struct rb_store *
ts_store (struct tstore *ts)
{
  return ts->store;
}

void
ts_free (struct tstore *ts)
{
  g_assert_null (ts->store);            /* rb_close() closed it */
  g_assert_cmpuint (ts->gates->len, ==, 0);
  g_ptr_array_free (ts->gates, TRUE);
  g_array_free (ts->log, TRUE);
  g_free (ts->pending);
  g_free (ts->durable);
  pthread_cond_destroy (&ts->cond);
  pthread_mutex_destroy (&ts->lock);
  g_free (ts);
}

void
ts_fail_writes (struct tstore *ts, int n)
{
  pthread_mutex_lock (&ts->lock);
  ts->fail_writes = n;
  pthread_mutex_unlock (&ts->lock);
}

void
ts_read_latency (struct tstore *ts, unsigned ms)
{
  __atomic_store_n (&ts->read_latency_ms, ms, __ATOMIC_SEQ_CST);
}

void
ts_fail_syncs (struct tstore *ts, int n)
{
  pthread_mutex_lock (&ts->lock);
  ts->fail_syncs = n;
  pthread_mutex_unlock (&ts->lock);
}

struct ts_gate *
ts_gate_arm (struct tstore *ts, const struct ts_match *m, int err)
{
  struct ts_gate *g = g_new0 (struct ts_gate, 1);

  g->ts = ts;
  g->m = *m;
  g->err = err;
  g->state = GATE_ARMED;
  pthread_mutex_lock (&ts->lock);
  g_ptr_array_add (ts->gates, g);
  pthread_mutex_unlock (&ts->lock);
  return g;
}

void
ts_gate_wait (struct ts_gate *g)
{
  struct tstore *ts = g->ts;
  struct timespec end = deadline ();

  pthread_mutex_lock (&ts->lock);
  while (g->state == GATE_ARMED)
    wait_locked (ts, end, "a request to reach a gate");
  pthread_mutex_unlock (&ts->lock);
}

bool
ts_gate_held (struct ts_gate *g)
{
  struct tstore *ts = g->ts;
  bool r;

  pthread_mutex_lock (&ts->lock);
  r = g->state == GATE_HELD;
  pthread_mutex_unlock (&ts->lock);
  return r;
}

struct ts_rec
ts_gate_rec (struct ts_gate *g)
{
  struct tstore *ts = g->ts;
  struct ts_rec r;

  pthread_mutex_lock (&ts->lock);
  g_assert_true (g->state == GATE_HELD);
  r = *rec_at (ts, g->rec);
  pthread_mutex_unlock (&ts->lock);
  return r;
}

void
ts_gate_open (struct ts_gate *g)
{
  struct tstore *ts = g->ts;

  pthread_mutex_lock (&ts->lock);
  if (g->state == GATE_ARMED) {         /* never used: the test frees it */
    g_ptr_array_remove (ts->gates, g);
    g_free (g);
  }
  else {                                /* the held request frees it */
    g->state = GATE_OPEN;
    pthread_cond_broadcast (&ts->cond);
  }
  pthread_mutex_unlock (&ts->lock);
}

size_t
ts_count (struct tstore *ts, const struct ts_match *m)
{
  size_t i, n = 0;

  pthread_mutex_lock (&ts->lock);
  for (i = 0; i < ts->log->len; i++)
    if (matches (m, rec_at (ts, i)))
      n++;
  pthread_mutex_unlock (&ts->lock);
  return n;
}

bool
ts_find (struct tstore *ts, const struct ts_match *m, size_t nth,
         struct ts_rec *out)
{
  size_t i;
  bool found = false;

  pthread_mutex_lock (&ts->lock);
  for (i = 0; i < ts->log->len; i++)
    if (matches (m, rec_at (ts, i)) && nth-- == 0) {
      *out = *rec_at (ts, i);
      found = true;
      break;
    }
  pthread_mutex_unlock (&ts->lock);
  return found;
}

void
ts_wait_count (struct tstore *ts, const struct ts_match *m, size_t n,
               const char *what)
{
  struct timespec end = deadline ();
  size_t i, k;

  pthread_mutex_lock (&ts->lock);
  for (;;) {
    for (i = k = 0; i < ts->log->len; i++)
      if (matches (m, rec_at (ts, i)))
        k++;
    if (k >= n)
      break;
    wait_locked (ts, end, what);
  }
  pthread_mutex_unlock (&ts->lock);
}

static void
read_image (struct tstore *ts, const uint8_t *img, void *buf,
            uint64_t count, uint64_t offset)
{
  g_assert_cmpuint (offset + count, <=, ts->size);
  memcpy (buf, img + offset, count);
}

void
ts_read_durable (struct tstore *ts, void *buf, uint64_t count,
                 uint64_t offset)
{
  pthread_mutex_lock (&ts->lock);
  read_image (ts, ts->durable, buf, count, offset);
  pthread_mutex_unlock (&ts->lock);
}

void
ts_read_pending (struct tstore *ts, void *buf, uint64_t count,
                 uint64_t offset)
{
  pthread_mutex_lock (&ts->lock);
  read_image (ts, ts->pending, buf, count, offset);
  pthread_mutex_unlock (&ts->lock);
}

static bool
image_has (struct tstore *ts, const uint8_t *img, const void *data,
           uint64_t count, uint64_t offset)
{
  bool r;

  pthread_mutex_lock (&ts->lock);
  g_assert_cmpuint (offset + count, <=, ts->size);
  r = memcmp (img + offset, data, count) == 0;
  pthread_mutex_unlock (&ts->lock);
  return r;
}

bool
ts_durable_has (struct tstore *ts, const void *data, uint64_t count,
                uint64_t offset)
{
  return image_has (ts, ts->durable, data, count, offset);
}

bool
ts_pending_has (struct tstore *ts, const void *data, uint64_t count,
                uint64_t offset)
{
  return image_has (ts, ts->pending, data, count, offset);
}

void
ts_assert_durable (struct tstore *ts, const uint8_t *model, const char *what)
{
  uint64_t i;

  pthread_mutex_lock (&ts->lock);
  for (i = 0; i < ts->size; i++)
    if (ts->durable[i] != model[i]) {
      uint8_t got = ts->durable[i];
      pthread_mutex_unlock (&ts->lock);
      g_error ("%s: the durable copy differs from the model at byte %"
               G_GUINT64_FORMAT " (chunk of 4K %" G_GUINT64_FORMAT
               "): %02x != %02x", what, i, i / 4096, got, model[i]);
    }
  pthread_mutex_unlock (&ts->lock);
}

void
ts_fill_random (GRand *r, uint8_t *p, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    p[i] = g_rand_int (r);
}

/* Log-uniform length in [lo, hi], as tests/model.py's rand_len. */
static uint64_t
rand_len (GRand *r, uint64_t lo, uint64_t hi)
{
  double x;

  if (lo >= hi)
    return lo;
  x = exp (g_rand_double_range (r, log ((double) lo), log ((double) hi + 1)));
  return CLAMP ((uint64_t) x, lo, hi);
}

void
ts_rand_extent (GRand *r, uint64_t size, uint32_t chunk, uint64_t maxlen,
                uint64_t *offp, uint64_t *lenp)
{
  uint64_t n = rand_len (r, 1, MIN (maxlen, size)), off;
  double p = g_rand_double (r);

  if (p < 0.2) {
    /* Touch the last, possibly partial, chunk. */
    uint64_t last = (size - 1) / chunk * chunk;
    uint64_t lo = last + 1 >= n ? last + 1 - n : 0;
    off = lo + (uint64_t) g_rand_double_range (r, 0, (double) (size - n - lo + 1));
  }
  else if (p < 0.5) {
    /* Start or end a few bytes either side of a chunk boundary. */
    int64_t b = (int64_t) ((uint64_t) g_rand_int_range (r, 0, size / chunk + 1)
                           * chunk) + g_rand_int_range (r, -3, 4);
    if (g_rand_boolean (r))
      b -= (int64_t) n;
    off = (uint64_t) CLAMP (b, 0, (int64_t) (size - n));
  }
  else if (p < 0.6 && size >= chunk) {
    /* Whole chunks, aligned. */
    uint64_t nch = MAX (n / chunk, 1);
    n = MIN (nch * chunk, size / chunk * chunk);
    off = (uint64_t) g_rand_int_range (r, 0, (size - n) / chunk + 1) * chunk;
  }
  else
    off = (uint64_t) g_rand_double_range (r, 0, (double) (size - n + 1));
  off = MIN (off, size - n);
  g_assert_cmpuint (n, >=, 1);
  g_assert_cmpuint (off + n, <=, size);
  *offp = off;
  *lenp = n;
}
