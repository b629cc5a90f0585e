/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the backing store, as an ops table.
 *
 * This module owns nothing but the contract between the caching core and
 * whatever persists its data: a local file or block device
 * (store-file.c), a remote NBD export (store-nbd.c) or a Ceph RBD image
 * (store-rbd.c).  The core never
 * calls read(2)/write(2) itself; every byte to or from persistent storage
 * goes through these ops, so a test or a kernel port can swap in its own.
 *
 * Locking: the core calls the ops without holding any of its locks, from
 * several threads at once (application threads doing writethrough or
 * demand loads, the flusher, the populator).  Each implementation must be
 * thread-safe.  The core guarantees that two requests in flight at the
 * same time never overlap unless both are reads, or one is a populate
 * read into its bounce buffer (populate.c), whose data is not used for
 * a chunk that a write reached meanwhile: such a read may return the
 * old bytes, the new, or a mix, and must not disturb the write.
 *
 * Errors: each op returns 0 on success, or -1 with errno set and a
 * message recorded with rb_set_error() (error.h).
 */

#ifndef RAMBACK_STORE_H
#define RAMBACK_STORE_H

#include "env.h"
#include "ramback.h"           /* rb_store_params, rb_store_state */

enum rb_io_op {
  RB_IO_READ,
  RB_IO_WRITE,
  RB_IO_ZERO,                 /* write zeroes; may deallocate */
};

/* One request of a batch.  'err' is filled in by submit: 0 or an errno. */
struct rb_io {
  enum rb_io_op op;
  void *buf;                  /* READ: destination; WRITE: source (const) */
  uint64_t count;
  uint64_t offset;
  bool fua;                   /* WRITE: durable when it completes (sent
                                 only to a store that can_fua) */
  int err;
};

/* A byte range of the store (take_suspects). */
struct rb_store_range {
  uint64_t offset, count;
};

struct rb_store;
struct rb_status_out;

struct rb_store_ops {
  const char *name;           /* "file", "nbd" */

  /* Submit a batch of non-overlapping requests and wait for all of them.
   * Returns 0 if every request succeeded, else -1 with errno set to the
   * first failure; each io->err says which ones failed.  A store may run
   * them in parallel (many requests in flight hide a slow link).
   */
  int (*submit) (struct rb_store *s, struct rb_io *ios, size_t n);

  /* Make everything written so far durable (fdatasync, NBD FLUSH).  On
   * failure anything written since the last successful flush may be
   * lost, and the caller must write it again; a store reports such a
   * loss to every flush that began before one of them returned it.
   */
  int (*flush) (struct rb_store *s);

  /* Optional.  Find the first allocated byte at or after 'offset':
   * sets *data to its offset and *hole to the end of that data extent.
   * *data == size means only a hole remains.  NULL: all data.
   */
  int (*next_data) (struct rb_store *s, uint64_t offset,
                    uint64_t *data, uint64_t *hole);

  /* Optional: append the store's own status fields (store_*) to the
   * reply being written, after the core's, with the rb_status_* calls
   * of json.h (the same writer for the text and the JSON form).
   */
  void (*status) (struct rb_store *s, struct rb_status_out *o);

  void (*close) (struct rb_store *s);

  /* Optional.  Ranges the store can no longer vouch for although no
   * request about them failed now: a write to them failed earlier with
   * an unknown outcome (its connection was lost before the reply), the
   * caller wrote them again since, and the old write may have landed
   * after that (a remote server thread still running it).  A store
   * hands a range over only once the old write can no longer be
   * executing; the caller then writes it again from its current data.
   * Moves up to 'max' ranges to 'out', returns how many; sets *pending
   * if more may come later (the caller asks again; a clean stop waits
   * until none are pending).  Called without any lock of the caller.
   */
  size_t (*take_suspects) (struct rb_store *s, struct rb_store_range *out,
                           size_t max, bool *pending);

  /* Optional.  A start that failed gives back what open made: a file
   * it created is removed, an empty one it grew to size= is emptied
   * again; nothing else is touched.  Called before close.
   */
  void (*undo_create) (struct rb_store *s);

  /* Optional.  A stop has begun: the reads queued or in flight are no
   * longer needed (a stop waits for the data it must write back, never
   * for a read).  The store fails them soon: queued ones at once, one
   * in flight that the server does not answer by giving up its
   * connection (writes there follow the lost-connection rules).  Reads
   * made after the call fail at once.
   */
  void (*abandon_reads) (struct rb_store *s);
};

/* What a local backing store is (store-file.c sets it; all zero for a
 * remote one): ram= is refused if it is the store itself, and the RAM
 * image header records it.
 */
enum rb_store_kind {
  RB_STORE_REMOTE = 0,
  RB_STORE_FILE = 1,
  RB_STORE_BLOCK = 2,
};

struct rb_store_id {
  enum rb_store_kind kind;
  uint64_t dev;               /* FILE: st_dev; BLOCK: st_rdev */
  uint64_t ino;               /* FILE: st_ino */
};

struct rb_store {
  const struct rb_store_ops *ops;
  void *handle;               /* implementation's own state */
  uint64_t size;              /* device size in bytes */
  bool can_zero;              /* ZERO is cheaper than writing zeroes */
  bool can_fua;               /* honours a WRITE's fua (writethrough
                                 then needs no sync) */
  bool read_only;
  uint32_t min_block;         /* the store's minimum block size: requests
                                 are widened to it (widen.c); 0 or 1:
                                 none.  The chunk size must be a
                                 multiple of it (rb_open checks). */
  int connections;            /* parallel connections used (status) */
  enum rb_store_state state;  /* updated by the implementation (atomic) */
  struct rb_store_id id;
};

/* Open the store named by params->uri: an NBD URI goes to store-nbd.c,
 * rbd:... to store-rbd.c, anything else is a file or block device.
 * NULL on error.
 */
extern struct rb_store *rb_store_open (const struct rb_store_params *params);
extern void rb_store_close (struct rb_store *s);

/* Cutting a batch into pieces for a store that runs them in parallel
 * (store-nbd.c, the filter's store-next.c).  A request is cut into
 * pieces of at most its step (zero_step for a ZERO, read_step for a
 * READ if set, rw_step otherwise):
 * with aligned, at the multiples of the step (so no two pieces share a
 * block of a store that does read-modify-write), else from the
 * request's own start.  The caller sets the steps and aligned, calls
 * rb_store_cut_plan, then rb_store_cut_next for each piece.
 */
struct rb_store_cut {
  uint64_t rw_step, zero_step;
  uint64_t read_step;           /* 0: rw_step */
  bool aligned;
  /* The current piece, set by rb_store_cut_next: */
  struct rb_io *io;             /* its request */
  uint64_t offset, count;
  char *buf;                    /* its data in io->buf; NULL for a ZERO */
  size_t i;                     /* io's index in the batch */
};

/* Check every request of the batch and allocate its pieces: a request
 * past the end of the store fails with EINVAL, a change to a read-only
 * one with EROFS; each refused request gets io->err, and the first one
 * the thread's error, "WHO: ..." (ro_what says what is read-only).
 * Returns a zeroed array of *npieces elements of size bytes, to be
 * filled in the order of rb_store_cut_next; or NULL with *npieces 0
 * (nothing to do) or -1 (errno set).  *bytes (if not NULL) gets the
 * batch's size.
 */
extern void *rb_store_cut_plan (struct rb_store_cut *c,
                                const struct rb_store *s,
                                struct rb_io *ios, size_t n, size_t size,
                                ssize_t *npieces, uint64_t *bytes,
                                const char *who, const char *ro_what);

/* Move c to the next piece of the batch; false when none is left. */
extern bool rb_store_cut_next (struct rb_store_cut *c, struct rb_io *ios,
                               size_t n);

/* Convenience wrappers for a batch of one (inline: the kernel target
 * shares the code that calls them, not store.c).
 */
static inline int
rb_store_one (struct rb_store *s, enum rb_io_op op, void *buf,
              uint64_t count, uint64_t offset)
{
  struct rb_io io = { .op = op, .buf = buf, .count = count, .offset = offset };

  return s->ops->submit (s, &io, 1);
}

static inline int
rb_store_pread (struct rb_store *s, void *buf, uint64_t count,
                uint64_t offset)
{
  return rb_store_one (s, RB_IO_READ, buf, count, offset);
}

static inline int
rb_store_pwrite (struct rb_store *s, const void *buf, uint64_t count,
                 uint64_t offset)
{
  return rb_store_one (s, RB_IO_WRITE, (void *) buf, count, offset);
}

static inline int
rb_store_zero (struct rb_store *s, uint64_t count, uint64_t offset)
{
  return rb_store_one (s, RB_IO_ZERO, NULL, count, offset);
}

/* Submit a batch through submit, which sees only requests aligned to
 * the minimum block m (the device's last block may end at the size):
 * the others are widened by read-modify-write (widen.c).  With m <= 1,
 * or every request aligned, this is submit itself.
 */
extern int rb_store_submit_widened (struct rb_store *s, uint64_t m,
                                    struct rb_io *ios, size_t n,
                                    int (*submit) (struct rb_store *,
                                                   struct rb_io *, size_t));

/* Implementations. */
extern struct rb_store *rb_store_file_open (const struct rb_store_params *);
extern struct rb_store *rb_store_nbd_open (const struct rb_store_params *);
extern struct rb_store *rb_store_rbd_open (const struct rb_store_params *);

#endif /* RAMBACK_STORE_H */
