/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: a backing store that is a local file or block device.
 *
 * Requests run synchronously on the calling thread; the core keeps large
 * sequential requests in a batch, which is what a disk wants.  pread and
 * pwrite are safe from many threads on one fd.
 *
 * One writer per store: a regular file is locked (exclusive.h) and a
 * block device opened with O_EXCL for as long as it is open, so a second
 * ramback, or a program that locks or mounts it, cannot write to it
 * behind our back; the refusal names who holds it.
 *
 * Direct I/O.  Write back copies from the RAM image, which is page
 * aligned, so it can go to the disk with O_DIRECT: no second copy of
 * the data in the page cache, and none of the buffered write path's
 * CPU (which, on a machine with few cores, is taken from the clients).
 * A second descriptor on the same open file (reopened through
 * /proc/self/fd, so it is the same inode) carries O_DIRECT; the first
 * stays buffered for what cannot be aligned.  direct-io=auto uses it
 * only where the kernel reports the file system's direct I/O alignment
 * (statx STATX_DIOALIGN; BLKSSZGET for a block device) and not on
 * btrfs (data checksums of a buffer that changes while it is written
 * read back as errors on older kernels); tmpfs, NFS, FUSE and the like
 * stay buffered.  The alignment used is at least the page size, so a
 * direct request covers whole pages that no other request in flight
 * touches (the core never runs overlapping requests at once, but for
 * a populate read whose data it drops, store.h), and a
 * buffered head or tail of one request never shares a page with
 * another's direct part: direct and buffered I/O of the same page never
 * race.  A request whose buffer and offset are not equally aligned
 * goes buffered (the journal's records; every buffer of a data request
 * lies in the RAM image at the request's own offset, writethrough's
 * too, or in populate's bounce buffer aligned alike); an aligned one goes direct for its aligned middle and
 * buffered for its head and tail.  If the file system refuses a direct request (EINVAL), the
 * request is redone buffered and direct I/O is off from then on.
 * Small writes (under DIRECT_MIN_WRITE: the sector-sized write back of
 * scattered small writes) go through the page cache all the same: a
 * direct write waits for the disk one request at a time, where the
 * page cache takes them at memory speed and the sync's write out
 * sends them to the disk together (measured in bench/README.md).
 * fdatasync is unchanged: O_DIRECT moves the data past the page cache,
 * not past the disk's cache nor the file system's metadata, so every
 * sync still ends in fdatasync.
 *
 * Why one file of over 600 lines: half of it is the open (exclusive
 * claim, size, O_DIRECT probe with its fallback), which belongs to the
 * store it opens; the I/O loops are the other half.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#ifdef HAVE_LINUX_FS_H
#include <linux/fs.h>
#endif

#include "cleanup.h"
#include "env.h"
#include "error.h"
#include "exclusive.h"
#include "json.h"
#include "store.h"

/* Writes smaller than this go through the page cache (above). */
#define DIRECT_MIN_WRITE (64 * 1024)

#ifndef BTRFS_SUPER_MAGIC
#define BTRFS_SUPER_MAGIC 0x9123683E
#endif

struct file_store {
  int fd;
  int dfd;                /* the same file with O_DIRECT, -1: none */
  uint64_t dalign;        /* dfd's alignment (a power of two >= page) */
  bool direct;            /* [atomic] use dfd; cleared if refused */
  char *path;
  char *label;            /* how messages name it: "back=PATH" */
  bool is_block;
  /* What open did to the file system, for rb_store_undo_create: */
  bool created;           /* made the file (O_CREAT) */
  bool grown;             /* grew an empty file to size= */
  uint64_t dev, ino;
  bool can_punch;         /* cleared once punching fails */
  bool can_zero_range;
};

/* One pread (RB_IO_READ) or pwrite of fd, again if interrupted. */
static ssize_t
rw_once (int fd, enum rb_io_op op, uint8_t *p, uint64_t count,
         uint64_t offset)
{
  ssize_t r;

  do {
    if (op == RB_IO_READ)
      r = pread (fd, p, count, offset);
    else
      r = pwrite (fd, p, count, offset);
  } while (r == -1 && errno == EINTR);
  return r;
}

/* Through the page cache.  Returns 0 or -1 with the error set. */
static int
rw_buffered (struct file_store *f, enum rb_io_op op, uint8_t *p,
             uint64_t count, uint64_t offset)
{
  uint64_t done = 0;

  while (done < count) {
    ssize_t r = rw_once (f->fd, op, p + done, count - done, offset + done);

    if (r == -1) {
      rb_set_error (errno, "%s: %s %" PRIu64 " bytes at %" PRIu64, f->path,
                    op == RB_IO_READ ? "pread" : "pwrite",
                    count - done, offset + done);
      return -1;
    }
    if (r == 0) {
      if (op == RB_IO_READ) {   /* past EOF reads as zeroes */
        memset (p + done, 0, count - done);
        return 0;
      }
      rb_set_error (ENOSPC, "%s: pwrite wrote nothing at %" PRIu64,
                    f->path, offset + done);
      return -1;
    }
    done += r;
  }
  return 0;
}

/* With O_DIRECT; p, count and offset are multiples of dalign.  Returns
 * the bytes done (less than count if the rest must go buffered: a
 * short transfer, end of file, or direct I/O refused), or -1 with the
 * error set.
 */
static int64_t
rw_direct (struct file_store *f, enum rb_io_op op, uint8_t *p,
           uint64_t count, uint64_t offset)
{
  uint64_t done = 0;

  while (done < count) {
    ssize_t r = rw_once (f->dfd, op, p + done, count - done, offset + done);

    if (r == -1) {
      if (errno == EINVAL) {
        /* The file system takes O_DIRECT at open but not this I/O. */
        if (rb_atomic_xchg_relaxed (&f->direct, false))
          rb_log ("%s: direct I/O refused (%m): using the page cache",
                  f->path);
        return done;
      }
      rb_set_error (errno, "%s: %s %" PRIu64 " bytes at %" PRIu64
                    " (O_DIRECT)", f->path,
                    op == RB_IO_READ ? "pread" : "pwrite",
                    count - done, offset + done);
      return -1;
    }
    done += r;
    if (r == 0 || (r & (f->dalign - 1)))
      break;
  }
  return done;
}

static int
rw_all (struct file_store *f, struct rb_io *io)
{
  uint8_t *p = io->buf;
  uint64_t a = f->dalign, head, mid, done = 0;

  /* Direct for the aligned middle, if buffer and offset align alike,
   * and for writes only if large (see the top of the file).
   */
  if (rb_atomic_load_relaxed (&f->direct) &&
      (io->op != RB_IO_WRITE || io->count >= DIRECT_MIN_WRITE) &&
      ((uintptr_t) p & (a - 1)) == (io->offset & (a - 1))) {
    head = (a - (io->offset & (a - 1))) & (a - 1);
    mid = head < io->count ? (io->count - head) & ~(a - 1) : 0;
    if (mid > 0) {
      int64_t r;

      if (head > 0 && rw_buffered (f, io->op, p, head, io->offset) == -1)
        return -1;
      r = rw_direct (f, io->op, p + head, mid, io->offset + head);
      if (r == -1)
        return -1;
      done = head + r;
    }
  }
  if (done == io->count)
    return 0;
  return rw_buffered (f, io->op, p + done, io->count - done,
                      io->offset + done);
}

static int
write_zeroes (struct file_store *f, uint64_t count, uint64_t offset)
{
  static const uint8_t zeroes[65536];

  while (count > 0) {
    struct rb_io w = { .op = RB_IO_WRITE, .buf = (void *) zeroes,
                       .count = count < sizeof zeroes ? count : sizeof zeroes,
                       .offset = offset };
    if (rw_all (f, &w) == -1)
      return -1;
    count -= w.count;
    offset += w.count;
  }
  return 0;
}

/* Cheapest way to make a range read as zeroes: punch a hole in a file
 * (the image stays sparse), BLKZEROOUT on a block device, else write.
 */
static int
zero_range (struct file_store *f, uint64_t count, uint64_t offset)
{
  if (f->is_block) {
#ifdef BLKZEROOUT
    uint64_t range[2] = { offset, count };
    if (ioctl (f->fd, BLKZEROOUT, range) == 0)
      return 0;
    rb_log ("%s: BLKZEROOUT: %m (falling back to writing zeroes)", f->path);
#endif
    return write_zeroes (f, count, offset);
  }
  if (rb_atomic_load_relaxed (&f->can_punch)) {
    if (fallocate (f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                   offset, count) == 0)
      return 0;
    if (errno != EOPNOTSUPP && errno != ENOSYS) {
      rb_set_error (errno, "%s: fallocate punch hole %" PRIu64 " at %" PRIu64,
                    f->path, count, offset);
      return -1;
    }
    rb_log ("%s: cannot punch holes: %m (writing zeroes instead)", f->path);
    rb_atomic_store_relaxed (&f->can_punch, false);
  }
  return write_zeroes (f, count, offset);
}

static int
file_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct file_store *f = s->handle;
  int first_err = 0;
  size_t i;

  for (i = 0; i < n; i++) {
    int r = ios[i].op == RB_IO_ZERO
      ? zero_range (f, ios[i].count, ios[i].offset)
      : rw_all (f, &ios[i]);
    ios[i].err = r == -1 ? errno : 0;
    if (r == -1 && first_err == 0)
      first_err = errno;
  }
  rb_atomic_store (&s->state, first_err ? RB_STORE_FAILING : RB_STORE_OK);
  if (first_err) {
    errno = first_err;
    return -1;
  }
  return 0;
}

static int
file_flush (struct rb_store *s)
{
  struct file_store *f = s->handle;

  if (fdatasync (f->fd) == -1) {
    rb_set_error (errno, "%s: fdatasync", f->path);
    rb_atomic_store (&s->state, RB_STORE_FAILING);
    return -1;
  }
  return 0;
}

static int
file_next_data (struct rb_store *s, uint64_t offset, uint64_t *data,
                uint64_t *hole)
{
  struct file_store *f = s->handle;
  off_t d, h;

  if (f->is_block) {
    *data = offset;
    *hole = s->size;
    return 0;
  }
  d = lseek (f->fd, offset, SEEK_DATA);
  if (d == -1) {
    if (errno == ENXIO) {         /* only a hole remains */
      *data = *hole = s->size;
      return 0;
    }
    if (errno == EINVAL || errno == EOPNOTSUPP) {  /* no SEEK_DATA here */
      *data = offset;
      *hole = s->size;
      return 0;
    }
    rb_set_error (errno, "%s: lseek SEEK_DATA", f->path);
    return -1;
  }
  h = lseek (f->fd, d, SEEK_HOLE);
  if (h == -1) {
    rb_set_error (errno, "%s: lseek SEEK_HOLE", f->path);
    return -1;
  }
  *data = d < (off_t) s->size ? (uint64_t) d : s->size;
  *hole = h < (off_t) s->size ? (uint64_t) h : s->size;
  return 0;
}

static void
file_status (struct rb_store *s, struct rb_status_out *o)
{
  struct file_store *f = s->handle;

  rb_status_str (o, "store_path", f->path);
  rb_status_bool (o, "store_direct_io", rb_atomic_load_relaxed (&f->direct));
}

static void
file_close (struct rb_store *s)
{
  struct file_store *f = s->handle;

  if (f) {
    if (f->dfd >= 0)
      close (f->dfd);
    if (f->fd >= 0)
      close (f->fd);
    free (f->path);
    free (f->label);
    free (f);
  }
  free (s);
}

/* A start that failed: remove the file open created (if its path
 * still names it), or empty again the empty file it grew.
 */
static void
file_undo_create (struct rb_store *s)
{
  struct file_store *f = s->handle;
  struct stat st;

  if (f->created && lstat (f->path, &st) == 0 && st.st_dev == f->dev &&
      st.st_ino == f->ino && unlink (f->path) == -1)
    rb_warn ("%s: cannot remove the file this start created: %s",
             f->label, rb_strerror (errno));
  if (f->grown && ftruncate (f->fd, 0) == -1)
    rb_warn ("%s: cannot make it empty again: %s", f->label,
             rb_strerror (errno));
  f->created = f->grown = false;
}

static const struct rb_store_ops file_ops = {
  .name      = "file",
  .submit    = file_submit,
  .flush     = file_flush,
  .next_data = file_next_data,
  .status    = file_status,
  .close     = file_close,
  .undo_create = file_undo_create,
};

/* Does the directory that would hold path exist?  (A missing one
 * needs another message than a missing file.)
 */
static bool
parent_missing (const char *path, char *dir, size_t n)
{
  const char *slash = strrchr (path, '/');
  struct stat st;

  if (slash == NULL)
    return false;
  snprintf (dir, n, "%.*s", (int) (slash - path), path);
  if (dir[0] == '\0')
    return false;
  return stat (dir, &st) == -1 && errno == ENOENT;
}

static int
open_fd (struct file_store *f, const struct rb_store_params *p)
{
  int flags = (p->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
  char dir[4096];

  f->fd = open (p->uri, flags);
  if (f->fd == -1 && errno == ENOENT && p->create_size > 0 && !p->read_only) {
    struct stat st;

    f->fd = open (p->uri, flags | O_CREAT | O_EXCL, 0644);
    if (f->fd >= 0 && fstat (f->fd, &st) == 0) {
      f->created = true;
      f->dev = st.st_dev;
      f->ino = st.st_ino;
    }
  }
  if (f->fd == -1) {
    if (errno == ENOENT && parent_missing (p->uri, dir, sizeof dir))
      rb_set_error (ENOENT, "%s: the directory %s does not exist (create "
                    "it first, or give a path in one that exists%s)",
                    f->label, dir, p->param == NULL && p->create_size == 0
                    ? "; then size=SIZE creates the backing store" : "");
    else if (errno == ENOENT && p->param == NULL)
      rb_set_error (ENOENT, "%s: the backing store does not exist "
                    "(give size=SIZE to create it)", f->label);
    else if (errno == ENOENT)
      rb_set_error (ENOENT, "%s does not exist", f->label);
    else if (errno == EACCES || errno == EROFS || errno == EPERM)
      rb_set_error (errno, "%s: cannot open it for writing (check its "
                    "permissions and mount)", f->label);
    else
      rb_set_error (errno, "%s: open", f->label);
    return -1;
  }
  return 0;
}

/* Make this the only writer: lock a file, open a block device again
 * with O_EXCL.  Fills in s->id.
 */
static int
claim (struct rb_store *s, struct file_store *f,
       const struct rb_store_params *p)
{
  char who[512];
  struct stat st;

  if (fstat (f->fd, &st) == -1) {
    rb_set_error (errno, "%s: fstat", f->label);
    return -1;
  }
  if (S_ISBLK (st.st_mode)) {
    int fd = rb_open_block_excl ("back", p->uri,
                                 p->read_only ? O_RDONLY : O_RDWR,
                                 st.st_rdev);
    struct stat st2;

    if (fd == -1)
      return -1;
    if (fstat (fd, &st2) == -1 || !S_ISBLK (st2.st_mode) ||
        st2.st_rdev != st.st_rdev) {
      close (fd);
      rb_set_error (EAGAIN, "%s changed while it was being opened",
                    f->label);
      return -1;
    }
    close (f->fd);
    f->fd = fd;
    s->id.kind = RB_STORE_BLOCK;
    s->id.dev = st.st_rdev;
    return 0;
  }
  if (S_ISREG (st.st_mode)) {
    switch (rb_lock_file (f->fd, !p->read_only)) {
    case 0:
      break;
    case 1:
      rb_describe_lock_holders (f->fd, who, sizeof who);
      rb_set_error (EBUSY, "%s is in use by %s, which holds a lock on "
                    "it: another ramback, or another program such as "
                    "qemu, is using this backing store, and two writers "
                    "would corrupt it; stop the other one first, or give "
                    "a different back=", f->label, who);
      return -1;
    default:
      /* Some network file systems have no locks: serve, but say so. */
      rb_warn ("%s: cannot lock it (%s): nothing stops a second "
               "writer", f->label, rb_strerror (errno));
      break;
    }
    s->id.kind = RB_STORE_FILE;
    s->id.dev = st.st_dev;
    s->id.ino = st.st_ino;
  }
  return 0;
}

static int
get_size (struct rb_store *s, struct file_store *f,
          const struct rb_store_params *p)
{
  struct stat st;

  if (fstat (f->fd, &st) == -1) {
    rb_set_error (errno, "%s: fstat", f->label);
    return -1;
  }
  if (S_ISBLK (st.st_mode)) {
    f->is_block = true;
#ifdef BLKGETSIZE64
    if (ioctl (f->fd, BLKGETSIZE64, &s->size) == -1) {
      rb_set_error (errno, "%s: ioctl BLKGETSIZE64", f->label);
      return -1;
    }
#else
    off_t end = lseek (f->fd, 0, SEEK_END);
    if (end == -1) {
      rb_set_error (errno, "%s: lseek", f->label);
      return -1;
    }
    s->size = end;
#endif
  }
  else if (S_ISREG (st.st_mode)) {
    if (st.st_size == 0 && p->create_size > 0) {
      if (ftruncate (f->fd, p->create_size) == -1) {
        rb_set_error (errno, "%s: ftruncate to %" PRIu64, f->label,
                      p->create_size);
        return -1;
      }
      f->grown = !f->created;
      st.st_size = p->create_size;
    }
    s->size = st.st_size;
  }
  else {
    rb_set_error (EINVAL, "%s: not a regular file or block device",
                  f->label);
    return -1;
  }

  if (p->create_size > 0 && s->size != p->create_size) {
    rb_set_error (EINVAL, "%s is %" PRIu64 " bytes but size=%" PRIu64
                  " was given: size= only creates a missing backing store "
                  "and must match an existing one (drop size=, or resize "
                  "the backing store yourself)", f->label, s->size,
                  p->create_size);
    return -1;
  }
  if (s->size == 0) {
    rb_set_error (EINVAL, "%s: the backing store is empty (0 bytes)",
                  f->label);
    return -1;
  }
  return 0;
}

/* The alignment direct I/O needs here, or 0 and *why: the file system
 * has none (direct I/O not supported), or does not say (*unknown).
 */
static uint64_t
direct_alignment (struct file_store *f, bool *unknown, const char **why)
{
#ifdef STATX_DIOALIGN
  struct statx sx;

  if (statx (f->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
      (sx.stx_mask & STATX_DIOALIGN)) {
    if (sx.stx_dio_offset_align == 0) {
      *why = "the file system does not support it for this file";
      return 0;
    }
    return RB_MAX (sx.stx_dio_offset_align, sx.stx_dio_mem_align);
  }
#endif
#ifdef BLKSSZGET
  if (f->is_block) {
    int ssz;
    if (ioctl (f->fd, BLKSSZGET, &ssz) == 0 && ssz > 0)
      return ssz;
  }
#endif
  *unknown = true;
  *why = "the file system does not report its direct I/O alignment";
  return 0;
}

/* Open the O_DIRECT descriptor if direct-io= and the file allow it. */
static int
open_direct (struct file_store *f, const struct rb_store_params *p)
{
  uint64_t page = sysconf (_SC_PAGESIZE), a;
  const char *why = NULL;
  bool unknown = false;
  char proc[64];
  struct statfs sfs;
  struct stat st1, st2;

  if (p->direct_io == RB_DIRECT_OFF)
    return 0;
  a = direct_alignment (f, &unknown, &why);
  if (a == 0 && unknown && p->direct_io == RB_DIRECT_ON)
    a = page;       /* page alignment suits whatever takes O_DIRECT */
  if (a == 0 && p->direct_io == RB_DIRECT_AUTO)
    goto buffered;
  if (a == 0) {
    rb_set_error (EINVAL, "%s: direct-io=true, but %s (use "
                  "direct-io=auto or false)", f->label, why);
    return -1;
  }
  if (!f->is_block && p->direct_io == RB_DIRECT_AUTO &&
      fstatfs (f->fd, &sfs) == 0 && sfs.f_type == BTRFS_SUPER_MAGIC) {
    why = "btrfs (give direct-io=true to use it anyway)";
    goto buffered;
  }
  f->dalign = RB_MAX (a, page);
  if (f->dalign & (f->dalign - 1)) {
    why = "its alignment is not a power of two";
    if (p->direct_io == RB_DIRECT_AUTO)
      goto buffered;
    rb_set_error (EINVAL, "%s: direct-io=true, but %s", f->label, why);
    return -1;
  }
  snprintf (proc, sizeof proc, "/proc/self/fd/%d", f->fd);
  f->dfd = open (proc, (p->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC |
                 O_DIRECT);
  if (f->dfd >= 0 &&
      (fstat (f->fd, &st1) == -1 || fstat (f->dfd, &st2) == -1 ||
       st1.st_dev != st2.st_dev || st1.st_ino != st2.st_ino ||
       st1.st_rdev != st2.st_rdev)) {
    close (f->dfd);
    f->dfd = -1;
    errno = EXDEV;
  }
  if (f->dfd == -1) {
    if (p->direct_io == RB_DIRECT_ON) {
      rb_set_error (errno, "%s: direct-io=true, but opening it with "
                    "O_DIRECT failed (use direct-io=auto or false)", f->label);
      return -1;
    }
    why = rb_strerror (errno);
    goto buffered;
  }
  f->direct = true;
  rb_log ("%s: direct I/O, %" PRIu64 "-byte alignment", f->label,
          f->dalign);
  return 0;

 buffered:
  rb_log ("%s: no direct I/O: %s", f->label, why);
  return 0;
}

struct rb_store *
rb_store_file_open (const struct rb_store_params *p)
{
  struct rb_store *s = calloc (1, sizeof *s);
  struct file_store *f = calloc (1, sizeof *f);

  if (s == NULL || f == NULL) {
    rb_set_error (errno, "calloc");
    free (s);
    free (f);
    return NULL;
  }
  s->ops = &file_ops;
  s->handle = f;
  s->read_only = p->read_only;
  s->connections = 1;
  f->fd = -1;
  f->dfd = -1;
  f->dalign = 1;
  f->can_punch = true;
  f->path = strdup (p->uri);
  if (asprintf (&f->label, "%s%s%s", p->param ? p->param : "back",
                p->param && !*p->param ? "" : "=", p->uri) == -1)
    f->label = NULL;
  if (f->path == NULL || f->label == NULL) {
    rb_set_error (errno, "strdup");
    file_close (s);
    return NULL;
  }
  if (open_fd (f, p) == -1 || claim (s, f, p) == -1 ||
      get_size (s, f, p) == -1 || open_direct (f, p) == -1) {
    int e = errno;
    if (f->fd >= 0)
      file_undo_create (s);
    file_close (s);
    errno = e;
    return NULL;
  }
  s->can_zero = true;
#ifdef HAVE_POSIX_FADVISE
  /* Populate reads it once, front to back. */
  posix_fadvise (f->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  return s;
}
