/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Forced interleavings of the core, each one a way data used to get (or
 * could get) lost.  No sleeps and no luck: a gated test store
 * (test-store.h) holds one request in flight, the test makes the racing
 * request from its own thread or a second one, waits for a *state* (a
 * request held at a gate, a thread blocked on a given condition variable
 * of the core), lets go, and checks RAM and the store's durable copy
 * against a model.  So each test fails on every run if the rule it
 * checks is broken.
 *
 * Blocked threads: this binary is linked with --wrap for
 * pthread_cond_wait and pthread_cond_timedwait (lib/Makefile.am), so
 * the calls the core makes through env-posix.c are counted per condition
 * variable.  "A thread waits on rb->rl.released" is how a test knows an
 * I/O is queued behind an earlier range, rather than hoping it is.
 *
 * This is white-box on purpose: it includes internal.h to name those
 * condition variables.
 *
 * Why one file of over 1,100 lines: every test is a self-contained
 * scenario over the same gated store, model and condition-variable
 * counting; split by topic, those fixtures would move to a header shared
 * by nothing else.
 */

#include <config.h>

#undef NDEBUG
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "internal.h"
#include "journal.h"
#include "test-store.h"

#define MiB (1024 * 1024)
#define CHUNK 4096
#define SIZE (1 * MiB)

/* --- which condition variables the core's threads wait on ------------- */

extern int __real_pthread_cond_wait (pthread_cond_t *c, pthread_mutex_t *m);
extern int __real_pthread_mutex_lock (pthread_mutex_t *m);
extern int __real_pthread_cond_timedwait (pthread_cond_t *c,
                                          pthread_mutex_t *m,
                                          const struct timespec *t);

#define WAIT_SLOTS 64
static struct {
  const void *cond;
  int n;
} waits[WAIT_SLOTS];
static pthread_mutex_t waits_lock = PTHREAD_MUTEX_INITIALIZER;

static void
note_wait (const void *c, int d)
{
  size_t i, free_slot = WAIT_SLOTS;

  pthread_mutex_lock (&waits_lock);
  for (i = 0; i < WAIT_SLOTS; i++) {
    if (waits[i].cond == c) {
      waits[i].n += d;
      if (waits[i].n == 0)
        waits[i].cond = NULL;
      pthread_mutex_unlock (&waits_lock);
      return;
    }
    if (waits[i].cond == NULL && free_slot == WAIT_SLOTS)
      free_slot = i;
  }
  g_assert_cmpint (d, >, 0);
  g_assert_cmpuint (free_slot, <, WAIT_SLOTS);
  waits[free_slot].cond = c;
  waits[free_slot].n = d;
  pthread_mutex_unlock (&waits_lock);
}

/* Threads waiting on c right now. */
static int
waiters (const void *c)
{
  int n = 0;
  size_t i;

  pthread_mutex_lock (&waits_lock);
  for (i = 0; i < WAIT_SLOTS; i++)
    if (waits[i].cond == c)
      n = waits[i].n;
  pthread_mutex_unlock (&waits_lock);
  return n;
}

int __wrap_pthread_mutex_lock (pthread_mutex_t *m);
int __wrap_pthread_cond_wait (pthread_cond_t *c, pthread_mutex_t *m);
int __wrap_pthread_cond_timedwait (pthread_cond_t *c, pthread_mutex_t *m,
                                   const struct timespec *t);

/* A thread that blocks on a locked mutex counts as waiting on it too
 * (the core serialises store syncs with a mutex).
 */
int
__wrap_pthread_mutex_lock (pthread_mutex_t *m)
{
  int r;

  if (m == &waits_lock || pthread_mutex_trylock (m) == 0)
    return m == &waits_lock ? __real_pthread_mutex_lock (m) : 0;
  note_wait (m, 1);
  r = __real_pthread_mutex_lock (m);
  note_wait (m, -1);
  return r;
}

int
__wrap_pthread_cond_wait (pthread_cond_t *c, pthread_mutex_t *m)
{
  int r;

  note_wait (c, 1);
  r = __real_pthread_cond_wait (c, m);
  note_wait (c, -1);
  return r;
}

int
__wrap_pthread_cond_timedwait (pthread_cond_t *c, pthread_mutex_t *m,
                               const struct timespec *t)
{
  int r;

  note_wait (c, 1);
  r = __real_pthread_cond_timedwait (c, m, t);
  note_wait (c, -1);
  return r;
}

/* --- holding a zero request after it changed RAM ---------------------- */

/* Also linked with --wrap=ramimage_zero: a thread that set hold_zero
 * stops right after its zero reached RAM, before the request path moves
 * the chunk states, and stays there until zero_go is set.  With
 * hold_zero_before it stops just before its zero reaches RAM instead
 * (after the whole chunks were marked ZERO).
 */
extern void __real_ramimage_zero (struct ramimage *ri, uint64_t off,
                                  uint64_t len);
void __wrap_ramimage_zero (struct ramimage *ri, uint64_t off, uint64_t len);

static __thread bool hold_zero, hold_zero_before;
static bool zero_held, zero_go;         /* [atomic] */

static void
zero_hold (void)
{
  rb_atomic_store (&zero_held, true);
  TS_WAIT (rb_atomic_load (&zero_go),
           "the test to let the held zero go on");
}

void
__wrap_ramimage_zero (struct ramimage *ri, uint64_t off, uint64_t len)
{
  if (hold_zero_before)
    zero_hold ();
  __real_ramimage_zero (ri, off, len);
  if (hold_zero)
    zero_hold ();
}

/* --- holding the flusher between collecting a batch and locking it -- */

/* Also linked with --wrap=rangelock_acquire_batch: while hold_batch is
 * set, the flusher (the only caller with RL_STORE ranges) stops right
 * before it takes the range locks of a batch it has collected, and stays
 * there until batch_go is set: the window in which a flush-rate= cap
 * makes it wait on a real machine.
 */
extern void __real_rangelock_acquire_batch (struct rangelock *rl,
                                            struct rl_node *nodes, size_t n);
void __wrap_rangelock_acquire_batch (struct rangelock *rl,
                                     struct rl_node *nodes, size_t n);

static bool hold_batch, batch_held, batch_go;   /* [atomic] */

void
__wrap_rangelock_acquire_batch (struct rangelock *rl, struct rl_node *nodes,
                                size_t n)
{
  if (n > 0 && nodes[0].kind == RL_STORE && rb_atomic_load (&hold_batch)) {
    rb_atomic_store (&hold_batch, false);
    rb_atomic_store (&batch_held, true);
    TS_WAIT (rb_atomic_load (&batch_go),
             "the test to let the held write-back batch go on");
    rb_atomic_store (&batch_held, false);
    rb_atomic_store (&batch_go, false);
  }
  __real_rangelock_acquire_batch (rl, nodes, n);
}

/* --- holding the flusher between its CAS and taking the bits --------- */

/* Also linked with --wrap=chunkmap_take_bits: while hold_take is set,
 * the first caller (the flusher: no other thread of these tests takes
 * sector bits) stops right before it takes them, after its CAS moved
 * the chunk to CLEAN, until take_go is set.
 */
extern uint64_t __real_chunkmap_take_bits (struct chunkmap *cm, uint64_t s,
                                           unsigned n);
uint64_t __wrap_chunkmap_take_bits (struct chunkmap *cm, uint64_t s,
                                    unsigned n);

static bool hold_take, take_held, take_go;      /* [atomic] */

/* A process that set crash_take_at (a sector number) ends right after
 * taking the bits of that sector's word, as a kill -9 at that moment
 * of a commit point or a write-back capture would.
 */
static uint64_t crash_take_at = UINT64_MAX;     /* [atomic] */

uint64_t
__wrap_chunkmap_take_bits (struct chunkmap *cm, uint64_t s, unsigned n)
{
  bool t = true;

  if (rb_atomic_load (&crash_take_at) == s) {
    __real_chunkmap_take_bits (cm, s, n);
    _exit (0);
  }

  if (rb_atomic_load (&hold_take) &&
      rb_atomic_cas (&hold_take, &t, false)) {
    rb_atomic_store (&take_held, true);
    TS_WAIT (rb_atomic_load (&take_go),
             "the test to let the held take of the sector bits go on");
    rb_atomic_store (&take_held, false);
    rb_atomic_store (&take_go, false);
  }
  return __real_chunkmap_take_bits (cm, s, n);
}

/* --- changing a write's buffer after it reached RAM -------------------- */

/* Also linked with --wrap=ramimage_copy_in: a thread that set
 * scribble_copy changes the source buffer of its write right after the
 * bytes reached RAM, as a racy application may change the pages of a
 * write it has handed to the kernel while that write is in flight.
 * One that set crash_copy ends the process there instead, as a kill -9
 * between a write's copy and its move of the chunk states would.
 */
extern void __real_ramimage_copy_in (struct ramimage *ri, uint64_t off,
                                     const void *buf, uint64_t len);
void __wrap_ramimage_copy_in (struct ramimage *ri, uint64_t off,
                              const void *buf, uint64_t len);

static __thread bool scribble_copy, crash_copy;

void
__wrap_ramimage_copy_in (struct ramimage *ri, uint64_t off, const void *buf,
                         uint64_t len)
{
  __real_ramimage_copy_in (ri, off, buf, len);
  if (scribble_copy)
    memset ((void *) buf, 0x5a, len);
  if (crash_copy)
    _exit (0);
}

/* --- holding a re-dirtying before its first mark ----------------------- */

/* Also linked with --wrap=chunkmap_mark: a thread that set hold_mark
 * stops at its next call, before the sector bits are set (the first
 * step of rbi_redirty: a failed sync putting back to dirty what it
 * covered, with sync_lock held), until mark_go is set.
 */
extern void __real_chunkmap_mark (struct chunkmap *cm, uint64_t s,
                                  uint64_t n);
void __wrap_chunkmap_mark (struct chunkmap *cm, uint64_t s, uint64_t n);

static __thread bool hold_mark;
static bool mark_held, mark_go;         /* [atomic] */

void
__wrap_chunkmap_mark (struct chunkmap *cm, uint64_t s, uint64_t n)
{
  if (hold_mark) {
    hold_mark = false;
    rb_atomic_store (&mark_held, true);
    TS_WAIT (rb_atomic_load (&mark_go),
             "the test to let the held re-dirtying go on");
    rb_atomic_store (&mark_held, false);
    rb_atomic_store (&mark_go, false);
  }
  __real_chunkmap_mark (cm, s, n);
}

/* --- fixture --------------------------------------------------------- */

struct fx {
  struct tstore *ts;
  struct rb *rb;
  uint8_t *model;
  GRand *r;
};

/* The fixture's gated store of random data and its model, as
 * configuration *c's store_override (taking FUA writes if can_fua);
 * nothing open on it yet.
 */
static void
fx_new_store (struct fx *f, guint32 seed, struct rb_config *c, bool can_fua)
{
  f->r = g_rand_new_with_seed (seed);
  f->model = g_malloc (SIZE);
  ts_fill_random (f->r, f->model, SIZE);
  f->ts = ts_new (SIZE, f->model);
  c->store_override = ts_store (f->ts);
  c->store_override->can_fua = can_fua;
}

/* Open the engine with *c over the fixture's store (fx_new_store);
 * started (and populated, with populate) if start.
 */
static void
fx_open_engine (struct fx *f, const struct rb_config *c, bool start)
{
  f->rb = rb_open (c);
  if (f->rb == NULL)
    g_error ("rb_open: %s", rb_get_error ());
  if (start) {
    g_assert_cmpint (rb_start (f->rb), ==, 0);
    if (c->populate)
      g_assert_cmpint (rb_wait_populated (f->rb, TS_TIMEOUT_S * 1000), ==, 0);
  }
}

/* The fixture over the gated store with configuration *c (its
 * store_override is set here, taking FUA writes if can_fua); started
 * (and populated, with populate) if start.
 */
static void
fx_open_store (struct fx *f, guint32 seed, struct rb_config *c, bool start,
               bool can_fua)
{
  fx_new_store (f, seed, c, can_fua);
  fx_open_engine (f, c, start);
}

static void
fx_open_cfg (struct fx *f, guint32 seed, struct rb_config *c, bool start)
{
  fx_open_store (f, seed, c, start, false);
}

/* A ram= image in /dev/shm for a test, or NULL (the test skipped). */
static char *
shm_ram_path (void)
{
  char *ram;

  if (access ("/dev/shm", W_OK) != 0) {
    g_test_skip ("no /dev/shm for a ram= image");
    return NULL;
  }
  ram = g_strdup_printf ("/dev/shm/ramback-interleave-%d", (int) getpid ());
  unlink (ram);
  return ram;
}

static void
fx_open_cs (struct fx *f, guint32 seed, bool fsync_wait, bool populate,
            bool start, uint64_t dirty_max, uint32_t chunk_size)
{
  struct rb_config c = { .chunk_size = chunk_size, .populate = populate,
                         .fsync_wait = fsync_wait, .dirty_max = dirty_max,
                         .store.tls_verify_peer = -1 };

  fx_open_cfg (f, seed, &c, start);
}

static void
fx_open (struct fx *f, guint32 seed, bool fsync_wait, bool populate,
         bool start, uint64_t dirty_max)
{
  fx_open_cs (f, seed, fsync_wait, populate, start, dirty_max, CHUNK);
}

/* Write and put it in the model; the write must succeed. */
static void
fx_write (struct fx *f, const uint8_t *buf, uint32_t len, uint64_t off,
          unsigned flags)
{
  if (rb_pwrite (f->rb, buf, len, off, flags) == -1)
    g_error ("rb_pwrite %" PRIu32 " at %" PRIu64 ": %s", len, off,
             rb_get_error ());
  memcpy (f->model + off, buf, len);
}

static uint8_t *
fx_random (struct fx *f, size_t len)
{
  uint8_t *p = g_malloc (len);

  ts_fill_random (f->r, p, len);
  return p;
}

/* RAM (through rb_pread) must equal the model. */
static void
fx_check_ram (struct fx *f, const char *what)
{
  g_autofree uint8_t *buf = g_malloc (SIZE);
  size_t i;

  g_assert_cmpint (rb_pread (f->rb, buf, SIZE, 0), ==, 0);
  for (i = 0; i < SIZE; i++)
    if (buf[i] != f->model[i])
      g_error ("%s: RAM differs from the model at byte %zu (chunk %zu): "
               "%02x != %02x", what, i, i / CHUNK, buf[i], f->model[i]);
}

/* Everything reaches the store: RAM == durable == model, then close. */
static void
fx_finish (struct fx *f, const char *what)
{
  fx_check_ram (f, what);
  ts_sync_until_ok (f->rb);
  ts_assert_durable (f->ts, f->model, what);
  g_assert_cmpint (rb_close (f->rb), ==, 0);
  ts_assert_durable (f->ts, f->model, what);
  ts_free (f->ts);
  g_free (f->model);
  g_rand_free (f->r);
}

/* Dirty chunk c and hold the flusher in the middle of writing it back:
 * until the gate opens it can neither write nor sync anything else.
 * Writeback mode.
 */
static struct ts_gate *
stall_flusher (struct fx *f, uint64_t c)
{
  struct ts_match m = { .ops = TS_WRITE, .offset = c * CHUNK,
                        .count = CHUNK, .tag = "" };
  struct ts_gate *g = ts_gate_arm (f->ts, &m, 0);
  g_autofree uint8_t *buf = fx_random (f, CHUNK);

  fx_write (f, buf, CHUNK, c * CHUNK, 0);
  ts_gate_wait (g);
  return g;
}

/* A thread doing one request, tagged for the store. */
struct job {
  struct fx *f;
  const char *tag;
  enum { J_WRITE, J_READ, J_SYNC, J_ZERO, J_FLUSH } op;
  uint8_t *buf;
  uint32_t len;
  uint64_t off;
  unsigned flags;
  bool hold_before;             /* J_ZERO: held before RAM, not after */
  bool hold_redirty;            /* held at its first sector mark */
  int r;
  bool durable;                 /* the data was durable right after r == 0 */
  bool done;                    /* [atomic] the request returned */
  GThread *t;
};

static gpointer
job_main (gpointer arg)
{
  struct job *j = arg;

  ts_set_tag (j->tag);
  hold_mark = j->hold_redirty;
  switch (j->op) {
  case J_WRITE:
    j->r = rb_pwrite (j->f->rb, j->buf, j->len, j->off, j->flags);
    break;
  case J_READ:
    j->r = rb_pread (j->f->rb, j->buf, j->len, j->off);
    break;
  case J_SYNC:
    j->r = rb_sync (j->f->rb, -1);
    break;
  case J_FLUSH:
    j->r = rb_flush (j->f->rb);
    break;
  case J_ZERO:
    hold_zero = !j->hold_before;
    hold_zero_before = j->hold_before;
    j->r = rb_zero (j->f->rb, j->len, j->off, j->flags);
    hold_zero = hold_zero_before = false;
    break;
  }
  hold_mark = false;
  if (j->r == 0 && (j->op == J_WRITE || j->op == J_SYNC))
    j->durable = ts_durable_has (j->f->ts, j->buf, j->len, j->off);
  rb_atomic_store (&j->done, true);
  return NULL;
}

static void
job_start (struct job *j)
{
  j->t = g_thread_new (j->tag, job_main, j);
}

static void
job_join (struct job *j)
{
  g_thread_join (j->t);
}

/* Wait until g holds a request of job j; fail if j returns first. */
static void
wait_gate_job (struct ts_gate *g, struct job *j, const char *what)
{
  TS_WAIT (ts_gate_held (g) || rb_atomic_load (&j->done),
           what);
  if (!ts_gate_held (g))
    g_error ("%s: it returned (%d) without reaching the store", what, j->r);
}

/* --- the flush race ---------------------------------------------------- */

/* A write back of chunk X is in flight with the old data (captured);
 * the mode goes writethrough and the same chunk is written.  The
 * writethrough write must wait for the write back (not reach the store,
 * not even change RAM yet), then land after it: store = RAM = new data.
 */
static void
test_flush_race (void)
{
  struct fx f;
  uint64_t x = 100 * CHUNK;
  struct ts_match mf = { .ops = TS_WRITE, .offset = x, .count = CHUNK,
                         .tag = "" };
  struct ts_match mw = { .ops = TS_WRITE, .offset = x, .count = CHUNK,
                         .tag = "writer" };
  g_autofree uint8_t *v1 = NULL, *v2 = NULL, *got = g_malloc (CHUNK);
  struct ts_gate *gf, *gw;
  struct ts_rec rf, rw;
  struct job w;

  fx_open (&f, 51, false, true, true, 0);
  v1 = fx_random (&f, CHUNK);
  v2 = fx_random (&f, CHUNK);
  gf = ts_gate_arm (f.ts, &mf, 0);
  fx_write (&f, v1, CHUNK, x, 0);
  ts_gate_wait (gf);                    /* write back of v1 in flight */

  gw = ts_gate_arm (f.ts, &mw, 0);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  w = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE, .buf = v2,
                     .len = CHUNK, .off = x };
  job_start (&w);
  TS_WAIT (ts_gate_held (gw) || waiters (&f.rb->rl.released) > 0 ||
           rb_atomic_load (&w.done),
           "the writethrough write to queue behind the write back");
  if (ts_gate_held (gw))
    g_error ("flush race: a writethrough write reached the store while a "
             "write back of the same chunk was in flight");
  if (rb_atomic_load (&w.done))
    g_error ("flush race: a writethrough write completed while a write "
             "back of the same chunk was in flight");
  g_assert_cmpint (rb_pread (f.rb, got, CHUNK, x), ==, 0);
  if (memcmp (got, v1, CHUNK) != 0)
    g_error ("flush race: a writethrough write changed RAM while a write "
             "back of the same chunk was in flight");

  ts_gate_open (gf);
  ts_gate_wait (gw);
  g_assert_true (ts_find (f.ts, &mf, 0, &rf));
  rw = ts_gate_rec (gw);
  g_assert_cmpuint (rf.done, !=, 0);
  g_assert_cmpuint (rf.done, <, rw.arrived);
  ts_gate_open (gw);
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  memcpy (f.model + x, v2, CHUNK);
  g_assert_true (ts_pending_has (f.ts, v2, CHUNK, x));
  fx_finish (&f, "flush race");
}

/* --- a write while its chunk is being written back ---------------------- */

/* The flusher captured chunk X (old data) and the store holds it; an
 * application write changes X in RAM and completes.  The flusher marked
 * X clean *before* capturing, so the write re-dirtied it and X is
 * written again: the store converges on RAM.
 */
static void
test_write_during_store (void)
{
  struct fx f;
  uint64_t x = 70 * CHUNK;
  struct ts_match m = { .ops = TS_WRITE, .offset = x, .count = CHUNK,
                        .tag = "" };
  g_autofree uint8_t *v1 = NULL, *v2 = NULL;
  struct ts_gate *g;

  fx_open (&f, 53, false, true, true, 0);
  v1 = fx_random (&f, CHUNK);
  v2 = fx_random (&f, 1000);
  g = ts_gate_arm (f.ts, &m, 0);
  fx_write (&f, v1, CHUNK, x, 0);
  ts_gate_wait (g);
  fx_write (&f, v2, 1000, x + 3000, 0);
  ts_gate_open (g);
  fx_finish (&f, "a write during the write back of its chunk");
}

/* --- sector bits: partial chunks -------------------------------------- */

#define BIG_CHUNK (64 * 1024)
#define SECTOR 4096

/* 64 KiB chunks, so a chunk has 16 sectors.  One sector of chunk X is
 * written back alone (the gate matches a 4 KiB store request: a whole
 * chunk would never reach it) and held there; meanwhile the same
 * sector and another one of X are written.  Both must reach the store:
 * the flusher took the bits before it captured the data, so the new
 * writes set them again and X is dirty again.
 */
static void
test_sector_write_during_store (void)
{
  struct fx f;
  uint64_t x = 5 * BIG_CHUNK, s3 = x + 3 * SECTOR, s9 = x + 9 * SECTOR;
  struct ts_match m = { .ops = TS_WRITE, .offset = s3, .count = SECTOR,
                        .tag = "" };
  g_autofree uint8_t *v1 = NULL, *v2 = NULL, *v3 = NULL;
  struct ts_gate *g;

  fx_open_cs (&f, 61, false, true, true, 0, BIG_CHUNK);
  v1 = fx_random (&f, SECTOR);
  v2 = fx_random (&f, SECTOR);
  v3 = fx_random (&f, 100);
  g = ts_gate_arm (f.ts, &m, 0);
  fx_write (&f, v1, SECTOR, s3, 0);
  ts_gate_wait (g);
  fx_write (&f, v2, SECTOR, s3, 0);
  fx_write (&f, v3, 100, s9 + 7, 0);
  ts_gate_open (g);
  fx_finish (&f, "sector writes during the write back of their chunk");
}

/* 64 KiB chunks, nothing loaded (populate off): a write of sector 3 of
 * chunk X makes X partial, and its write back is held at the store.
 * Writes into the sectors of X that are not loaded go by the slow path
 * under a range over X (io.c), and must not wait for that write back:
 * they change RAM only, write back stores only valid sectors and a
 * sector written under it is dirty again afterwards, as on the fast
 * path.  Nor must a read that loads a sector of X.  (Waiting, each such write took as long as the write back of
 * its chunk, seconds over a slow link: a device not yet populated, or
 * larger than RAM, wrote at a fraction of the link's speed.)
 */
static void
test_partial_write_during_store (void)
{
  struct fx f;
  uint64_t x = 5 * BIG_CHUNK, s3 = x + 3 * SECTOR;
  struct ts_match m = { .ops = TS_WRITE, .offset = s3, .count = SECTOR,
                        .tag = "" };
  g_autofree uint8_t *v1 = NULL, *v2 = NULL;
  struct ts_gate *g;
  struct job w9, w3, rd;

  fx_open_cs (&f, 67, false, false, true, 0, BIG_CHUNK);
  v1 = fx_random (&f, SECTOR);
  v2 = fx_random (&f, 100);
  g = ts_gate_arm (f.ts, &m, 0);
  fx_write (&f, v1, SECTOR, s3, 0);
  ts_gate_wait (g);
  g_assert_true (chunkmap_partial (&f.rb->map, x / BIG_CHUNK));

  w9 = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE,
                      .buf = fx_random (&f, SECTOR), .len = SECTOR,
                      .off = x + 9 * SECTOR };
  job_start (&w9);
  TS_WAIT (rb_atomic_load (&w9.done) || waiters (&f.rb->rl.released) > 0,
           "the write into the partial chunk to complete");
  if (!rb_atomic_load (&w9.done))
    g_error ("a write into a sector not loaded of a partial chunk waited "
             "for the write back of another sector of the chunk");
  job_join (&w9);
  g_assert_cmpint (w9.r, ==, 0);
  memcpy (f.model + w9.off, w9.buf, SECTOR);

  /* The sector in write back, rewritten (and a 100-byte write into a
   * sector not loaded: it loads that sector first).
   */
  w3 = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE,
                      .buf = fx_random (&f, SECTOR), .len = SECTOR,
                      .off = s3 };
  job_start (&w3);
  TS_WAIT (rb_atomic_load (&w3.done) || waiters (&f.rb->rl.released) > 0,
           "the rewrite of the sector in write back to complete");
  if (!rb_atomic_load (&w3.done))
    g_error ("a write into a partial chunk waited for the write back of "
             "the same sector");
  job_join (&w3);
  g_assert_cmpint (w3.r, ==, 0);
  memcpy (f.model + s3, w3.buf, SECTOR);
  fx_write (&f, v2, 100, x + 12 * SECTOR + 7, 0);

  /* A read of a sector not loaded loads it beside the write back. */
  rd = (struct job) { .f = &f, .tag = "reader", .op = J_READ,
                      .buf = g_malloc (SECTOR), .len = SECTOR,
                      .off = x + 14 * SECTOR };
  job_start (&rd);
  TS_WAIT (rb_atomic_load (&rd.done) || waiters (&f.rb->rl.released) > 0,
           "the read of a sector not loaded to complete");
  if (!rb_atomic_load (&rd.done))
    g_error ("a read of a sector not loaded of a partial chunk waited for "
             "the write back of another sector of the chunk");
  job_join (&rd);
  g_assert_cmpint (rd.r, ==, 0);
  if (memcmp (rd.buf, f.model + rd.off, SECTOR) != 0)
    g_error ("the read beside the write back returned other data than "
             "the store holds");

  ts_gate_open (g);
  g_free (rd.buf);
  g_free (w9.buf);
  g_free (w3.buf);
  fx_finish (&f, "writes into a partial chunk during its write back");
}

/* 64 KiB chunks, populate on, fsync=wait: a FUA write of one sector of
 * chunk X, EMPTY, goes through to the store and is held there, X EMPTY
 * and partial meanwhile (io.c, writethrough: P before the copy, X
 * leaves EMPTY once the store has the sector).  Populate cannot load X
 * whole and must go past it, then wait for X's range to fill in the
 * rest, not spin: its scan took X's run as empty (partial) and looked
 * for the next EMPTY chunk from X, which is X, for as long as the write
 * was in flight (forever in the simulator, whose time stands still
 * while a thread spins: seed 977 with two more atomic loads in over()).
 */
static void
test_populate_past_partial (void)
{
  struct rb_config c = { .chunk_size = BIG_CHUNK, .populate = true,
                         .fsync_wait = true, .store.tls_verify_peer = -1 };
  uint64_t x = 5 * BIG_CHUNK, s3 = x + 3 * SECTOR;
  struct ts_match m = { .ops = TS_WRITE, .offset = s3, .count = SECTOR,
                        .tag = "writer" };
  struct ts_gate *g;
  struct fx f;
  struct job w;

  fx_open_cfg (&f, 131, &c, false);
  g = ts_gate_arm (f.ts, &m, 0);
  w = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE,
                     .buf = fx_random (&f, SECTOR), .len = SECTOR,
                     .off = s3, .flags = RB_FUA };
  job_start (&w);
  ts_gate_wait (g);
  g_assert_cmpint (chunkmap_get (&f.rb->map, x / BIG_CHUNK), ==, CS_EMPTY);
  g_assert_true (chunkmap_partial (&f.rb->map, x / BIG_CHUNK));
  g_assert_cmpint (rb_start (f.rb), ==, 0);
  /* Within half the gate's own time-out, so that this says why. */
  {
    gint64 end = g_get_monotonic_time () +
      (gint64) TS_TIMEOUT_S / 2 * G_USEC_PER_SEC;

    while (!(waiters (&f.rb->rl.released) > 0 &&
             chunkmap_loaded (&f.rb->map) == SIZE / BIG_CHUNK - 1)) {
      if (g_get_monotonic_time () > end)
        g_error ("populate did not wait for the range of chunk %" PRIu64
                 " (EMPTY, partial, a write of part of it in flight) after "
                 "loading the others: %" PRIu64 " of %d chunks loaded, %d "
                 "threads waiting for a range", x / BIG_CHUNK,
                 chunkmap_loaded (&f.rb->map), SIZE / BIG_CHUNK,
                 waiters (&f.rb->rl.released));
      g_usleep (200);
    }
  }
  ts_gate_open (g);
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  memcpy (f.model + s3, w.buf, SECTOR);
  g_free (w.buf);
  g_assert_cmpint (rb_wait_populated (f.rb, TS_TIMEOUT_S * 1000), ==, 0);
  fx_finish (&f, "populate past a chunk loaded in part");
}

/* A write back of one sector fails: the sync that covers it fails, the
 * sectors stay dirty, and only what failed is written again, which the
 * store then takes.  Each step is held at a gate, so the flusher's
 * retry cannot overtake the check: the flusher is held writing back a
 * chunk above X when X is written and the sync ticket taken, so the next
 * pass is the one that covers the ticket and meets the failing write.
 */
static void
test_sector_store_fails (void)
{
  struct fx f;
  uint64_t x = 9 * BIG_CHUNK + 2 * SECTOR, t;
  struct ts_match m = { .ops = TS_WRITE, .offset = x, .count = 2 * SECTOR,
                        .tag = "" };
  g_autofree uint8_t *v = NULL;
  struct ts_gate *g0, *g1, *g2;
  struct ts_rec rec;

  fx_open_cs (&f, 67, false, true, true, 0, BIG_CHUNK);
  g0 = stall_flusher (&f, 200);         /* a 4 KiB sector above X */
  v = fx_random (&f, 2 * SECTOR);
  fx_write (&f, v, 2 * SECTOR, x, 0);
  t = rbi_sync_request (f.rb);
  g1 = ts_gate_arm (f.ts, &m, EIO);
  ts_gate_open (g0);
  ts_gate_wait (g1);
  g2 = ts_gate_arm (f.ts, &m, 0);
  ts_gate_open (g1);
  TS_WAIT (rbi_sync_answered (f.rb, t) != 0,
           "the sync ticket of the failed pass to be answered");
  g_assert_cmpint (rbi_sync_answered (f.rb, t), ==, -1);
  ts_gate_wait (g2);
  rec = ts_gate_rec (g2);
  g_assert_cmpuint (rec.offset, ==, x);
  g_assert_cmpuint (rec.count, ==, 2 * SECTOR);
  g_assert_cmpuint (chunkmap_dirty (&f.rb->map) +
                    rb_atomic_load (&f.rb->inflight_chunks), ==, 1);
  ts_gate_open (g2);
  fx_finish (&f, "a failed write back of sectors");
}

/* A chunk zeroed whole (ZERO) and then written in one sector before it
 * was written back: the store still has the old data in the other 15
 * sectors, so the whole chunk must be written back, not the sector.
 */
static void
test_sector_zero_then_write (void)
{
  struct fx f;
  uint64_t x = 3 * BIG_CHUNK;
  g_autofree uint8_t *v = NULL;

  fx_open_cs (&f, 71, false, true, false, 0, BIG_CHUNK);
  v = fx_random (&f, SECTOR);
  g_assert_cmpint (rb_zero (f.rb, BIG_CHUNK, x, 0), ==, 0);
  memset (f.model + x, 0, BIG_CHUNK);
  fx_write (&f, v, SECTOR, x + 4 * SECTOR, 0);
  g_assert_cmpint (rb_start (f.rb), ==, 0);
  fx_finish (&f, "a sector written into a zeroed chunk");
}

/* --- populate must not load over a newer write ------------------------ */

/* Thread A writes part of chunk X before populate reaches it, so A loads
 * X first, holding its range; the store holds that load.  The populator
 * starts, finds X still EMPTY in its run and queues behind A's range.
 * A finishes.  Under its range the populator must see that X is no
 * longer EMPTY and not load it again over A's data.  The store refuses
 * every write, so write back cannot repair the damage behind our back.
 */
static void
test_populate_newer_write (void)
{
  struct fx f;
  uint64_t x = 100 * CHUNK;
  struct ts_match m = { .ops = TS_READ, .offset = x, .count = CHUNK,
                        .tag = "A" };
  g_autofree uint8_t *buf = NULL;
  struct ts_gate *g;
  struct job a;

  fx_open (&f, 57, false, true, false, 0);
  ts_fail_writes (f.ts, -1);
  buf = fx_random (&f, 100);
  g = ts_gate_arm (f.ts, &m, 0);
  a = (struct job) { .f = &f, .tag = "A", .op = J_WRITE, .buf = buf,
                     .len = 100, .off = x + 50 };
  job_start (&a);
  wait_gate_job (g, &a, "a partial write to load its chunk");

  g_assert_cmpint (rb_start (f.rb), ==, 0);
  TS_WAIT (waiters (&f.rb->rl.released) > 0,
           "the populator to queue behind the write's range");
  ts_gate_open (g);
  job_join (&a);
  g_assert_cmpint (a.r, ==, 0);
  memcpy (f.model + x + 50, buf, 100);
  g_assert_cmpint (rb_wait_populated (f.rb, TS_TIMEOUT_S * 1000), ==, 0);
  fx_check_ram (&f, "populate after a write ahead of it");

  ts_fail_writes (f.ts, 0);
  fx_finish (&f, "populate after a write ahead of it");
}

/* --- a demand load queues behind a write that is loading its chunk ---- */

/* populate=false, so chunk X stays unloaded.  A partial write to X loads
 * X first (held in the store).  A read of X must queue behind the
 * write's range, not load X a second time: a second load landing after
 * the write would put the old data back over it.
 */
static void
test_demand_load_waits (void)
{
  struct fx f;
  uint64_t x = 100 * CHUNK;
  struct ts_match ma = { .ops = TS_READ, .offset = x, .count = CHUNK,
                         .tag = "A" };
  struct ts_match mb = { .ops = TS_READ, .offset = x, .count = CHUNK,
                         .tag = "B" };
  g_autofree uint8_t *buf = NULL, *got = g_malloc (CHUNK);
  struct ts_gate *ga, *gb;
  struct job a, b;

  fx_open (&f, 59, false, false, true, 0);
  buf = fx_random (&f, 100);
  ga = ts_gate_arm (f.ts, &ma, 0);
  a = (struct job) { .f = &f, .tag = "A", .op = J_WRITE, .buf = buf,
                     .len = 100, .off = x + 50 };
  job_start (&a);
  wait_gate_job (ga, &a, "a partial write to load its chunk");

  gb = ts_gate_arm (f.ts, &mb, 0);
  b = (struct job) { .f = &f, .tag = "B", .op = J_READ, .buf = got,
                     .len = CHUNK, .off = x };
  job_start (&b);
  TS_WAIT (ts_gate_held (gb) || waiters (&f.rb->rl.released) > 0 ||
           rb_atomic_load (&b.done),
           "the read to queue behind the write's range");
  if (ts_gate_held (gb))
    g_error ("a demand load of a chunk reached the store while a write "
             "was loading the same chunk");
  if (rb_atomic_load (&b.done))
    g_error ("a read of a chunk returned while a write was loading the "
             "same chunk");
  ts_gate_open (ga);
  job_join (&a);
  g_assert_cmpint (a.r, ==, 0);
  memcpy (f.model + x + 50, buf, 100);
  job_join (&b);
  g_assert_cmpint (b.r, ==, 0);
  ts_gate_open (gb);                    /* never used: X was loaded */
  if (memcmp (got, f.model + x, CHUNK) != 0)
    g_error ("a read queued behind a write did not return the write's data");
  fx_finish (&f, "a demand load behind a write");
}

/* --- a miss does not wait for a populate batch elsewhere --------------- */

/* 64 MiB of 64 KiB chunks, populate on, and its first read held in the
 * store.  A 4 KiB read at 40 MiB must be served meanwhile: a populate
 * batch covers little of the device at a time (before the store's
 * bandwidth is known, a MiB), and its ranges hold back only requests
 * inside it.  Loading everything in sight (8 requests of 8 MiB, all of
 * the device) held every miss until the whole batch was in: seconds
 * to minutes over a slow link.
 */
static void
test_miss_beside_populate (void)
{
  const uint64_t size = 64 * MiB;
  struct rb_config c = { .chunk_size = 65536, .populate = true,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_READ, .tag = "" };
  g_autofree uint8_t *model = g_malloc (size), *got = g_malloc (4096);
  GRand *r = g_rand_new_with_seed (28);
  struct ts_gate *g;
  struct tstore *ts;
  struct fx f = { 0 };
  struct job b;

  ts_fill_random (r, model, size);
  ts = ts_new (size, model);
  c.store_override = ts_store (ts);
  f.rb = rb_open (&c);
  g_assert_nonnull (f.rb);
  f.ts = ts;
  g = ts_gate_arm (ts, &m, 0);
  g_assert_cmpint (rb_start (f.rb), ==, 0);
  ts_gate_wait (g);                     /* populate's first read, held */

  b = (struct job) { .f = &f, .tag = "B", .op = J_READ, .buf = got,
                     .len = 4096, .off = 40 * MiB };
  job_start (&b);
  TS_WAIT (rb_atomic_load (&b.done),
           "a miss at 40 MiB while populate's first batch is held");
  job_join (&b);
  g_assert_cmpint (b.r, ==, 0);
  if (memcmp (got, model + 40 * MiB, 4096) != 0)
    g_error ("a miss beside a populate batch read the wrong data");

  ts_gate_open (g);
  g_assert_cmpint (rb_wait_populated (f.rb, TS_TIMEOUT_S * 1000), ==, 0);
  g_assert_cmpint (rb_close (f.rb), ==, 0);
  ts_free (ts);
  g_rand_free (r);
}

/* --- a miss inside a populate batch does not wait for its read -------- */

/* 64 KiB chunks, populate on, and its first batch (chunks 0 to 3, read
 * while the store's bandwidth is not known yet) held in the store.  A
 * 4 KiB read in chunk 0 and a 4 KiB write in chunk 1 must complete
 * meanwhile: they load (or need) only their own sectors.  A batch that
 * held its ranges over its read held them for the whole round trip of
 * its slowest request: seconds over a slow link, while each held miss
 * kept a server thread.  Then the batch comes in and must leave both
 * chunks to the partial fill: not put the store's old sector back
 * over the write.
 */
static void
test_miss_inside_populate (void)
{
  struct ts_match m = { .ops = TS_READ, .tag = "" };
  g_autofree uint8_t *got = g_malloc (SECTOR), *buf = NULL;
  struct ts_gate *g;
  struct job b, w;
  struct fx f;

  fx_open_cs (&f, 73, false, true, false, 0, BIG_CHUNK);
  buf = fx_random (&f, SECTOR);
  g = ts_gate_arm (f.ts, &m, 0);
  g_assert_cmpint (rb_start (f.rb), ==, 0);
  ts_gate_wait (g);                     /* populate's first batch, held */
  g_assert_cmpuint (ts_gate_rec (g).offset, ==, 0);
  g_assert_cmpuint (ts_gate_rec (g).count, >=, 2 * BIG_CHUNK);

  b = (struct job) { .f = &f, .tag = "B", .op = J_READ, .buf = got,
                     .len = SECTOR, .off = SECTOR };
  w = (struct job) { .f = &f, .tag = "W", .op = J_WRITE, .buf = buf,
                     .len = SECTOR, .off = BIG_CHUNK + 2 * SECTOR };
  job_start (&b);
  job_start (&w);
  TS_WAIT (rb_atomic_load (&b.done) && rb_atomic_load (&w.done),
           "a read and a write inside populate's batch while its read "
           "is held in the store");
  job_join (&b);
  job_join (&w);
  g_assert_cmpint (b.r, ==, 0);
  g_assert_cmpint (w.r, ==, 0);
  if (memcmp (got, f.model + SECTOR, SECTOR) != 0)
    g_error ("a miss inside a populate batch read the wrong data");
  memcpy (f.model + BIG_CHUNK + 2 * SECTOR, buf, SECTOR);

  ts_gate_open (g);
  g_assert_cmpint (rb_wait_populated (f.rb, TS_TIMEOUT_S * 1000), ==, 0);
  fx_finish (&f, "a read and a write inside a held populate batch");
}

/* --- FUA with fsync=wait is durable when it returns -------------------- */

/* The flusher is held in a write back, so it cannot sync: a FUA write or
 * zero is durable on return only if it synced the store itself.
 */
static void
test_fua_durable (void)
{
  struct fx f;
  struct ts_gate *g;
  int k;

  fx_open (&f, 61, true, true, true, 0);
  g = stall_flusher (&f, 10);
  ts_set_tag ("fua");
  for (k = 0; k < 4; k++) {
    uint64_t off = (uint64_t) (40 + 40 * k) * CHUNK + 123;
    uint32_t len = 5000;
    g_autofree uint8_t *buf = fx_random (&f, len);

    if (k == 3) {
      g_assert_cmpint (rb_zero (f.rb, len, off, RB_FUA), ==, 0);
      memset (buf, 0, len);
      memset (f.model + off, 0, len);
    }
    else
      fx_write (&f, buf, len, off, RB_FUA);
    if (!ts_durable_has (f.ts, buf, len, off))
      g_error ("a FUA %s with fsync=wait returned before it was durable",
               k == 3 ? "zero" : "write");
  }
  ts_set_tag (NULL);
  ts_gate_open (g);
  fx_finish (&f, "FUA");
}

/* --- the sync ticket is taken before the sweep ------------------------- */

/* The flusher is in the middle of a sweep (held writing chunk 200).  A
 * write lands on chunk 5, behind the sweep's cursor, then rb_sync takes
 * its ticket.  That sweep cannot cover the write, so it must not
 * complete the ticket: when the next sweep is held writing chunk 5 (so
 * chunk 5 is certainly not stored yet), the ticket must still be open;
 * and when rb_sync returns 0, chunk 5 is durable.
 */
static void
test_sync_ticket (void)
{
  struct fx f;
  struct ts_match m5 = { .ops = TS_WRITE, .offset = 5 * CHUNK,
                         .count = CHUNK, .tag = "" };
  g_autofree uint8_t *buf = NULL;
  struct ts_gate *g, *g5;
  uint64_t ticket, done;
  struct job s;

  fx_open (&f, 67, false, true, true, 0);
  g = stall_flusher (&f, 200);
  buf = fx_random (&f, CHUNK);
  fx_write (&f, buf, CHUNK, 5 * CHUNK, 0);
  g5 = ts_gate_arm (f.ts, &m5, 0);
  s = (struct job) { .f = &f, .tag = "sync", .op = J_SYNC, .buf = buf,
                     .len = CHUNK, .off = 5 * CHUNK };
  job_start (&s);
  TS_WAIT (waiters (&f.rb->sync_cond) > 0, "rb_sync to wait for a sweep");
  rb_mutex_lock (&f.rb->lock);
  ticket = f.rb->sync_requested;
  rb_mutex_unlock (&f.rb->lock);

  ts_gate_open (g);                     /* the first sweep ends */
  ts_gate_wait (g5);                    /* the next one writes chunk 5 */
  rb_mutex_lock (&f.rb->lock);
  done = f.rb->sync_done;
  rb_mutex_unlock (&f.rb->lock);
  if (done >= ticket)
    g_error ("sync ticket %" PRIu64 " was completed (sync_done %" PRIu64
             ") by a sweep that began before it and never stored a write "
             "made before rb_sync", ticket, done);
  ts_gate_open (g5);
  job_join (&s);
  g_assert_cmpint (s.r, ==, 0);
  if (!s.durable)
    g_error ("rb_sync returned before a write made before it was durable");
  fx_finish (&f, "sync ticket");
}

/* --- dirty-max counts what is in flight -------------------------------- */

/* dirty-max=8 chunks.  Eight chunks are written at once and their write
 * back is held: nothing is dirty, all eight are in flight.  They are not
 * stored yet, so a writer must wait for them, not add more.
 */
static void
test_dirty_max_inflight (void)
{
  struct fx f;
  struct ts_match m = { .ops = TS_WRITE, .offset = 16 * CHUNK,
                        .count = 8 * CHUNK, .tag = "" };
  g_autofree uint8_t *buf = NULL, *more = NULL;
  struct ts_gate *g;
  struct job w;

  fx_open (&f, 83, false, true, true, 8 * CHUNK);
  g = ts_gate_arm (f.ts, &m, 0);
  buf = fx_random (&f, 8 * CHUNK);
  fx_write (&f, buf, 8 * CHUNK, 16 * CHUNK, 0);
  ts_gate_wait (g);
  more = fx_random (&f, 100);
  w = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE, .buf = more,
                     .len = 100, .off = 100 * CHUNK };
  job_start (&w);
  TS_WAIT (waiters (&f.rb->space_cond) > 0 ||
           rb_atomic_load (&w.done),
           "the writer to wait for dirty-max, or to finish");
  if (rb_atomic_load (&w.done))
    g_error ("a write went past dirty-max while the limit was all in "
             "flight to the store");
  ts_gate_open (g);
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  memcpy (f.model + w.off, more, 100);
  fx_finish (&f, "dirty-max with chunks in flight");
}

/* --- dirty-max counts dirty sectors, not whole chunks --------------- */

/* A 4 KiB write of fresh data into chunk c (64 KiB chunks) by a job;
 * fails if the writer waits for dirty-max.
 */
static void
write_unthrottled (struct fx *f, uint64_t off, uint64_t dirty_sectors)
{
  g_autofree uint8_t *buf = fx_random (f, SECTOR);
  struct job w = { .f = f, .tag = "writer", .op = J_WRITE, .buf = buf,
                   .len = SECTOR, .off = off };

  job_start (&w);
  TS_WAIT (waiters (&f->rb->space_cond) > 0 || rb_atomic_load (&w.done),
           "the writer to finish, or to wait for dirty-max");
  if (!rb_atomic_load (&w.done))
    g_error ("dirty-max=%" PRIu64 ": a 4 KiB write at %" PRIu64 " waited "
             "with only %" PRIu64 " sectors (%" PRIu64 " bytes) dirty or "
             "in flight", rb_atomic_load (&f->rb->dirty_limit), off,
             dirty_sectors, dirty_sectors * SECTOR);
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  memcpy (f->model + off, buf, SECTOR);
}

/* 64 KiB chunks, dirty-max= 4 chunks (64 sectors).  The flusher is held
 * writing back one sector.  A 4 KiB write into each other chunk (and a
 * zero of a whole chunk) must not wait: 16 sectors are dirty or in
 * flight, far below the limit, though 16 chunks are.  Then more
 * sectors, up to the limit: the write that finds 64 sectors dirty or in
 * flight waits, and goes on once the flusher may drain.
 */
static void
test_dirty_max_sectors (void)
{
  struct fx f;
  uint64_t sx = 12 * BIG_CHUNK + 8 * SECTOR, c, k, n = 1;
  struct ts_match m = { .ops = TS_WRITE, .offset = sx, .count = SECTOR,
                        .tag = "" };
  g_autofree uint8_t *v = NULL, *more = NULL;
  struct ts_gate *g;
  struct rb_stats st;
  struct job w;

  fx_open_cs (&f, 89, false, true, true, 4 * BIG_CHUNK, BIG_CHUNK);
  g = ts_gate_arm (f.ts, &m, 0);
  v = fx_random (&f, SECTOR);
  fx_write (&f, v, SECTOR, sx, 0);
  ts_gate_wait (g);                     /* one sector in flight */

  for (c = 0; c < SIZE / BIG_CHUNK - 1; c++, n++)
    if (c != 12)
      write_unthrottled (&f, c * BIG_CHUNK + 5 * SECTOR, n);
  g_assert_cmpint (rb_zero (f.rb, BIG_CHUNK, 15 * BIG_CHUNK, 0), ==, 0);
  memset (f.model + 15 * BIG_CHUNK, 0, BIG_CHUNK);
  rb_get_stats (f.rb, &st);
  g_assert_cmpuint (st.dirty_chunks, ==, 15);
  if (st.dirty_bytes != 15 * SECTOR || st.inflight_bytes != SECTOR)
    g_error ("14 sectors written and a chunk zeroed in 64 KiB chunks, a "
             "sector in flight: dirty_bytes %" PRIu64 " (want %d), "
             "inflight_bytes %" PRIu64 " (want %d)", st.dirty_bytes,
             15 * SECTOR, st.inflight_bytes, SECTOR);
  g_assert_cmpuint (st.throttled, ==, 0);

  /* 16 sectors dirty or in flight: 48 more reach the limit, each write
   * finding fewer than 64 before it.
   */
  n = 16;
  for (k = 0; k < 48; k++, n++)
    write_unthrottled (&f, (k % 12) * BIG_CHUNK + (k / 12 + 1) * SECTOR, n);
  rb_get_stats (f.rb, &st);
  g_assert_cmpuint (st.dirty_bytes + st.inflight_bytes + st.unsynced_bytes,
                    ==, 4 * BIG_CHUNK);
  g_assert_cmpuint (st.throttled, ==, 0);

  more = fx_random (&f, 100);
  w = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE, .buf = more,
                     .len = 100, .off = 14 * BIG_CHUNK + 100 };
  job_start (&w);
  TS_WAIT (waiters (&f.rb->space_cond) > 0 || rb_atomic_load (&w.done),
           "the writer to wait for dirty-max, or to finish");
  if (rb_atomic_load (&w.done))
    g_error ("a write went past dirty-max with 64 sectors of 4 KiB dirty "
             "or in flight");
  rb_get_stats (f.rb, &st);
  g_assert_cmpuint (st.throttled, ==, 1);
  ts_gate_open (g);
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  memcpy (f.model + w.off, more, 100);
  fx_finish (&f, "dirty-max in sectors");
}

/* A write races the flusher's capture of its chunk X (64 KiB chunks):
 * sector 3 of X is dirty; the flusher moves X to CLEAN and is held
 * before it takes the bits; a write of sectors 3 and 9 sets their bits
 * and moves X to DIRTY again.  Each dirty sector counts once
 * (dirty_bytes two sectors, not the chunk).  The flusher takes both
 * bits and writes them back: X is DIRTY with no bits, which counts
 * nothing.  After a sync every counter is back to 0.
 */
static void
test_sector_count_capture (void)
{
  struct fx f;
  uint64_t x = 6 * BIG_CHUNK, s3 = x + 3 * SECTOR, s9 = x + 9 * SECTOR;
  struct ts_match m = { .ops = TS_WRITE, .offset = s3, .count = SECTOR,
                        .tag = "" };
  g_autofree uint8_t *v1 = NULL, *v2 = NULL, *v3 = NULL;
  struct ts_gate *g;
  struct rb_stats st;

  fx_open_cs (&f, 97, false, true, true, 0, BIG_CHUNK);
  v1 = fx_random (&f, SECTOR);
  v2 = fx_random (&f, SECTOR);
  v3 = fx_random (&f, SECTOR);
  g = ts_gate_arm (f.ts, &m, 0);
  rb_atomic_store (&hold_take, true);
  fx_write (&f, v1, SECTOR, s3, 0);
  TS_WAIT (rb_atomic_load (&take_held),
           "the flusher to stop before it takes X's bits");
  g_assert_cmpint (chunkmap_get (&f.rb->map, x / BIG_CHUNK), ==, CS_CLEAN);

  fx_write (&f, v2, SECTOR, s3, 0);
  fx_write (&f, v3, SECTOR, s9, 0);
  g_assert_cmpint (chunkmap_get (&f.rb->map, x / BIG_CHUNK), ==, CS_DIRTY);
  rb_get_stats (f.rb, &st);
  if (chunkmap_sectors_set (&f.rb->map) != 2 || st.dirty_bytes != 2 * SECTOR)
    g_error ("a write racing the capture of its chunk: %" PRIu64 " sector "
             "bits, dirty_bytes %" PRIu64 " (want 2 and %d)",
             chunkmap_sectors_set (&f.rb->map), st.dirty_bytes, 2 * SECTOR);

  rb_atomic_store (&take_go, true);
  ts_gate_wait (g);                     /* both sectors in flight */
  rb_get_stats (f.rb, &st);
  g_assert_cmpuint (chunkmap_sectors_set (&f.rb->map), ==, 0);
  /* Two requests of a sector, or one over the gap between them. */
  if (st.dirty_bytes != 0 || (st.inflight_bytes != 2 * SECTOR &&
                              st.inflight_bytes != s9 + SECTOR - s3))
    g_error ("the racing write's sectors taken by the flusher: "
             "dirty_bytes %" PRIu64 " (want 0), inflight_bytes %" PRIu64
             " (want the bytes of the store requests)",
             st.dirty_bytes, st.inflight_bytes);
  ts_gate_open (g);
  ts_sync_until_ok (f.rb);
  TS_WAIT (chunkmap_dirty (&f.rb->map) == 0, "X to be clean");
  rb_get_stats (f.rb, &st);
  g_assert_cmpuint (st.dirty_bytes, ==, 0);
  g_assert_cmpuint (st.inflight_bytes, ==, 0);
  g_assert_cmpuint (st.unsynced_bytes, ==, 0);
  g_assert_cmpuint (chunkmap_sectors_set (&f.rb->map), ==, 0);
  fx_finish (&f, "a write racing the capture of its chunk");
}

/* --- writethrough writes are on the store when they return ------------ */

/* The flusher is held, so nothing but the write itself can put its data
 * on the store: after "mode writethrough" every write and zero that
 * returned is there (not durable: nobody asked for a sync).
 */
static void
test_writethrough_reaches_store (void)
{
  struct fx f;
  struct ts_gate *g;
  int k;

  fx_open (&f, 89, false, true, true, 0);
  g = stall_flusher (&f, 2);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  for (k = 0; k < 6; k++) {
    uint64_t off, len;
    g_autofree uint8_t *buf = NULL;

    do
      ts_rand_extent (f.r, SIZE, CHUNK, 20000, &off, &len);
    while (off < 3 * CHUNK);            /* not the held chunk */
    buf = fx_random (&f, len);
    if (k % 3 == 2) {
      g_assert_cmpint (rb_zero (f.rb, len, off, 0), ==, 0);
      memset (buf, 0, len);
      memset (f.model + off, 0, len);
    }
    else
      fx_write (&f, buf, len, off, 0);
    if (!ts_pending_has (f.ts, buf, len, off))
      g_error ("a %s in writethrough mode returned before it reached the "
               "store", k % 3 == 2 ? "zero" : "write");
  }
  ts_gate_open (g);
  fx_finish (&f, "writethrough");
}

/* --- writethrough stores what RAM holds -------------------------------- */

/* The caller's buffer changes after its bytes reached RAM and before
 * the writethrough write reached the store.  RAM is the truth: the
 * store must get what RAM holds, or the two differ for good (the chunk
 * stays CLEAN, so nothing would ever write RAM's bytes back).
 */
static void
test_writethrough_from_ram (void)
{
  struct fx f;
  uint64_t x = 30 * CHUNK + 100;
  g_autofree uint8_t *buf = NULL, *want = NULL;

  fx_open (&f, 97, false, true, true, 0);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  buf = fx_random (&f, 5000);
  want = g_memdup2 (buf, 5000);
  scribble_copy = true;
  if (rb_pwrite (f.rb, buf, 5000, x, 0) == -1)
    g_error ("rb_pwrite: %s", rb_get_error ());
  scribble_copy = false;
  memcpy (f.model + x, want, 5000);
  fx_check_ram (&f, "writethrough with a buffer changed after the copy");
  if (!ts_pending_has (f.ts, want, 5000, x))
    g_error ("writethrough stored the caller's buffer as changed after "
             "the copy into RAM, not what RAM holds");
  fx_finish (&f, "writethrough from RAM");
}

/* --- writethrough to a store that takes FUA writes -------------------- */

/* The kernel target's store writes with FUA.  The flusher is held, so
 * it can sync nothing: a writethrough write is durable when it returns
 * all the same, and nothing is left for a sync.  A failed one stays
 * dirty in RAM and reaches the store later.
 */
static void
test_writethrough_fua_store (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .populate = true,
                         .store.tls_verify_peer = -1 };
  uint64_t x = 50 * CHUNK + 300;
  g_autofree uint8_t *buf = NULL, *bad = NULL;
  struct ts_gate *g;
  struct fx f;

  fx_open_store (&f, 101, &c, true, true);
  g = stall_flusher (&f, 2);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);

  buf = fx_random (&f, 6000);
  fx_write (&f, buf, 6000, x, 0);
  if (!ts_durable_has (f.ts, buf, 6000, x))
    g_error ("a writethrough write to a FUA store returned before it was "
             "durable");
  g_assert_cmpuint (rb_atomic_load (&f.rb->unsynced_bytes), ==, 0);
  g_assert_cmpuint (rb_atomic_load (&f.rb->written_through), ==, 1);

  ts_fail_writes (f.ts, 1);
  bad = fx_random (&f, 100);
  g_assert_cmpint (rb_pwrite (f.rb, bad, 100, x + 10000, 0), ==, -1);
  memcpy (f.model + x + 10000, bad, 100);  /* kept in RAM */
  g_assert_cmpuint (chunkmap_get (&f.rb->map, (x + 10000) / CHUNK), ==,
                    CS_DIRTY);
  g_assert_cmpuint (rb_atomic_load (&f.rb->written_through), ==, 1);
  ts_gate_open (g);
  fx_finish (&f, "writethrough with FUA");
}

/* --- the request path for data that is not a flat buffer ------------- */

/* A bio-like request: the data in pieces of a few hundred bytes. */
struct pieces {
  struct rb_data data;
  uint8_t *p[64];
  uint32_t len[64];
  size_t n;
  int copies;
};

static void
pieces_copy (struct rb_data *d, void *ram, uint64_t count, bool to_ram)
{
  struct pieces *pc = (struct pieces *) d;
  uint8_t *r = ram;
  size_t i;

  for (i = 0; i < pc->n; i++) {
    g_assert_cmpuint (count, >=, pc->len[i]);
    if (to_ram)
      memcpy (r, pc->p[i], pc->len[i]);
    else
      memcpy (pc->p[i], r, pc->len[i]);
    r += pc->len[i];
    count -= pc->len[i];
  }
  g_assert_cmpuint (count, ==, 0);
  pc->copies++;
}

/* Cut buf (len bytes) into pieces of 1..600 bytes. */
static void
pieces_init (struct fx *f, struct pieces *pc, uint8_t *buf, uint32_t len)
{
  uint32_t done = 0;

  *pc = (struct pieces) { .data.copy = pieces_copy };
  while (done < len) {
    uint32_t n = g_rand_int_range (f->r, 1, 601);

    g_assert_cmpuint (pc->n, <, 64);
    pc->p[pc->n] = buf + done;
    pc->len[pc->n] = n < len - done ? n : len - done;
    done += pc->len[pc->n++];
  }
}

static int kicks;                       /* [atomic] */

static void
count_kick (struct rb *rb)
{
  rb_atomic_add (&kicks, 1);
  rbi_flusher_kick (rb);
}

/* rb_try_* do the request only when it needs no wait, and then exactly
 * as rb_pread/rb_pwrite would; the waiting calls do the rest (demand
 * loads, edges, writethrough, the dirty limit) with the same data.
 */
static void
test_data_paths (void)
{
  struct fx f;
  struct pieces pc;
  uint64_t x = 10 * CHUNK + 1000, y = 80 * CHUNK + 77;
  g_autofree uint8_t *w = NULL, *got = NULL;
  struct ts_gate *g;

  fx_open (&f, 103, false, false, true, 0);      /* nothing loaded */
  f.rb->kick_nowait = count_kick;
  w = fx_random (&f, 9000);
  got = g_malloc0 (9000);

  /* EMPTY chunks: nothing done, the caller must wait. */
  pieces_init (&f, &pc, got, 9000);
  g_assert_false (rbi_try_pread (f.rb, &pc.data, 9000, x));
  pieces_init (&f, &pc, w, 9000);
  g_assert_false (rbi_try_pwrite (f.rb, &pc.data, 9000, x, 0));
  g_assert_cmpint (pc.copies, ==, 0);
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), ==, 0);

  /* The waiting calls: a demand load, then a write with partial edges. */
  pieces_init (&f, &pc, got, 9000);
  g_assert_cmpint (rbi_pread_data (f.rb, &pc.data, 9000, x), ==, 0);
  g_assert_cmpmem (got, 9000, f.model + x, 9000);
  pieces_init (&f, &pc, w, 9000);
  g_assert_cmpint (rbi_pwrite_data (f.rb, &pc.data, 9000, y, 0), ==, 0);
  memcpy (f.model + y, w, 9000);
  fx_check_ram (&f, "the waiting data calls");

  /* Loaded now: the fast path, which wakes the idle flusher without
   * waiting.
   */
  ts_sync_until_ok (f.rb);
  TS_WAIT (rb_atomic_load (&f.rb->flusher_idle), "the flusher to idle");
  ts_fill_random (f.r, w, 9000);
  pieces_init (&f, &pc, w, 9000);
  g_assert_true (rbi_try_pwrite (f.rb, &pc.data, 9000, y, 0));
  memcpy (f.model + y, w, 9000);
  g_assert_cmpint (rb_atomic_load (&kicks), ==, 1);
  memset (got, 0, 9000);
  pieces_init (&f, &pc, got, 9000);
  g_assert_true (rbi_try_pread (f.rb, &pc.data, 9000, y));
  g_assert_cmpmem (got, 9000, w, 9000);

  /* Writethrough and the dirty limit wait: not on the fast path. */
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  pieces_init (&f, &pc, w, 100);
  g_assert_false (rbi_try_pwrite (f.rb, &pc.data, 100, y, 0));
  g_assert_cmpint (pc.copies, ==, 0);
  g_assert_cmpint (rbi_pwrite_data (f.rb, &pc.data, 100, y, 0), ==, 0);
  memcpy (f.model + y, w, 100);
  g_assert_true (ts_pending_has (f.ts, w, 100, y));
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITEBACK), ==, 0);
  g = stall_flusher (&f, 2);            /* a chunk in flight: over 1 byte */
  rb_atomic_store (&f.rb->dirty_limit, (uint64_t) 1);
  ts_fill_random (f.r, w, 100);
  pieces_init (&f, &pc, w, 100);
  g_assert_false (rbi_try_pwrite (f.rb, &pc.data, 100, y, 0));
  g_assert_cmpint (pc.copies, ==, 0);
  rb_atomic_store (&f.rb->dirty_limit, (uint64_t) 0);
  ts_gate_open (g);
  fx_finish (&f, "the data paths");
}

/* --- a writethrough write over a chunk that is dirty-zero ------------- */

/* Chunk X is zeroed (ZERO: to be written back as a zero request), then
 * part of it is written in writethrough mode before the flusher gets
 * to it.  X now holds data: written back as a zero request, the data
 * would be lost on the store.
 */
static void
test_writethrough_over_zero (void)
{
  struct fx f;
  uint64_t x = 100 * CHUNK;
  g_autofree uint8_t *buf = NULL;
  struct ts_gate *g;

  fx_open (&f, 71, false, true, true, 0);
  g = stall_flusher (&f, 3);
  g_assert_cmpint (rb_zero (f.rb, CHUNK, x, 0), ==, 0);
  memset (f.model + x, 0, CHUNK);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  buf = fx_random (&f, 100);
  fx_write (&f, buf, 100, x + 1000, 0);
  ts_gate_open (g);
  fx_finish (&f, "writethrough over a zeroed chunk");
}

/* --- sync errors racing with writes (known bug) ----------------------- */

/* Writethrough.  W1 reaches the store and is noted; the flusher
 * snapshots {W1} and syncs (held); W2 reaches the store and is noted;
 * the sync fails and the store drops every unsynced write, W1's and
 * W2's.  Both must be written again.
 */
static void
test_sync_error_writethrough (void)
{
  struct fx f;
  struct ts_match m = { .ops = TS_FLUSH, .tag = "" };
  g_autofree uint8_t *w1 = NULL, *w2 = NULL;
  struct ts_gate *g;

  if (ts_skip_known_bug (KNOWN_BUG_SYNC_ERROR_RACE,
                         "known bug: a failed sync does not re-dirty writes "
                         "that reached the store while it ran"))
    return;
  fx_open (&f, 73, false, true, true, 0);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  ts_set_tag ("app");
  g = ts_gate_arm (f.ts, &m, EIO);
  w1 = fx_random (&f, 3000);
  w2 = fx_random (&f, 3000);
  fx_write (&f, w1, 3000, 20 * CHUNK + 100, 0);
  ts_gate_wait (g);                     /* the flusher syncs {W1} */
  fx_write (&f, w2, 3000, 60 * CHUNK + 100, 0);
  g_assert_true (ts_pending_has (f.ts, w2, 3000, 60 * CHUNK + 100));
  ts_gate_open (g);                     /* fails: W1 and W2 dropped */
  ts_set_tag (NULL);
  fx_finish (&f, "writes around a failed sync in writethrough mode");
}

/* fsync=wait.  W1's FUA sync is in progress and will fail; W2's FUA
 * write reaches the store and its sync starts behind W1's.  W1's sync
 * fails and the store drops both writes, reporting the error once (to
 * W1).  Any FUA write that returned 0 must have been durable then.
 */
static void
test_sync_error_fua (void)
{
  struct fx f;
  struct ts_match m1 = { .ops = TS_FLUSH, .tag = "w1" };
  struct ts_match m2 = { .ops = TS_FLUSH, .tag = "w2" };
  g_autofree uint8_t *d1 = NULL, *d2 = NULL;
  struct ts_gate *gy, *g1;
  struct job j1, j2;

  if (ts_skip_known_bug (KNOWN_BUG_SYNC_ERROR_RACE,
                         "known bug: a sync that waited behind a failing "
                         "one reports success with its data lost"))
    return;
  fx_open (&f, 79, true, true, true, 0);
  gy = stall_flusher (&f, 3);           /* no background syncs */
  d1 = fx_random (&f, 3000);
  d2 = fx_random (&f, 3000);
  g1 = ts_gate_arm (f.ts, &m1, EIO);
  j1 = (struct job) { .f = &f, .tag = "w1", .op = J_WRITE, .buf = d1,
                      .len = 3000, .off = 20 * CHUNK + 100, .flags = RB_FUA };
  j2 = (struct job) { .f = &f, .tag = "w2", .op = J_WRITE, .buf = d2,
                      .len = 3000, .off = 60 * CHUNK + 100, .flags = RB_FUA };
  job_start (&j1);
  wait_gate_job (g1, &j1, "W1's FUA write to sync");
  job_start (&j2);
  /* W2's sync either reaches the store while W1's is held there, or
   * waits its turn in the core (syncs serialised): either way it has
   * started behind W1's.
   */
  {
    gint64 end = g_get_monotonic_time () + 120 * G_USEC_PER_SEC;
    while (ts_count (f.ts, &m2) < 1 && waiters (&f.rb->sync_lock) < 1) {
      if (g_get_monotonic_time () > end)
        g_error ("W2's sync never started");
      g_usleep (1000);
    }
  }
  ts_gate_open (g1);                    /* fails: W1 and W2 dropped */
  /* Let the flusher go too (a fix may wait for it): nothing it does
   * can bring W2's data back to the store, only writing W2 again can.
   */
  ts_gate_open (gy);
  job_join (&j1);
  job_join (&j2);
  memcpy (f.model + j1.off, d1, 3000);  /* in RAM either way */
  memcpy (f.model + j2.off, d2, 3000);
  if (j1.r == 0 && !j1.durable)
    g_error ("W1's FUA write returned 0 but was not durable");
  if (j2.r == 0 && !j2.durable)
    g_error ("W2's FUA write returned 0 after its sync waited behind a "
             "failing one, but it was not durable");
  fx_finish (&f, "FUA writes around a failed sync");
}

/* Writethrough.  W1 is noted and the flusher's sync of it is held; W2's
 * store write is performed (its data in the store's cache) but its reply
 * is held, so it is in flight when the sync fails and the store drops
 * every unsynced write, W2's too.  W2 completes after the failure: it
 * must be written again, not trusted.
 */
static void
test_sync_error_inflight (void)
{
  struct fx f;
  struct ts_match m = { .ops = TS_FLUSH, .tag = "" };
  struct ts_match mw = { .ops = TS_WRITE, .tag = "w2", .after = true };
  g_autofree uint8_t *w1 = NULL, *w2 = NULL;
  struct ts_gate *g, *gw;
  struct job j2;

  fx_open (&f, 83, false, true, true, 0);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  ts_set_tag ("app");
  g = ts_gate_arm (f.ts, &m, EIO);
  gw = ts_gate_arm (f.ts, &mw, 0);
  w1 = fx_random (&f, 3000);
  w2 = fx_random (&f, 3000);
  fx_write (&f, w1, 3000, 20 * CHUNK + 100, 0);
  ts_gate_wait (g);                     /* the flusher syncs {W1} */
  j2 = (struct job) { .f = &f, .tag = "w2", .op = J_WRITE, .buf = w2,
                      .len = 3000, .off = 60 * CHUNK + 100, .flags = 0 };
  job_start (&j2);
  ts_gate_wait (gw);                    /* W2 performed, reply held */
  ts_gate_open (g);                     /* fails: W1 and W2 dropped */
  TS_WAIT (rb_atomic_load (&f.rb->fail_gen) >= 1,
           "the failed sync to be taken into account");
  ts_gate_open (gw);                    /* W2 completes after it */
  job_join (&j2);
  g_assert_cmpint (j2.r, ==, 0);
  memcpy (f.model + j2.off, w2, 3000);
  ts_set_tag (NULL);
  fx_finish (&f, "a write in flight across a failed sync");
}

/* Writethrough, fsync=wait.  W1 is written through: on the store, in
 * its cache only, and acknowledged.  W2, a FUA write, syncs, and that
 * sync fails: the store drops W1 and W2, the generation moves on, and
 * the failed sync puts what it covered back to dirty, holding
 * sync_lock; it is held just before it does.  Meanwhile the flusher,
 * held in a write back from before, ends that sweep, and rb_sync's
 * ticket (taken after W1 was acknowledged) starts the next: it reads
 * the new generation and finds W1's chunk CLEAN, then waits for
 * sync_lock to sync.  The re-dirtying goes on.  rb_sync may return 0
 * only with W1 durable: a sweep that began before W1 was dirty again
 * never stored it.
 */
static void
test_sync_error_redirty (void)
{
  struct fx f;
  struct ts_match m1 = { .ops = TS_WRITE, .offset = 20 * CHUNK + 100,
                         .count = 3000, .tag = "" };
  g_autofree uint8_t *w1 = NULL, *w2 = NULL;
  struct ts_gate *gy, *g1;
  struct job j2, s;
  uint64_t ticket;

  fx_open (&f, 89, true, true, true, 0);
  ts_sync_until_ok (f.rb);              /* nothing owed, no ticket open */
  gy = stall_flusher (&f, 3);           /* a sweep that answers nothing */
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  w1 = fx_random (&f, 3000);
  w2 = fx_random (&f, 3000);
  fx_write (&f, w1, 3000, 20 * CHUNK + 100, 0);
  g_assert_true (ts_pending_has (f.ts, w1, 3000, 20 * CHUNK + 100));

  ts_fail_syncs (f.ts, 1);
  rb_atomic_store (&mark_go, false);
  j2 = (struct job) { .f = &f, .tag = "w2", .op = J_WRITE, .buf = w2,
                      .len = 3000, .off = 60 * CHUNK + 100, .flags = RB_FUA,
                      .hold_redirty = true };
  job_start (&j2);
  TS_WAIT (rb_atomic_load (&mark_held) || rb_atomic_load (&j2.done),
           "W2's failed sync to put its writes back to dirty");
  if (!rb_atomic_load (&mark_held))
    g_error ("W2's FUA write returned (%d) without a failed sync "
             "re-dirtying what it covered", j2.r);

  s = (struct job) { .f = &f, .tag = "sync", .op = J_SYNC, .buf = w1,
                     .len = 3000, .off = 20 * CHUNK + 100 };
  job_start (&s);
  TS_WAIT (waiters (&f.rb->sync_cond) > 0, "rb_sync to take its ticket");
  rb_mutex_lock (&f.rb->lock);
  ticket = f.rb->sync_requested;
  rb_mutex_unlock (&f.rb->lock);
  ts_gate_open (gy);                    /* that sweep ends, the next begins */
  /* It waits for the failed sync: for its lock to sync, or for its
   * re-dirtying to end before the sweep.
   */
  TS_WAIT (waiters (&f.rb->sync_lock) > 0 ||
           waiters (&f.rb->flusher_cond) > 0,
           "the flusher to wait for the failed sync");
  /* W1 written again by the flusher is held at g1: it cannot become
   * durable behind the check's back.
   */
  g1 = ts_gate_arm (f.ts, &m1, 0);
  rb_atomic_store (&mark_go, true);
  job_join (&j2);
  g_assert_cmpint (j2.r, ==, -1);
  /* Either rb_sync returns, or W1 is held at g1 before its ticket is
   * answered (a sweep that answers it writes W1 again first).
   */
  TS_WAIT (rb_atomic_load (&s.done) ||
           (ts_gate_held (g1) &&
            rb_atomic_load (&f.rb->sync_done) < ticket),
           "rb_sync to return or W1 to be written again");
  ts_gate_open (g1);
  job_join (&s);
  memcpy (f.model + j2.off, w2, 3000);  /* in RAM either way */
  if (s.r == 0 && !s.durable)
    g_error ("rb_sync returned 0 without a write through acknowledged "
             "before it on the store (a failed sync dropped it and was "
             "still putting it back to dirty when the sweep that "
             "answered began)");
  fx_finish (&f, "a sweep beside a failed sync's re-dirtying");
}

/* A process that crashed left a write X in the store's cache, unsynced.
 * The next start loads X into RAM, CLEAN (a read returns it), and its
 * first sync, the flusher's, fails: the store drops X.  RAM still holds
 * X as CLEAN, which it no longer is: once a sync succeeds, rb_sync
 * returns 0 with data a read returned on neither the store nor its
 * cache.  A sync that fails before the first good one must put back to
 * dirty what RAM holds.
 */
static void
test_first_sync_fails (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .fsync_wait = true,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_FLUSH, .tag = "" };
  g_autofree uint8_t *x = NULL, *got = g_malloc (CHUNK);
  struct rb_io io;
  struct ts_gate *g;
  struct fx f;

  fx_new_store (&f, 157, &c, false);
  /* The crashed process's write: in the cache only. */
  x = fx_random (&f, CHUNK);
  io = (struct rb_io) { .op = RB_IO_WRITE, .buf = x, .count = CHUNK,
                        .offset = 7 * CHUNK };
  g_assert_cmpint (c.store_override->ops->submit (c.store_override, &io, 1),
                   ==, 0);
  memcpy (f.model + 7 * CHUNK, x, CHUNK);
  ts_set_tag ("app");
  g = ts_gate_arm (f.ts, &m, EIO);      /* the flusher's first sync fails */
  fx_open_engine (&f, &c, true);
  ts_gate_wait (g);
  g_assert_cmpint (rb_pread (f.rb, got, CHUNK, 7 * CHUNK), ==, 0);
  if (memcmp (got, x, CHUNK) != 0)
    g_error ("the restart did not read the store's cache");
  ts_gate_open (g);                     /* fails: X dropped */
  ts_sync_until_ok (f.rb);
  if (!ts_durable_has (f.ts, x, CHUNK, 7 * CHUNK))
    g_error ("rb_sync returned 0 without data a read returned on the "
             "store (the first sync failed and dropped what a crashed "
             "process had left in the store's cache, and RAM held it "
             "as CLEAN)");
  ts_set_tag (NULL);
  fx_finish (&f, "a first sync that fails");
}

/* --- zero against write -------------------------------------------------- */

/* Writeback, loaded, no lock on the fast path.  Z zeroes chunk X (whole)
 * and is held right after RAM is zeroed; W writes new data over X and
 * returns; Z goes on.  RAM holds W's data, so X must be written back as
 * that data: a zero request that marks X as a hole *after* W marked it
 * dirty would make the store lose W's write.
 */
static void
test_zero_vs_write (void)
{
  struct fx f;
  uint64_t x = 40 * CHUNK;
  g_autofree uint8_t *w = NULL;
  struct job z;

  fx_open (&f, 91, false, true, true, 0);
  ts_sync_until_ok (f.rb);
  w = fx_random (&f, CHUNK);
  rb_atomic_store (&zero_held, false);
  rb_atomic_store (&zero_go, false);
  z = (struct job) { .f = &f, .tag = "zeroer", .op = J_ZERO,
                     .len = CHUNK, .off = x };
  job_start (&z);
  TS_WAIT (rb_atomic_load (&zero_held),
           "the zero to reach RAM");
  fx_write (&f, w, CHUNK, x, 0);        /* W, after Z in RAM */
  rb_atomic_store (&zero_go, true);
  job_join (&z);
  g_assert_cmpint (z.r, ==, 0);
  fx_finish (&f, "a write racing a zero of the same chunk");
}

/* The other order.  Z zeroes chunk X (whole): it marks X ZERO and is
 * held just before RAM is zeroed.  W writes new data over X (ZERO ->
 * DIRTY) and returns, and a sync stores W's data and marks X CLEAN.
 * Then Z zeroes RAM and returns.  RAM now holds zeroes (Z landed last),
 * so the store must get them too: X must not stay CLEAN over W's data,
 * or a restart would bring back data the device no longer served.
 * Both chunk sizes: without and with several sectors per chunk.
 */
static void
zero_vs_write_before_ram (uint32_t chunk, guint32 seed)
{
  struct fx f;
  uint64_t x = 7 * (uint64_t) chunk, c = x / chunk;
  g_autofree uint8_t *w = NULL, *ram = g_malloc (chunk);
  g_autofree uint8_t *store = g_malloc (chunk);
  enum chunk_state st;
  struct job z;
  uint32_t i;

  fx_open_cs (&f, seed, false, true, true, 0, chunk);
  ts_sync_until_ok (f.rb);
  w = fx_random (&f, chunk);
  rb_atomic_store (&zero_held, false);
  rb_atomic_store (&zero_go, false);
  z = (struct job) { .f = &f, .tag = "zeroer", .op = J_ZERO,
                     .len = chunk, .off = x, .hold_before = true };
  job_start (&z);
  TS_WAIT (rb_atomic_load (&zero_held), "the zero to mark its chunk");
  g_assert_cmpstr (rbi_chunk_state_name (chunkmap_get (&f.rb->map, c)), ==,
                   "zero");
  fx_write (&f, w, chunk, x, 0);        /* W, before Z in RAM */
  ts_sync_until_ok (f.rb);                 /* W's data stored, X clean */
  g_assert_true (ts_durable_has (f.ts, w, chunk, x));
  rb_atomic_store (&zero_go, true);
  job_join (&z);
  g_assert_cmpint (z.r, ==, 0);
  memset (f.model + x, 0, chunk);       /* Z landed last in RAM */

  ts_sync_until_ok (f.rb);
  g_assert_cmpint (rb_pread (f.rb, ram, chunk, x), ==, 0);
  ts_read_durable (f.ts, store, chunk, x);
  st = chunkmap_get (&f.rb->map, c);
  for (i = 0; i < chunk; i++)
    if (ram[i] != store[i])
      g_error ("zero vs write, chunk size %" PRIu32 ": after a sync chunk "
               "%" PRIu64 " is %s but RAM differs from the store at byte "
               "%" PRIu32 " of it: %02x != %02x (a restart would show "
               "data the device no longer served)", chunk, c,
               rbi_chunk_state_name (st), i, ram[i], store[i]);
  fx_finish (&f, "a zero whose RAM change lands after a write");
}

/* With a ram= image (resume): Z zeroes chunk X whole, which holds data
 * D on the store: X is marked ZERO and Z is held before RAM changes.
 * The flusher writes X back (a zero request) and a sync covers it: RAM
 * still holds D, the store zeroes.  A crash now must not leave X CLEAN
 * without its NB bit: a resume would serve D from RAM and never write it
 * back, while the store holds zeroes.  The resume invariant (resume.c)
 * is checked at this point, as a kill -9 would find it.
 */
static void
test_zero_nb_window (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .populate = true,
                         .store.tls_verify_peer = -1 };
  g_autofree char *ram = shm_ram_path ();
  g_autofree uint8_t *d = NULL, *store = g_malloc (CHUNK);
  uint64_t x = 12 * CHUNK, cx = x / CHUNK;
  struct fx f;
  struct job z;
  bool nb;

  if (ram == NULL)
    return;
  c.ram = ram;
  fx_open_cfg (&f, 109, &c, true);
  d = fx_random (&f, CHUNK);
  fx_write (&f, d, CHUNK, x, 0);
  ts_sync_until_ok (f.rb);              /* D stored, X clean, NB gone */

  rb_atomic_store (&zero_held, false);
  rb_atomic_store (&zero_go, false);
  z = (struct job) { .f = &f, .tag = "zeroer", .op = J_ZERO,
                     .len = CHUNK, .off = x, .hold_before = true };
  job_start (&z);
  TS_WAIT (rb_atomic_load (&zero_held), "the zero to mark its chunk");
  ts_sync_until_ok (f.rb);              /* X's zero stored and synced */
  ts_read_durable (f.ts, store, CHUNK, x);
  nb = (rb_atomic_load (&f.rb->nb[cx / 64]) >> (cx % 64)) & 1;
  if (chunkmap_get (&f.rb->map, cx) == CS_CLEAN && !nb &&
      memcmp (f.rb->ram.base + x, store, CHUNK) != 0)
    g_error ("zero with ram=: chunk %" PRIu64 " is CLEAN without its NB bit "
             "while RAM differs from the store: a crash now resumes data "
             "the store does not have", cx);
  rb_atomic_store (&zero_go, true);
  job_join (&z);
  g_assert_cmpint (z.r, ==, 0);
  memset (f.model + x, 0, CHUNK);
  fx_finish (&f, "a zero held before RAM with ram=");
  unlink (ram);
}

/* With a ram= image (resume): a write of chunk X whole, X EMPTY (not
 * loaded: populate=false) over a hole of the backing store, and a
 * crash right after its copy reached RAM, before X left EMPTY (a chunk
 * a write covers whole stays EMPTY until its copy is complete, io.c).
 * The resume finds X EMPTY, and populate marks the hole CLEAN without
 * reading it: RAM must hold zeroes there then, not the data of the
 * write cut short, which no write back would ever store.  The crash is
 * a child process ending in the copy; the store is a file, which
 * outlives it.
 */
static void
test_resume_empty_ram (void)
{
  g_autofree char *ram = shm_ram_path ();
  g_autofree char *path = NULL;
  g_autofree uint8_t *got = g_malloc (CHUNK), *stored = g_malloc (CHUNK);
  uint64_t x = 5 * CHUNK;
  struct rb_config c = { .chunk_size = CHUNK, .store.tls_verify_peer = -1 };
  struct rb *rb;
  pid_t pid;
  int fd, st;

  if (ram == NULL)
    return;
  path = g_strdup_printf ("%s-store", ram);
  fd = open (path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (ftruncate (fd, SIZE), ==, 0);        /* all a hole */
  close (fd);
  c.store.uri = path;
  c.ram = ram;

  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0) {
    uint8_t *d = g_malloc (CHUNK);

    c.populate = false;
    rb = rb_open (&c);
    if (rb == NULL || rb_start (rb) == -1)
      _exit (2);
    memset (d, 0xa5, CHUNK);
    crash_copy = true;
    rb_pwrite (rb, d, CHUNK, x, 0);
    _exit (3);                  /* the copy did not end the process */
  }
  g_assert_cmpint (waitpid (pid, &st, 0), ==, pid);
  g_assert_true (WIFEXITED (st));
  g_assert_cmpint (WEXITSTATUS (st), ==, 0);

  c.populate = true;
  rb = rb_open (&c);
  if (rb == NULL)
    g_error ("rb_open after the crash: %s", rb_get_error ());
  g_assert_cmpint (rb_start (rb), ==, 0);
  g_assert_cmpint (rb_wait_populated (rb, TS_TIMEOUT_S * 1000), ==, 0);
  g_assert_cmpint (rb_pread (rb, got, CHUNK, x), ==, 0);
  g_assert_cmpint (rb_close (rb), ==, 0);
  fd = open (path, O_RDONLY);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (pread (fd, stored, CHUNK, x), ==, CHUNK);
  close (fd);
  if (memcmp (got, stored, CHUNK) != 0)
    g_error ("resume after a crash: chunk %" PRIu64 " read %02x (the data "
             "of a write cut short by the crash), the store holds %02x after "
             "a clean stop: populate marked the store's hole CLEAN over what "
             "the crash left in RAM", x / CHUNK, got[0], stored[0]);
  unlink (path);
  unlink (ram);
}

/* --- crashes with ram= and journal=, across processes ---------------- */

/* A device of 'dev' bytes of random data in a file store ('model':
 * what it must read), a 1 MiB journal file, a ram= image in /dev/shm,
 * and 'c' set for them: 64 KiB chunks, populate, fsync=wait, no commit
 * but those asked for.  A test crashes a child process (fork, then
 * _exit in the middle of something, as kill -9 would) and starts again,
 * in itself or in another child.  A child runs without the populator:
 * its thread, finished and not joined at the _exit, is a leak to
 * ThreadSanitizer (exit status 66).  False (the test skipped) without
 * /dev/shm.
 */
struct crashfx {
  char *ram, *path, *jpath;
  uint8_t *model;
  uint64_t dev;
  struct rb_config c;
};

static bool
crashfx_open (struct crashfx *cf, uint64_t dev, guint32 seed)
{
  GRand *r;
  uint64_t i;
  int fd;

  memset (cf, 0, sizeof *cf);
  cf->ram = shm_ram_path ();
  if (cf->ram == NULL)
    return false;
  cf->dev = dev;
  cf->model = g_malloc (dev);
  r = g_rand_new_with_seed (seed);
  for (i = 0; i < dev; i++)
    cf->model[i] = g_rand_int (r);
  g_rand_free (r);
  cf->path = g_strdup_printf ("%s-store", cf->ram);
  cf->jpath = g_strdup_printf ("%s-journal", cf->ram);
  fd = open (cf->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (pwrite (fd, cf->model, dev, 0), ==, (ssize_t) dev);
  close (fd);
  fd = open (cf->jpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (ftruncate (fd, MiB), ==, 0);
  close (fd);
  cf->c = (struct rb_config) {
    .chunk_size = BIG_CHUNK, .populate = true, .fsync_wait = true,
    .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
    .store.tls_verify_peer = -1, .store.uri = cf->path, .ram = cf->ram,
    .journal = cf->jpath,
  };
  return true;
}

/* Fork a child (returns 0 in it, with the populator off). */
static pid_t
crashfx_fork (struct crashfx *cf)
{
  pid_t pid = fork ();

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    cf->c.populate = false;
  return pid;
}

/* The child ended with status 0 (its own _exit (0) at the crash). */
static void
crashfx_wait (pid_t pid)
{
  int st;

  g_assert_cmpint (waitpid (pid, &st, 0), ==, pid);
  g_assert_true (WIFEXITED (st));
  g_assert_cmpint (WEXITSTATUS (st), ==, 0);
}

/* In a child: a FLUSH's commit point, and the process ends right after
 * it takes the sector bits of chunk c (the last it takes).
 */
static void __attribute__ ((__noreturn__))
crashfx_crash_in_commit (struct rb *rb, uint64_t c)
{
  rb_atomic_store (&crash_take_at, c << rb->map.sect_per_chunk_shift);
  rb_flush (rb);
  _exit (3);                    /* the commit did not end the process */
}

/* The restart after the crash: rb_open must take the image. */
static struct rb *
crashfx_reopen (struct crashfx *cf, const char *what)
{
  struct rb *rb = rb_open (&cf->c);

  if (rb == NULL)
    g_error ("%s: %s", what, rb_get_error ());
  return rb;
}

/* After a clean stop, the store file holds the model. */
static void
crashfx_check_store (struct crashfx *cf, const char *what)
{
  g_autofree uint8_t *got = g_malloc (cf->dev);
  uint64_t i;
  int fd;

  fd = open (cf->path, O_RDONLY);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (pread (fd, got, cf->dev, 0), ==, (ssize_t) cf->dev);
  close (fd);
  for (i = 0; i < cf->dev; i++)
    if (got[i] != cf->model[i])
      g_error ("%s: after a clean stop the store holds %02x at byte %"
               PRIu64 " (chunk %" PRIu64 "), the device %02x", what, got[i],
               i, i / BIG_CHUNK, cf->model[i]);
}

/* rb, opened after the crash: started, it reads the model, and a clean
 * stop puts the model on the store.
 */
static void
crashfx_serve (struct crashfx *cf, struct rb *rb, const char *what)
{
  g_autofree uint8_t *got = g_malloc (cf->dev);

  g_assert_cmpint (rb_start (rb), ==, 0);
  g_assert_cmpint (rb_wait_populated (rb, TS_TIMEOUT_S * 1000), ==, 0);
  g_assert_cmpint (rb_pread (rb, got, cf->dev, 0), ==, 0);
  if (memcmp (got, cf->model, cf->dev) != 0)
    g_error ("%s: the device differs from what was written before the "
             "crash", what);
  g_assert_cmpint (rb_close (rb), ==, 0);
  crashfx_check_store (cf, what);
}

static void
crashfx_free (struct crashfx *cf)
{
  if (cf->ram == NULL)
    return;
  unlink (cf->path);
  unlink (cf->jpath);
  unlink (cf->ram);
  g_free (cf->path);
  g_free (cf->jpath);
  g_free (cf->ram);
  g_free (cf->model);
}

/* With ram= and journal=: a FLUSH's commit point takes one 4 KiB
 * sector of each of 32 chunks of 64 KiB, every chunk whole in RAM; the
 * chunks move to CLEAN with their NB bits set, and the process ends
 * before the transaction reaches the journal.  What RAM holds and the
 * store does not is those 32 sectors, 128 KiB, well within the 1 MiB
 * journal; the 32 chunks whole (2 MiB) are not.  The restart must take
 * back what is at risk, not refuse to start, and every byte written
 * must reach the store.
 */
static void
test_resume_journal_sectors (void)
{
  enum { NCH = 32 };
  g_autofree uint8_t *stored = NULL;
  struct crashfx cf;
  struct rb *rb;
  uint64_t i, sectors;
  pid_t pid;

  if (!crashfx_open (&cf, 4 * MiB, 131))
    return;
  stored = g_memdup2 (cf.model, cf.dev);
  for (i = 0; i < NCH; i++)
    memset (cf.model + i * BIG_CHUNK + i % 16 * CHUNK, (int) i + 1, CHUNK);

  pid = crashfx_fork (&cf);
  if (pid == 0) {
    /* The chunks made whole by writes of what the store holds,
     * committed a quarter at a time (the journal holds less than all
     * of them).
     */
    rb = rb_open (&cf.c);
    if (rb == NULL || rb_start (rb) == -1)
      _exit (2);
    for (i = 0; i < NCH; i++) {
      if (rb_pwrite (rb, stored + i * BIG_CHUNK, BIG_CHUNK, i * BIG_CHUNK,
                     0) == -1 ||
          (i % 8 == 7 && rb_flush (rb) == -1))
        _exit (5);
    }
    for (i = 0; i < NCH; i++) {
      uint64_t off = i * BIG_CHUNK + i % 16 * CHUNK;
      if (rb_pwrite (rb, cf.model + off, CHUNK, off, 0) == -1)
        _exit (4);
    }
    crashfx_crash_in_commit (rb, NCH - 1);
  }
  crashfx_wait (pid);

  rb = crashfx_reopen (&cf, "resume with journal=, after a crash in a "
                       "commit point of 32 sectors of 4 KiB in 32 chunks "
                       "of 64 KiB");
  sectors = chunkmap_sectors_set (&rb->map);
  if (sectors != NCH)
    g_error ("resume with journal=: %" PRIu64 " sectors to write back, want "
             "%d (those the lost transaction held)", sectors, NCH);
  crashfx_serve (&cf, rb, "resume with journal=");
  crashfx_free (&cf);
}

/* With ram= and journal=: the first 2 MiB of a 4 MiB device (32 chunks
 * of 64 KiB, every one loaded, the store full of data) are zeroed, as
 * a discard or mkfs does, and a FLUSH's commit point takes the 32 ZERO
 * chunks: 32 zero extents, a few hundred bytes of journal.  The chunks
 * move to CLEAN with their NB bits set, and the process ends before
 * the transaction reaches the journal.  What RAM holds and the store
 * does not is 2 MiB of zeroes, twice the 1 MiB journal as data, and
 * 32 zero extents as what they are: the restart must take them back as
 * zeroes, not refuse to start, and the store must then hold them.
 */
static void
test_resume_journal_zero (void)
{
  enum { NCH = 32 };
  struct crashfx cf;
  struct rb *rb;
  uint64_t i;
  pid_t pid;

  if (!crashfx_open (&cf, 4 * MiB, 139))
    return;
  memset (cf.model, 0, NCH * BIG_CHUNK);

  pid = crashfx_fork (&cf);
  if (pid == 0) {
    rb = rb_open (&cf.c);
    if (rb == NULL || rb_start (rb) == -1)
      _exit (2);
    for (i = 0; i < NCH; i++)
      if (rb_zero (rb, BIG_CHUNK, i * BIG_CHUNK, 0) == -1) {
        fprintf (stderr, "zero: %s\n", rb_get_error ());
        _exit (4);
      }
    if (chunkmap_get (&rb->map, NCH - 1) != CS_ZERO)
      _exit (5);
    crashfx_crash_in_commit (rb, NCH - 1);
  }
  crashfx_wait (pid);

  rb = crashfx_reopen (&cf, "resume with journal=, after a crash in a "
                       "commit point of 32 chunks of 64 KiB zeroed whole");
  crashfx_serve (&cf, rb, "resume with journal=");
  crashfx_free (&cf);
}

/* With ram= and journal=, populate off, 64 KiB chunks: a read of the
 * first sector of chunk X loads that sector alone (a partial chunk), a
 * write of a sector of chunk Y is answered (dirty in RAM, no commit
 * point yet), and a write of X's sector 5 ends the process in its
 * copy: X is DIRTY with the bit of sector 5 set, and sector 5 is not
 * valid yet (a write marks dirty before its copy, valid after it,
 * io.c).  The resume takes that bit off (a write cut short, never
 * acknowledged: resume.c, resume_partial), and nothing of X differs
 * from the store any more: X must be CLEAN then, not DIRTY with no bit
 * set.  Such a chunk, in the journal's first commit point beside Y,
 * was marked pending capture and never captured (a capture copies the
 * chunks of the transaction's data runs), and the next write to it
 * copied it into a capture that had ended.  The restart runs in a
 * child: a FLUSH, a write into X, a FLUSH, a clean stop; it must not
 * die, and the store must then hold both writes.
 */
static void
test_resume_journal_partial (void)
{
  const uint64_t x = 3 * BIG_CHUNK, y = 9 * BIG_CHUNK;
  uint64_t cx = x / BIG_CHUNK;
  struct crashfx cf;
  struct rb *rb;
  pid_t pid;
  int st;

  if (!crashfx_open (&cf, MiB, 149))
    return;
  memset (cf.model + y, 0x5a, SECTOR);

  pid = crashfx_fork (&cf);
  if (pid == 0) {
    uint8_t *d = g_malloc (SECTOR);

    rb = rb_open (&cf.c);
    if (rb == NULL || rb_start (rb) == -1)
      _exit (2);
    if (rb_pread (rb, d, SECTOR, x) == -1 ||
        !chunkmap_partial (&rb->map, cx))
      _exit (4);
    if (rb_pwrite (rb, cf.model + y, SECTOR, y, 0) == -1)
      _exit (5);
    memset (d, 0xa5, SECTOR);
    crash_copy = true;
    rb_pwrite (rb, d, SECTOR, x + 5 * SECTOR, 0);
    _exit (3);                  /* the copy did not end the process */
  }
  crashfx_wait (pid);

  memset (cf.model + x + 7 * SECTOR, 0x3c, SECTOR);
  pid = crashfx_fork (&cf);
  if (pid == 0) {
    uint8_t *got = g_malloc (cf.dev);

    rb = rb_open (&cf.c);
    if (rb == NULL || rb_start (rb) == -1)
      _exit (2);
    if (rb_flush (rb) == -1)
      _exit (4);
    if (rb_pwrite (rb, cf.model + x + 7 * SECTOR, SECTOR, x + 7 * SECTOR,
                   0) == -1 || rb_flush (rb) == -1)
      _exit (5);
    if (rb_pread (rb, got, cf.dev, 0) == -1 ||
        memcmp (got, cf.model, cf.dev) != 0)
      _exit (6);
    _exit (rb_close (rb) == 0 ? 0 : 7);
  }
  g_assert_cmpint (waitpid (pid, &st, 0), ==, pid);
  if (WIFSIGNALED (st))
    g_error ("resume with journal=, then a FLUSH and a write into chunk %"
             PRIu64 ": the restarted process died of signal %d (%s)", cx,
             WTERMSIG (st), strsignal (WTERMSIG (st)));
  g_assert_true (WIFEXITED (st));
  g_assert_cmpint (WEXITSTATUS (st), ==, 0);
  crashfx_check_store (&cf, "resume with journal=");
  crashfx_free (&cf);
}

/* With ram= and journal=: a write answered (dirty in RAM, no commit
 * point yet), then a crash.  The next start opens the engine (it
 * replays the journal, resumes the image) and stops before rb_start,
 * as nbdkit does when it cannot listen after the plugin got ready: the
 * stop drains on its own thread, through the journal onto the store.
 * The start after that must resume the image, not refuse it as older
 * than the store (the journal left as not stopped cleanly is replayed
 * again, which changes the store after the image's clean stop).
 */
static void
test_resume_journal_unstarted (void)
{
  const uint64_t y = 9 * BIG_CHUNK + 3 * SECTOR;
  struct crashfx cf;
  struct rb *rb;
  pid_t pid;

  if (!crashfx_open (&cf, MiB, 151))
    return;
  memset (cf.model + y, 0x5a, SECTOR);

  pid = crashfx_fork (&cf);
  if (pid == 0) {
    rb = rb_open (&cf.c);
    if (rb == NULL || rb_start (rb) == -1)
      _exit (2);
    if (rb_pwrite (rb, cf.model + y, SECTOR, y, 0) == -1)
      _exit (4);
    _exit (0);                  /* a crash: no clean stop */
  }
  crashfx_wait (pid);

  rb = crashfx_reopen (&cf, "resume with journal= after a crash");
  g_assert_cmpint (rb_close (rb), ==, 0);       /* never started */

  rb = crashfx_reopen (&cf, "with ram= and journal=, after an engine "
                       "opened and stopped without a start");
  crashfx_serve (&cf, rb, "with ram= and journal=, after an engine opened "
                 "and stopped without a start");
  crashfx_free (&cf);
}

/* A long sweep under flush-rate= syncs on the way, not only at its end:
 * what it wrote back is durable within about SWEEP_SYNC_NS (flush.c),
 * not after the whole sweep.  1 MiB dirty at 512 KiB/s: the first
 * FLUSH must reach the store while chunks are still dirty.
 */
static void
test_sweep_syncs (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .populate = true,
                         .flush_rate = 512 * 1024,
                         .store.tls_verify_peer = -1 };
  struct ts_match mf = { .ops = TS_FLUSH };
  struct fx f;
  size_t before;
  int i;

  fx_open_cfg (&f, 113, &c, true);
  before = ts_count (f.ts, &mf);
  for (i = 0; i < 4; i++) {
    g_autofree uint8_t *b = fx_random (&f, SIZE / 4);
    fx_write (&f, b, SIZE / 4, (uint64_t) i * (SIZE / 4), 0);
  }
  ts_wait_count (f.ts, &mf, before + 1, "a FLUSH during the sweep");
  if (chunkmap_dirty (&f.rb->map) == 0)
    g_error ("a sweep under flush-rate= synced only at its end");
  fx_finish (&f, "a long sweep that syncs on the way");
}

static void
test_zero_vs_write_before_ram (void)
{
  zero_vs_write_before_ram (CHUNK, 93);
  zero_vs_write_before_ram (BIG_CHUNK, 95);
}

/* --- sync tickets answered by the journal's committer ------------------ */

/* rbi_sync_answered reads sync_done and sync_failed without the lock
 * (the kernel target waits that way), so whoever answers a ticket must
 * store them atomically: the journal's committer too.  Polled from
 * here while the committer answers; a plain store is a data race that
 * ThreadSanitizer reports (the ordinary build only checks the answer).
 */
struct flusher_job {
  struct fx *f;
  int id;
  uint8_t *bufs[25];
};

/* Write a chunk of its own and FLUSH, 25 times: FLUSHes on several
 * threads commit on their own thread or share another's commit.
 */
static gpointer
flusher_job_main (gpointer arg)
{
  struct flusher_job *j = arg;
  int i;

  for (i = 0; i < 25; i++) {
    uint64_t off = (uint64_t) (16 + j->id) * CHUNK;
    if (rb_pwrite (j->f->rb, j->bufs[i], CHUNK, off, 0) == -1 ||
        rb_flush (j->f->rb) == -1)
      g_error ("journal: write and FLUSH on thread %d: %s", j->id,
               rb_get_error ());
  }
  return NULL;
}

/* A 4 MiB journal in a file of its own, with configuration *c (its
 * journal is set here); returns its path, for fx_finish_journal.
 */
static char *
fx_open_journal_cfg (struct fx *f, guint32 seed, struct rb_config *c)
{
  char *jpath;
  int fd;

  jpath = g_strdup_printf ("%s/ramback-interleave-journal-%d",
                           g_getenv ("TMPDIR") ? g_getenv ("TMPDIR")
                           : "/var/tmp", (int) getpid ());
  fd = open (jpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (ftruncate (fd, 4 * MiB), ==, 0);
  close (fd);
  c->journal = jpath;
  fx_open_cfg (f, seed, c, true);
  return jpath;
}

/* The same with fsync=wait and populate. */
static char *
fx_open_journal (struct fx *f, guint32 seed)
{
  struct rb_config c = { .chunk_size = CHUNK, .populate = true,
                         .fsync_wait = true, .store.tls_verify_peer = -1 };

  return fx_open_journal_cfg (f, seed, &c);
}

/* RAM == model; a clean stop puts everything in place: store == model. */
static void
fx_finish_journal (struct fx *f, char *jpath, const char *what)
{
  fx_check_ram (f, what);
  g_assert_cmpint (rb_close (f->rb), ==, 0);
  ts_assert_durable (f->ts, f->model, what);
  ts_free (f->ts);
  g_free (f->model);
  g_rand_free (f->r);
  unlink (jpath);
  g_free (jpath);
}

static void
test_journal_sync_answered (void)
{
  struct fx f;
  char *jpath = fx_open_journal (&f, 97);
  int i;

  for (i = 0; i < 20; i++) {
    g_autofree uint8_t *buf = fx_random (&f, CHUNK);
    uint64_t t;
    int r;

    fx_write (&f, buf, CHUNK, (uint64_t) (i % 16) * CHUNK, 0);
    t = rbi_sync_request (f.rb);
    while ((r = rbi_sync_answered (f.rb, t)) == 0)
      g_usleep (100);
    if (r != 1)
      g_error ("journal: sync ticket %" PRIu64 " failed", t);
  }
  {
    struct flusher_job jobs[4];
    GThread *th[4];
    int k, n;

    for (k = 0; k < 4; k++) {
      jobs[k] = (struct flusher_job) { .f = &f, .id = k };
      for (n = 0; n < 25; n++)
        jobs[k].bufs[n] = fx_random (&f, CHUNK);
      memcpy (f.model + (uint64_t) (16 + k) * CHUNK, jobs[k].bufs[24],
              CHUNK);
    }
    for (k = 0; k < 4; k++)
      th[k] = g_thread_new ("flush", flusher_job_main, &jobs[k]);
    for (k = 0; k < 4; k++) {
      g_thread_join (th[k]);
      for (n = 0; n < 25; n++)
        g_free (jobs[k].bufs[n]);
    }
  }
  /* A ticket (a FLUSH) is answered once the journal holds it; the
   * store has it in place after the close.
   */
  fx_finish_journal (&f, jpath, "sync tickets answered by the journal");
}

/* With a journal, rb_sync (the control socket's sync) promises more than
 * a FLUSH: everything written before it is on the backing store, in
 * place, and synced.  The applier's in-place write is held: the sync
 * must still be waiting then, and the store must have the data when it
 * returns.
 */
static void
test_journal_sync_in_place (void)
{
  struct fx f;
  char *jpath = fx_open_journal (&f, 107);
  uint64_t x = 30 * CHUNK;
  struct ts_match m = { .ops = TS_WRITE, .offset = x, .count = CHUNK,
                        .tag = "" };
  g_autofree uint8_t *v = fx_random (&f, CHUNK);
  struct ts_gate *g = ts_gate_arm (f.ts, &m, 0);
  struct job j;

  fx_write (&f, v, CHUNK, x, 0);
  j = (struct job) { .f = &f, .tag = "sync", .op = J_SYNC, .buf = v,
                     .len = CHUNK, .off = x };
  job_start (&j);
  TS_WAIT (rb_atomic_load (&j.done) ||
           (ts_gate_held (g) && waiters (&f.rb->sync_cond) > 0),
           "the sync to return, or to wait for the held in-place write");
  if (rb_atomic_load (&j.done) && j.r == 0 && !j.durable)
    g_error ("journal: sync answered OK before the backing store held "
             "the data");
  ts_gate_open (g);
  job_join (&j);
  g_assert_cmpint (j.r, ==, 0);
  g_assert_true (j.durable);
  fx_finish_journal (&f, jpath, "sync with a journal");
}

/* --- a commit that fails -------------------------------------------- */

/* The journal's store: the wrapped rb_store_open hands out this test
 * store for journal_path, so that a test can fail the journal's sync.
 */
static struct tstore *journal_ts;
static char *journal_path;

extern struct rb_store *__real_rb_store_open (const struct rb_store_params *);
extern struct rb_store *__wrap_rb_store_open (const struct rb_store_params *);

struct rb_store *
__wrap_rb_store_open (const struct rb_store_params *p)
{
  if (journal_ts && p->uri && strcmp (p->uri, journal_path) == 0)
    return ts_store (journal_ts);
  return __real_rb_store_open (p);
}

/* The fixture with configuration *c and its journal (journal_path) on
 * the test store journal_ts, of the smallest size (1 MiB); started.
 */
static void
fx_open_jts (struct fx *f, guint32 seed, struct rb_config *c,
             const char *name)
{
  int fd;

  journal_path = g_strdup_printf ("%s/ramback-interleave-%s-%d",
                                  g_getenv ("TMPDIR") ? g_getenv ("TMPDIR")
                                  : "/var/tmp", name, (int) getpid ());
  fd = open (journal_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  g_assert_cmpint (fd, >=, 0);
  close (fd);
  journal_ts = ts_new (MiB, NULL);
  c->journal = journal_path;
  fx_open_cfg (f, seed, c, true);
}

/* RAM == model; a clean stop puts everything in place: store == model. */
static void
fx_finish_jts (struct fx *f, const char *what)
{
  fx_check_ram (f, what);
  g_assert_cmpint (rb_close (f->rb), ==, 0);
  ts_assert_durable (f->ts, f->model, what);
  ts_free (f->ts);
  ts_free (journal_ts);
  journal_ts = NULL;
  g_free (f->model);
  g_rand_free (f->r);
  unlink (journal_path);
  g_free (journal_path);
}

/* fsync=wait, a journal of the smallest size (1 MiB: it holds less
 * than the 1 MiB device), no commit but those asked for.  The whole
 * device is zeroed, a piece at a time: ZERO chunks, a few bytes of
 * journal each.  The FLUSH's commit fails (the journal's sync).  The
 * zeroes must stay as cheap as they were: the next FLUSH must commit
 * them and succeed.  (A failed commit used to put its ZERO chunks back
 * as dirty data, a whole chunk each, which no longer fitted in the
 * journal: the committer retried that forever and every FLUSH hung.)
 */
static void
test_journal_failed_commit (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .populate = true,
                         .fsync_wait = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct fx f;
  struct job j;
  uint64_t off;

  fx_open_jts (&f, 113, &c, "jfail");

  for (off = 0; off < SIZE; off += 16 * CHUNK) {
    g_assert_cmpint (rb_zero (f.rb, 16 * CHUNK, off, 0), ==, 0);
    memset (f.model + off, 0, 16 * CHUNK);
  }
  ts_fail_syncs (journal_ts, 1);
  g_assert_cmpint (rb_flush (f.rb), ==, -1);

  j = (struct job) { .f = &f, .tag = "flush", .op = J_FLUSH };
  job_start (&j);
  TS_WAIT (rb_atomic_load (&j.done),
           "a FLUSH after a failed commit to return");
  job_join (&j);
  if (j.r != 0)
    g_error ("journal: a FLUSH after a failed commit failed: %s",
             rb_get_error ());

  fx_finish_jts (&f, "a failed commit, then a clean stop");
}

/* --- a zero run collected, then written over ------------------------ */

/* fsync=wait.  Chunk X is zeroed whole (ZERO), and the flusher collects
 * it into a zero run; before it locks the run, a FUA write to X goes
 * through to the store, is synced and acknowledged.  The flusher must
 * then send no zero request over X: the store requests of a run cover
 * exactly the chunks the run moved.  With 'mode_wt' the write is a plain
 * write in writethrough mode, switched to after the zero.
 */
static void
zero_run_then_write (guint32 seed, bool mode_wt, const char *what)
{
  struct fx f;
  uint64_t x = 40 * CHUNK;
  struct ts_match mz = { .ops = TS_ZERO, .offset = x, .count = CHUNK };
  struct ts_match mw = { .ops = TS_WRITE, .offset = x, .count = CHUNK,
                         .tag = "test" };
  g_autofree uint8_t *v = NULL;
  struct ts_rec rw, rz;
  size_t i;

  fx_open (&f, seed, true, true, true, 0);
  ts_set_tag ("test");
  rb_atomic_store (&hold_batch, true);
  /* X and the chunk before it: the run goes on into X. */
  g_assert_cmpint (rb_zero (f.rb, 2 * CHUNK, x - CHUNK, 0), ==, 0);
  memset (f.model + x - CHUNK, 0, 2 * CHUNK);
  TS_WAIT (rb_atomic_load (&batch_held),
           "the flusher to collect the zero run");
  if (mode_wt)
    g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  v = fx_random (&f, CHUNK);
  fx_write (&f, v, CHUNK, x, mode_wt ? 0 : RB_FUA);
  if (!mode_wt)
    g_assert_true (ts_durable_has (f.ts, v, CHUNK, x));
  g_assert_true (ts_find (f.ts, &mw, 0, &rw));
  rb_atomic_store (&batch_go, true);
  /* A ticket taken now is answered by a pass after the held one. */
  ts_sync_until_ok (f.rb);
  for (i = 0; ts_find (f.ts, &mz, i, &rz); i++)
    if (rz.arrived > rw.done)
      g_error ("%s: a zero request over [%" PRIu64 ", +%" PRIu64 ") "
               "reached the store after the write to chunk %" PRIu64
               " was stored and acknowledged", what, rz.offset, rz.count,
               x / CHUNK);
  g_assert_true (ts_durable_has (f.ts, v, CHUNK, x));
  ts_set_tag (NULL);
  fx_finish (&f, what);
}

static void
test_zero_run_then_fua (void)
{
  zero_run_then_write (101, false, "a FUA write into a collected zero run");
}

static void
test_zero_run_then_writethrough (void)
{
  zero_run_then_write (103, true,
                       "a writethrough write into a collected zero run");
}

/* --- a DIRTY run's chunk zeroed before the flusher takes it ----------- */

/* 4 KiB chunks: a sector bit each.  Chunk X is written (DIRTY, its bit
 * set) and the flusher collects it in a DIRTY run; before it locks the
 * run, a zero over X whole makes it ZERO, its bit left set (stale,
 * chunkmap.h).  The flusher then writes X whole from RAM, held at the
 * store: in flight it must weigh no more than X left the dirty count
 * (io.c, over()), which counts at most a chunk for it (the dirty chunks
 * whole cap the sectors), not its bit and its ZERO sector both.
 */
static void
test_zeroed_in_dirty_run_weight (void)
{
  struct fx f;
  uint64_t x = 30 * CHUNK;
  struct ts_match mw = { .ops = TS_WRITE, .offset = x, .count = CHUNK,
                         .tag = "" };
  g_autofree uint8_t *v = NULL;
  struct ts_gate *g;
  uint64_t inflight;

  fx_open (&f, 137, false, true, true, 0);
  ts_set_tag ("test");
  rb_atomic_store (&hold_batch, true);
  v = fx_random (&f, CHUNK);
  fx_write (&f, v, CHUNK, x, 0);
  TS_WAIT (rb_atomic_load (&batch_held),
           "the flusher to collect the DIRTY run");
  g_assert_cmpint (rb_zero (f.rb, CHUNK, x, 0), ==, 0);
  memset (f.model + x, 0, CHUNK);
  g_assert_cmpint (chunkmap_get (&f.rb->map, x / CHUNK), ==, CS_ZERO);
  g = ts_gate_arm (f.ts, &mw, 0);
  rb_atomic_store (&batch_go, true);
  ts_gate_wait (g);
  inflight = rb_atomic_load (&f.rb->inflight_bytes);
  if (inflight > CHUNK)
    g_error ("chunk %" PRIu64 ", zeroed after the flusher collected it in "
             "a DIRTY run, weighs %" PRIu64 " bytes in flight, more than "
             "the chunk (%d) it left the dirty count by at most",
             x / CHUNK, inflight, CHUNK);
  ts_gate_open (g);
  ts_set_tag (NULL);
  fx_finish (&f, "a DIRTY run's chunk zeroed before it was taken");
}

/* --- block status while a write back is in flight -------------------- */

/* rb_extents on its own thread: the type of the first extent at off. */
struct ext_job {
  struct rb *rb;
  uint64_t off;
  uint32_t type;
  int r;
  bool done;                    /* [atomic] */
};

static int
ext_first (void *opaque, uint64_t offset, uint64_t length, uint32_t type)
{
  struct ext_job *j = opaque;

  j->type = type;
  return 0;
}

static gpointer
ext_main (gpointer arg)
{
  struct ext_job *j = arg;

  j->r = rb_extents (j->rb, CHUNK, j->off, RB_EXTENTS_REQ_ONE, ext_first, j);
  rb_atomic_store (&j->done, true);
  return NULL;
}

/* Chunk X is a hole of the store (zeroed and written back, CLEAN).  A
 * write makes it data; the flusher moves it to CLEAN and its write back
 * is held before it reaches the store, which still says hole.  Block
 * status of X must not believe the store now: it waits for the write
 * back and says data (a hole here would make a sparse copy lose X).
 */
static void
test_extents_during_store (void)
{
  struct fx f;
  uint64_t x = 60 * CHUNK;
  struct ts_match m = { .ops = TS_WRITE, .offset = x, .count = CHUNK,
                        .tag = "" };
  g_autofree uint8_t *v1 = NULL;
  struct ts_gate *g;
  struct ext_job j;
  GThread *t;

  fx_open (&f, 61, false, true, true, 0);
  ts_report_holes (f.ts);
  g_assert_cmpint (rb_zero (f.rb, CHUNK, x, 0), ==, 0);
  memset (f.model + x, 0, CHUNK);
  ts_sync_until_ok (f.rb);
  j = (struct ext_job) { .rb = f.rb, .off = x };
  ext_main (&j);
  g_assert_cmpint (j.r, ==, 0);
  g_assert_cmpuint (j.type, ==, RB_EXTENT_HOLE | RB_EXTENT_ZERO);

  v1 = fx_random (&f, CHUNK);
  g = ts_gate_arm (f.ts, &m, 0);
  fx_write (&f, v1, CHUNK, x, 0);
  ts_gate_wait (g);                     /* X CLEAN, store still a hole */
  j = (struct ext_job) { .rb = f.rb, .off = x };
  t = g_thread_new ("extents", ext_main, &j);
  TS_WAIT (waiters (&f.rb->rl.released) > 0 || rb_atomic_load (&j.done),
           "block status to wait for the write back");
  ts_gate_open (g);
  g_thread_join (t);
  g_assert_cmpint (j.r, ==, 0);
  if (j.type != 0)
    g_error ("block status during a write back: chunk %" PRIu64 " holds "
             "data but was reported as type %" PRIu32 " (the store's old "
             "hole)", x / CHUNK, j.type);
  fx_finish (&f, "block status during a write back");
}

/* --- ram-size=: a miss waits for the sync that frees room ------------- */

/* Wait for the miss rd (what: for what) to return; it must have read
 * the model's data, and evicted to make room.
 */
static void
miss_done (struct fx *f, struct job *rd, const char *what)
{
  TS_WAIT (rb_atomic_load (&rd->done), what);
  job_join (rd);
  g_assert_cmpint (rd->r, ==, 0);
  if (memcmp (rd->buf, f->model + rd->off, rd->len) != 0)
    g_error ("the miss read other data than the store holds");
  g_assert_cmpuint (rb_atomic_load (&f->rb->evictions), >, 0);
}

/* ram-size= of 16 chunks, started, and *rd a read that misses (chunk
 * 200) into got.
 */
static void
fx_open_16_slots (struct fx *f, guint32 seed, struct job *rd, uint8_t *got)
{
  struct rb_config c = { .chunk_size = CHUNK, .ram_size = 16 * CHUNK,
                         .store.tls_verify_peer = -1 };

  fx_open_cfg (f, seed, &c, true);
  g_assert_true (f->rb->slotted);
  g_assert_cmpuint (f->rb->nslots, ==, 16);
  *rd = (struct job) { .f = f, .tag = "miss", .op = J_READ, .buf = got,
                       .len = CHUNK, .off = 200 * CHUNK };
}

/* ram-size= of 16 chunks, every one of them resident and clean but not
 * synced yet: writethrough writes, and one chunk whose write back the
 * test holds (so the flusher can sync nothing).  Such chunks may not be
 * evicted (a failed sync needs their data in RAM), so a miss must wait
 * for the sync after the write back, and must not keep the sync from
 * running while it looks for a victim.
 */
static void
test_evict_waits_for_sync (void)
{
  g_autofree uint8_t *got = g_malloc (CHUNK);
  struct ts_gate *g;
  struct job rd;
  struct fx f;
  uint64_t k;

  fx_open_16_slots (&f, 131, &rd, got);
  g = stall_flusher (&f, 100);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  for (k = 0; k < 15; k++) {
    g_autofree uint8_t *buf = fx_random (&f, CHUNK);

    fx_write (&f, buf, CHUNK, k * CHUNK, 0);
  }
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), ==, 16);
  g_assert_cmpuint (rb_atomic_load (&f.rb->evictions), ==, 0);

  job_start (&rd);
  /* It passes the 15 chunks not synced and the one in write back, and
   * waits for room.
   */
  TS_WAIT (waiters (&f.rb->space_cond) >= 1 || rb_atomic_load (&rd.done),
           "the miss to wait for room");
  ts_gate_open (g);
  miss_done (&f, &rd, "the miss to find room after the write back and its "
             "sync (with every resident chunk clean but not synced, the "
             "evictor must give the sync a chance)");
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), <=, 16);
  fx_finish (&f, "a miss with every resident chunk unsynced");
}

/* ram-size= of 16 chunks, all resident: chunk 0 clean but held in its
 * write back, the other 15 loaded by reads (clean, nothing to sync).
 * The hand reaches chunk 0 first.  A miss must evict one of the others
 * and go on; it must not wait for the write back of chunk 0 while it
 * holds the slot lock and sync_lock (every writer and reader needing
 * room would queue behind it, for as long as a write back over a slow
 * link takes).
 */
static void
test_evict_skips_busy (void)
{
  g_autofree uint8_t *got = g_malloc (CHUNK);
  struct ts_gate *g;
  struct job rd;
  struct fx f;
  uint64_t k;

  fx_open_16_slots (&f, 139, &rd, got);
  g = stall_flusher (&f, 0);
  for (k = 1; k < 16; k++)
    g_assert_cmpint (rb_pread (f.rb, got, CHUNK, k * CHUNK), ==, 0);
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), ==, 16);
  g_assert_cmpuint (rb_atomic_load (&f.rb->evictions), ==, 0);
  g_assert_cmpuint (chunkmap_get (&f.rb->map, 0), ==, CS_CLEAN);

  job_start (&rd);
  TS_WAIT (rb_atomic_load (&rd.done) || waiters (&f.rb->rl.released) > 0,
           "the miss to find room");
  if (!rb_atomic_load (&rd.done))
    g_error ("an eviction waited for the write back in flight of its "
             "victim, holding the slot lock, while 15 clean chunks could go");
  miss_done (&f, &rd, "the miss");
  g_assert_cmpuint (chunkmap_get (&f.rb->map, 0), ==, CS_CLEAN);
  ts_gate_open (g);
  fx_finish (&f, "a miss beside a write back in flight");
}

/* ram-size= with ram= and a store that takes FUA writes (the kernel
 * target's): writethrough writes are durable when they return, with
 * no sync to retire their NB bits, so every resident chunk is CLEAN
 * with NB and nothing is left to write back or sync.  They must still
 * be evicted (a resume loads an EMPTY chunk from the store whatever NB
 * says), or a miss waits for good.
 */
static void
test_evict_fua_nb (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .ram_size = 16 * CHUNK,
                         .store.tls_verify_peer = -1 };
  g_autofree char *ram = shm_ram_path ();
  g_autofree uint8_t *got = g_malloc (CHUNK);
  struct job rd = { .tag = "miss", .op = J_READ, .len = CHUNK,
                    .off = 200 * CHUNK };
  struct fx f;
  uint64_t k;

  if (ram == NULL)
    return;
  c.ram = ram;
  fx_open_store (&f, 137, &c, true, true);
  g_assert_true (f.rb->slotted);
  g_assert_cmpint (rb_set_mode (f.rb, RB_MODE_WRITETHROUGH), ==, 0);
  for (k = 0; k < 16; k++) {
    g_autofree uint8_t *buf = fx_random (&f, CHUNK);

    fx_write (&f, buf, CHUNK, k * CHUNK, 0);
    g_assert_cmpuint (chunkmap_get (&f.rb->map, k), ==, CS_CLEAN);
    g_assert_true ((rb_atomic_load (&f.rb->nb[k / 64]) >> (k % 64)) & 1);
  }
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), ==, 16);
  g_assert_cmpuint (rb_atomic_load (&f.rb->unsynced_bytes), ==, 0);

  rd.f = &f;
  rd.buf = got;
  job_start (&rd);
  miss_done (&f, &rd, "a miss with every resident chunk CLEAN with NB, "
             "durable by FUA (nothing to write back or sync would ever "
             "free them)");
  fx_finish (&f, "a miss over FUA writethrough chunks with ram=");
  unlink (ram);
}

/* ram-size= with partial chunks (16 KiB chunks, a slot a sector): the
 * write back of sector 1 of chunk X (written into X not loaded, so X
 * is partial) is held at the store, X CLEAN meanwhile.  Beside it a
 * read loads sector 2 of X (a RAM range: it does not wait for the
 * write back), then reads of 21 other chunks need more room than the
 * budget has, so chunks are evicted: X must not be (its write back is
 * in flight and not synced; its range is held), and nothing may lose
 * data: afterwards RAM and the store equal the model.
 */
static void
test_evict_partial_during_store (void)
{
  const uint32_t chunk = 16384;
  struct rb_config c = { .chunk_size = chunk, .ram_size = 16 * chunk,
                         .store.tls_verify_peer = -1 };
  uint64_t x = 5 * (uint64_t) chunk, k;
  struct ts_match m = { .ops = TS_WRITE, .offset = x + SECTOR,
                        .count = SECTOR, .tag = "" };
  g_autofree uint8_t *v1 = NULL, *got = g_malloc (chunk);
  struct ts_gate *g;
  struct job rd;
  struct fx f;

  fx_open_cfg (&f, 149, &c, true);
  g_assert_true (f.rb->slotted);
  v1 = fx_random (&f, SECTOR);
  g = ts_gate_arm (f.ts, &m, 0);
  fx_write (&f, v1, SECTOR, x + SECTOR, 0);
  ts_gate_wait (g);
  g_assert_true (chunkmap_partial (&f.rb->map, x / chunk));
  g_assert_cmpint (chunkmap_get (&f.rb->map, x / chunk), ==, CS_CLEAN);

  rd = (struct job) { .f = &f, .tag = "reader", .op = J_READ,
                      .buf = got, .len = SECTOR, .off = x + 2 * SECTOR };
  job_start (&rd);
  TS_WAIT (rb_atomic_load (&rd.done) || waiters (&f.rb->rl.released) > 0,
           "the read of a sector of X not loaded to complete");
  if (!rb_atomic_load (&rd.done))
    g_error ("a read of a sector not loaded waited for the write back of "
             "another sector of its chunk");
  job_join (&rd);
  g_assert_cmpint (rd.r, ==, 0);
  if (memcmp (got, f.model + rd.off, SECTOR) != 0)
    g_error ("the load beside the write back read other data than the "
             "store holds");

  for (k = 20; k < 41; k++) {
    g_assert_cmpint (rb_pread (f.rb, got, chunk, k * chunk), ==, 0);
    if (memcmp (got, f.model + k * chunk, chunk) != 0)
      g_error ("chunk %" PRIu64 " read other data than the store holds", k);
  }
  g_assert_cmpuint (rb_atomic_load (&f.rb->evictions), >, 0);
  if (chunkmap_get (&f.rb->map, x / chunk) == CS_EMPTY)
    g_error ("chunk X was evicted while its write back was in flight");
  ts_gate_open (g);
  fx_finish (&f, "evictions beside the write back of a partial chunk");
}

/* ram-size= counts loaded sectors, not chunks: misses on one chunk of
 * 4 sectors, one of them held in the store while two more wait for
 * its range, one of the same sector and one of another.  The chunk
 * takes what was loaded (2 sectors) of the budget, each sector counted
 * once however many loads met on it, and the reservations all go back.
 */
static void
test_sector_budget_once (void)
{
  const uint32_t chunk = 16384;
  struct rb_config c = { .chunk_size = chunk, .ram_size = 16 * chunk,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_READ, .tag = "A" };
  g_autofree uint8_t *ga = g_malloc (4096), *gb = g_malloc (4096),
    *gc = g_malloc (4096);
  struct job a = { .tag = "A", .op = J_READ, .buf = ga, .len = 4096,
                   .off = 5 * chunk + 4096 };
  struct job b = { .tag = "B", .op = J_READ, .buf = gb, .len = 4096,
                   .off = 5 * chunk + 4096 };
  struct job d = { .tag = "C", .op = J_READ, .buf = gc, .len = 4096,
                   .off = 5 * chunk + 8192 };
  struct rb_stats st;
  struct ts_gate *g;
  struct fx f;

  fx_open_cfg (&f, 139, &c, true);
  g_assert_true (f.rb->slotted);
  a.f = b.f = d.f = &f;
  g = ts_gate_arm (f.ts, &m, 0);
  job_start (&a);
  ts_gate_wait (g);                     /* A's load, held in the store */
  job_start (&b);
  job_start (&d);
  TS_WAIT (waiters (&f.rb->rl.released) >= 2,
           "two more misses on the chunk to wait for its range");
  ts_gate_open (g);
  job_join (&a);
  job_join (&b);
  job_join (&d);
  g_assert_cmpint (a.r, ==, 0);
  g_assert_cmpint (b.r, ==, 0);
  g_assert_cmpint (d.r, ==, 0);
  if (memcmp (ga, f.model + a.off, 4096) != 0 ||
      memcmp (gb, f.model + b.off, 4096) != 0 ||
      memcmp (gc, f.model + d.off, 4096) != 0)
    g_error ("a miss read other data than the store holds");
  rb_get_stats (f.rb, &st);
  if (st.resident_bytes != 2 * 4096 || st.demand_loaded_bytes != 2 * 4096)
    g_error ("three misses loading 2 sectors of one chunk: resident_bytes "
             "%" PRIu64 " (want %d), demand_loaded_bytes %" PRIu64
             " (want %d)", st.resident_bytes, 2 * 4096,
             st.demand_loaded_bytes, 2 * 4096);
  g_assert_cmpuint (f.rb->slots_reserved, ==, 0);
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), ==, 1);
  fx_finish (&f, "misses meeting on one chunk with ram-size=");
}

/* ram-size= of 192 chunks with journal=: 190 of them are written and
 * committed (CLEAN in RAM, dirty-max= lets them all in, and leaves room
 * for a request of two chunks), and the applier's in-place write of
 * their transaction is held: the backing store still has their old
 * data.  Two more are read (clean and on the store).  A miss of three
 * chunks (one piece) must not evict any of the 190 (it would read the old data
 * back from the store): it evicts the two read ones, waits until the
 * transaction is in place and synced, then evicts one more.
 */
static void
test_journal_evict_before_apply (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .ram_size = 192 * CHUNK,
                         .dirty_max = 190 * CHUNK, .fsync_wait = true,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_WRITE, .offset = 0, .count = CHUNK,
                        .tag = "" };
  g_autofree uint8_t *got = g_malloc (3 * CHUNK);
  struct job rd = { .tag = "miss", .op = J_READ, .len = 3 * CHUNK,
                    .off = 250 * CHUNK };
  g_autofree uint8_t *buf = NULL;
  struct ts_gate *g;
  struct fx f;
  char *jpath;
  uint64_t k;

  jpath = fx_open_journal_cfg (&f, 139, &c);
  g_assert_true (f.rb->slotted);
  g_assert_cmpuint (f.rb->piece_chunks, ==, 3);
  g = ts_gate_arm (f.ts, &m, 0);
  buf = fx_random (&f, 190 * CHUNK);
  for (k = 0; k < 190; k++)
    fx_write (&f, buf + k * CHUNK, CHUNK, k * CHUNK, 0);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);
  ts_gate_wait (g);
  g_assert_cmpint (rb_pread (f.rb, got, 2 * CHUNK, 190 * CHUNK), ==, 0);
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), ==, 192);
  g_assert_cmpuint (chunkmap_dirty (&f.rb->map), ==, 0);

  rd.f = &f;
  rd.buf = got;
  job_start (&rd);
  TS_WAIT (rb_atomic_load (&rd.done) ||
           (rb_atomic_load (&f.rb->slot_waits) > 0 &&
            waiters (&f.rb->space_cond) > 0),
           "the miss to return, or to wait for room");
  for (k = 0; k < 190; k++)
    if (chunkmap_get (&f.rb->map, k) == CS_EMPTY &&
        !ts_pending_has (f.ts, f.model + k * CHUNK, CHUNK, k * CHUNK))
      g_error ("journal: chunk %" PRIu64 " was evicted while its "
               "transaction was committed but not in place: it would "
               "be read back stale from the backing store", k);
  g_assert_false (rb_atomic_load (&rd.done));
  ts_gate_open (g);
  miss_done (&f, &rd, "the miss to find room once the transaction is in "
             "place and synced");
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), <=, 192);
  fx_finish_journal (&f, jpath, "a miss over a transaction not in place");
}

/* ram-size= of 48 chunks with journal=: 33 chunks apart from each other
 * (a run each, more data than the journal appends in one request) are
 * written and a FLUSH commits them: they are CLEAN at once, and the
 * capture copies them from RAM run by run between the journal's
 * writes; the test holds the first of those writes, so most are still
 * pending.  15 chunks read between them fill the budget, and a miss
 * evicts two: it must take two of those (clean, and on the store), not
 * a chunk of the transaction, which the capture would then read as
 * zeroes (or a load read back stale).
 */
static void
test_journal_evict_during_capture (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .ram_size = 48 * CHUNK,
                         .dirty_max = 40 * CHUNK, .fsync_wait = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_WRITE, .tag = NULL };
  g_autofree uint8_t *got = g_malloc (CHUNK);
  struct job rd = { .tag = "miss", .op = J_READ, .len = CHUNK,
                    .off = 200 * CHUNK };
  struct job fl = { .tag = "flush", .op = J_FLUSH };
  struct ts_gate *g;
  struct fx f;
  uint64_t k;

  fx_open_jts (&f, 149, &c, "jcap");
  g_assert_true (f.rb->slotted);
  g_assert_cmpuint (33 * CHUNK, >, RBJ_WHOLE_MAX);

  for (k = 0; k < 33; k++) {
    g_autofree uint8_t *buf = fx_random (&f, CHUNK);

    fx_write (&f, buf, CHUNK, 2 * k * CHUNK, 0);
  }
  g = ts_gate_arm (journal_ts, &m, 0);
  fl.f = &f;
  job_start (&fl);
  ts_gate_wait (g);
  g_assert_cmpuint (chunkmap_dirty (&f.rb->map), ==, 0);
  for (k = 0; k < 15; k++)
    g_assert_cmpint (rb_pread (f.rb, got, CHUNK, (2 * k + 1) * CHUNK), ==, 0);
  g_assert_cmpuint (chunkmap_loaded (&f.rb->map), ==, 48);

  rd.f = &f;
  rd.buf = got;
  job_start (&rd);
  TS_WAIT (rb_atomic_load (&rd.done), "the miss to evict and return");
  job_join (&rd);
  g_assert_cmpint (rd.r, ==, 0);
  for (k = 0; k < 33; k++)
    if (chunkmap_get (&f.rb->map, 2 * k) == CS_EMPTY)
      g_error ("journal: chunk %" PRIu64 " of a transaction being appended "
               "was evicted (captured from RAM, or still to be)", 2 * k);
  ts_gate_open (g);
  TS_WAIT (rb_atomic_load (&fl.done), "the FLUSH to return");
  job_join (&fl);
  g_assert_cmpint (fl.r, ==, 0);
  fx_finish_jts (&f, "a miss during a capture, then a clean stop");
}

/* ram-size= of 16 chunks with journal=, dirty-max= of two chunks: a
 * transaction must hold whole writes.  Chunk 5 is dirty; a write of
 * chunks 20 and 21 (both EMPTY; pieces of one chunk, were it cut in
 * pieces of piece_chunks) passes the dirty limit.  Were its second
 * piece throttled on its own, after the first was in RAM and out of
 * the journal's gate, the commit point it asks for would take chunk
 * 20 alone: a crash after that commit would recover half the write.
 * The applier's in-place write of chunk 20 is held, so that such a
 * throttle would wait for good: the write must complete, and chunk 20
 * must be in no transaction without chunk 21.
 */
static void
test_journal_whole_write (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .ram_size = 16 * CHUNK,
                         .dirty_max = 2 * CHUNK, .fsync_wait = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_WRITE, .offset = 20 * CHUNK,
                        .count = CHUNK, .tag = "" };
  g_autofree uint8_t *one = NULL, *two = NULL;
  struct job w;
  struct ts_gate *g;
  struct fx f;

  fx_open_jts (&f, 151, &c, "jwhole");
  g_assert_true (f.rb->slotted);
  g_assert_cmpuint (f.rb->piece_chunks, ==, 1);
  one = fx_random (&f, CHUNK);
  two = fx_random (&f, 2 * CHUNK);
  fx_write (&f, one, CHUNK, 5 * CHUNK, 0);
  g_assert_cmpuint (chunkmap_get (&f.rb->map, 20), ==, CS_EMPTY);
  g_assert_cmpuint (chunkmap_get (&f.rb->map, 21), ==, CS_EMPTY);
  g = ts_gate_arm (f.ts, &m, 0);
  w = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE, .buf = two,
                     .len = 2 * CHUNK, .off = 20 * CHUNK };
  job_start (&w);
  TS_WAIT (rb_atomic_load (&w.done) || ts_gate_held (g),
           "the write to return, or a commit of part of it to be applied");
  if (!rb_atomic_load (&w.done) &&
      chunkmap_get (&f.rb->map, 20) != CS_DIRTY &&
      memcmp (f.rb->ram.base + 20 * CHUNK, two, CHUNK) == 0)
    g_error ("journal: a commit point fell inside a write: chunk 20 of "
             "it is in a transaction (%s in RAM, being applied) while "
             "chunk 21 is not written yet",
             chunkmap_get (&f.rb->map, 20) == CS_CLEAN ? "CLEAN" : "not dirty");
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  memcpy (f.model + 20 * CHUNK, two, 2 * CHUNK);
  g_assert_cmpuint (chunkmap_get (&f.rb->map, 20), ==, CS_DIRTY);
  g_assert_cmpuint (chunkmap_get (&f.rb->map, 21), ==, CS_DIRTY);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);
  ts_gate_wait (g);
  ts_gate_open (g);
  fx_finish_jts (&f, "a write whole in one transaction");
}

/* ram-size= of 16 chunks with journal=, dirty-max= of three chunks: a
 * chunk that several transactions hold, none of them in place yet,
 * holds one chunk of RAM, and counts once towards the dirty limit.
 * Chunk 5 is written and committed three times (a FLUSH after each
 * write, as an fsync-heavy load rewriting a hot block does) while the
 * applier's in-place write of the first transaction is held: the
 * three transactions hold chunk 5, and RAM holds it once.  A write
 * of chunk 6 then finds one chunk in flight, none dirty: under the
 * limit, it must not wait.  (Counted once per transaction, the three
 * filled the limit, and every writer waited for the slow backing
 * store: the journal's dirty data drained no faster than the store
 * took it, however often it was rewritten.)
 */
static void
test_journal_held_once (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .ram_size = 16 * CHUNK,
                         .dirty_max = 3 * CHUNK, .fsync_wait = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_WRITE, .offset = 5 * CHUNK,
                        .count = CHUNK, .tag = "" };
  g_autofree uint8_t *v = NULL, *w6 = NULL;
  struct ts_gate *g;
  struct job w;
  struct fx f;
  int k;

  fx_open_jts (&f, 157, &c, "jonce");
  g_assert_true (f.rb->slotted);
  g = ts_gate_arm (f.ts, &m, 0);
  for (k = 0; k < 3; k++) {
    g_free (v);
    v = fx_random (&f, CHUNK);
    fx_write (&f, v, CHUNK, 5 * CHUNK, 0);
    g_assert_cmpint (rb_flush (f.rb), ==, 0);
    if (k == 0)
      ts_gate_wait (g);
  }
  g_assert_cmpuint (chunkmap_dirty (&f.rb->map), ==, 0);
  w6 = fx_random (&f, CHUNK);
  w = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE, .buf = w6,
                     .len = CHUNK, .off = 6 * CHUNK };
  job_start (&w);
  TS_WAIT (rb_atomic_load (&w.done) || waiters (&f.rb->space_cond) > 0,
           "the write to return, or to wait at the dirty limit");
  if (!rb_atomic_load (&w.done))
    g_error ("journal: a write waited at the dirty limit (dirty-max= of "
             "3 chunks) with one chunk in RAM held by transactions not "
             "in place: inflight_chunks %" PRIu64 " (the chunk counted "
             "once per transaction holding it)",
             rb_atomic_load (&f.rb->inflight_chunks));
  g_assert_cmpuint (rb_atomic_load (&f.rb->inflight_chunks), ==, 1);
  ts_gate_open (g);
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  memcpy (f.model + 6 * CHUNK, w6, CHUNK);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);
  fx_finish_jts (&f, "a chunk held by several transactions");
}

/* journal= with 64 KiB chunks and dirty-max= of nine chunks (576
 * KiB): a 4 KiB write into each of chunks 0 to 7, committed by a
 * FLUSH, and the applier's in-place write of the first is held: the
 * transaction holds 8 sectors, 32 KiB, and they count in flight as
 * such.  Writes of chunks 10 and 11 must not wait at the limit.
 * (Counted as the chunks whole, 512 KiB, the second waited, and random
 * 4 KiB writes with FLUSHes waited at a limit that held a sixteenth of
 * what it said.)
 */
static void
test_journal_dirty_sectors (void)
{
  struct rb_config c = { .chunk_size = BIG_CHUNK, .dirty_max = 9 * BIG_CHUNK,
                         .fsync_wait = true, .populate = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_WRITE, .offset = SECTOR, .count = SECTOR,
                        .tag = "" };
  struct ts_gate *g;
  struct rb_stats st;
  struct fx f;
  uint64_t k;

  fx_open_jts (&f, 167, &c, "jsect");
  g = ts_gate_arm (f.ts, &m, 0);
  for (k = 0; k < 8; k++) {
    g_autofree uint8_t *v = fx_random (&f, SECTOR);
    fx_write (&f, v, SECTOR, k * BIG_CHUNK + SECTOR, 0);
  }
  g_assert_cmpint (rb_flush (f.rb), ==, 0);
  ts_gate_wait (g);                     /* the applier's first write */
  rb_get_stats (f.rb, &st);
  if (st.inflight_chunks != 8 || st.inflight_bytes != 8 * SECTOR ||
      st.dirty_bytes != 0)
    g_error ("journal: a transaction of 8 sectors of 4 KiB in 8 chunks of "
             "64 KiB, not in place: inflight_chunks %" PRIu64 " (want 8), "
             "inflight_bytes %" PRIu64 " (want %d), dirty_bytes %" PRIu64
             " (want 0)", st.inflight_chunks, st.inflight_bytes,
             8 * SECTOR, st.dirty_bytes);
  for (k = 10; k < 12; k++) {
    g_autofree uint8_t *v = fx_random (&f, SECTOR);
    struct job w = { .f = &f, .tag = "writer", .op = J_WRITE, .buf = v,
                     .len = SECTOR, .off = k * BIG_CHUNK };

    job_start (&w);
    TS_WAIT (rb_atomic_load (&w.done) || waiters (&f.rb->space_cond) > 0,
             "the write to return, or to wait at the dirty limit");
    if (!rb_atomic_load (&w.done))
      g_error ("journal: a write of chunk %" PRIu64 " waited at the dirty "
               "limit (dirty-max= of 576 KiB) with %" PRIu64 " sectors of "
               "4 KiB written, 8 of them held by a transaction not in "
               "place: inflight_bytes %" PRIu64 ", dirty_bytes %" PRIu64, k,
               k - 2, rb_atomic_load (&f.rb->inflight_bytes),
               rbi_dirty_bytes (f.rb));
    job_join (&w);
    g_assert_cmpint (w.r, ==, 0);
    memcpy (f.model + w.off, v, SECTOR);
  }
  ts_gate_open (g);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);
  fx_finish_jts (&f, "a transaction's sectors in flight");
}

/* ram-size= of 16 chunks with journal=, dirty-max= of three chunks
 * (the applier's segments: a chunk): a transaction holds chunks 2 and
 * 9, and the applier's in-place write of chunk 9 is held.  Chunk 2 is
 * in place and synced by then: it no longer counts towards the dirty
 * limit (nor is it kept in RAM), whatever chunk 9 waits for.  A write
 * of chunk 3, then one of chunk 4, find one chunk in flight and one
 * dirty: under the limit, the second must not wait.  (Released at the
 * end of the pass only, a pass over a slow backing store held all its
 * chunks for seconds, and writers waited for its last request.)
 */
static void
test_journal_release_early (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .ram_size = 16 * CHUNK,
                         .dirty_max = 3 * CHUNK, .fsync_wait = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct ts_match m = { .ops = TS_WRITE, .offset = 9 * CHUNK,
                        .count = CHUNK, .tag = "" };
  g_autofree uint8_t *a = NULL, *b = NULL, *w3 = NULL, *w4 = NULL;
  struct ts_gate *g;
  struct job w;
  struct fx f;

  fx_open_jts (&f, 163, &c, "jearly");
  g_assert_true (f.rb->slotted);
  g = ts_gate_arm (f.ts, &m, 0);
  a = fx_random (&f, CHUNK);
  b = fx_random (&f, CHUNK);
  fx_write (&f, a, CHUNK, 2 * CHUNK, 0);
  fx_write (&f, b, CHUNK, 9 * CHUNK, 0);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);
  ts_gate_wait (g);
  w3 = fx_random (&f, CHUNK);
  fx_write (&f, w3, CHUNK, 3 * CHUNK, 0);
  w4 = fx_random (&f, CHUNK);
  w = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE, .buf = w4,
                     .len = CHUNK, .off = 4 * CHUNK };
  job_start (&w);
  TS_WAIT (rb_atomic_load (&w.done) || waiters (&f.rb->space_cond) > 0,
           "the write to return, or to wait at the dirty limit");
  if (!rb_atomic_load (&w.done))
    g_error ("journal: a write waited at the dirty limit (dirty-max= of "
             "3 chunks) for the applier's last request: inflight_chunks "
             "%" PRIu64 " while chunk 2 was in place and synced (%s)",
             rb_atomic_load (&f.rb->inflight_chunks),
             ts_durable_has (f.ts, a, CHUNK, 2 * CHUNK) ? "yes" : "no");
  g_assert_true (ts_durable_has (f.ts, a, CHUNK, 2 * CHUNK));
  g_assert_cmpuint (rb_atomic_load (&f.rb->inflight_chunks), ==, 1);
  ts_gate_open (g);
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  memcpy (f.model + 4 * CHUNK, w4, CHUNK);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);
  fx_finish_jts (&f, "chunks released as the pass goes");
}

/* journal= with 64 KiB chunks: transaction 1 takes sectors 0 and 5 of
 * chunk 0 (and sector 0 of chunk 9, where the applier's in-place write
 * is held), transaction 2 then takes sector 0 of chunk 0 again.  Once
 * transaction 1 is in place and synced, while transaction 2's
 * in-place write is held, chunk 0 is held by transaction 2 alone:
 * one sector in flight, not the two the chunk held with both.  (Its
 * bits cleared only when no transaction held the chunk any more, an
 * fsync-heavy load, every FLUSH a transaction holding the hot chunks
 * again, kept the union of every sector ever taken from them in flight,
 * and writers waited at the dirty limit for what was in place already.)
 */
static void
test_journal_held_shrinks (void)
{
  struct rb_config c = { .chunk_size = BIG_CHUNK, .dirty_max = 16 * BIG_CHUNK,
                         .fsync_wait = true, .populate = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct ts_match m1 = { .ops = TS_WRITE, .offset = 9 * BIG_CHUNK,
                         .count = SECTOR, .tag = "" };
  struct ts_match m2 = { .ops = TS_WRITE, .offset = 0, .count = SECTOR,
                         .tag = "" };
  const uint64_t offs[] = { 0, 5 * SECTOR, 9 * BIG_CHUNK };
  struct ts_gate *g1, *g2;
  struct rb_stats st;
  struct fx f;
  size_t k;

  fx_open_jts (&f, 173, &c, "jshrink");
  g1 = ts_gate_arm (f.ts, &m1, 0);
  for (k = 0; k < G_N_ELEMENTS (offs); k++) {
    g_autofree uint8_t *v = fx_random (&f, SECTOR);
    fx_write (&f, v, SECTOR, offs[k], 0);
  }
  g_assert_cmpint (rb_flush (f.rb), ==, 0);     /* transaction 1 */
  ts_gate_wait (g1);            /* its pass: chunk 0 written, 9 held */
  g2 = ts_gate_arm (f.ts, &m2, 0);
  {
    g_autofree uint8_t *v = fx_random (&f, SECTOR);
    fx_write (&f, v, SECTOR, 0, 0);
  }
  g_assert_cmpint (rb_flush (f.rb), ==, 0);     /* transaction 2 */
  ts_gate_open (g1);            /* transaction 1 in place, synced */
  ts_gate_wait (g2);            /* transaction 2's pass, held */
  rb_get_stats (f.rb, &st);
  if (st.inflight_chunks != 1 || st.inflight_bytes != SECTOR ||
      st.dirty_bytes != 0)
    g_error ("journal: chunk 0 held by one transaction not in place, of "
             "sector 0 only, after an older one of sectors 0 and 5 was "
             "put in place and synced: inflight_chunks %" PRIu64 " (want "
             "1), inflight_bytes %" PRIu64 " (want %d), dirty_bytes %"
             PRIu64 " (want 0)", st.inflight_chunks, st.inflight_bytes,
             SECTOR, st.dirty_bytes);
  if (rbi_txn_check_held (f.rb) == -1)
    g_error ("journal: %s", rb_get_error ());
  ts_gate_open (g2);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);
  fx_finish_jts (&f, "a chunk's held sectors shrink with its holders");
}

/* --- deferred sectors: a pass leaves the newest transactions queued --- */

/* What the backing store and the journal give after a crash now: both
 * durable images replayed (rbj_open) into fresh stores; must equal the
 * model (the device at the newest commit point).
 */
static void
check_replay (struct fx *f, const char *what)
{
  g_autofree uint8_t *jimg = g_malloc (MiB), *bimg = g_malloc (SIZE);
  struct tstore *j2, *b2;
  struct rb_journal *j;
  struct rbj_replay rp;
  size_t i;

  ts_read_durable (journal_ts, jimg, MiB, 0);
  ts_read_durable (f->ts, bimg, SIZE, 0);
  j2 = ts_new (MiB, jimg);
  b2 = ts_new (SIZE, bimg);
  j = rbj_open (ts_store (j2), "crash", ts_store (b2), &rp);
  if (j == NULL)
    g_error ("%s: replay: %s", what, rb_get_error ());
  g_assert_cmpint (rbj_close (j, false), ==, 0);
  ts_read_durable (b2, bimg, SIZE, 0);
  for (i = 0; i < SIZE; i++)
    if (bimg[i] != f->model[i])
      g_error ("%s: after a crash now, the backing store plus the journal "
               "replay to something else than the newest commit point: "
               "byte %zu (chunk %zu) is %02x, want %02x (%" PRIu64
               " transactions replayed)", what, i, i / CHUNK, bimg[i],
               f->model[i], rp.txns);
  rb_store_close (ts_store (j2));
  ts_free (j2);
  rb_store_close (ts_store (b2));
  ts_free (b2);
}

/* journal=, fsync=wait: the applier's pass over transaction Z (chunk
 * 20) is held.  Meanwhile A (chunks 2 and 5) and then B (chunk 2
 * again) are committed: the next pass finds both queued.  It may put
 * A in place and leave B queued, but then not write chunk 2 (B holds
 * its newer version, and replay writes B after the tail): A is retired
 * without it, and chunk 2 crosses to the store once, from B, in a
 * later pass.  The test holds that write and checks: A retired
 * (journal_applied 2), chunk 5 on the store, chunk 2 not yet, 4 KiB
 * deferred, chunk 2 alone held by B (the held check exact), and a
 * crash now replays to the newest commit point.  (Every pass took the
 * whole queue, and an fsync-heavy load's hot sectors crossed a slow
 * link once per pass.)
 *
 * With 'full' A is large (544 KiB, over half of the 1 MiB journal):
 * the pass must keep nothing back and write chunk 2 with A.
 */
static void
journal_defer (bool full)
{
  struct rb_config c = { .chunk_size = CHUNK, .populate = true,
                         .fsync_wait = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct ts_match mz = { .ops = TS_WRITE, .offset = 20 * CHUNK,
                         .count = CHUNK, .tag = "" };
  struct ts_match ms = { .ops = TS_WRITE, .offset = 2 * CHUNK,
                         .count = CHUNK, .tag = "" };
  g_autofree uint8_t *z = NULL, *s1 = NULL, *t1 = NULL, *s2 = NULL;
  g_autofree uint8_t *old_s = g_malloc (CHUNK), *big = NULL;
  const char *what = full ? "a pass over a journal half full"
    : "a pass leaving a newer transaction queued";
  struct ts_gate *gz, *gs;
  struct rb_stats st;
  struct fx f;

  fx_open_jts (&f, full ? 181 : 179, &c, full ? "jdeffull" : "jdefer");
  memcpy (old_s, f.model + 2 * CHUNK, CHUNK);
  gz = ts_gate_arm (f.ts, &mz, 0);
  z = fx_random (&f, CHUNK);
  fx_write (&f, z, CHUNK, 20 * CHUNK, 0);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);     /* Z */
  ts_gate_wait (gz);
  s1 = fx_random (&f, CHUNK);
  t1 = fx_random (&f, CHUNK);
  fx_write (&f, s1, CHUNK, 2 * CHUNK, 0);
  fx_write (&f, t1, CHUNK, 5 * CHUNK, 0);
  if (full) {
    big = fx_random (&f, 136 * CHUNK);
    fx_write (&f, big, 136 * CHUNK, 100 * CHUNK, 0);
  }
  g_assert_cmpint (rb_flush (f.rb), ==, 0);     /* A */
  s2 = fx_random (&f, CHUNK);
  fx_write (&f, s2, CHUNK, 2 * CHUNK, 0);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);     /* B */
  gs = ts_gate_arm (f.ts, &ms, 0);
  ts_gate_open (gz);
  ts_gate_wait (gs);            /* chunk 2's one write in place, held */
  rb_get_stats (f.rb, &st);
  if (full) {
    if (st.journal_applied != 1 || st.journal_deferred_bytes != 0)
      g_error ("journal: %s left B queued: chunk 2 written after A was "
               "retired (journal_applied %" PRIu64 ", want 1: Z only), "
               "journal_deferred_bytes %" PRIu64 " (want 0)", what,
               st.journal_applied, st.journal_deferred_bytes);
  }
  else {
    if (st.journal_applied != 2 || st.journal_deferred_bytes != CHUNK)
      g_error ("journal: the pass that put A in place wrote chunk 2, which "
               "the newer transaction B, left queued, holds: when chunk "
               "2's write reached the store journal_applied was %" PRIu64
               " (want 2: Z and A retired) and journal_deferred_bytes %"
               PRIu64 " (want %d)", st.journal_applied,
               st.journal_deferred_bytes, CHUNK);
    if (!ts_durable_has (f.ts, t1, CHUNK, 5 * CHUNK) ||
        !ts_durable_has (f.ts, old_s, CHUNK, 2 * CHUNK))
      g_error ("journal: %s: A is retired, so chunk 5 must be on the store "
               "(%s) and chunk 2 not yet (%s)", what,
               ts_durable_has (f.ts, t1, CHUNK, 5 * CHUNK) ? "yes" : "no",
               ts_durable_has (f.ts, old_s, CHUNK, 2 * CHUNK)
               ? "old" : "changed");
    if (st.inflight_chunks != 1 || st.inflight_bytes != CHUNK)
      g_error ("journal: %s: chunk 2 alone is held (by B): inflight_chunks "
               "%" PRIu64 " (want 1), inflight_bytes %" PRIu64 " (want %d)",
               what, st.inflight_chunks, st.inflight_bytes, CHUNK);
    if (rbi_txn_check_held (f.rb) == -1)
      g_error ("journal: %s: %s", what, rb_get_error ());
  }
  check_replay (&f, what);
  ts_gate_open (gs);
  fx_finish_jts (&f, what);
}

static void
test_journal_defer (void)
{
  journal_defer (false);
}

static void
test_journal_defer_full (void)
{
  journal_defer (true);
}

static uint64_t
journal_commits (struct rb *rb)
{
  struct rb_stats st;

  rb_get_stats (rb, &st);
  return st.journal_commits;
}

/* journal=: a sync (rb_sync: the store alone holds everything written
 * before it) whose transaction A (chunks 2 and 5) is committed after
 * the sync began, while the applier's pass over Z is held; a pass over
 * Y, taken once the sync asked for haste, is held too, until B
 * (chunk 2 again) is committed: the next pass finds A and B queued
 * and nobody asking for haste any more.  If it leaves B queued, chunk
 * 2 is not on the store when A is retired: the sync must not return
 * then.  When it returns, chunks 5 and 2 (A's or B's version) are on
 * the store.
 */
static void
test_journal_defer_sync (void)
{
  struct rb_config c = { .chunk_size = CHUNK, .populate = true,
                         .fsync_wait = true,
                         .commit_interval_ms = RB_MAX_COMMIT_INTERVAL_MS,
                         .store.tls_verify_peer = -1 };
  struct ts_match mz = { .ops = TS_WRITE, .offset = 20 * CHUNK,
                         .count = CHUNK, .tag = "" };
  struct ts_match my = { .ops = TS_WRITE, .offset = 21 * CHUNK,
                         .count = CHUNK, .tag = "" };
  struct ts_match ms = { .ops = TS_WRITE, .offset = 2 * CHUNK,
                         .count = CHUNK, .tag = "" };
  struct ts_match mj = { .ops = TS_WRITE, .tag = NULL };
  g_autofree uint8_t *z = NULL, *y = NULL, *s1 = NULL, *t1 = NULL;
  g_autofree uint8_t *s2 = NULL;
  struct ts_gate *gz, *gy, *gs, *gj;
  struct job w;
  struct fx f;

  fx_open_jts (&f, 191, &c, "jdefsync");
  gz = ts_gate_arm (f.ts, &mz, 0);
  z = fx_random (&f, CHUNK);
  fx_write (&f, z, CHUNK, 20 * CHUNK, 0);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);     /* Z */
  ts_gate_wait (gz);
  y = fx_random (&f, CHUNK);
  fx_write (&f, y, CHUNK, 21 * CHUNK, 0);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);     /* Y */
  s1 = fx_random (&f, CHUNK);
  t1 = fx_random (&f, CHUNK);
  fx_write (&f, s1, CHUNK, 2 * CHUNK, 0);
  fx_write (&f, t1, CHUNK, 5 * CHUNK, 0);
  gj = ts_gate_arm (journal_ts, &mj, 0);
  w = (struct job) { .f = &f, .tag = "sync", .op = J_SYNC, .buf = t1,
                     .len = CHUNK, .off = 5 * CHUNK };
  job_start (&w);
  ts_gate_wait (gj);            /* A's append, held */
  gy = ts_gate_arm (f.ts, &my, 0);
  ts_gate_open (gz);
  ts_gate_wait (gy);            /* the pass over Y, held */
  ts_gate_open (gj);
  TS_WAIT (journal_commits (f.rb) >= 3, "A to be committed");
  s2 = fx_random (&f, CHUNK);
  fx_write (&f, s2, CHUNK, 2 * CHUNK, 0);
  g_assert_cmpint (rb_flush (f.rb), ==, 0);     /* B */
  gs = ts_gate_arm (f.ts, &ms, 0);
  ts_gate_open (gy);
  TS_WAIT (rb_atomic_load (&w.done) || ts_gate_held (gs),
           "the sync to return, or chunk 2's write in place to be held");
  if (rb_atomic_load (&w.done) &&
      !ts_durable_has (f.ts, s1, CHUNK, 2 * CHUNK) &&
      !ts_durable_has (f.ts, s2, CHUNK, 2 * CHUNK))
    g_error ("journal: a sync returned (%d) with chunk 2, written before "
             "it, not on the backing store: a pass put A in place without "
             "it (left to B) and answered the sync", w.r);
  ts_gate_open (gs);
  job_join (&w);
  g_assert_cmpint (w.r, ==, 0);
  g_assert_true (w.durable);
  if (!ts_durable_has (f.ts, s1, CHUNK, 2 * CHUNK) &&
      !ts_durable_has (f.ts, s2, CHUNK, 2 * CHUNK))
    g_error ("journal: a sync returned with chunk 2 not on the store");
  fx_finish_jts (&f, "a sync over a pass that may defer");
}

/* --- cold first: write back under pressure holds rewritten sectors ---- */

/* Also linked with --wrap=rbi_slots_trim, which the flusher calls at the
 * end of every pass: once rb->held_back reaches hold_pass_at, it stops
 * there (between two sweeps) until pass_go is set.
 */
extern void __real_rbi_slots_trim (struct rb *rb);
void __wrap_rbi_slots_trim (struct rb *rb);

static uint64_t hold_pass_at = UINT64_MAX;      /* [atomic] */
static bool pass_held, pass_go;                 /* [atomic] */

void
__wrap_rbi_slots_trim (struct rb *rb)
{
  uint64_t at = rb_atomic_load (&hold_pass_at);

  __real_rbi_slots_trim (rb);
  if (at != UINT64_MAX && rb_atomic_load (&rb->held_back) >= at &&
      rb_atomic_cas (&hold_pass_at, &at, UINT64_MAX)) {
    rb_atomic_store (&pass_held, true);
    TS_WAIT (rb_atomic_load (&pass_go),
             "the test to let the flusher begin its next pass");
    rb_atomic_store (&pass_held, false);
    rb_atomic_store (&pass_go, false);
  }
}

/* The cold sectors of these tests: sectors 1-4 of chunks 1-10. */
#define COLD_N 40
static uint64_t
cold_off (unsigned k)
{
  return (1 + k / 4) * BIG_CHUNK + (1 + k % 4) * SECTOR;
}

/* 64 KiB chunks, dirty-max= 4 chunks (64 sectors; pressure from 32),
 * dirty-expire= expire_ms.  Returns the gate holding the flusher in the
 * middle of a pass, writing back a sector of chunk 15.
 */
static struct ts_gate *
cold_open_ram (struct fx *f, guint32 seed, uint32_t expire_ms,
               const char *ram)
{
  struct rb_config c = { .chunk_size = BIG_CHUNK, .populate = true,
                         .dirty_max = 4 * BIG_CHUNK,
                         .dirty_expire_ms = expire_ms, .ram = ram,
                         .store.tls_verify_peer = -1 };
  uint64_t sx = 15 * BIG_CHUNK + 8 * SECTOR;
  struct ts_match m = { .ops = TS_WRITE, .offset = sx, .count = SECTOR,
                        .tag = "" };
  g_autofree uint8_t *v = NULL;
  struct ts_gate *g;

  fx_open_cfg (f, seed, &c, true);
  g = ts_gate_arm (f->ts, &m, 0);
  v = fx_random (f, SECTOR);
  fx_write (f, v, SECTOR, sx, 0);
  ts_gate_wait (g);
  return g;
}

static struct ts_gate *
cold_open (struct fx *f, guint32 seed, uint32_t expire_ms)
{
  return cold_open_ram (f, seed, expire_ms, NULL);
}

/* Sector 0 of chunk 0 written twice (rewritten while dirty: hot), each
 * cold sector once: 41 sectors dirty and one in flight, over half the
 * limit and under it.  Returns the hot sector's last data.
 */
static uint8_t *
cold_writes (struct fx *f)
{
  uint8_t *h1 = fx_random (f, SECTOR), *h2 = fx_random (f, SECTOR);
  unsigned k;

  fx_write (f, h1, SECTOR, 0, 0);
  fx_write (f, h2, SECTOR, 0, 0);
  g_free (h1);
  for (k = 0; k < COLD_N; k++) {
    g_autofree uint8_t *b = fx_random (f, SECTOR);
    fx_write (f, b, SECTOR, cold_off (k), 0);
  }
  return h2;
}

/* Let the held flusher go, and hold the next write of the hot sector
 * at the store; *st: the stats then.  Returns that write's gate.
 */
static struct ts_gate *
cold_go (struct fx *f, struct ts_gate *g, struct rb_stats *st)
{
  struct ts_match mh = { .ops = TS_WRITE, .offset = 0, .count = SECTOR,
                         .tag = "" };
  struct ts_gate *gh = ts_gate_arm (f->ts, &mh, 0);

  ts_gate_open (g);
  ts_gate_wait (gh);
  rb_get_stats (f->rb, st);
  return gh;
}

/* Let the hot sector's write go: it is durable after a sync. */
static void
cold_finish (struct fx *f, struct ts_gate *gh, const uint8_t *hot,
             const char *what)
{
  ts_gate_open (gh);
  ts_sync_until_ok (f->rb);
  g_assert_true (ts_durable_has (f->ts, hot, SECTOR, 0));
  fx_finish (f, what);
}

/* Under pressure, the sweep after the held one writes back the 40 cold
 * sectors and syncs them, and leaves the hot one dirty: when the hot
 * sector's write reaches the store (a later sweep, below half the
 * limit), every cold one is durable, and one sector was held back.
 */
static void
test_cold_first (void)
{
  struct fx f;
  g_autofree uint8_t *hot = NULL;
  struct ts_gate *g, *gh;
  struct rb_stats st;
  unsigned k, cold_durable = 0;

  g = cold_open (&f, 131, 30000);
  hot = cold_writes (&f);
  gh = cold_go (&f, g, &st);
  for (k = 0; k < COLD_N; k++)
    cold_durable += ts_durable_has (f.ts, f.model + cold_off (k), SECTOR,
                                    cold_off (k));
  if (cold_durable != COLD_N || st.held_back != 1)
    g_error ("under pressure, the rewritten sector went to the store with "
             "%u of %d cold sectors durable before it, held_back %" PRIu64
             " (want all of them, and 1)", cold_durable, COLD_N,
             st.held_back);
  cold_finish (&f, gh, hot, "cold first");
}

/* The same with a ram= image (resume.c), where a write marks its
 * sectors dirty twice, before its copy and after it: a sector written
 * once is not rewritten, and must not be taken for hot.
 */
static void
test_cold_first_ram (void)
{
  g_autofree char *ram = shm_ram_path ();
  struct fx f;
  g_autofree uint8_t *hot = NULL;
  struct ts_gate *g, *gh;
  struct rb_stats st;
  unsigned k, cold_durable = 0;

  if (ram == NULL)
    return;
  g = cold_open_ram (&f, 151, 30000, ram);
  hot = cold_writes (&f);
  gh = cold_go (&f, g, &st);
  for (k = 0; k < COLD_N; k++)
    cold_durable += ts_durable_has (f.ts, f.model + cold_off (k), SECTOR,
                                    cold_off (k));
  if (cold_durable != COLD_N || st.held_back != 1)
    g_error ("with ram=, under pressure, the rewritten sector went to the "
             "store with %u of %d cold sectors durable before it, "
             "held_back %" PRIu64 " (want all of them, and 1: a sector "
             "written once is not hot)", cold_durable, COLD_N,
             st.held_back);
  cold_finish (&f, gh, hot, "cold first with ram=");
  unlink (ram);
}

/* The same, with an rb_sync waiting when the pressure begins: the sweep
 * that answers it must write the hot sector too.
 */
static void
test_cold_first_sync (void)
{
  struct fx f;
  g_autofree uint8_t *hot = NULL;
  struct job s = { .tag = "sync", .op = J_SYNC };
  struct ts_gate *g;
  struct rb_stats st;

  g = cold_open (&f, 137, 30000);
  hot = cold_writes (&f);
  s.f = &f;
  s.buf = hot;                  /* durable: checked when rb_sync returns */
  s.len = SECTOR;
  s.off = 0;
  job_start (&s);
  TS_WAIT (waiters (&f.rb->sync_cond) > 0, "rb_sync to wait for a sweep");
  ts_gate_open (g);
  job_join (&s);
  g_assert_cmpint (s.r, ==, 0);
  rb_get_stats (f.rb, &st);
  /* held_back: the sweep that answered the sync held nothing back (the
   * sector may have been stored by a later one when rb_sync returns).
   */
  if (!s.durable || st.held_back != 0)
    g_error ("rb_sync returned 0 under pressure: rewritten sector %s, "
             "held_back %" PRIu64 " (want durable, and 0)",
             s.durable ? "durable" : "not durable", st.held_back);
  fx_finish (&f, "cold first, a sync waiting");
}

/* dirty-expire= 1 ms, and more than that since the last sweep that held
 * nothing back began: the next sweep, under pressure, holds nothing
 * back either, and writes the hot sector with the cold ones.
 */
static void
test_cold_first_expire (void)
{
  struct fx f;
  g_autofree uint8_t *hot = NULL;
  struct ts_gate *g, *gh;
  struct rb_stats st;
  uint64_t t;

  g = cold_open (&f, 139, 1);
  hot = cold_writes (&f);
  t = rb_now_ns ();
  TS_WAIT (rb_now_ns () >= t + 2000000, "2 ms to pass (dirty-expire=)");
  gh = cold_go (&f, g, &st);
  if (st.held_back != 0)
    g_error ("dirty-expire= 1 ms over: a sweep held %" PRIu64 " rewritten "
             "sectors back", st.held_back);
  cold_finish (&f, gh, hot, "cold first, expired");
}

/* Every dirty sector hot: the sweep holds all 40 back and writes
 * nothing.  Held between that pass and the next, the test rewrites them
 * all (hot again).  The next sweep must hold nothing back (no sweep
 * after sweep writing nothing while writers keep the data hot), so 40
 * sectors were held back in all when everything is clean.
 */
static void
test_cold_first_all_hot (void)
{
  struct fx f;
  struct ts_gate *g;
  struct rb_stats st;
  unsigned k, r;

  g = cold_open (&f, 149, 30000);
  for (r = 0; r < 2; r++)
    for (k = 0; k < COLD_N; k++) {
      g_autofree uint8_t *b = fx_random (&f, SECTOR);
      fx_write (&f, b, SECTOR, cold_off (k), 0);
    }
  rb_atomic_store (&hold_pass_at, (uint64_t) COLD_N);
  ts_gate_open (g);
  TS_WAIT (rb_atomic_load (&pass_held),
           "the flusher to end the pass that held every sector back");
  for (k = 0; k < COLD_N; k++) {
    g_autofree uint8_t *b = fx_random (&f, SECTOR);
    fx_write (&f, b, SECTOR, cold_off (k), 0);
  }
  rb_atomic_store (&pass_go, true);
  TS_WAIT (chunkmap_dirty (&f.rb->map) == 0, "every chunk to be clean");
  rb_get_stats (f.rb, &st);
  if (st.held_back != COLD_N)
    g_error ("every dirty sector hot, rewritten after a sweep held them "
             "all back and wrote nothing: held_back %" PRIu64 " (want %d: "
             "the next sweep holds nothing back)", st.held_back, COLD_N);
  fx_finish (&f, "cold first, every sector hot");
}

/* 64 KiB chunks, dirty-max= of 4 chunks (64 sectors); the flusher held
 * writing back a sector of chunk 15.  63 sectors written once reach the
 * limit.  A write to one of them again adds nothing to the dirty data:
 * it must not wait at the limit (a skewed load rewrites its hot sectors
 * far more often than it dirties new ones, and those rewrites waited
 * for write back as if each dirtied a sector).  A write to a new
 * sector still waits.
 */
static void
test_rewrite_at_limit (void)
{
  struct fx f;
  uint64_t x = 15 * BIG_CHUNK, k;
  struct ts_match m = { .ops = TS_WRITE, .offset = x, .count = SECTOR,
                        .tag = "" };
  g_autofree uint8_t *v = NULL, *v2 = NULL, *v3 = NULL;
  struct ts_gate *g;
  struct job re, nw;

  fx_open_cs (&f, 71, false, true, true, 4 * BIG_CHUNK, BIG_CHUNK);
  v = fx_random (&f, SECTOR);
  v2 = fx_random (&f, 1000);
  v3 = fx_random (&f, SECTOR);
  g = ts_gate_arm (f.ts, &m, 0);
  fx_write (&f, v, SECTOR, x, 0);
  ts_gate_wait (g);
  for (k = 0; k < 63; k++)
    fx_write (&f, v, SECTOR, (k % 15) * BIG_CHUNK + (k / 15) * SECTOR, 0);
  g_assert_true (rbi_over_dirty_limit (f.rb));

  re = (struct job) { .f = &f, .tag = "rewriter", .op = J_WRITE, .buf = v2,
                      .len = 1000, .off = 3 * BIG_CHUNK + 2 * SECTOR + 9 };
  job_start (&re);
  TS_WAIT (rb_atomic_load (&re.done) || waiters (&f.rb->space_cond) > 0,
           "the rewrite of a dirty sector at the dirty limit");
  if (!rb_atomic_load (&re.done))
    g_error ("a write into sectors all dirty already waited at the dirty "
             "limit (it adds no dirty data)");
  job_join (&re);
  g_assert_cmpint (re.r, ==, 0);
  memcpy (f.model + re.off, v2, 1000);

  /* A new sector waits, until the write back goes on. */
  nw = (struct job) { .f = &f, .tag = "writer", .op = J_WRITE, .buf = v3,
                      .len = SECTOR, .off = 14 * BIG_CHUNK + 9 * SECTOR };
  job_start (&nw);
  TS_WAIT (rb_atomic_load (&nw.done) || waiters (&f.rb->space_cond) > 0,
           "the write of a new sector to wait at the dirty limit");
  if (rb_atomic_load (&nw.done))
    g_error ("a write of a sector not dirty went past the dirty limit");
  ts_gate_open (g);
  job_join (&nw);
  g_assert_cmpint (nw.r, ==, 0);
  memcpy (f.model + nw.off, v3, SECTOR);
  fx_finish (&f, "a rewrite at the dirty limit");
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/interleave/miss-beside-populate",
                   test_miss_beside_populate);
  g_test_add_func ("/interleave/miss-inside-populate",
                   test_miss_inside_populate);
  g_test_add_func ("/interleave/flush-race", test_flush_race);
  g_test_add_func ("/interleave/write-during-store", test_write_during_store);
  g_test_add_func ("/interleave/populate-newer-write",
                   test_populate_newer_write);
  g_test_add_func ("/interleave/demand-load-waits", test_demand_load_waits);
  g_test_add_func ("/interleave/fua-durable", test_fua_durable);
  g_test_add_func ("/interleave/sync-ticket", test_sync_ticket);
  g_test_add_func ("/interleave/sync-error-inflight",
                   test_sync_error_inflight);
  g_test_add_func ("/interleave/dirty-max-sectors", test_dirty_max_sectors);
  g_test_add_func ("/interleave/sector-count-capture",
                   test_sector_count_capture);
  g_test_add_func ("/interleave/dirty-max-inflight",
                   test_dirty_max_inflight);
  g_test_add_func ("/interleave/writethrough-reaches-store",
                   test_writethrough_reaches_store);
  g_test_add_func ("/interleave/writethrough-from-ram",
                   test_writethrough_from_ram);
  g_test_add_func ("/interleave/writethrough-fua-store",
                   test_writethrough_fua_store);
  g_test_add_func ("/interleave/data-paths", test_data_paths);
  g_test_add_func ("/interleave/writethrough-over-zero",
                   test_writethrough_over_zero);
  g_test_add_func ("/interleave/sync-error-writethrough",
                   test_sync_error_writethrough);
  g_test_add_func ("/interleave/sync-error-fua", test_sync_error_fua);
  g_test_add_func ("/interleave/first-sync-fails", test_first_sync_fails);
  g_test_add_func ("/interleave/sync-error-redirty",
                   test_sync_error_redirty);
  g_test_add_func ("/interleave/zero-vs-write", test_zero_vs_write);
  g_test_add_func ("/interleave/zero-vs-write-before-ram",
                   test_zero_vs_write_before_ram);
  g_test_add_func ("/interleave/partial-write-during-store",
                   test_partial_write_during_store);
  g_test_add_func ("/interleave/sector-write-during-store",
                   test_sector_write_during_store);
  g_test_add_func ("/interleave/sector-store-fails", test_sector_store_fails);
  g_test_add_func ("/interleave/sector-zero-then-write",
                   test_sector_zero_then_write);
  g_test_add_func ("/interleave/journal-sync-answered",
                   test_journal_sync_answered);
  g_test_add_func ("/interleave/journal-sync-in-place",
                   test_journal_sync_in_place);
  g_test_add_func ("/interleave/journal-held-once",
                   test_journal_held_once);
  g_test_add_func ("/interleave/journal-release-early",
                   test_journal_release_early);
  g_test_add_func ("/interleave/journal-dirty-sectors",
                   test_journal_dirty_sectors);
  g_test_add_func ("/interleave/journal-failed-commit",
                   test_journal_failed_commit);
  g_test_add_func ("/interleave/zero-run-then-fua", test_zero_run_then_fua);
  g_test_add_func ("/interleave/zeroed-in-dirty-run-weight",
                   test_zeroed_in_dirty_run_weight);
  g_test_add_func ("/interleave/zero-nb-window", test_zero_nb_window);
  g_test_add_func ("/interleave/resume-empty-ram", test_resume_empty_ram);
  g_test_add_func ("/interleave/resume-journal-sectors",
                   test_resume_journal_sectors);
  g_test_add_func ("/interleave/resume-journal-zero",
                   test_resume_journal_zero);
  g_test_add_func ("/interleave/resume-journal-partial",
                   test_resume_journal_partial);
  g_test_add_func ("/interleave/resume-journal-unstarted",
                   test_resume_journal_unstarted);
  g_test_add_func ("/interleave/populate-past-partial",
                   test_populate_past_partial);
  g_test_add_func ("/interleave/sweep-syncs", test_sweep_syncs);
  g_test_add_func ("/interleave/zero-run-then-writethrough",
                   test_zero_run_then_writethrough);
  g_test_add_func ("/interleave/extents-during-store",
                   test_extents_during_store);
  g_test_add_func ("/interleave/evict-skips-busy", test_evict_skips_busy);
  g_test_add_func ("/interleave/evict-waits-for-sync",
                   test_evict_waits_for_sync);
  g_test_add_func ("/interleave/evict-fua-nb", test_evict_fua_nb);
  g_test_add_func ("/interleave/evict-partial-during-store",
                   test_evict_partial_during_store);
  g_test_add_func ("/interleave/sector-budget-once",
                   test_sector_budget_once);
  g_test_add_func ("/interleave/journal-evict-before-apply",
                   test_journal_evict_before_apply);
  g_test_add_func ("/interleave/journal-evict-during-capture",
                   test_journal_evict_during_capture);
  g_test_add_func ("/interleave/journal-whole-write",
                   test_journal_whole_write);
  g_test_add_func ("/interleave/journal-held-shrinks",
                   test_journal_held_shrinks);
  g_test_add_func ("/interleave/journal-defer", test_journal_defer);
  g_test_add_func ("/interleave/journal-defer-full",
                   test_journal_defer_full);
  g_test_add_func ("/interleave/journal-defer-sync",
                   test_journal_defer_sync);
  g_test_add_func ("/interleave/cold-first", test_cold_first);
  g_test_add_func ("/interleave/cold-first-ram", test_cold_first_ram);
  g_test_add_func ("/interleave/cold-first-sync", test_cold_first_sync);
  g_test_add_func ("/interleave/cold-first-expire", test_cold_first_expire);
  g_test_add_func ("/interleave/cold-first-all-hot", test_cold_first_all_hot);
  g_test_add_func ("/interleave/rewrite-at-limit", test_rewrite_at_limit);
  return g_test_run ();
}
