/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the RAM image.
 *
 * Owns the memory that holds the device: anonymous memory by default,
 * or a file on a memory filesystem (ram=, tmpfs or hugetlbfs) mapped
 * shared.  base + off addresses device offset off in both cases.  The
 * image starts all zero (its old contents are never trusted, the
 * backing store is the truth), so holes of the backing store need no
 * copying.  No locking here: who may touch which bytes when is decided
 * by chunkmap.h and rangelock.h.
 *
 * The ram= file.  ramback writes only to a file it created itself:
 *   - a path that does not exist is created (O_CREAT|O_EXCL|O_NOFOLLOW,
 *     mode 0600) with the header below;
 *   - an existing file is taken over (its old image discarded, the
 *     header rewritten) only if it is a regular file, not a symbolic
 *     link, with one link, owned by our uid, not the backing store
 *     itself, starts with RAMIMAGE_MAGIC in a format we know, and no
 *     other ramback holds its lock;
 *   - anything else is refused, untouched, with a message saying why.
 * The file is locked (exclusive.h) for as long as it is open.  On
 * hugetlbfs and elsewhere every size and offset is a multiple of the
 * file system's block size (the huge page size there).  Unless
 * overcommit is set, the whole file is allocated at start
 * (posix_fallocate), so that a page fault can never find the file
 * system full (that raises SIGBUS).  After a clean stop the file is
 * removed; after a stop that could not write everything back it is
 * kept, image and all, in state IN_USE.
 *
 * File layout (format 1; integers little-endian):
 *
 *   0              struct ramimage_header, zero-padded to
 *                  RAMIMAGE_HEADER_SIZE
 *   map_offset     map_size bytes reserved for the chunk state map (2
 *                  bits per chunk, rounded up to 4 KiB), so that a
 *                  later format can resume after a crash; format 1
 *                  leaves it zero
 *   image_offset   the image, image_size bytes (the device size rounded
 *                  up to block_size); image_offset is a multiple of
 *                  block_size
 *
 * block_size is the larger of the page size and the file system's
 * block size (fstatfs f_bsize).  state says what the file holds:
 * CREATING while it is being set up (nothing valid), IN_USE from then on
 * while a ramback serves from it, and also what a crash leaves (then
 * dirty data may be in the image), CLEAN_STOP after a clean stop that
 * could not remove the file (nothing in it is needed).
 */

#ifndef RAMBACK_RAMIMAGE_H
#define RAMBACK_RAMIMAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

#define RAMIMAGE_MAGIC "RAMBACK-IMAGE\0\0\0"      /* 16 bytes */
#define RAMIMAGE_VERSION 1
#define RAMIMAGE_HEADER_SIZE 4096

enum ramimage_state {
  RAMIMAGE_CREATING = 1,
  RAMIMAGE_IN_USE = 2,
  RAMIMAGE_CLEAN_STOP = 3,
};

struct ramimage_header {        /* offsets are part of the format */
  char magic[16];               /*   0 RAMIMAGE_MAGIC */
  uint32_t version;             /*  16 RAMIMAGE_VERSION */
  uint32_t header_size;         /*  20 RAMIMAGE_HEADER_SIZE */
  uint32_t state;               /*  24 enum ramimage_state */
  uint32_t chunk_size;          /*  28 */
  uint64_t device_size;         /*  32 */
  uint64_t image_offset;        /*  40 */
  uint64_t image_size;          /*  48 */
  uint64_t map_offset;          /*  56 */
  uint64_t map_size;            /*  64 */
  uint64_t block_size;          /*  72 */
  uint8_t uuid[16];             /*  80 random, new each (re)initialisation */
  uint64_t generation;          /*  96 1 when created, +1 per takeover */
  uint64_t back_dev;            /* 104 struct rb_store_id of back= */
  uint64_t back_ino;            /* 112 */
  uint64_t back_size;           /* 120 */
  uint32_t back_kind;           /* 128 enum rb_store_kind */
  uint32_t reserved0;           /* 132 zero */
  uint64_t created;             /* 136 seconds since the epoch */
  char back_uri[1024];          /* 144 back= (path or URI), NUL-terminated,
                                   truncated if longer */
};                              /* 1168 bytes */

struct ramimage {
  uint8_t *base;          /* the image: device offset off is base[off] */
  uint64_t size;          /* device size */
  uint64_t mapped;        /* bytes of image mapped (size rounded up) */
  uint64_t block;         /* unit in which memory is given back */
  int fd;                 /* ram= file, or -1 */
  char *path;
  /* ram= only. */
  uint8_t *file_map;      /* the whole file: the header, then the image */
  uint64_t file_size;
  uint64_t image_offset;
  uint64_t dev, ino;      /* of the file, to recognise it at removal */
  bool owned;             /* ours (created or taken over) and locked */
  bool created;           /* created by us, not taken over */
  bool reserved;          /* allocated at start (no overcommit) */
  bool reserve_lost;      /* warned: a zeroed range lost its reservation */
};

struct ramimage_params {
  uint64_t size;              /* device size */
  uint32_t chunk_size;
  const char *path;           /* ram=, or NULL for anonymous memory */
  bool overcommit;            /* allow more than RAM / free space, do
                                 not reserve the ram= file */
  /* The backing store: compared with ram=, recorded in the header. */
  const char *back_uri;
  struct rb_store_id back_id;
};

/* Allocate.  Refuses a device larger than physical memory unless
 * overcommit is set; with ram=, refuses a file that is not ours (see
 * above) and, unless overcommit is set, a device that the file system
 * cannot hold.
 */
extern int ramimage_open (struct ramimage *ri,
                          const struct ramimage_params *p);

/* Free.  clean: everything in the image is on the backing store, so a
 * ram= file is removed (memory given back); otherwise it is kept with
 * its contents and a warning says where.
 */
extern void ramimage_close (struct ramimage *ri, bool clean);

/* Make [offset, offset+count) read as zeroes, returning whole pages to
 * the system where possible (a reserved ram= file keeps them allocated).
 */
extern void ramimage_zero (struct ramimage *ri, uint64_t offset,
                           uint64_t count);

/* Copy application data into or out of the image.  These are the only
 * places that touch image bytes on behalf of the application, on
 * purpose without any lock: a write may change bytes that the flusher
 * is writing to the store at that moment.  That race is benign by
 * design (the chunk is re-dirtied after the copy, so it is stored again)
 * and lib/tsan.supp names these functions for ThreadSanitizer.
 */
extern void ramimage_copy_in (struct ramimage *ri, uint64_t offset,
                              const void *buf, uint64_t count);
extern void ramimage_copy_out (struct ramimage *ri, uint64_t offset,
                               void *buf, uint64_t count);

#endif /* RAMBACK_RAMIMAGE_H */
