/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: requests that do not keep to a store's minimum block size,
 * made whole by read-modify-write (an NBD server that advertises a
 * minimum, say a disk with 4 KiB sectors, may refuse anything smaller,
 * as nbdkit's blocksize-policy filter does with its error policy).
 *
 * rb_store_submit_widened() takes a batch and a submit function that
 * only ever sees whole blocks.  Each request is cut into
 *   - its aligned middle, sent as it is (a READ, WRITE or ZERO of whole
 *     blocks; the device's last block may be short, ending at the size);
 *   - at most two partial blocks, its head and its tail.
 * Phase 1 reads every block that holds a partial part; then the partial
 * parts are patched in (a WRITE's bytes, a ZERO's zeroes) or copied out
 * (a READ's); phase 2 writes the patched blocks back together with the
 * middles.  Requests of one batch never overlap, but two of them may
 * share a block (two dirty sectors of one chunk written back in one
 * batch): a block is read once, every request's part is patched into
 * the same copy, and it is written once, so neither undoes the other.
 *
 * Why read-modify-write is safe here: the core never has two requests
 * in flight that overlap unless both are reads or one is a populate
 * read whose data it drops (store.h: a read changes nothing), it holds its
 * range over whole chunks, and the chunk size is a multiple of the
 * minimum block (rb_open refuses anything else), so the blocks read
 * and written back lie inside chunks no other request writes meanwhile.
 * (A write into a chunk loaded in part may load a sector of it beside
 * its write back, rangelock.h: that read is of a sector not in RAM,
 * which write back never patches, so a block written back around it
 * carries the bytes the read returns either way.)
 *
 * Errors: a request fails if any of its parts (or a block it shares)
 * failed; io->err is the first errno, the call returns -1 with errno
 * set to the batch's first failure, as submit does.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "error.h"
#include "store.h"

/* One block that partial parts of requests lie in. */
struct wblock {
  uint64_t offset;
  uint64_t len;               /* m, or less for the device's last block */
  char *buf;
  bool dirty;                 /* a WRITE or ZERO patched it */
  int err;                    /* its read (phase 1) or write (phase 2) */
};

/* A partial part of request ios[io] in block b. */
struct wpart {
  size_t io, b;
  uint64_t offset, count;     /* on the device */
};

static bool
is_aligned (const struct rb_store *s, uint64_t m, uint64_t offset,
            uint64_t count)
{
  uint64_t end = offset + count;

  return offset % m == 0 && (end % m == 0 || end == s->size);
}

/* The index of the block at offset (adding it if new); blocks are few,
 * a linear search is fine.
 */
static size_t
block_at (const struct rb_store *s, struct wblock *blocks, size_t *nblocks,
          uint64_t m, uint64_t offset)
{
  uint64_t b = offset / m * m;
  size_t i;

  for (i = 0; i < *nblocks; i++)
    if (blocks[i].offset == b)
      return i;
  blocks[i].offset = b;
  blocks[i].len = b + m > s->size ? s->size - b : m;
  (*nblocks)++;
  return i;
}

int
rb_store_submit_widened (struct rb_store *s, uint64_t m,
                         struct rb_io *ios, size_t n,
                         int (*submit) (struct rb_store *, struct rb_io *,
                                        size_t))
{
  CLEANUP_FREE struct wblock *blocks = NULL;
  CLEANUP_FREE struct wpart *parts = NULL;
  CLEANUP_FREE struct rb_io *sub = NULL;
  CLEANUP_FREE size_t *owner = NULL;
  size_t i, j, nblocks = 0, nparts = 0, nsub = 0;
  int first_err = 0;

  for (i = 0; i < n; i++)
    if (ios[i].count > 0 && !is_aligned (s, m, ios[i].offset, ios[i].count))
      break;
  if (m <= 1 || i == n)
    return submit (s, ios, n);

  /* At most two partial blocks and one middle per request. */
  blocks = calloc (2 * n, sizeof *blocks);
  parts = calloc (2 * n, sizeof *parts);
  sub = calloc (n + 2 * n, sizeof *sub);
  owner = calloc (n + 2 * n, sizeof *owner);
  if (blocks == NULL || parts == NULL || sub == NULL || owner == NULL) {
    rb_set_error (errno, "store: out of memory for a batch of %zu", n);
    return -1;
  }

  /* Cut: middles into sub[], partial parts into parts[]. */
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];
    uint64_t pos = io->offset, end = io->offset + io->count;

    io->err = 0;
    if (io->count == 0)
      continue;
    if (io->offset > s->size || io->count > s->size - io->offset) {
      /* Beyond the end: let submit refuse it with its own message. */
      sub[nsub] = *io;
      owner[nsub++] = i;
      continue;
    }
    while (pos < end) {
      uint64_t b = pos / m * m;
      uint64_t bend = b + m > s->size ? s->size : b + m;

      if (pos == b && end >= bend) {
        /* Whole blocks from pos on, up to the last whole one. */
        uint64_t stop = end == s->size ? end : end / m * m;

        sub[nsub] = (struct rb_io) {
          .op = io->op, .count = stop - pos, .offset = pos, .fua = io->fua,
          .buf = io->buf ? (char *) io->buf + (pos - io->offset) : NULL,
        };
        owner[nsub++] = i;
        pos = stop;
      }
      else {
        uint64_t stop = end < bend ? end : bend;

        parts[nparts] = (struct wpart) {
          .io = i, .b = block_at (s, blocks, &nblocks, m, pos),
          .offset = pos, .count = stop - pos,
        };
        nparts++;
        pos = stop;
      }
    }
  }

  /* Phase 1: read the blocks that partial parts lie in. */
  {
    CLEANUP_FREE struct rb_io *rd = calloc (nblocks, sizeof *rd);

    if (rd == NULL) {
      rb_set_error (errno, "store: out of memory for a batch of %zu", n);
      return -1;
    }
    for (j = 0; j < nblocks; j++) {
      blocks[j].buf = malloc (blocks[j].len);
      if (blocks[j].buf == NULL) {
        rb_set_error (errno, "store: out of memory for a block of %" PRIu64,
                      blocks[j].len);
        first_err = errno;
        for (i = 0; i < n; i++)
          ios[i].err = first_err;
        goto out;
      }
      rd[j] = (struct rb_io) { .op = RB_IO_READ, .buf = blocks[j].buf,
                               .count = blocks[j].len,
                               .offset = blocks[j].offset };
    }
    if (submit (s, rd, nblocks) == -1) {
      for (j = 0; j < nblocks; j++)
        blocks[j].err = rd[j].err;
    }
  }

  /* Patch the parts in, or copy them out. */
  for (j = 0; j < nparts; j++) {
    struct wpart *p = &parts[j];
    struct wblock *b = &blocks[p->b];
    struct rb_io *io = &ios[p->io];
    char *at = b->buf + (p->offset - b->offset);

    if (b->err)
      continue;
    switch (io->op) {
    case RB_IO_READ:
      memcpy ((char *) io->buf + (p->offset - io->offset), at, p->count);
      break;
    case RB_IO_WRITE:
      memcpy (at, (char *) io->buf + (p->offset - io->offset), p->count);
      b->dirty = true;
      break;
    case RB_IO_ZERO:
      memset (at, 0, p->count);
      b->dirty = true;
      break;
    }
  }

  /* Phase 2: the middles and the patched blocks, in one batch. */
  for (j = 0; j < nblocks; j++)
    if (blocks[j].dirty && blocks[j].err == 0) {
      bool fua = false;
      size_t k;

      for (k = 0; k < nparts; k++)
        if (parts[k].b == j && ios[parts[k].io].fua)
          fua = true;
      sub[nsub] = (struct rb_io) { .op = RB_IO_WRITE, .buf = blocks[j].buf,
                                   .count = blocks[j].len,
                                   .offset = blocks[j].offset, .fua = fua };
      owner[nsub++] = n + j;    /* a block, not a request */
    }
  if (nsub > 0)
    submit (s, sub, nsub);

  /* Results back to the requests. */
  for (j = 0; j < nsub; j++)
    if (sub[j].err) {
      if (owner[j] < n) {
        if (!ios[owner[j]].err)
          ios[owner[j]].err = sub[j].err;
      }
      else
        blocks[owner[j] - n].err = sub[j].err;
    }
  for (j = 0; j < nparts; j++)
    if (blocks[parts[j].b].err && !ios[parts[j].io].err)
      ios[parts[j].io].err = blocks[parts[j].b].err;
  for (i = 0; i < n; i++)
    if (ios[i].err && !first_err)
      first_err = ios[i].err;

 out:
  for (j = 0; j < nblocks; j++)
    free (blocks[j].buf);
  if (first_err) {
    errno = first_err;
    return -1;
  }
  return 0;
}
