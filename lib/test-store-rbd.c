/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the RBD store's request bookkeeping (store/store-rbd.c)
 * against a librbd of this file's own.
 *
 * The seam is the link: this file defines every librados and librbd
 * function the store calls, and the executable's definitions come
 * before the libraries', so the store talks to an image in memory with
 * no cluster.  Each asynchronous request follows the rule the test set
 * for its offset: run at once (the completion runs before the call
 * returns, as librbd may do), be held until the test completes it, or
 * be refused synchronously (the call returns -errno and its completion
 * never runs) once the caller of another offset has made its call.
 * Rules are for writes; reads and zeroes run at once.
 *
 * How a batch is cut: every aio call's offset and length are kept, so
 * a test sees the pieces a write went out in (their size, that none
 * crosses an object of the image, that they cover it exactly).
 *
 * What is forced: a request refused synchronously while requests of
 * other threads were issued before it and after it.  The store must
 * take exactly that request out of its in-flight list, whatever its
 * place: the others stay listed (their age in store_oldest_request_ms,
 * their count in store_inflight) and complete normally, the data they
 * wrote is in the image, and nothing touches the refused request's
 * memory after its caller returned (AddressSanitizer's build sees that).
 *
 * Locking: fk.lock protects struct fake; fk.cond is broadcast on every
 * change.  Waits are for states, bounded by TIMEOUT_S so that a broken
 * store fails the test instead of hanging it.  pthread objects, not
 * GLib's (ThreadSanitizer cannot see GLib's futexes).
 */

#include <config.h>

#undef NDEBUG
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <glib.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

#include "error.h"
#include "json.h"
#include "store.h"
#include "env.h"

#define TIMEOUT_S 60
#define IMG_SIZE (64 * 1024 * 1024)
#define OBJ_SIZE (4 * 1024 * 1024)   /* the image's, unless a test sets it */
#define MiB (1024 * 1024)
#define MAX_RULES 8
#define BLOCK 4096

enum rule_action { RUN = 0, HOLD, REFUSE };

struct rule {
  uint64_t offset;
  enum rule_action action;
  uint64_t after;             /* REFUSE: once offset 'after' was called */
  int err;                    /* REFUSE: -errno returned */
};

struct fake_comp {
  rbd_callback_t cb;
  void *arg;
  ssize_t ret;
  /* Held: the request, applied when the test completes it. */
  bool held;
  int op;                     /* 0 read, 1 write, 2 zero */
  uint64_t offset, len;
  char *buf;
};

struct fake {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint8_t *img;
  struct rule rules[MAX_RULES];
  unsigned nrules;
  uint64_t called[64];        /* offsets whose aio call was made */
  uint64_t called_len[64];    /* and their lengths */
  unsigned ncalled;
  uint64_t obj_size;          /* the image's object size */
  uint64_t entered[64];       /* offsets whose aio call has begun */
  unsigned nentered;
  struct fake_comp *held[MAX_RULES];
  unsigned nheld;
  int images_open;
};

static struct fake fk = {
  .lock = PTHREAD_MUTEX_INITIALIZER,
  .cond = PTHREAD_COND_INITIALIZER,
};

static struct timespec
deadline (void)
{
  struct timespec t;

  clock_gettime (CLOCK_REALTIME, &t);
  t.tv_sec += TIMEOUT_S;
  return t;
}

static void
wait_locked (struct timespec end, const char *what)
{
  if (pthread_cond_timedwait (&fk.cond, &fk.lock, &end) == ETIMEDOUT)
    g_error ("fake librbd: timed out after %d s waiting for %s",
             TIMEOUT_S, what);
}

static bool
in_list (const uint64_t *v, unsigned n, uint64_t off)
{
  unsigned i;

  for (i = 0; i < n; i++)
    if (v[i] == off)
      return true;
  return false;
}

static void
fake_reset (void)
{
  pthread_mutex_lock (&fk.lock);
  g_free (fk.img);
  fk.img = g_malloc0 (IMG_SIZE);
  fk.nrules = fk.ncalled = fk.nentered = fk.nheld = 0;
  fk.obj_size = OBJ_SIZE;
  pthread_mutex_unlock (&fk.lock);
}

static void
fake_rule (uint64_t offset, enum rule_action action, uint64_t after, int err)
{
  pthread_mutex_lock (&fk.lock);
  g_assert_cmpuint (fk.nrules, <, MAX_RULES);
  fk.rules[fk.nrules++] = (struct rule) {
    .offset = offset, .action = action, .after = after, .err = err,
  };
  pthread_mutex_unlock (&fk.lock);
}

/* Wait until the aio call for offset has begun (entered) or returned
 * (called).
 */
static void
fake_wait (uint64_t offset, bool returned)
{
  struct timespec end = deadline ();

  pthread_mutex_lock (&fk.lock);
  while (!(returned ? in_list (fk.called, fk.ncalled, offset)
           : in_list (fk.entered, fk.nentered, offset)))
    wait_locked (end, "an aio call");
  pthread_mutex_unlock (&fk.lock);
}

static void
apply (struct fake_comp *c)
{
  switch (c->op) {
  case 0:
    memcpy (c->buf, fk.img + c->offset, c->len);
    c->ret = c->len;
    break;
  case 1:
    memcpy (fk.img + c->offset, c->buf, c->len);
    c->ret = 0;
    break;
  default:
    memset (fk.img + c->offset, 0, c->len);
    c->ret = 0;
  }
}

/* Complete the held request at offset, as librbd's thread would. */
static void
fake_complete (uint64_t offset)
{
  struct fake_comp *c = NULL;
  unsigned i;

  pthread_mutex_lock (&fk.lock);
  for (i = 0; i < fk.nheld; i++)
    if (fk.held[i]->offset == offset) {
      c = fk.held[i];
      fk.held[i] = fk.held[--fk.nheld];
      break;
    }
  g_assert_nonnull (c);
  apply (c);
  pthread_mutex_unlock (&fk.lock);
  c->cb (c, c->arg);
}

static int
fake_aio (int op, uint64_t off, size_t len, char *buf, rbd_completion_t cp)
{
  struct fake_comp *c = cp;
  struct timespec end = deadline ();
  struct rule *r = NULL;
  unsigned i;
  int ret = 0;

  g_assert_cmpuint (off + len, <=, IMG_SIZE);
  pthread_mutex_lock (&fk.lock);
  g_assert_cmpuint (fk.nentered, <, G_N_ELEMENTS (fk.entered));
  fk.entered[fk.nentered++] = off;
  pthread_cond_broadcast (&fk.cond);
  for (i = 0; i < fk.nrules && op == 1; i++)
    if (fk.rules[i].offset == off)
      r = &fk.rules[i];
  c->op = op;
  c->offset = off;
  c->len = len;
  c->buf = buf;
  if (r && r->action == REFUSE) {
    while (!in_list (fk.called, fk.ncalled, r->after))
      wait_locked (end, "the call a refusal waits for");
    ret = r->err;
  }
  else if (r && r->action == HOLD) {
    g_assert_cmpuint (fk.nheld, <, MAX_RULES);
    c->held = true;
    fk.held[fk.nheld++] = c;
  }
  else
    apply (c);
  g_assert_cmpuint (fk.ncalled, <, G_N_ELEMENTS (fk.called));
  fk.called_len[fk.ncalled] = len;
  fk.called[fk.ncalled++] = off;
  pthread_cond_broadcast (&fk.cond);
  pthread_mutex_unlock (&fk.lock);
  if (ret == 0 && !c->held)
    c->cb (c, c->arg);
  return ret;
}

/* The fake librados. */
int
rados_create (rados_t *cluster, const char *const id)
{
  *cluster = g_malloc0 (1);
  return 0;
}

int
rados_conf_read_file (rados_t cluster, const char *path)
{
  return 0;
}

int
rados_conf_parse_env (rados_t cluster, const char *var)
{
  return 0;
}

int
rados_conf_set (rados_t cluster, const char *option, const char *value)
{
  return 0;
}

int
rados_connect (rados_t cluster)
{
  return 0;
}

uint64_t
rados_get_instance_id (rados_t cluster)
{
  return 4242;
}

void
rados_shutdown (rados_t cluster)
{
  g_free (cluster);
}

int
rados_ioctx_create (rados_t cluster, const char *pool, rados_ioctx_t *io)
{
  *io = g_malloc0 (1);
  return 0;
}

void
rados_ioctx_set_namespace (rados_ioctx_t io, const char *nspace)
{
}

void
rados_ioctx_destroy (rados_ioctx_t io)
{
  g_free (io);
}

/* The fake librbd: one image, fk. */
static int
open_image (rbd_image_t *image)
{
  pthread_mutex_lock (&fk.lock);
  fk.images_open++;
  pthread_mutex_unlock (&fk.lock);
  *image = &fk;
  return 0;
}

int
rbd_open (rados_ioctx_t io, const char *name, rbd_image_t *image,
          const char *snap)
{
  return open_image (image);
}

int
rbd_open_read_only (rados_ioctx_t io, const char *name, rbd_image_t *image,
                    const char *snap)
{
  return open_image (image);
}

int
rbd_close (rbd_image_t image)
{
  pthread_mutex_lock (&fk.lock);
  fk.images_open--;
  pthread_mutex_unlock (&fk.lock);
  return 0;
}

int
rbd_stat (rbd_image_t image, rbd_image_info_t *info, size_t infosize)
{
  memset (info, 0, infosize);
  info->size = IMG_SIZE;
  info->obj_size = fk.obj_size;
  info->num_objs = IMG_SIZE / fk.obj_size;
  info->order = 22;
  return 0;
}

int
rbd_get_features (rbd_image_t image, uint64_t *features)
{
  *features = RBD_FEATURE_EXCLUSIVE_LOCK;
  return 0;
}

int
rbd_lock_acquire (rbd_image_t image, rbd_lock_mode_t mode)
{
  return 0;
}

int
rbd_lock_break (rbd_image_t image, rbd_lock_mode_t mode, const char *owner)
{
  return 0;
}

int
rbd_lock_get_owners (rbd_image_t image, rbd_lock_mode_t *mode,
                     char **owners, size_t *max)
{
  if (*max < 1)
    return -ERANGE;
  if (mode)
    *mode = RBD_LOCK_MODE_EXCLUSIVE;
  owners[0] = strdup ("client.4242 127.0.0.1:0/1");
  *max = 1;
  return 0;
}

void
rbd_lock_get_owners_cleanup (char **owners, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    free (owners[i]);
}

ssize_t
rbd_list_lockers (rbd_image_t image, int *exclusive, char *tag,
                  size_t *tag_len, char *clients, size_t *clients_len,
                  char *cookies, size_t *cookies_len, char *addrs,
                  size_t *addrs_len)
{
  return 0;
}

int
rbd_diff_iterate2 (rbd_image_t image, const char *fromsnap, uint64_t ofs,
                   uint64_t len, uint8_t include_parent, uint8_t whole_object,
                   int (*cb) (uint64_t, size_t, int, void *), void *arg)
{
  return cb (ofs, len, 1, arg) == -ECANCELED ? -ECANCELED : 0;
}

int
rbd_flush (rbd_image_t image)
{
  return 0;
}

int
rbd_aio_create_completion (void *arg, rbd_callback_t cb, rbd_completion_t *c)
{
  struct fake_comp *fc = g_new0 (struct fake_comp, 1);

  fc->cb = cb;
  fc->arg = arg;
  *c = fc;
  return 0;
}

ssize_t
rbd_aio_get_return_value (rbd_completion_t c)
{
  return ((struct fake_comp *) c)->ret;
}

void
rbd_aio_release (rbd_completion_t c)
{
  g_free (c);
}

int
rbd_aio_read (rbd_image_t image, uint64_t off, size_t len, char *buf,
              rbd_completion_t c)
{
  return fake_aio (0, off, len, buf, c);
}

int
rbd_aio_write (rbd_image_t image, uint64_t off, size_t len, const char *buf,
               rbd_completion_t c)
{
  return fake_aio (1, off, len, (char *) buf, c);
}

int
rbd_aio_write_zeroes (rbd_image_t image, uint64_t off, size_t len,
                      rbd_completion_t c, int zero_flags, int op_flags)
{
  return fake_aio (2, off, len, NULL, c);
}

/* The store's status field key, as a number. */
static uint64_t
status_u64 (struct rb_store *s, const char *key)
{
  char buf[8192], pat[100];
  struct rb_status_out o;
  const char *p;

  rb_status_begin (&o, false, buf, sizeof buf);
  s->ops->status (s, &o);
  rb_status_end (&o);
  g_assert_cmpuint (o.pos, <, sizeof buf);
  snprintf (pat, sizeof pat, "%s: ", key);
  for (p = buf; p; p = strchr (p, '\n')) {
    if (*p == '\n')
      p++;
    if (strncmp (p, pat, strlen (pat)) == 0)
      return g_ascii_strtoull (p + strlen (pat), NULL, 10);
  }
  g_error ("no %s in status:\n%s", key, buf);
}

/* A write of BLOCK bytes of 'fill' at offset, on a thread of its own. */
struct writer {
  pthread_t thread;
  struct rb_store *s;
  uint64_t offset;
  uint8_t buf[BLOCK];
  int ret, err, io_err;
};

static void *
writer_run (void *vw)
{
  struct writer *w = vw;
  struct rb_io io = {
    .op = RB_IO_WRITE, .buf = w->buf, .count = BLOCK, .offset = w->offset,
  };

  w->ret = w->s->ops->submit (w->s, &io, 1);
  w->err = w->ret == -1 ? errno : 0;
  w->io_err = io.err;
  return NULL;
}

static void
writer_start (struct writer *w, struct rb_store *s, uint64_t offset,
              uint8_t fill)
{
  w->s = s;
  w->offset = offset;
  memset (w->buf, fill, BLOCK);
  g_assert_cmpint (pthread_create (&w->thread, NULL, writer_run, w), ==, 0);
}

static void
writer_join (struct writer *w, int err)
{
  g_assert_cmpint (pthread_join (w->thread, NULL), ==, 0);
  g_assert_cmpint (w->ret, ==, err ? -1 : 0);
  g_assert_cmpint (w->err, ==, err);
  g_assert_cmpint (w->io_err, ==, err);
}

/* Let the store's oldest request be at least ms old, counted from a
 * moment after it was issued: a wait for an age, not for an order.
 */
static void
age (uint64_t since_ns, uint64_t ms)
{
  while (rb_now_ns () - since_ns < ms * 1000000)
    g_usleep (1000);
}

/* The block at offset holds fill, in the image and read back. */
static void
assert_block (struct rb_store *s, uint64_t offset, uint8_t fill)
{
  uint8_t want[BLOCK], got[BLOCK];

  memset (want, fill, BLOCK);
  g_assert_cmpmem (fk.img + offset, BLOCK, want, BLOCK);
  g_assert_cmpint (rb_store_pread (s, got, BLOCK, offset), ==, 0);
  g_assert_cmpmem (got, BLOCK, want, BLOCK);
}

/* A store on a new image of objects of obj_size bytes. */
static struct rb_store *
open_store_obj (uint64_t obj_size)
{
  struct rb_store_params p = { .uri = "rbd:pool/image" };
  struct rb_store *s;

  fake_reset ();
  fk.obj_size = obj_size;
  s = rb_store_rbd_open (&p);
  if (s == NULL)
    g_error ("rb_store_rbd_open: %s", rb_get_error ());
  g_assert_cmpuint (s->size, ==, IMG_SIZE);
  return s;
}

static struct rb_store *
open_store (void)
{
  return open_store_obj (OBJ_SIZE);
}

#define X (0 * OBJ_SIZE)        /* issued before the refused one */
#define A (1 * OBJ_SIZE)        /* refused synchronously */
#define B (2 * OBJ_SIZE)        /* issued after it */
#define C (3 * OBJ_SIZE)        /* issued once all that is over */
#define AGE_MS 3

/* A refused while B, issued after it by another thread, is in flight;
 * with 'before', X too, issued before it (A in the middle of the list,
 * else A its head).
 */
static void
refused_amid_others (bool before)
{
  struct rb_store *s = open_store ();
  struct writer wx, wa, wb, wc;
  uint64_t t_x = 0, t_b, t_c;
  uint64_t requests = before ? 4 : 3;

  if (before)
    fake_rule (X, HOLD, 0, 0);
  fake_rule (A, REFUSE, B, -EIO);
  fake_rule (B, HOLD, 0, 0);
  fake_rule (C, HOLD, 0, 0);

  if (before) {
    writer_start (&wx, s, X, 0x11);
    fake_wait (X, true);
    t_x = rb_now_ns ();
  }
  writer_start (&wa, s, A, 0x22);
  fake_wait (A, false);         /* A is in flight, inside its call */
  writer_start (&wb, s, B, 0x33);
  fake_wait (B, true);          /* B is in flight after A; A refused */
  t_b = rb_now_ns ();
  writer_join (&wa, EIO);       /* A's caller is gone, its piece freed */

  g_assert_cmpuint (status_u64 (s, "store_inflight"), ==, before ? 2 : 1);
  g_assert_cmpuint (status_u64 (s, "store_failed_requests"), ==, 1);
  if (before) {
    age (t_x, AGE_MS);
    g_assert_cmpuint (status_u64 (s, "store_oldest_request_ms"), >=, AGE_MS);
    fake_complete (X);
    writer_join (&wx, 0);
    g_assert_cmpuint (status_u64 (s, "store_inflight"), ==, 1);
  }
  /* B is still in flight, and the oldest. */
  age (t_b, AGE_MS);
  g_assert_cmpuint (status_u64 (s, "store_oldest_request_ms"), >=, AGE_MS);

  fake_complete (B);
  writer_join (&wb, 0);
  g_assert_cmpuint (status_u64 (s, "store_inflight"), ==, 0);
  g_assert_cmpuint (status_u64 (s, "store_oldest_request_ms"), ==, 0);

  /* The list is whole again: a new request is listed, and its age
   * shows.
   */
  writer_start (&wc, s, C, 0x44);
  fake_wait (C, true);
  t_c = rb_now_ns ();
  age (t_c, AGE_MS);
  g_assert_cmpuint (status_u64 (s, "store_inflight"), ==, 1);
  g_assert_cmpuint (status_u64 (s, "store_oldest_request_ms"), >=, AGE_MS);
  fake_complete (C);
  writer_join (&wc, 0);
  g_assert_cmpuint (status_u64 (s, "store_inflight"), ==, 0);
  g_assert_cmpuint (status_u64 (s, "store_requests"), ==, requests);
  g_assert_cmpuint (status_u64 (s, "store_inflight_max"), ==,
                    before ? 3 : 2);

  /* Data: what completed is in the image, what was refused is not. */
  if (before)
    assert_block (s, X, 0x11);
  assert_block (s, A, 0);
  assert_block (s, B, 0x33);
  assert_block (s, C, 0x44);

  rb_store_close (s);
  g_assert_cmpint (fk.images_open, ==, 0);
}

static void
test_refused_head (void)
{
  refused_amid_others (false);
}

static void
test_refused_middle (void)
{
  refused_amid_others (true);
}

/* One write of 'len' bytes at 'off' on an image of obj_size objects:
 * it goes out in pieces of at most 'piece' bytes at multiples of it (so
 * never across an object), covering it exactly, in 'want' aio calls, and
 * the image holds it.  A piece of a whole 4 MiB object is slower to
 * write on an OSD than four of 1 MiB (bench/README.md, bench-rbd.sh).
 */
static void
cut_write (uint64_t obj_size, uint64_t off, uint64_t len, uint64_t piece,
           unsigned want)
{
  struct rb_store *s = open_store_obj (obj_size);
  g_autofree uint8_t *buf = g_malloc (len);
  uint64_t pos = off;
  unsigned i;

  for (i = 0; i < len; i++)
    buf[i] = (uint8_t) (i * 7 + 1);
  g_assert_cmpint (rb_store_pwrite (s, buf, len, off), ==, 0);
  g_assert_cmpuint (fk.ncalled, ==, want);
  for (i = 0; i < fk.ncalled; i++) {
    uint64_t o = fk.called[i], l = fk.called_len[i];

    g_assert_cmpuint (o, ==, pos);
    g_assert_cmpuint (l, >, 0);
    g_assert_cmpuint (l, <=, piece);
    g_assert_cmpuint (o / piece, ==, (o + l - 1) / piece);
    g_assert_cmpuint (o / obj_size, ==, (o + l - 1) / obj_size);
    pos += l;
  }
  g_assert_cmpuint (pos, ==, off + len);
  g_assert_cmpmem (fk.img + off, len, buf, len);
  g_assert_cmpuint (status_u64 (s, "store_requests"), ==, want);
  rb_store_close (s);
}

/* 6 MiB from 3.5 MiB on 4 MiB objects: 0.5 + 5 x 1 + 0.5 MiB. */
static void
test_pieces_1m (void)
{
  cut_write (OBJ_SIZE, 7 * MiB / 2, 6 * MiB, MiB, 7);
}

/* Objects smaller than 1 MiB: pieces of an object each. */
static void
test_pieces_small_objects (void)
{
  cut_write (MiB / 4, MiB / 8, MiB, MiB / 4, 5);
}

/* A read of 6 MiB from 3.5 MiB on 4 MiB objects goes out in whole
 * objects (0.5 + 4 + 1.5 MiB): reads gained nothing from smaller
 * pieces.
 */
static void
test_pieces_read (void)
{
  struct rb_store *s = open_store ();
  const uint64_t off = 7 * MiB / 2, len = 6 * MiB;
  const uint64_t want_off[] = { off, 4 * MiB, 8 * MiB };
  const uint64_t want_len[] = { MiB / 2, 4 * MiB, 3 * MiB / 2 };
  g_autofree uint8_t *buf = g_malloc (len);
  unsigned i;

  for (i = 0; i < IMG_SIZE; i++)
    fk.img[i] = (uint8_t) (i * 13 + 5);
  g_assert_cmpint (rb_store_pread (s, buf, len, off), ==, 0);
  g_assert_cmpmem (buf, len, fk.img + off, len);
  g_assert_cmpuint (fk.ncalled, ==, G_N_ELEMENTS (want_off));
  for (i = 0; i < fk.ncalled; i++) {
    g_assert_cmpuint (fk.called[i], ==, want_off[i]);
    g_assert_cmpuint (fk.called_len[i], ==, want_len[i]);
  }
  rb_store_close (s);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/store-rbd/refused-head", test_refused_head);
  g_test_add_func ("/store-rbd/refused-middle", test_refused_middle);
  g_test_add_func ("/store-rbd/pieces-1m", test_pieces_1m);
  g_test_add_func ("/store-rbd/pieces-small-objects",
                   test_pieces_small_objects);
  g_test_add_func ("/store-rbd/pieces-read", test_pieces_read);
  return g_test_run ();
}
