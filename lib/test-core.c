/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Tests of the whole core (no nbdkit): random I/O against a model,
 * concurrent writers while the mode flips, writes racing populate, the
 * dirty limit, and the fsyncgate rule against a backing store that
 * loses unsynced writes when a sync fails.  Run under ThreadSanitizer
 * in CI.
 */

#include <config.h>

#undef NDEBUG
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ramback.h"

#define MiB (1024 * 1024)

static char *
temp_path (const char *name)
{
  const char *dir = g_getenv ("TMPDIR") ? g_getenv ("TMPDIR") : "/var/tmp";
  return g_strdup_printf ("%s/ramback-%s-%d", dir, name, (int) getpid ());
}

static void
write_file (const char *path, const uint8_t *data, size_t len)
{
  GError *err = NULL;
  g_assert_true (g_file_set_contents (path, (const char *) data, len, &err));
}

static void
assert_file_equals (const char *path, const uint8_t *model, size_t len)
{
  gchar *got;
  gsize got_len;
  size_t i;

  g_assert_true (g_file_get_contents (path, &got, &got_len, NULL));
  g_assert_cmpuint (got_len, ==, len);
  for (i = 0; i < len; i++)
    if ((uint8_t) got[i] != model[i])
      g_error ("backing differs from the model at byte %zu: %02x != %02x",
               i, (uint8_t) got[i], model[i]);
  g_free (got);
}

static struct rb *
open_rb (const char *path, uint32_t chunk, void (*tweak) (struct rb_config *))
{
  struct rb_config c = { .store.uri = path, .chunk_size = chunk,
                         .populate = true, .store.tls_verify_peer = -1 };
  struct rb *rb;

  if (tweak)
    tweak (&c);
  rb = rb_open (&c);
  if (rb == NULL)
    g_error ("rb_open: %s", rb_get_error ());
  g_assert_cmpint (rb_start (rb), ==, 0);
  return rb;
}

static void
fill_random (GRand *r, uint8_t *p, size_t n)
{
  size_t i;
  for (i = 0; i < n; i++)
    p[i] = g_rand_int (r);
}

/* --- random single-threaded I/O against a model ---------------------- */

static void
test_model (gconstpointer chunkp)
{
  uint32_t chunk = GPOINTER_TO_UINT (chunkp);
  size_t size = 3 * MiB + 12345;        /* last chunk partial */
  char *path = temp_path ("model");
  uint8_t *model = g_malloc (size), *buf = g_malloc (size);
  GRand *r = g_rand_new_with_seed (chunk);
  struct rb *rb;
  int op;

  fill_random (r, model, size);
  write_file (path, model, size);
  rb = open_rb (path, chunk, NULL);
  g_assert_cmpuint (rb_get_size (rb), ==, size);

  for (op = 0; op < 2000; op++) {
    uint64_t off = g_rand_int_range (r, 0, size);
    uint32_t len = g_rand_int_range (r, 1, MIN (size - off, 300000) + 1);
    int kind = g_rand_int_range (r, 0, 10);

    if (kind < 5) {
      fill_random (r, buf, len);
      g_assert_cmpint (rb_pwrite (rb, buf, len, off, 0), ==, 0);
      memcpy (model + off, buf, len);
    }
    else if (kind < 7) {
      g_assert_cmpint ((kind == 5 ? rb_zero : rb_trim) (rb, len, off, 0),
                       ==, 0);
      memset (model + off, 0, len);
    }
    else if (kind == 7)
      g_assert_cmpint (rb_set_mode (rb, g_rand_boolean (r)), ==, 0);
    else {
      g_assert_cmpint (rb_pread (rb, buf, len, off), ==, 0);
      g_assert_true (memcmp (buf, model + off, len) == 0);
    }
    if (op % 500 == 499) {
      g_assert_cmpint (rb_sync (rb, -1), ==, 0);
      assert_file_equals (path, model, size);
    }
  }
  g_assert_cmpint (rb_close (rb), ==, 0);
  assert_file_equals (path, model, size);
  unlink (path);
  g_free (path);
  g_free (model);
  g_free (buf);
  g_rand_free (r);
}

/* --- concurrent writers, mode flipping, populate racing ---------------- */

#define WRITERS 4
#define REGION (256 * 1024)

struct writer {
  struct rb *rb;
  int id;
  uint8_t *model;               /* this writer's region of the model */
  int rounds;
  bool reads;
};

static gpointer
writer_main (gpointer arg)
{
  struct writer *w = arg;
  GRand *r = g_rand_new_with_seed (w->id * 7919);
  uint8_t *buf = g_malloc (REGION);
  uint64_t base = (uint64_t) w->id * REGION;
  int k;

  for (k = 0; k < w->rounds; k++) {
    uint64_t off = g_rand_int_range (r, 0, REGION);
    uint32_t len = g_rand_int_range (r, 1, MIN (REGION - off, 70000) + 1);

    if (w->reads && k % 3 == 0) {
      g_assert_cmpint (rb_pread (w->rb, buf, len, base + off), ==, 0);
      g_assert_true (memcmp (buf, w->model + off, len) == 0);
      continue;
    }
    fill_random (r, buf, len);
    g_assert_cmpint (rb_pwrite (w->rb, buf, len, base + off,
                                k % 17 == 0 ? RB_FUA : 0), ==, 0);
    memcpy (w->model + off, buf, len);
  }
  g_free (buf);
  g_rand_free (r);
  return NULL;
}

static int toggling;

static gpointer
toggler_main (gpointer arg)
{
  struct rb *rb = arg;
  int i = 0;

  while (__atomic_load_n (&toggling, __ATOMIC_SEQ_CST)) {
    g_assert_cmpint (rb_set_mode (rb, (i++ & 1) ? RB_MODE_WRITETHROUGH
                                  : RB_MODE_WRITEBACK), ==, 0);
    if (i % 16 == 0)
      g_assert_cmpint (rb_sync (rb, -1), ==, 0);
    g_usleep (200);
  }
  return NULL;
}

static void
slow_populate (struct rb_config *c)
{
  c->populate_rate = 2 * MiB;
  c->fsync_wait = true;
}

static void
run_concurrent (bool populate_race)
{
  size_t size = WRITERS * REGION;
  char *path = temp_path (populate_race ? "populate" : "toggle");
  uint8_t *model = g_malloc (size);
  GRand *r = g_rand_new_with_seed (99);
  struct writer w[WRITERS];
  GThread *t[WRITERS], *tog = NULL;
  struct rb *rb;
  int i;

  fill_random (r, model, size);
  write_file (path, model, size);
  rb = open_rb (path, 4096, populate_race ? slow_populate : NULL);
  if (!populate_race) {
    __atomic_store_n (&toggling, 1, __ATOMIC_SEQ_CST);
    tog = g_thread_new ("toggle", toggler_main, rb);
  }
  for (i = 0; i < WRITERS; i++) {
    w[i] = (struct writer) { rb, i, model + (size_t) i * REGION,
                             populate_race ? 300 : 1500, true };
    t[i] = g_thread_new ("writer", writer_main, &w[i]);
  }
  for (i = 0; i < WRITERS; i++)
    g_thread_join (t[i]);
  if (tog) {
    __atomic_store_n (&toggling, 0, __ATOMIC_SEQ_CST);
    g_thread_join (tog);
  }
  g_assert_cmpint (rb_close (rb), ==, 0);
  assert_file_equals (path, model, size);
  unlink (path);
  g_free (path);
  g_free (model);
  g_rand_free (r);
}

static void
test_toggle (void)
{
  run_concurrent (false);
}

static void
test_populate_race (void)
{
  run_concurrent (true);
}

/* --- dirty limit --------------------------------------------------- */

static void
limited (struct rb_config *c)
{
  /* Small enough that writers outrun the flusher even on a loaded
   * machine, so the limit is really reached.
   */
  c->dirty_max = 256 * 1024;
  c->flush_rate = 2 * MiB;
}

static int sampling;
static uint64_t max_seen;

static gpointer
sampler_main (gpointer arg)
{
  struct rb *rb = arg;
  struct rb_stats st;

  while (__atomic_load_n (&sampling, __ATOMIC_SEQ_CST)) {
    rb_get_stats (rb, &st);
    if (st.dirty_bytes + st.inflight_bytes > max_seen)
      max_seen = st.dirty_bytes + st.inflight_bytes;
    g_usleep (100);
  }
  return NULL;
}

static void
test_dirty_limit (void)
{
  size_t size = WRITERS * REGION;
  char *path = temp_path ("limit");
  uint8_t *model = g_malloc0 (size);
  struct writer w[WRITERS];
  GThread *t[WRITERS], *s;
  struct rb_stats st;
  struct rb *rb;
  int i;

  write_file (path, model, size);
  rb = open_rb (path, 4096, limited);
  g_assert_cmpint (rb_wait_populated (rb, 10000), ==, 0);
  __atomic_store_n (&sampling, 1, __ATOMIC_SEQ_CST);
  s = g_thread_new ("sampler", sampler_main, rb);
  for (i = 0; i < WRITERS; i++) {
    w[i] = (struct writer) { rb, i, model + (size_t) i * REGION, 100, false };
    t[i] = g_thread_new ("writer", writer_main, &w[i]);
  }
  for (i = 0; i < WRITERS; i++)
    g_thread_join (t[i]);
  __atomic_store_n (&sampling, 0, __ATOMIC_SEQ_CST);
  g_thread_join (s);
  rb_get_stats (rb, &st);
  /* The limit is checked before each write, so it can be passed by at
   * most the writes in progress: WRITERS x 70000 bytes, in 4K chunks.
   */
  g_assert_cmpuint (max_seen, <=, 256 * 1024 + WRITERS * (70000 + 8192));
  g_assert_cmpuint (st.throttled, >, 0);
  g_assert_cmpint (rb_close (rb), ==, 0);
  assert_file_equals (path, model, size);
  unlink (path);
  g_free (path);
  g_free (model);
}

/* --- fsyncgate: a store that loses unsynced writes when sync fails ---- */

struct vstore {
  uint8_t *durable, *pending;   /* pending = what the page cache holds */
  size_t size;
  int fail_syncs;               /* this many next syncs fail */
  int fail_writes;              /* this many next writes fail */
  GMutex lock;
};

static int
v_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct vstore *v = s->handle;
  int first = 0;
  size_t i;

  g_mutex_lock (&v->lock);
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];
    io->err = 0;
    if (io->op != RB_IO_READ && v->fail_writes > 0) {
      v->fail_writes--;
      io->err = EIO;
    }
    else if (io->op == RB_IO_READ)
      memcpy (io->buf, v->pending + io->offset, io->count);
    else if (io->op == RB_IO_WRITE)
      memcpy (v->pending + io->offset, io->buf, io->count);
    else
      memset (v->pending + io->offset, 0, io->count);
    if (io->err && !first)
      first = io->err;
  }
  g_mutex_unlock (&v->lock);
  if (first) {
    errno = first;
    return -1;
  }
  return 0;
}

static int
v_flush (struct rb_store *s)
{
  struct vstore *v = s->handle;
  int r = 0;

  g_mutex_lock (&v->lock);
  /* Only a sync that has something to lose fails. */
  if (v->fail_syncs > 0 && memcmp (v->pending, v->durable, v->size) != 0) {
    /* Like Linux after a writeback error: the unsynced data is gone
     * and the pages look clean.
     */
    v->fail_syncs--;
    memcpy (v->pending, v->durable, v->size);
    errno = EIO;
    r = -1;
  }
  else
    memcpy (v->durable, v->pending, v->size);
  g_mutex_unlock (&v->lock);
  return r;
}

static void
v_close (struct rb_store *s)
{
  g_free (s);
}

static const struct rb_store_ops vops = {
  .name = "volatile", .submit = v_submit, .flush = v_flush, .close = v_close,
};

static struct rb_store *vs_store;

static void
use_vstore (struct rb_config *c)
{
  c->store_override = vs_store;
  c->fsync_wait = true;
}

static void
test_fsyncgate (void)
{
  struct vstore v = { 0 };
  size_t size = 1 * MiB;
  uint8_t *model = g_malloc (size), *buf = g_malloc (65536);
  GRand *r = g_rand_new_with_seed (5);
  struct rb_stats st;
  struct rb *rb;
  int k;

  v.size = size;
  v.durable = g_malloc (size);
  fill_random (r, v.durable, size);
  v.pending = g_memdup2 (v.durable, size);
  memcpy (model, v.durable, size);
  g_mutex_init (&v.lock);
  vs_store = g_new0 (struct rb_store, 1);
  *vs_store = (struct rb_store) { .ops = &vops, .handle = &v, .size = size,
                                  .connections = 1 };
  rb = open_rb (NULL, 4096, use_vstore);
  g_assert_cmpint (rb_wait_populated (rb, 10000), ==, 0);

  /* The next sync with unsynced data fails and loses every write since
   * the last good one.
   */
  g_mutex_lock (&v.lock);
  v.fail_syncs = 1;
  g_mutex_unlock (&v.lock);
  for (k = 0; k < 40; k++) {
    uint64_t off = g_rand_int_range (r, 0, size - 65536);
    uint32_t len = g_rand_int_range (r, 1, 65536);
    fill_random (r, buf, len);
    g_assert_cmpint (rb_pwrite (rb, buf, len, off, 0), ==, 0);
    memcpy (model + off, buf, len);
  }
  /* Whether the first FLUSH sees the failure depends on when the
   * flusher's own sync ran; either way the failed sync must have made
   * the core write the lost data again (a plain retried fsync would
   * "succeed" with the data gone), so the store ends up right.
   */
  while (rb_flush (rb) == -1)
    g_assert_cmpint (rb_get_errno (), ==, EIO);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.sync_errors, ==, 1);
  g_assert_cmpint (v.fail_syncs, ==, 0);
  g_assert_true (memcmp (v.durable, model, size) == 0);

  /* Failed writes: FLUSH fails while they fail, succeeds after. */
  g_mutex_lock (&v.lock);
  v.fail_writes = 3;
  g_mutex_unlock (&v.lock);
  g_assert_cmpint (rb_pwrite (rb, buf, 4096, 0, 0), ==, 0);
  memcpy (model, buf, 4096);
  while (rb_flush (rb) == -1)
    ;
  g_assert_true (memcmp (v.durable, model, size) == 0);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.store_errors, >=, 3);

  g_assert_cmpint (rb_close (rb), ==, 0);
  g_assert_true (memcmp (v.durable, model, size) == 0);
  g_mutex_clear (&v.lock);
  g_free (v.durable);
  g_free (v.pending);
  g_free (model);
  g_free (buf);
  g_rand_free (r);
}

/* --- bad configuration --------------------------------------------- */

static void
test_bad_config (void)
{
  struct rb_config c = { .store.uri = "/nonexistent/ramback/x",
                         .store.tls_verify_peer = -1 };

  g_assert_null (rb_open (&c));
  g_assert_cmpint (rb_get_errno (), ==, ENOENT);
  g_assert_nonnull (strstr (rb_get_error (), "size="));
  c.chunk_size = 1000;
  g_assert_null (rb_open (&c));
  g_assert_cmpint (rb_get_errno (), ==, EINVAL);
  g_assert_nonnull (strstr (rb_get_error (), "power of two"));
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_data_func ("/core/model/4k", GUINT_TO_POINTER (4096), test_model);
  g_test_add_data_func ("/core/model/64k", GUINT_TO_POINTER (65536),
                        test_model);
  g_test_add_func ("/core/toggle", test_toggle);
  g_test_add_func ("/core/populate-race", test_populate_race);
  g_test_add_func ("/core/dirty-limit", test_dirty_limit);
  g_test_add_func ("/core/fsyncgate", test_fsyncgate);
  g_test_add_func ("/core/bad-config", test_bad_config);
  return g_test_run ();
}
