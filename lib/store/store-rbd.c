/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: a backing store that is a Ceph RBD image, through librbd.
 *
 * Names.  back=rbd:POOL/IMAGE, rbd:POOL/NAMESPACE/IMAGE, and
 * rbd:POOL/IMAGE@SNAP for a snapshot (read-only), as the rbd command
 * spells an image.  The cluster is reached as librados does for any
 * client: rbd-conf= (the ceph.conf, default: librados' own search,
 * $CEPH_CONF then /etc/ceph/ceph.conf ...), rbd-id= (the client name
 * without "client.", default admin), rbd-keyring= (default: the conf's
 * keyring).  Those are the rbd command's --conf, --id and --keyring,
 * and QEMU's conf=, id= and keyring= options of its rbd: driver.
 *
 * Requests.  A batch is cut into pieces, each handed to librbd's
 * asynchronous API (rbd_aio_read, rbd_aio_write, rbd_aio_write_zeroes)
 * with up to max_inflight of them in flight for the whole store;
 * librbd sends them to the OSDs in parallel.  Reads are cut at the
 * image's object boundaries (4 MiB by default), zeroes in pieces of up
 * to 64 MiB, and writes in pieces of at most PIECE_BYTES (1 MiB), at
 * its multiples, so never across an object (objects of less than that:
 * a piece each).  Why writes of 1 MiB rather than whole objects: an
 * OSD starts on a write once it has received all of it, so smaller
 * ones keep its disk and the link busy at once; a whole-image write
 * back to a single-OSD cluster ran at a median 1.44x in 1 MiB pieces of
 * what it did in 4 MiB ones (9 paired runs, 7 of them faster, on a
 * loaded machine; 2 MiB, 512 KiB, 256 KiB, and 16 or 64 in flight did
 * no better).  Reads showed no such gain, and keep whole objects.  The caller
 * sleeps until its batch's pieces have all completed (the completions
 * run on librbd's threads and only count down under the store lock).
 * A piece is on the store's in-flight list (inflight.h, for status)
 * from before its aio call until its completion ran, or until the call
 * refused it (returned < 0: no completion will run); other threads may
 * have listed pieces behind it by then, so it leaves from its place.
 * librbd's own write-back cache is turned off (rbd_cache=false):
 * ramback is the cache, and a write acknowledged by librbd without a
 * cache is on the OSDs' disks.  flush() is rbd_flush() all the same, so
 * the semantics are the ones of every store: a write counts only once
 * a later flush succeeded.
 *
 * Errors.  A failed request fails its batch with librbd's errno; the
 * core keeps the data dirty and retries with its back-off.  An OSD
 * that is down does not fail requests: librados waits for the cluster
 * to recover (its osd_op_timeout, 0 by default, would fail them), so
 * write back stalls with the data dirty and the age of the oldest
 * request in status; state "offline" once it is over
 * RB_INFLIGHT_STALL_MS (inflight.h).  A client that the cluster has
 * blocklisted (its lock was broken by another client) gets ESHUTDOWN
 * forever: the connection is dropped and made again on the next
 * request, at most once per back-off period, and taking the lock again
 * is what decides whether this ramback may go on writing.
 *
 * One writer per image.  A writable image is opened with RBD's
 * exclusive lock taken explicitly (rbd_lock_acquire): librbd then
 * refuses the lock to every other client instead of handing it over
 * on request, so a second ramback, a QEMU or an rbd map of the same
 * image cannot write it, and this open refuses an image whose lock
 * another live client holds, naming it.  The image needs the
 * exclusive-lock feature (the default for new images).  A holder that
 * died without releasing it (kill -9, a host crash) keeps it until the
 * OSDs notice its watch is gone (osd_client_watch_timeout, 30 s by
 * default); librbd waits for that inside rbd_lock_acquire, then breaks
 * the lock, blocklisting the dead client so that nothing it had in
 * flight can land later.  A live holder refuses at once.
 *
 * fork.  nbdkit opens the store before it forks into the background,
 * and librados' threads do not survive a fork.  So the connection is
 * per process: a call from a process other than the one that connected
 * connects again (the parent's handles are left alone: their threads
 * are gone), and takes the lock over from the parent by breaking it if
 * the parent's client still holds it (the parent exits; breaking
 * blocklists its client, so nothing of it can write any more).
 *
 * Locking: st->lock protects everything in struct rbd_store after it;
 * no librbd call is made while it is held (their completions take it).
 * Connecting is done by one thread at a time (st->connecting), outside
 * the lock; the others wait on st->cond.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rados/librados.h>
#include <rbd/librbd.h>

#include "ramback.h"
#include "store.h"
#include "error.h"
#include "env.h"
#include "cleanup.h"
#include "json.h"
#include "backoff.h"
#include "inflight.h"

#define DEFAULT_INFLIGHT 32         /* pieces in flight, whole store */
#define MAX_INFLIGHT 1024
#define MAX_ZERO_REQUEST (64 * 1024 * 1024)
#define PIECE_BYTES (1024 * 1024)   /* a read or write request, at most */
#define MOUNT_TIMEOUT "15"          /* seconds to reach the monitors */

struct rbd_store;

struct piece {
  struct rbd_store *st;
  struct rb_io *io;
  size_t *pending;            /* the batch's count (store lock) */
  int *err;                   /* the batch's first error (store lock) */
  int ret;                    /* this piece's result, 0 or -errno */
  uint64_t count, offset;
  struct rb_inflight_req req; /* on st->inflight (store lock) */
};

struct rbd_store {
  struct rb_store s;
  char *spec;                 /* as given: rbd:POOL/IMAGE */
  char *pool, *nspace, *image, *snap;
  char *conf, *id, *keyring;
  uint64_t object_size;
  unsigned max_inflight;

  rb_mutex lock;              /* protects everything below */
  rb_cond cond;               /* a piece completed; connecting ended */
  /* The connection of process 'pid' (0: none). */
  pid_t pid;
  rados_t cluster;
  rados_ioctx_t ioctx;
  rbd_image_t img;
  uint64_t instance;          /* our client id: client.<instance> */
  bool locked;                /* we hold the exclusive lock */
  char owner[128];            /* as that lock's owner, librbd's name */
  bool broken;                /* blocklisted: connect again */
  bool connecting;
  uint64_t next_attempt_ns;   /* a failed connect: not before then */
  uint64_t backoff_ns;
  char last_error[600];
  /* In flight and counters (status). */
  struct rb_inflight_list inflight;
  struct rb_inflight_counts counts;
  uint64_t connects;
};

static const struct rb_store_ops rbd_ops;

/* Split rbd:POOL[/NAMESPACE]/IMAGE[@SNAP] into its parts. */
static int
parse_spec (struct rbd_store *st, const char *spec)
{
  const char *p = spec + 4;
  char *at, *slash1, *slash2, *buf;

  if (strchr (p, ':'))
    goto bad_colon;
  buf = strdup (p);
  if (buf == NULL) {
    rb_set_error (errno, "rbd: strdup");
    return -1;
  }
  at = strchr (buf, '@');
  if (at) {
    *at++ = '\0';
    st->snap = strdup (at);
  }
  slash1 = strchr (buf, '/');
  if (slash1 == NULL || slash1 == buf || (at && *at == '\0'))
    goto bad;
  *slash1++ = '\0';
  slash2 = strchr (slash1, '/');
  if (slash2) {
    *slash2++ = '\0';
    if (*slash1 == '\0' || strchr (slash2, '/'))
      goto bad;
    st->nspace = strdup (slash1);
    st->image = strdup (slash2);
  }
  else
    st->image = strdup (slash1);
  st->pool = strdup (buf);
  free (buf);
  if (st->pool == NULL || st->image == NULL || (at && st->snap == NULL) ||
      (slash2 && st->nspace == NULL)) {
    rb_set_error (ENOMEM, "rbd: strdup");
    return -1;
  }
  if (*st->image == '\0') {
    rb_set_error (EINVAL, "%s: no image name: expected rbd:POOL/IMAGE", spec);
    return -1;
  }
  return 0;

 bad:
  free (buf);
  rb_set_error (EINVAL, "%s: expected rbd:POOL/IMAGE, rbd:POOL/NAMESPACE/"
                "IMAGE or rbd:POOL/IMAGE@SNAPSHOT", spec);
  return -1;
 bad_colon:
  rb_set_error (EINVAL, "%s: options after ':' are QEMU's syntax; ramback "
                "takes them as parameters of their own: rbd-conf=FILE, "
                "rbd-id=NAME, rbd-keyring=FILE", spec);
  return -1;
}

/* Everything that holds the image, for a refusal: the lock's owners
 * (client.N) with their addresses.
 */
static void
describe_holders (rbd_image_t img, char *buf, size_t len)
{
  char tag[256], clients[1024], cookies[1024], addrs[1024];
  size_t tag_len = sizeof tag, clients_len = sizeof clients;
  size_t cookies_len = sizeof cookies, addrs_len = sizeof addrs;
  int exclusive;
  ssize_t n;

  snprintf (buf, len, "another client");
  n = rbd_list_lockers (img, &exclusive, tag, &tag_len, clients,
                        &clients_len, cookies, &cookies_len, addrs,
                        &addrs_len);
  if (n > 0) {
    /* Each list is NUL-separated; the first locker says enough. */
    snprintf (buf, len, "%.100s at %.100s%s", clients, addrs,
              n > 1 ? " and others" : "");
    return;
  }
  {
    char *owners[4];
    size_t max = 4;

    if (rbd_lock_get_owners (img, NULL, owners, &max) == 0 && max > 0) {
      snprintf (buf, len, "%s", owners[0]);
      rbd_lock_get_owners_cleanup (owners, max);
    }
  }
}

/* The lock's owner as librbd names it (the client's address), or "". */
static void
lock_owner (rbd_image_t img, char *buf, size_t len)
{
  char *owners[4];
  size_t max = 4;
  rbd_lock_mode_t mode;

  buf[0] = '\0';
  if (rbd_lock_get_owners (img, &mode, owners, &max) == 0) {
    if (max > 0)
      snprintf (buf, len, "%s", owners[0]);
    rbd_lock_get_owners_cleanup (owners, max);
  }
}

/* Take the exclusive lock, into owner (our own name as its owner).
 * parent: the owner name of the process we were forked from, whose
 * lock we take over (breaking it blocklists that client, which is
 * what we want: it is gone or about to exit).  A live holder refuses
 * at once (EROFS); a holder that died is waited for inside librbd
 * until its watch expires, and then broken.
 */
static int
take_lock (struct rbd_store *st, rbd_image_t img, const char *parent,
           char *owner, size_t ownerlen, char *why, size_t whylen)
{
  char holder[256];
  int r;

  if (parent[0]) {
    lock_owner (img, holder, sizeof holder);
    if (strcmp (holder, parent) == 0) {
      r = rbd_lock_break (img, RBD_LOCK_MODE_EXCLUSIVE, parent);
      if (r < 0 && r != -ENOENT)
        rb_log ("%s: breaking the lock of our parent process (%s): %s",
                st->spec, parent, strerror (-r));
    }
  }
  r = rbd_lock_acquire (img, RBD_LOCK_MODE_EXCLUSIVE);
  if (r == 0) {
    lock_owner (img, owner, ownerlen);
    return 0;
  }
  if (r == -EOPNOTSUPP || r == -EINVAL) {
    snprintf (why, whylen, "the image has no exclusive-lock feature, so "
              "a single writer cannot be ensured: enable it with "
              "'rbd feature enable %s/%s exclusive-lock'", st->pool,
              st->image);
    return r;
  }
  describe_holders (img, holder, sizeof holder);
  if (r == -EROFS) {            /* the holder said no */
    snprintf (why, whylen, "the image is in use: its exclusive lock is "
              "held by %s (another ramback, a QEMU or an rbd map writing "
              "it; stop that one first)", holder);
    return -EBUSY;
  }
  snprintf (why, whylen, "taking the image's exclusive lock (held by %s): "
            "%s", holder, strerror (-r));
  return r;
}

/* Connect, open the image and (writable) take its lock.  Fills the
 * handles in *out; on failure returns -errno with why filled in and
 * everything made undone.
 */
struct conn_handles {
  rados_t cluster;
  rados_ioctx_t ioctx;
  rbd_image_t img;
  uint64_t instance;
  bool locked;
  char owner[128];            /* our name as the lock's owner */
};

static int
do_connect (struct rbd_store *st, const char *parent, struct conn_handles *h,
            char *why, size_t whylen)
{
  int r;

  memset (h, 0, sizeof *h);
  r = rados_create (&h->cluster, st->id);
  if (r < 0) {
    snprintf (why, whylen, "rados_create: %s", strerror (-r));
    return r;
  }
  r = rados_conf_read_file (h->cluster, st->conf);
  if (r < 0) {
    snprintf (why, whylen, "reading %s: %s",
              st->conf ? st->conf : "the Ceph configuration (set rbd-conf=)",
              strerror (-r));
    goto fail;
  }
  rados_conf_parse_env (h->cluster, NULL);
  if (st->keyring && (r = rados_conf_set (h->cluster, "keyring",
                                          st->keyring)) < 0) {
    snprintf (why, whylen, "keyring %s: %s", st->keyring, strerror (-r));
    goto fail;
  }
  /* ramback is the cache; a monitor that does not answer is an error
   * after a while rather than a hang of the start.
   */
  rados_conf_set (h->cluster, "rbd_cache", "false");
  rados_conf_set (h->cluster, "client_mount_timeout", MOUNT_TIMEOUT);
  r = rados_connect (h->cluster);
  if (r < 0) {
    snprintf (why, whylen, "connecting to the cluster (%s): %s",
              st->conf ? st->conf : "default configuration", strerror (-r));
    goto fail;
  }
  h->instance = rados_get_instance_id (h->cluster);
  r = rados_ioctx_create (h->cluster, st->pool, &h->ioctx);
  if (r < 0) {
    snprintf (why, whylen, "pool %s: %s", st->pool, strerror (-r));
    goto fail;
  }
  if (st->nspace)
    rados_ioctx_set_namespace (h->ioctx, st->nspace);
  if (st->s.read_only)
    r = rbd_open_read_only (h->ioctx, st->image, &h->img, st->snap);
  else
    r = rbd_open (h->ioctx, st->image, &h->img, NULL);
  if (r < 0) {
    snprintf (why, whylen, "opening image %s%s%s: %s", st->image,
              st->snap ? "@" : "", st->snap ? st->snap : "", strerror (-r));
    h->img = NULL;
    goto fail;
  }
  if (!st->s.read_only) {
    r = take_lock (st, h->img, parent, h->owner, sizeof h->owner,
                   why, whylen);
    if (r < 0)
      goto fail;
    h->locked = true;
  }
  return 0;

 fail:
  if (h->img)
    rbd_close (h->img);
  if (h->ioctx)
    rados_ioctx_destroy (h->ioctx);
  rados_shutdown (h->cluster);
  memset (h, 0, sizeof *h);
  return r;
}

/* Close the handles of this process's connection (no request in
 * flight).  Not for a parent's handles after fork: their threads are
 * gone and closing them would wait for them forever.
 */
static void
close_handles (rados_t cluster, rados_ioctx_t ioctx, rbd_image_t img)
{
  if (img)
    rbd_close (img);            /* releases the exclusive lock */
  if (ioctx)
    rados_ioctx_destroy (ioctx);
  if (cluster)
    rados_shutdown (cluster);
}

/* The image of this process, connected if need be.  Returns it, or
 * NULL with the error recorded.
 */
static rbd_image_t
get_image (struct rbd_store *st)
{
  pid_t pid = getpid ();
  struct conn_handles h, old;
  char parent[128] = "";
  char why[512];
  int r;

  memset (&old, 0, sizeof old);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);

    for (;;) {
      if (st->pid == pid && st->img && !st->broken)
        return st->img;
      if (!st->connecting)
        break;
      rb_cond_wait (&st->cond, &st->lock);
    }
    if (st->next_attempt_ns && rb_now_ns () < st->next_attempt_ns) {
      rb_set_error (EIO, "%s: not connected: %s (next attempt in "
                    "%" PRIu64 " ms)", st->spec, st->last_error,
                    (st->next_attempt_ns - rb_now_ns ()) / 1000000);
      return NULL;
    }
    if (st->pid == pid) {
      /* Broken: wait for what is in flight, then close. */
      while (st->inflight.n)
        rb_cond_wait (&st->cond, &st->lock);
      old.cluster = st->cluster;
      old.ioctx = st->ioctx;
      old.img = st->img;
    }
    else if (st->pid && st->locked)
      snprintf (parent, sizeof parent, "%s", st->owner);
    st->cluster = NULL;
    st->ioctx = NULL;
    st->img = NULL;
    st->locked = false;
    st->pid = 0;
    st->connecting = true;
  }

  close_handles (old.cluster, old.ioctx, old.img);
  r = do_connect (st, parent, &h, why, sizeof why);

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
  st->connecting = false;
  rb_cond_broadcast (&st->cond);
  if (r < 0) {
    snprintf (st->last_error, sizeof st->last_error, "%s", why);
    st->next_attempt_ns = rb_now_ns () + st->backoff_ns;
    st->backoff_ns = rbi_backoff_next_ns (st->backoff_ns);
    rb_atomic_store (&st->s.state, RB_STORE_OFFLINE);
    rb_set_error (-r, "%s: %s", st->spec, why);
    return NULL;
  }
  st->cluster = h.cluster;
  st->ioctx = h.ioctx;
  st->img = h.img;
  st->instance = h.instance;
  st->locked = h.locked;
  memcpy (st->owner, h.owner, sizeof st->owner);
  st->broken = false;
  st->pid = pid;
  st->connects++;
  st->next_attempt_ns = 0;
  st->backoff_ns = BACKOFF_MIN_NS;
  return st->img;
}

/* librbd's completion, on one of its threads. */
static void
piece_done (rbd_completion_t c, void *arg)
{
  struct piece *p = arg;
  struct rbd_store *st = p->st;
  ssize_t r = rbd_aio_get_return_value (c);

  rbd_aio_release (c);
  if (r >= 0 && p->io->op == RB_IO_READ && (uint64_t) r != p->count)
    r = -EIO;                   /* a short read: never within the image */
  p->ret = r < 0 ? (int) r : 0;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
  rb_inflight_end (&st->inflight, &st->counts, &p->req, p->ret < 0);
  if (p->ret < 0) {
    if (p->ret == -ESHUTDOWN)   /* blocklisted: connect again */
      st->broken = true;
    if (p->io->err == 0)
      p->io->err = -p->ret;
    if (*p->err == 0)
      *p->err = -p->ret;
  }
  (*p->pending)--;
  rb_cond_broadcast (&st->cond);
}

static const char *
op_name (enum rb_io_op op)
{
  return op == RB_IO_READ ? "read" : op == RB_IO_WRITE ? "write" : "zero";
}

static int
rbd_store_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct rbd_store *st = s->handle;
  CLEANUP_FREE struct piece *pieces = NULL;
  struct rb_store_cut cut = {
    .rw_step = RB_MIN (st->object_size, (uint64_t) PIECE_BYTES),
    .read_step = st->object_size,
    .zero_step = RB_MAX (st->object_size, (uint64_t) MAX_ZERO_REQUEST),
    .aligned = true,
  };
  rbd_image_t img;
  ssize_t npieces;
  size_t k = 0, pending = 0, i;
  int err = 0;
  struct rb_io *failed = NULL;

  pieces = rb_store_cut_plan (&cut, s, ios, n, sizeof *pieces, &npieces,
                              NULL, "rbd", st->spec);
  if (pieces == NULL)
    return npieces;
  img = get_image (st);
  if (img == NULL) {
    for (i = 0; i < n; i++)
      if (ios[i].count)
        ios[i].err = EIO;
    rb_set_errno (EIO);
    return -1;
  }

  while (rb_store_cut_next (&cut, ios, n)) {
    struct piece *p = &pieces[k++];
    rbd_completion_t c;
    int r;

    p->st = st;
    p->io = cut.io;
    p->count = cut.count;
    p->offset = cut.offset;
    p->pending = &pending;
    p->err = &err;
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
      while (st->inflight.n >= st->max_inflight)
        rb_cond_wait (&st->cond, &st->lock);
      rb_inflight_issue (&st->inflight, &st->counts, &p->req, rb_now_ns ());
      pending++;
    }
    r = rbd_aio_create_completion (p, piece_done, &c);
    if (r == 0) {
      switch (cut.io->op) {
      case RB_IO_READ:
        r = rbd_aio_read (img, cut.offset, cut.count, cut.buf, c);
        break;
      case RB_IO_WRITE:
        r = rbd_aio_write (img, cut.offset, cut.count, cut.buf, c);
        break;
      case RB_IO_ZERO:
        r = rbd_aio_write_zeroes (img, cut.offset, cut.count, c, 0, 0);
        break;
      }
      if (r < 0)
        rbd_aio_release (c);
    }
    if (r < 0) {
      /* Never issued: its completion will not run.  Other threads may
       * have issued requests behind it meanwhile.
       */
      p->ret = r;
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
      rb_inflight_end (&st->inflight, &st->counts, &p->req, true);
      if (p->io->err == 0)
        p->io->err = -r;
      if (err == 0)
        err = -r;
      pending--;
      rb_cond_broadcast (&st->cond);
    }
  }

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    while (pending)
      rb_cond_wait (&st->cond, &st->lock);
  }
  if (err == 0) {
    rb_atomic_store (&s->state, RB_STORE_OK);
    return 0;
  }
  for (i = 0; i < n && failed == NULL; i++)
    if (ios[i].err)
      failed = &ios[i];
  rb_atomic_store (&s->state, RB_STORE_FAILING);
  rb_set_error (err, "%s: %s of %" PRIu64 " bytes at offset %" PRIu64,
                st->spec, op_name (failed->op), failed->count,
                failed->offset);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    snprintf (st->last_error, sizeof st->last_error, "%s", rb_get_error ());
  }
  rb_set_errno (err);
  return -1;
}

static int
rbd_store_flush (struct rb_store *s)
{
  struct rbd_store *st = s->handle;
  rbd_image_t img;
  int r;

  if (s->read_only)
    return 0;
  img = get_image (st);
  if (img == NULL)
    return -1;
  r = rbd_flush (img);
  if (r < 0) {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    st->counts.failed++;
    if (r == -ESHUTDOWN)
      st->broken = true;
    rb_atomic_store (&s->state, RB_STORE_FAILING);
    rb_set_error (-r, "%s: flush", st->spec);
    snprintf (st->last_error, sizeof st->last_error, "%s", rb_get_error ());
    return -1;
  }
  return 0;
}

/* The first allocated extent from offset, from the image's diff
 * against nothing (whole objects: with fast-diff the object map answers
 * at once).
 */
struct next_data_ctx {
  uint64_t data, hole;
  bool found;
};

static int
diff_cb (uint64_t off, size_t len, int exists, void *arg)
{
  struct next_data_ctx *c = arg;

  if (!exists)
    return c->found ? -ECANCELED : 0;
  if (!c->found) {
    c->found = true;
    c->data = off;
    c->hole = off + len;
    return 0;
  }
  if (off != c->hole)
    return -ECANCELED;
  c->hole = off + len;
  return 0;
}

static int
rbd_store_next_data (struct rb_store *s, uint64_t offset,
                     uint64_t *data, uint64_t *hole)
{
  struct rbd_store *st = s->handle;
  struct next_data_ctx c = { .found = false };
  rbd_image_t img;
  int r;

  if (offset >= s->size) {
    *data = *hole = s->size;
    return 0;
  }
  img = get_image (st);
  if (img == NULL)
    return -1;
  r = rbd_diff_iterate2 (img, NULL, offset, s->size - offset, 1, 1,
                         diff_cb, &c);
  if (r < 0 && r != -ECANCELED) {
    /* No object map, or whatever else: everything is data. */
    *data = offset;
    *hole = s->size;
    return 0;
  }
  if (!c.found) {
    *data = *hole = s->size;
    return 0;
  }
  *data = RB_MAX (c.data, offset);
  *hole = RB_MIN (c.hole, s->size);
  return 0;
}

static void
rbd_store_status (struct rb_store *s, struct rb_status_out *o)
{
  struct rbd_store *st = s->handle;
  uint64_t oldest_ms, connects, instance;
  struct rb_inflight_counts counts;
  bool locked, connected;
  char last_error[600];

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&st->lock);
    oldest_ms = rb_inflight_oldest_ms (&st->inflight, rb_now_ns ());
    counts = st->counts;
    connects = st->connects;
    instance = st->instance;
    locked = st->locked && st->pid == getpid ();
    connected = st->img && st->pid == getpid () && !st->broken;
    snprintf (last_error, sizeof last_error, "%s", st->last_error);
    /* Requests that wait on an OSD that is down fail nothing: say so. */
    if (oldest_ms >= RB_INFLIGHT_STALL_MS)
      rb_atomic_store (&s->state, RB_STORE_OFFLINE);
  }

  rb_status_str (o, "store_uri", st->spec);
  rb_status_str (o, "store_rbd_conf", st->conf ? st->conf : "");
  rb_status_u64 (o, "store_rbd_client", instance);
  rb_status_bool (o, "store_rbd_connected", connected);
  rb_status_str (o, "store_rbd_lock", s->read_only ? "read-only"
                 : locked ? "exclusive" : "none");
  rb_status_u64 (o, "store_rbd_object_size", st->object_size);
  rb_status_u64 (o, "store_connects", connects);
  rb_status_str (o, "store_last_error", last_error);
  rb_inflight_status (o, &counts, st->max_inflight, oldest_ms);
}

static void
rbd_store_close (struct rb_store *s)
{
  struct rbd_store *st;

  if (s == NULL)
    return;
  st = s->handle;
  if (st->pid == getpid ())
    close_handles (st->cluster, st->ioctx, st->img);
  rb_mutex_destroy (&st->lock);
  rb_cond_destroy (&st->cond);
  free (st->spec);
  free (st->pool);
  free (st->nspace);
  free (st->image);
  free (st->snap);
  free (st->conf);
  free (st->id);
  free (st->keyring);
  free (st);
}

static char *
dup_or_null (const char *str, bool *failed)
{
  char *r;

  if (str == NULL)
    return NULL;
  r = strdup (str);
  if (r == NULL)
    *failed = true;
  return r;
}

struct rb_store *
rb_store_rbd_open (const struct rb_store_params *params)
{
  struct rbd_store *st;
  rbd_image_info_t info;
  bool failed = false;
  rbd_image_t img;
  uint64_t features = 0;
  int r;

  if (params->max_inflight < 0 || params->max_inflight > MAX_INFLIGHT) {
    rb_set_error (EINVAL, "rbd: inflight=%d must be 1..%d",
                  params->max_inflight, MAX_INFLIGHT);
    return NULL;
  }
  st = calloc (1, sizeof *st);
  if (st == NULL) {
    rb_set_error (errno, "rbd: calloc");
    return NULL;
  }
  rb_mutex_init (&st->lock);
  rb_cond_init (&st->cond);
  st->s.ops = &rbd_ops;
  st->s.handle = st;
  st->s.read_only = params->read_only;
  st->s.can_zero = true;
  st->s.connections = 1;
  st->backoff_ns = BACKOFF_MIN_NS;
  st->max_inflight = params->max_inflight > 0
    ? params->max_inflight : DEFAULT_INFLIGHT;
  st->spec = dup_or_null (params->uri, &failed);
  st->conf = dup_or_null (params->rbd_conf, &failed);
  st->id = dup_or_null (params->rbd_id, &failed);
  st->keyring = dup_or_null (params->rbd_keyring, &failed);
  if (failed) {
    rb_set_error (ENOMEM, "rbd: strdup");
    goto fail;
  }
  if (parse_spec (st, params->uri) == -1)
    goto fail;
  if (st->snap)
    st->s.read_only = true;     /* a snapshot cannot be written */

  img = get_image (st);
  if (img == NULL)
    goto fail;
  r = rbd_stat (img, &info, sizeof info);
  if (r < 0) {
    rb_set_error (-r, "%s: stat", st->spec);
    goto fail;
  }
  if (info.size == 0) {
    rb_set_error (EINVAL, "%s: the image is empty (size 0): resize "
                  "it with 'rbd resize'", st->spec);
    goto fail;
  }
  rbd_get_features (img, &features);
  st->s.size = info.size;
  st->object_size = info.obj_size ? info.obj_size : 4 * 1024 * 1024;
  rb_log ("%s: size %" PRIu64 ", objects of %" PRIu64 " bytes, "
          "client.%" PRIu64 "%s, inflight %u%s", st->spec, st->s.size,
          st->object_size, st->instance,
          st->s.read_only ? ", read-only" : ", exclusive lock held",
          st->max_inflight,
          (features & RBD_FEATURE_FAST_DIFF) ? ", fast-diff" : "");
  return &st->s;

 fail:
  {
    int err = errno;

    rbd_store_close (&st->s);
    errno = err;
  }
  return NULL;
}

static const struct rb_store_ops rbd_ops = {
  .name = "rbd",
  .submit = rbd_store_submit,
  .flush = rbd_store_flush,
  .next_data = rbd_store_next_data,
  .status = rbd_store_status,
  .close = rbd_store_close,
};
