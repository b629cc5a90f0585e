/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the RAM image (ramimage.h). */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "env.h"
#include "error.h"
#include "ramimage.h"

static uint64_t
page_size (void)
{
  long p = sysconf (_SC_PAGESIZE);
  return p > 0 ? (uint64_t) p : 4096;
}

static int
check_fits (uint64_t size, uint64_t avail, const char *what, bool overcommit)
{
  if (avail == 0 || size <= avail || overcommit)
    return 0;
  rb_set_error (ENOMEM,
                "the device (%" PRIu64 " bytes) is larger than %s "
                "(%" PRIu64 " bytes); use a smaller backing store, or "
                "overcommit=true if it is sparse and will never be filled",
                size, what, avail);
  return -1;
}

static int
open_file (struct ramimage *ri, const char *path, bool overcommit)
{
  struct statfs fs;

  ri->fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (ri->fd == -1) {
    rb_set_error (errno, "ram=%s: open", path);
    return -1;
  }
  if (fstatfs (ri->fd, &fs) == 0 &&
      check_fits (ri->size, (uint64_t) fs.f_bavail * fs.f_bsize + 0,
                  "the free space of the ram= filesystem", overcommit) == -1)
    return -1;
  /* Truncate to zero first: stale contents must not leak into the image. */
  if (ftruncate (ri->fd, 0) == -1 || ftruncate (ri->fd, ri->mapped) == -1) {
    rb_set_error (errno, "ram=%s: ftruncate", path);
    return -1;
  }
  ri->base = mmap (NULL, ri->mapped, PROT_READ | PROT_WRITE, MAP_SHARED,
                   ri->fd, 0);
  if (ri->base == MAP_FAILED) {
    ri->base = NULL;
    rb_set_error (errno, "ram=%s: mmap", path);
    return -1;
  }
  return 0;
}

int
ramimage_open (struct ramimage *ri, uint64_t size, const char *path,
               bool overcommit)
{
  uint64_t ps = page_size ();

  memset (ri, 0, sizeof *ri);
  ri->fd = -1;
  ri->size = size;
  ri->mapped = (size + ps - 1) / ps * ps;
  if (ri->mapped == 0)
    ri->mapped = ps;

  if (path) {
    ri->path = strdup (path);
    if (ri->path == NULL) {
      rb_set_error (errno, "strdup");
      return -1;
    }
    return open_file (ri, path, overcommit);
  }

  if (check_fits (size, rb_phys_mem (), "the machine's RAM", overcommit) == -1)
    return -1;
  /* NORESERVE: pages are only committed when written, so a sparse
   * overcommitted device costs what is actually used.
   */
  ri->base = mmap (NULL, ri->mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (ri->base == MAP_FAILED) {
    ri->base = NULL;
    if (errno == ENOMEM && ri->mapped > (UINT64_C (32) << 40))
      rb_set_error (ENOMEM, "mmap: %" PRIu64 " bytes of anonymous memory: "
                    "no free range of the process address space is that "
                    "large (x86-64 user space is 128 TiB in all); use a "
                    "smaller device", ri->mapped);
    else
      rb_set_error (errno, "mmap: %" PRIu64 " bytes of anonymous memory",
                    ri->mapped);
    return -1;
  }
  return 0;
}

void
ramimage_close (struct ramimage *ri)
{
  if (ri->base)
    munmap (ri->base, ri->mapped);
  if (ri->fd >= 0) {
    /* The image is a cache of the backing store: give the memory back. */
    if (ftruncate (ri->fd, 0) == -1)
      rb_log ("ram=%s: ftruncate: %m (ignored)", ri->path);
    close (ri->fd);
  }
  free (ri->path);
  memset (ri, 0, sizeof *ri);
  ri->fd = -1;
}

void __attribute__ ((noinline))
ramimage_zero (struct ramimage *ri, uint64_t offset, uint64_t count)
{
  uint64_t ps = page_size ();
  uint64_t a = (offset + ps - 1) / ps * ps;
  uint64_t b = (offset + count) / ps * ps;

  if (b > a) {
    int r;

    if (ri->fd >= 0)
      r = fallocate (ri->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     a, b - a);
    else
      r = madvise (ri->base + a, b - a, MADV_DONTNEED);
    if (r == 0) {
      memset (ri->base + offset, 0, a - offset);
      memset (ri->base + b, 0, offset + count - b);
      return;
    }
  }
  memset (ri->base + offset, 0, count);
}

void __attribute__ ((noinline))
ramimage_copy_in (struct ramimage *ri, uint64_t offset, const void *buf,
                  uint64_t count)
{
  memcpy (ri->base + offset, buf, count);
}

void __attribute__ ((noinline))
ramimage_copy_out (struct ramimage *ri, uint64_t offset, void *buf,
                   uint64_t count)
{
  memcpy (buf, ri->base + offset, count);
}
