/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Tests of the whole core (no nbdkit): random I/O against a model,
 * concurrent writers while the mode flips, writes racing populate, the
 * dirty limit, and backing store failures against the test store
 * (test-store.h), which loses unsynced writes when a sync fails: the
 * fsyncgate rule, failed writethrough writes and syncs, and zeroes that
 * must reach the store as zero requests.  The forced interleavings are
 * in test-interleave.c.  Run under ThreadSanitizer in CI.
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

#include "error.h"
#include "ramback.h"
#include "test-store.h"

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

/* --- random single-threaded I/O against a model ---------------------- */

/* How the model test loads the image. */
enum model_load {
  MODEL_POPULATE,               /* populate at full speed */
  MODEL_MISSES,                 /* populate=false: misses only, so the
                                   chunks stay partly loaded */
  MODEL_SLOW_POPULATE,          /* populate slowly, filling the partly
                                   loaded chunks while I/O goes on */
};

static enum model_load model_load;

static void
model_tweak (struct rb_config *c)
{
  if (model_load == MODEL_MISSES)
    c->populate = false;
  else if (model_load == MODEL_SLOW_POPULATE)
    c->populate_rate = 1 * MiB;
}

/* Under ThreadSanitizer, each word of the deliberate race between an
 * application copy and the flusher's read of the same chunk (see
 * lib/tsan.supp) goes through the suppressions one at a time: with 1 MiB
 * chunks the model's 2000 operations took over 500 s there (3 s in the
 * plain build).  The TSan build runs a tenth of them with 1 MiB chunks;
 * the plain and ASan builds run them all.
 */
#if defined(__SANITIZE_THREAD__)
#define MODEL_OPS(chunk) ((chunk) >= MiB ? 200 : 2000)
#else
#define MODEL_OPS(chunk) 2000
#endif

static void
run_model (uint32_t chunk, enum model_load load)
{
  const int ops = MODEL_OPS (chunk);
  size_t size = 3 * MiB + 12345;        /* last chunk partial */
  char *path = temp_path ("model");
  uint8_t *model = g_malloc (size), *buf = g_malloc (size);
  GRand *r = g_rand_new_with_seed (chunk + load);
  struct rb_stats st;
  uint64_t max_partial = 0;
  struct rb *rb;
  int op;

  ts_fill_random (r, model, size);
  write_file (path, model, size);
  model_load = load;
  rb = open_rb (path, chunk, model_tweak);
  g_assert_cmpuint (rb_get_size (rb), ==, size);

  for (op = 0; op < ops; op++) {
    uint64_t off, len;
    int kind = g_rand_int_range (r, 0, 10);

    /* Biased to chunk edges and the partial last chunk, where the
     * arithmetic goes wrong (uniform offsets almost never reach it).
     */
    ts_rand_extent (r, size, chunk, 300000, &off, &len);

    if (kind < 5) {
      ts_fill_random (r, buf, len);
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
    if (op % (ops / 4) == ops / 4 - 1) {
      g_assert_cmpint (rb_sync (rb, -1), ==, 0);
      assert_file_equals (path, model, size);
    }
    rb_get_stats (rb, &st);
    max_partial = MAX (max_partial, st.partial_chunks);
  }
  if (load == MODEL_MISSES && chunk > 4096)
    /* The test is about partly loaded chunks: there must have been
     * some (they fill up as the requests cover them).
     */
    g_assert_cmpuint (max_partial, >, 0);
  /* Populate completes, partly loaded chunks and the partial last
   * chunk included.
   */
  if (load == MODEL_SLOW_POPULATE) {
    g_assert_cmpint (rb_wait_populated (rb, 120 * 1000), ==, 0);
    rb_get_stats (rb, &st);
    g_assert_cmpuint (st.partial_chunks, ==, 0);
  }
  g_assert_cmpint (rb_pread (rb, buf, size, 0), ==, 0);
  g_assert_true (memcmp (buf, model, size) == 0);
  g_assert_cmpint (rb_close (rb), ==, 0);
  assert_file_equals (path, model, size);
  unlink (path);
  g_free (path);
  g_free (model);
  g_free (buf);
  g_rand_free (r);
}

static void
test_model (gconstpointer chunkp)
{
  run_model (GPOINTER_TO_UINT (chunkp), MODEL_POPULATE);
}

/* Chunks loaded in part (reads of some sectors, writes of others,
 * unaligned edges), written back, read, zeroed: the store and RAM must
 * equal the model, so no sector that was never loaded reached the
 * store, and none was loaded over newer data.
 */
static void
test_model_misses (gconstpointer chunkp)
{
  run_model (GPOINTER_TO_UINT (chunkp), MODEL_MISSES);
}

static void
test_model_slow_populate (gconstpointer chunkp)
{
  run_model (GPOINTER_TO_UINT (chunkp), MODEL_SLOW_POPULATE);
}

/* --- a miss costs what it asks for ------------------------------------ */

static void
no_populate (struct rb_config *c)
{
  c->populate = false;
}

static uint64_t
demand_loaded (struct rb *rb)
{
  struct rb_stats st;

  rb_get_stats (rb, &st);
  return st.demand_loaded_bytes;
}

static uint64_t
partial_chunks (struct rb *rb)
{
  struct rb_stats st;

  rb_get_stats (rb, &st);
  return st.partial_chunks;
}

/* 64 KiB chunks, nothing loaded: a 4 KiB read loads 4 KiB, a write of
 * whole sectors loads nothing, a write of part of a sector loads that
 * sector, a read across a sector boundary the two sectors; sequential
 * reads read ahead.  Then the whole device reads back as the model,
 * and reaches the store as the model.
 */
static void
test_miss_cost (void)
{
  const uint32_t chunk = 65536;
  size_t size = 4 * MiB + 5000;         /* a last chunk of 2 sectors */
  char *path = temp_path ("misses");
  struct rb_stats st;
  uint8_t *model = g_malloc (size), *buf = g_malloc (size);
  GRand *r = g_rand_new_with_seed (28);
  uint64_t before;
  struct rb *rb;

  ts_fill_random (r, model, size);
  write_file (path, model, size);
  rb = open_rb (path, chunk, no_populate);

  /* A 4 KiB read in chunk 5. */
  before = demand_loaded (rb);
  g_assert_cmpint (rb_pread (rb, buf, 4096, 5 * chunk + 8192), ==, 0);
  g_assert_true (memcmp (buf, model + 5 * chunk + 8192, 4096) == 0);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 4096);
  g_assert_cmpuint (partial_chunks (rb), ==, 1);

  /* Again: a hit. */
  before = demand_loaded (rb);
  g_assert_cmpint (rb_pread (rb, buf, 4096, 5 * chunk + 8192), ==, 0);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 0);

  /* 100 bytes across a sector boundary in chunk 9: two sectors. */
  before = demand_loaded (rb);
  g_assert_cmpint (rb_pread (rb, buf, 100, 9 * chunk + 4096 - 50), ==, 0);
  g_assert_true (memcmp (buf, model + 9 * chunk + 4096 - 50, 100) == 0);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 8192);

  /* A 4 KiB aligned write into chunk 20: no load at all. */
  before = demand_loaded (rb);
  ts_fill_random (r, buf, 4096);
  g_assert_cmpint (rb_pwrite (rb, buf, 4096, 20 * chunk + 12288, 0), ==, 0);
  memcpy (model + 20 * chunk + 12288, buf, 4096);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 0);
  g_assert_cmpuint (partial_chunks (rb), ==, 3);

  /* 100 bytes inside one sector of chunk 30: that sector. */
  before = demand_loaded (rb);
  ts_fill_random (r, buf, 100);
  g_assert_cmpint (rb_pwrite (rb, buf, 100, 30 * chunk + 5000, 0), ==, 0);
  memcpy (model + 30 * chunk + 5000, buf, 100);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 4096);

  /* A zero of whole sectors in chunk 40: no load. */
  before = demand_loaded (rb);
  g_assert_cmpint (rb_zero (rb, 8192, 40 * chunk + 4096, 0), ==, 0);
  memset (model + 40 * chunk + 4096, 0, 8192);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 0);

  /* 9 of the 16 sectors of chunk 45: dense enough that a whole chunk
   * would be written back, but 7 sectors were never loaded.
   */
  before = demand_loaded (rb);
  ts_fill_random (r, buf, 9 * 4096);
  g_assert_cmpint (rb_pwrite (rb, buf, 9 * 4096, 45 * chunk + 4096, 0),
                   ==, 0);
  memcpy (model + 45 * chunk + 4096, buf, 9 * 4096);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 0);

  /* Written back: the store gets the written sectors only. */
  g_assert_cmpint (rb_sync (rb, -1), ==, 0);
  assert_file_equals (path, model, size);

  /* Sequential 4 KiB reads in chunk 50: the second reads ahead (to
   * the end of the chunk), the next ones hit.
   */
  g_assert_cmpint (rb_pread (rb, buf, 4096, 50 * chunk + 4096), ==, 0);
  before = demand_loaded (rb);
  g_assert_cmpint (rb_pread (rb, buf, 4096, 50 * chunk + 8192), ==, 0);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, chunk - 8192);
  before = demand_loaded (rb);
  g_assert_cmpint (rb_pread (rb, buf, 4096, 50 * chunk + 12288), ==, 0);
  g_assert_true (memcmp (buf, model + 50 * chunk + 12288, 4096) == 0);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 0);

  /* The last chunk's first sector: the chunk is partial. */
  before = demand_loaded (rb);
  g_assert_cmpint (rb_pread (rb, buf, 100, 4 * MiB + 10), ==, 0);
  g_assert_true (memcmp (buf, model + 4 * MiB + 10, 100) == 0);
  g_assert_cmpuint (demand_loaded (rb) - before, ==, 4096);

  /* Everything, partly loaded chunks and all: then every chunk is
   * whole (the last one has no sectors past the device to wait for),
   * and the image is populated.
   */
  g_assert_cmpint (rb_pread (rb, buf, size, 0), ==, 0);
  g_assert_true (memcmp (buf, model, size) == 0);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.partial_chunks, ==, 0);
  g_assert_true (st.populated);
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
    ts_fill_random (r, buf, len);
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

  while (rb_atomic_load (&toggling)) {
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

static uint32_t concurrent_chunk;

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

  ts_fill_random (r, model, size);
  write_file (path, model, size);
  rb = open_rb (path, concurrent_chunk ? concurrent_chunk : 4096,
                populate_race ? slow_populate : NULL);
  if (!populate_race) {
    rb_atomic_store (&toggling, 1);
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
    rb_atomic_store (&toggling, 0);
    g_thread_join (tog);
  }
  g_assert_cmpint (rb_close (rb), ==, 0);
  assert_file_equals (path, model, size);
  unlink (path);
  g_free (path);
  g_free (model);
  g_rand_free (r);
}

/* ram-size= tests: a read of [off, off+len) that must match the model. */
static void
read_model (struct rb *rb, const uint8_t *model, uint8_t *buf, uint32_t len,
            uint64_t off)
{
  g_assert_cmpint (rb_pread (rb, buf, len, off), ==, 0);
  g_assert_true (memcmp (buf, model + off, len) == 0);
}

/* The end of a ram-size= test: past the budget, chunks went and what
 * is resident fits; the file is the model after close.
 */
static void
budget_close (struct rb *rb, char *path, uint8_t *model, size_t size)
{
  struct rb_stats st;

  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.evictions, >, 0);
  g_assert_cmpuint (st.resident_bytes, <=, st.ram_size);
  g_assert_cmpint (rb_close (rb), ==, 0);
  assert_file_equals (path, model, size);
  unlink (path);
  g_free (path);
  g_free (model);
}

/* ram-size= with partial chunks: a chunk loaded in part is resident
 * (it holds the sectors loaded), so another read of its loaded sectors
 * is a hit: it reserves nothing and evicts nothing, and a miss on
 * another of its sectors loads that sector only.  Rereading them must
 * not evict one of them.
 */
static void
ram_size_16_chunks (struct rb_config *c)
{
  c->populate = false;
  c->ram_size = 16 * 65536;
}

static void
test_partial_hits (void)
{
  const uint32_t chunk = 65536;
  size_t size = 4 * MiB;
  char *path = temp_path ("partial-hits");
  uint8_t *model = g_malloc (size), *buf = g_malloc (4096);
  GRand *r = g_rand_new_with_seed (29);
  struct rb_stats st;
  uint64_t before;
  struct rb *rb;
  int pass, k;

  ts_fill_random (r, model, size);
  write_file (path, model, size);
  rb = open_rb (path, chunk, ram_size_16_chunks);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.ram_size, ==, 16 * chunk);

  /* One sector of each of 16 chunks. */
  for (k = 0; k < 16; k++)
    g_assert_cmpint (rb_pread (rb, buf, 4096, (3 * k) * chunk + 4096), ==, 0);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.misses, ==, 16);
  g_assert_cmpuint (st.resident_bytes, ==, 16 * 4096);
  before = st.demand_loaded_bytes;

  /* The same sectors again, three times: hits. */
  for (pass = 0; pass < 3; pass++)
    for (k = 0; k < 16; k++) {
      g_assert_cmpint (rb_pread (rb, buf, 4096, (3 * k) * chunk + 4096),
                       ==, 0);
      g_assert_true (memcmp (buf, model + (3 * k) * chunk + 4096,
                             4096) == 0);
    }
  rb_get_stats (rb, &st);
  if (st.evictions != 0 || st.hits != 48)
    g_error ("rereading the loaded sectors of 16 partial chunks with a "
             "budget of 16: %" PRIu64 " hits (want 48), %" PRIu64
             " misses (want 16), %" PRIu64 " evictions (want 0), %" PRIu64
             " bytes loaded again", st.hits, st.misses, st.evictions,
             st.demand_loaded_bytes - before);
  g_assert_cmpuint (st.demand_loaded_bytes, ==, before);

  /* Another sector of a resident chunk: a miss, one sector loaded,
   * still nothing evicted.
   */
  g_assert_cmpint (rb_pread (rb, buf, 4096, 3 * chunk + 8192), ==, 0);
  g_assert_true (memcmp (buf, model + 3 * chunk + 8192, 4096) == 0);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.misses, ==, 17);
  g_assert_cmpuint (st.evictions, ==, 0);
  g_assert_cmpuint (st.demand_loaded_bytes, ==, before + 4096);

  /* A write of whole sectors into a resident chunk: no slot either. */
  ts_fill_random (r, buf, 4096);
  g_assert_cmpint (rb_pwrite (rb, buf, 4096, 6 * chunk + 12288, 0), ==, 0);
  memcpy (model + 6 * chunk + 12288, buf, 4096);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.evictions, ==, 0);

  /* Whole chunks not in RAM, a budget's worth: now something goes. */
  g_free (buf);
  buf = g_malloc (chunk);
  for (k = 48; k < 64; k++)
    read_model (rb, model, buf, chunk, k * chunk);
  budget_close (rb, path, model, size);
  g_free (buf);
  g_rand_free (r);
}

/* ram-size= counts the sectors loaded, not whole chunks: a budget of
 * 16 chunks of 64 KiB (256 sectors) holds one sector of each of 200
 * chunks without evicting, counted exactly; a chunk written whole
 * counts all its sectors; writes filling sectors of partial chunks
 * count too; past the budget, chunks go until the loaded sectors fit
 * again.
 */
static void
test_sector_budget (void)
{
  const uint32_t chunk = 65536;
  size_t size = 32 * MiB;
  char *path = temp_path ("sector-budget");
  uint8_t *model = g_malloc (size), *buf = g_malloc (chunk);
  GRand *r = g_rand_new_with_seed (31);
  struct rb_stats st;
  struct rb *rb;
  int k;

  ts_fill_random (r, model, size);
  write_file (path, model, size);
  rb = open_rb (path, chunk, ram_size_16_chunks);
  for (k = 0; k < 200; k++)
    read_model (rb, model, buf, 4096, k * chunk + 8192);
  rb_get_stats (rb, &st);
  if (st.evictions != 0 || st.resident_bytes != 200 * 4096)
    g_error ("one sector of each of 200 chunks with a budget of 256 "
             "sectors: %" PRIu64 " evictions (want 0), resident_bytes %"
             PRIu64 " (want %d)", st.evictions, st.resident_bytes,
             200 * 4096);
  g_assert_cmpuint (st.loaded_chunks, ==, 200);

  /* A chunk written whole: all of its 16 sectors. */
  ts_fill_random (r, buf, chunk);
  g_assert_cmpint (rb_pwrite (rb, buf, chunk, 400 * chunk, 0), ==, 0);
  memcpy (model + 400 * chunk, buf, chunk);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.evictions, ==, 0);
  g_assert_cmpuint (st.resident_bytes, ==, 216 * 4096);

  /* A sector written whole into each of 100 of the partial chunks:
   * hits, but each fills a sector, past the budget: chunks go (the
   * writes reserve, and the flusher trims after write back).
   */
  for (k = 0; k < 100; k++) {
    ts_fill_random (r, buf, 4096);
    g_assert_cmpint (rb_pwrite (rb, buf, 4096, k * chunk + 12288, 0), ==, 0);
    memcpy (model + k * chunk + 12288, buf, 4096);
  }
  rb_get_stats (rb, &st);
  if (st.resident_bytes > st.ram_size)
    g_error ("writes filling sectors of resident partial chunks: %" PRIu64
             " bytes resident, ram-size %" PRIu64 " (%" PRIu64
             " evictions)", st.resident_bytes, st.ram_size, st.evictions);
  g_assert_cmpuint (st.evictions, >, 0);

  /* 150 more chunks, a sector each: past the budget, chunks go. */
  for (k = 200; k < 350; k++)
    read_model (rb, model, buf, 4096, k * chunk);
  budget_close (rb, path, model, size);
  g_free (buf);
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

/* The same with 64 KiB chunks: writers and readers miss in chunks that
 * populate is filling, and in chunks they load in part.
 */
static void
test_populate_race_partial (void)
{
  concurrent_chunk = 65536;
  run_concurrent (true);
  concurrent_chunk = 0;
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

  while (rb_atomic_load (&sampling)) {
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
  rb_atomic_store (&sampling, 1);
  s = g_thread_new ("sampler", sampler_main, rb);
  for (i = 0; i < WRITERS; i++) {
    w[i] = (struct writer) { rb, i, model + (size_t) i * REGION, 100, false };
    t[i] = g_thread_new ("writer", writer_main, &w[i]);
  }
  for (i = 0; i < WRITERS; i++)
    g_thread_join (t[i]);
  rb_atomic_store (&sampling, 0);
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

/* --- backing store failures, on the test store (test-store.h) -------- */

static struct rb_store *override_store;
static bool override_fsync_wait;
static uint32_t override_flush_delay_ms;

static void
use_override (struct rb_config *c)
{
  c->store_override = override_store;
  c->fsync_wait = override_fsync_wait;
  c->flush_delay_ms = override_flush_delay_ms;
}

/* A started rb on the test store, fully loaded. */
static struct rb *
open_ts (struct tstore *ts, uint32_t chunk, bool fsync_wait)
{
  struct rb *rb;

  override_store = ts_store (ts);
  override_fsync_wait = fsync_wait;
  rb = open_rb (NULL, chunk, use_override);
  g_assert_cmpint (rb_wait_populated (rb, TS_TIMEOUT_S * 1000), ==, 0);
  return rb;
}

/* A store of 'size' random bytes, and its model. */
static struct tstore *
random_store (GRand *r, size_t size, uint8_t **model)
{
  *model = g_malloc (size);
  ts_fill_random (r, *model, size);
  return ts_new (size, *model);
}

/* A store whose round trip (150 ms) is longer than the time populate
 * aims a batch at (BATCH_NS, 100 ms of the link): a batch's time is
 * then the round trip, not its bytes, and sized from that bandwidth
 * each batch would be half the last, down to one chunk per round trip
 * (8 MiB in 64K chunks: about 128 round trips, 20 s).  It must grow.
 */
static void
test_populate_far_store (void)
{
  size_t size = 8 * MiB;
  uint8_t *model, *buf = g_malloc (size);
  GRand *r = g_rand_new_with_seed (41);
  struct tstore *ts = random_store (r, size, &model);
  struct ts_match reads = { .ops = TS_READ };
  struct rb *rb;
  size_t n;

  ts_read_latency (ts, 150);
  rb = open_ts (ts, 65536, false);
  n = ts_count (ts, &reads);
  if (n > 24)
    g_error ("populate of %zu chunks from a store 150 ms away took %zu "
             "reads (want at most 24): its batches shrank to the round "
             "trip", size / 65536, n);
  g_assert_cmpint (rb_pread (rb, buf, size, 0), ==, 0);
  g_assert_true (memcmp (buf, model, size) == 0);
  g_assert_cmpint (rb_close (rb), ==, 0);
  ts_free (ts);
  g_free (model);
  g_free (buf);
  g_rand_free (r);
}

/* Populate over a slow store reads a batch into a bounce buffer, each
 * read at an address aligned as its offset is modulo 64 KiB (for
 * O_DIRECT).  With 4 KiB chunks the runs of EMPTY chunks start anywhere
 * in a 64 KiB block: here two chunks at 60K of every 128K, the rest
 * loaded by misses before populate starts, so that each read of the
 * first batch needs all but 8K of 128K of the buffer for its 8K.  The
 * buffer must hold that layout (an overrun shows under ASan, or as a
 * corrupted heap), and every chunk must come out right.
 */
static void
test_populate_bounce_layout (void)
{
  const uint32_t chunk = 4096;
  size_t size = 1 * MiB, off;
  uint8_t *model, *buf = g_malloc (size);
  GRand *r = g_rand_new_with_seed (43);
  struct tstore *ts = random_store (r, size, &model);
  struct rb_config c = { .chunk_size = chunk, .populate = true,
                         .store.tls_verify_peer = -1 };
  struct rb_stats st;
  struct rb *rb;

  override_store = ts_store (ts);
  use_override (&c);
  ts_read_latency (ts, 20);     /* well under BOUNCE_BPS */
  rb = rb_open (&c);
  if (rb == NULL)
    g_error ("rb_open: %s", rb_get_error ());
  for (off = 0; off < size; off += chunk)
    if (off % (128 * 1024) != 60 * 1024 && off % (128 * 1024) != 64 * 1024)
      g_assert_cmpint (rb_pread (rb, buf, chunk, off), ==, 0);
  g_assert_cmpint (rb_start (rb), ==, 0);
  g_assert_cmpint (rb_wait_populated (rb, TS_TIMEOUT_S * 1000), ==, 0);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.loaded_chunks, ==, size / chunk);
  g_assert_cmpint (rb_pread (rb, buf, size, 0), ==, 0);
  g_assert_true (memcmp (buf, model, size) == 0);
  g_assert_cmpint (rb_close (rb), ==, 0);
  ts_free (ts);
  g_free (model);
  g_free (buf);
  g_rand_free (r);
}

static void
test_fsyncgate (void)
{
  size_t size = 1 * MiB;
  uint8_t *model, *buf = g_malloc (65536);
  GRand *r = g_rand_new_with_seed (5);
  struct tstore *ts = random_store (r, size, &model);
  struct rb_stats st;
  struct rb *rb = open_ts (ts, 4096, true);
  int k;

  /* The next sync with unsynced data fails and loses every write since
   * the last good one.
   */
  ts_fail_syncs (ts, 1);
  for (k = 0; k < 40; k++) {
    uint64_t off = g_rand_int_range (r, 0, size - 65536);
    uint32_t len = g_rand_int_range (r, 1, 65536);
    ts_fill_random (r, buf, len);
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
  ts_assert_durable (ts, model, "after a failed sync and FLUSH");

  /* Failed writes: FLUSH fails while they fail, succeeds after. */
  ts_fail_writes (ts, 3);
  g_assert_cmpint (rb_pwrite (rb, buf, 4096, 0, 0), ==, 0);
  memcpy (model, buf, 4096);
  while (rb_flush (rb) == -1)
    ;
  ts_assert_durable (ts, model, "after failed write backs and FLUSH");
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.store_errors, >=, 3);

  g_assert_cmpint (rb_close (rb), ==, 0);
  ts_assert_durable (ts, model, "after close");
  ts_free (ts);
  g_free (model);
  g_free (buf);
  g_rand_free (r);
}

/* A writethrough write that the store refuses fails, but its data is in
 * RAM (RAM is the truth) and must reach the store by itself: nothing
 * rewrites it here.  The chunks were clean, so only the failure path
 * can have made them dirty again.
 */
static void
test_writethrough_write_fails (void)
{
  size_t size = 1 * MiB;
  uint64_t off = 123457;
  uint32_t len = 10000;         /* across three 4K chunks */
  uint8_t *model, *buf = g_malloc (len), *got = g_malloc (len);
  GRand *r = g_rand_new_with_seed (31);
  struct tstore *ts = random_store (r, size, &model);
  struct rb *rb = open_ts (ts, 4096, false);

  g_assert_cmpint (rb_set_mode (rb, RB_MODE_WRITETHROUGH), ==, 0);
  ts_fail_writes (ts, 1);
  ts_fill_random (r, buf, len);
  g_assert_cmpint (rb_pwrite (rb, buf, len, off, 0), ==, -1);
  g_assert_cmpint (rb_get_errno (), ==, EIO);
  g_assert_cmpint (rb_pread (rb, got, len, off), ==, 0);
  g_assert_true (memcmp (got, buf, len) == 0);
  memcpy (model + off, got, len);

  ts_sync_until_ok (rb);
  ts_assert_durable (ts, model,
                     "after a failed writethrough write and a sync");
  g_assert_cmpint (rb_close (rb), ==, 0);
  ts_free (ts);
  g_free (model);
  g_free (buf);
  g_free (got);
  g_rand_free (r);
}

/* Writethrough writes reach the store, but only a sync makes them
 * durable: a failing sync drops them (they never were dirty in RAM) and
 * they must be written again.
 */
static void
test_writethrough_sync_fails (void)
{
  size_t size = 1 * MiB;
  uint8_t *model, *buf = g_malloc (65536);
  GRand *r = g_rand_new_with_seed (37);
  struct tstore *ts = random_store (r, size, &model);
  struct rb_stats st;
  struct rb *rb = open_ts (ts, 4096, false);
  int k;

  g_assert_cmpint (rb_set_mode (rb, RB_MODE_WRITETHROUGH), ==, 0);
  ts_fail_syncs (ts, 1);
  for (k = 0; k < 3; k++) {
    uint64_t off = (uint64_t) k * 300000 + 777;
    ts_fill_random (r, buf, 65536);
    g_assert_cmpint (rb_pwrite (rb, buf, 65536, off, 0), ==, 0);
    memcpy (model + off, buf, 65536);
  }
  ts_sync_until_ok (rb);
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.sync_errors, ==, 1);
  ts_assert_durable (ts, model, "after a failed sync of writethrough writes");
  g_assert_cmpint (rb_close (rb), ==, 0);
  ts_free (ts);
  g_free (model);
  g_free (buf);
  g_rand_free (r);
}

/* Zero and trim of whole chunks reach the store as zero requests (a
 * punched hole, NBD WRITE ZEROES), not as zero bytes written, in both
 * modes; a partial chunk is written as data.  The flusher is held
 * (flush-delay=) while the writeback zeros run: one that stores a
 * chunk the zero marked ZERO before the zero changed RAM makes the
 * zero dirty it again (io.c), and it is then written as data, rightly.
 */
static void
test_zero_ops (void)
{
  size_t size = 1 * MiB;
  uint8_t *model;
  GRand *r = g_rand_new_with_seed (41);
  struct tstore *ts = random_store (r, size, &model);
  struct rb *rb;
  static const struct { uint64_t off, len; bool trim, wt; } z[] = {
    { 128 * 1024, 64 * 1024, false, false },
    { 512 * 1024, 32 * 1024, true, false },
    { 800 * 1024, 16 * 1024, false, true },
  };
  struct ts_match m;
  size_t i;

  override_flush_delay_ms = 60000;
  rb = open_ts (ts, 4096, false);
  override_flush_delay_ms = 0;
  for (i = 0; i < G_N_ELEMENTS (z); i++) {
    g_assert_cmpint (rb_set_mode (rb, z[i].wt ? RB_MODE_WRITETHROUGH
                                  : RB_MODE_WRITEBACK), ==, 0);
    g_assert_cmpint ((z[i].trim ? rb_trim : rb_zero) (rb, z[i].len,
                                                      z[i].off, 0), ==, 0);
    memset (model + z[i].off, 0, z[i].len);
  }
  /* Partial, in writeback mode: chunk 230 keeps most of its data and is
   * written back as data.
   */
  g_assert_cmpint (rb_set_mode (rb, RB_MODE_WRITEBACK), ==, 0);
  g_assert_cmpint (rb_zero (rb, 100, 230 * 4096 + 10, 0), ==, 0);
  memset (model + 230 * 4096 + 10, 0, 100);
  ts_sync_until_ok (rb);
  ts_assert_durable (ts, model, "after zero and trim");

  for (i = 0; i < G_N_ELEMENTS (z); i++) {
    m.offset = z[i].off;
    m.count = z[i].len;
    m.tag = NULL;
    m.ops = TS_ZERO;
    if (ts_count (ts, &m) == 0)
      g_error ("zeroed range [%" G_GUINT64_FORMAT ", +%" G_GUINT64_FORMAT
               ") never reached the store as a zero request", m.offset,
               m.count);
    m.ops = TS_WRITE;
    if (ts_count (ts, &m) != 0)
      g_error ("zeroed range [%" G_GUINT64_FORMAT ", +%" G_GUINT64_FORMAT
               ") was written to the store as data", m.offset, m.count);
  }
  m = (struct ts_match) { .ops = TS_WRITE, .offset = 230 * 4096,
                          .count = 4096 };
  g_assert_cmpuint (ts_count (ts, &m), ==, 1);
  g_assert_cmpint (rb_close (rb), ==, 0);
  ts_assert_durable (ts, model, "after close");
  ts_free (ts);
  g_free (model);
  g_rand_free (r);
}

/* A device whose last chunk is short (64K chunks, 72K): a write into
 * that chunk after a zero of it whole moves it ZERO -> DIRTY, which
 * marks every sector of the chunk; the dirty limit must count the two
 * the device has, not the sixteen of a whole chunk.
 */
static void
test_tail_chunk_sectors (void)
{
  size_t size = 72 * 1024;
  uint8_t *model, buf[4096];
  GRand *r = g_rand_new_with_seed (43);
  struct tstore *ts = random_store (r, size, &model);
  struct rb_stats st;
  struct rb *rb;

  override_flush_delay_ms = 60000;
  rb = open_ts (ts, 65536, false);
  override_flush_delay_ms = 0;
  g_assert_cmpint (rb_zero (rb, 8192, 65536, 0), ==, 0);
  memset (model + 65536, 0, 8192);
  memset (buf, 0xa5, sizeof buf);
  g_assert_cmpint (rb_pwrite (rb, buf, sizeof buf, 65536, 0), ==, 0);
  memcpy (model + 65536, buf, sizeof buf);
  rb_get_stats (rb, &st);
  if (st.dirty_bytes != 8192)
    g_error ("a zeroed short last chunk (2 sectors), then written: "
             "dirty_bytes %" G_GUINT64_FORMAT " (want 8192: no sector "
             "past the device's end counts)", st.dirty_bytes);
  ts_sync_until_ok (rb);
  ts_assert_durable (ts, model, "after the short chunk's write back");
  rb_get_stats (rb, &st);
  g_assert_cmpuint (st.dirty_bytes, ==, 0);
  g_assert_cmpint (rb_close (rb), ==, 0);
  ts_free (ts);
  g_free (model);
  g_rand_free (r);
}

/* --- bad configuration --------------------------------------------- */

/* A message that wraps the previous one (rb_set_error (errno, "...: %s",
 * rb_get_error ())) keeps it whole, with the errno text once.
 */
static void
test_error_wraps (void)
{
  rb_set_error (EIO, "flush of backing failed");
  rb_set_error (EIO, "journal j: sync after replay failed: %s",
                rb_get_error ());
  g_assert_cmpstr (rb_get_error (), ==, "journal j: sync after replay "
                   "failed: flush of backing failed: Input/output error");
  g_assert_cmpint (errno, ==, EIO);
}

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

/* One validation (config.c): rb_open() refuses, before it opens
 * anything, what the plugin and the filter refuse, with EINVAL and a
 * message that names the parameter; the form's own rules come with
 * rb_config_check()'s flags.
 */
#define NOFILE "/nonexistent/ramback/x"
static const struct {
  unsigned flags;               /* 0: through rb_open() */
  struct rb_config c;
  const char *msg;
} config_cases[] = {
  { 0, { .commit_interval_ms = 1000 }, "commit-interval= only applies" },
  { 0, { .resume_set = true }, "resume= only applies with ram=" },
  { 0, { .journal = "/nonexistent/j", .flush_delay_ms = 5000 },
    "flush-delay= does not apply with journal=" },
  { 0, { .journal = NOFILE }, "is the backing store itself" },
  { 0, { .flush_delay_ms = 61000 }, "flush-delay=61: expected seconds "
    "from 0 to 60" },
  { 0, { .chunk_size = 96 * 1024 }, "chunk=98304: the chunk size must be" },
  { 0, { .commit_interval_ms = 5 }, "commit-interval=0.005: expected" },
  { 0, { .store.connections = 65 }, "connections=65: expected a whole "
    "number from 1 to 64" },
  { RB_CHECK_ALL | RB_CHECK_URI_STORE, { .store.tls_username = "alice" },
    "tls-username= only applies to an NBD backing store" },
  { RB_CHECK_ALL | RB_CHECK_FILTER, { .store.max_inflight = 65 },
    "inflight=65: the filter runs at most 64" },
};

static void
test_config_rules (void)
{
  size_t i;

  for (i = 0; i < sizeof config_cases / sizeof config_cases[0]; i++) {
    struct rb_config c = config_cases[i].c;

    c.store.uri = NOFILE;
    c.store.tls_verify_peer = -1;
    if (config_cases[i].flags)
      g_assert_cmpint (rb_config_check (&c, config_cases[i].flags), ==, -1);
    else
      g_assert_null (rb_open (&c));
    g_assert_cmpint (rb_get_errno (), ==, EINVAL);
    if (strstr (rb_get_error (), config_cases[i].msg) == NULL)
      g_error ("case %zu: '%s' does not say '%s'", i, rb_get_error (),
               config_cases[i].msg);
  }
  /* What parses is valid on its own: the rules between parameters
   * wait for RB_CHECK_ALL.
   */
  {
    struct rb_config c = { .commit_interval_ms = 1000 };

    g_assert_cmpint (rb_config_check (&c, RB_CHECK_VALUES), ==, 0);
    g_assert_cmpint (rb_config_check (&c, RB_CHECK_ALL), ==, -1);
    c.store.uri = NULL;
    c.journal = "/j";
    c.store.tls_verify_peer = -1;
    g_assert_cmpint (rb_config_check (&c, RB_CHECK_ALL | RB_CHECK_URI_STORE),
                     ==, -1);
    g_assert_nonnull (strstr (rb_get_error (), "back= parameter is "
                              "required"));
  }
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_data_func ("/core/model/4k", GUINT_TO_POINTER (4096), test_model);
  g_test_add_data_func ("/core/model/64k", GUINT_TO_POINTER (65536),
                        test_model);
  g_test_add_data_func ("/core/model/64k-misses", GUINT_TO_POINTER (65536),
                        test_model_misses);
  g_test_add_data_func ("/core/model/1m-misses", GUINT_TO_POINTER (1 << 20),
                        test_model_misses);
  g_test_add_data_func ("/core/model/64k-slow-populate",
                        GUINT_TO_POINTER (65536), test_model_slow_populate);
  g_test_add_func ("/core/miss-cost", test_miss_cost);
  g_test_add_func ("/core/populate-race-partial", test_populate_race_partial);
  g_test_add_func ("/core/partial-hits", test_partial_hits);
  g_test_add_func ("/core/sector-budget", test_sector_budget);
  g_test_add_func ("/core/toggle", test_toggle);
  g_test_add_func ("/core/populate-race", test_populate_race);
  g_test_add_func ("/core/populate-far-store", test_populate_far_store);
  g_test_add_func ("/core/populate-bounce-layout",
                   test_populate_bounce_layout);
  g_test_add_func ("/core/dirty-limit", test_dirty_limit);
  g_test_add_func ("/core/fsyncgate", test_fsyncgate);
  g_test_add_func ("/core/writethrough-write-fails",
                   test_writethrough_write_fails);
  g_test_add_func ("/core/writethrough-sync-fails",
                   test_writethrough_sync_fails);
  g_test_add_func ("/core/zero-ops", test_zero_ops);
  g_test_add_func ("/core/tail-chunk-sectors", test_tail_chunk_sectors);
  g_test_add_func ("/core/bad-config", test_bad_config);
  g_test_add_func ("/core/config-rules", test_config_rules);
  g_test_add_func ("/core/error-wraps", test_error_wraps);
  return g_test_run ();
}
