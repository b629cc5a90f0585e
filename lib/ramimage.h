/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the RAM image.
 *
 * Owns the memory that holds the device: anonymous memory by default,
 * or a file on a memory filesystem (ram=, tmpfs or hugetlbfs) mapped
 * shared.  The image starts all zero (a file is truncated first: its old
 * contents are never trusted, the backing store is the truth), so holes
 * of the backing store need no copying.  No locking here: who may touch
 * which bytes when is decided by chunkmap.h and rangelock.h.
 */

#ifndef RAMBACK_RAMIMAGE_H
#define RAMBACK_RAMIMAGE_H

#include <stdbool.h>
#include <stdint.h>

struct ramimage {
  uint8_t *base;
  uint64_t size;          /* device size */
  uint64_t mapped;        /* mapping size (rounded up to pages) */
  int fd;                 /* ram= file, or -1 */
  char *path;
};

/* Allocate.  Refuses a device larger than physical memory (or than the
 * free space of the ram= filesystem) unless overcommit is set.
 */
extern int ramimage_open (struct ramimage *ri, uint64_t size,
                          const char *path, bool overcommit);
extern void ramimage_close (struct ramimage *ri);

/* Make [offset, offset+count) read as zeroes, returning whole pages to
 * the system where possible.
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
