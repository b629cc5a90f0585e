/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of read-modify-write widening (store/widen.c): random
 * batches of non-overlapping reads, writes and zeroes, many of them
 * small and several in one block, through rb_store_submit_widened over
 * a store that refuses any request not aligned to its minimum block
 * (as libnbd does for a server that advertises one) and applies the
 * others to a memory image.  The image must equal a byte model after
 * every batch, reads must return the model's bytes, and a failed block
 * read must fail exactly the requests that have a part in that block.
 */

#include <config.h>

#undef NDEBUG
#include <glib.h>
#include <errno.h>
#include <string.h>

#include "store.h"

struct mem {
  struct rb_store s;
  uint64_t m;
  uint8_t *img;
  uint64_t fail_read_at;      /* UINT64_MAX: none */
  unsigned calls, unaligned;
};

static int
mem_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct mem *mm = s->handle;
  int first = 0;
  size_t i;

  mm->calls++;
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];
    uint64_t end = io->offset + io->count;

    io->err = 0;
    if (io->offset % mm->m || (end % mm->m && end != s->size) ||
        end > s->size) {
      mm->unaligned++;
      io->err = EINVAL;
    }
    else if (io->op == RB_IO_READ && mm->fail_read_at >= io->offset &&
             mm->fail_read_at < end)
      io->err = EIO;
    else if (io->op == RB_IO_READ)
      memcpy (io->buf, mm->img + io->offset, io->count);
    else if (io->op == RB_IO_WRITE)
      memcpy (mm->img + io->offset, io->buf, io->count);
    else
      memset (mm->img + io->offset, 0, io->count);
    if (io->err && !first)
      first = io->err;
  }
  if (first) {
    errno = first;
    return -1;
  }
  return 0;
}

/* A batch of up to nmax random non-overlapping requests, biased to
 * small ones near block edges.
 */
static size_t
random_batch (GRand *r, uint64_t size, uint64_t m, struct rb_io *ios,
              size_t nmax, uint8_t *taken)
{
  size_t n = 0, tries;

  memset (taken, 0, size);
  for (tries = 0; n < nmax && tries < 4 * nmax; tries++) {
    uint64_t len, off, k;
    int kind = g_rand_int_range (r, 0, 10);

    if (kind < 5)
      len = g_rand_int_range (r, 1, 600);
    else if (kind < 8)
      len = 512 * g_rand_int_range (r, 1, 9);
    else
      len = g_rand_int_range (r, 1, 5 * (int) m);
    if (len > size)
      len = size;
    off = g_rand_boolean (r)
      ? g_rand_int_range (r, 0, (gint32) (size - len + 1))
      : (g_rand_int_range (r, 0, (gint32) (size / 512)) * 512);
    if (off + len > size)
      off = size - len;
    for (k = off; k < off + len; k++)
      if (taken[k])
        break;
    if (k < off + len)
      continue;
    memset (taken + off, 1, len);
    ios[n] = (struct rb_io) {
      .op = (enum rb_io_op) g_rand_int_range (r, 0, 3),
      .count = len, .offset = off,
    };
    n++;
  }
  return n;
}

static void
run (uint64_t m, uint64_t size, unsigned seed, bool fail_reads)
{
  GRand *r = g_rand_new_with_seed (seed);
  struct mem mm = { .m = m, .fail_read_at = UINT64_MAX };
  uint8_t *model = g_malloc (size), *taken = g_malloc (size);
  struct rb_io ios[24];
  int round;

  mm.s.handle = &mm;
  mm.s.size = size;
  mm.img = g_malloc (size);
  for (uint64_t i = 0; i < size; i++)
    model[i] = mm.img[i] = g_rand_int (r);

  for (round = 0; round < 400; round++) {
    size_t n = random_batch (r, size, m, ios, 1 + round % 24, taken), i;
    uint8_t *data[24];
    int ret;

    mm.fail_read_at = fail_reads && g_rand_int_range (r, 0, 4) == 0
      ? (uint64_t) g_rand_int_range (r, 0, (gint32) size) : UINT64_MAX;
    for (i = 0; i < n; i++) {
      data[i] = g_malloc (ios[i].count);
      if (ios[i].op == RB_IO_WRITE)
        for (uint64_t k = 0; k < ios[i].count; k++)
          data[i][k] = g_rand_int (r);
      ios[i].buf = ios[i].op == RB_IO_ZERO ? NULL : data[i];
    }
    ret = rb_store_submit_widened (&mm.s, m, ios, n, mem_submit);
    g_assert_cmpuint (mm.unaligned, ==, 0);
    for (i = 0; i < n; i++) {
      struct rb_io *io = &ios[i];
      uint64_t b0 = io->offset / m * m, b1 = io->offset + io->count;
      bool touches = mm.fail_read_at != UINT64_MAX &&
        mm.fail_read_at >= b0 && mm.fail_read_at < (b1 + m - 1) / m * m;

      if (io->err) {
        /* Only a request touching the failing block may fail, and it
         * changed nothing that reads see outside its own range.
         */
        g_assert_true (touches);
        g_assert_cmpint (io->err, ==, EIO);
        g_assert_cmpint (ret, ==, -1);
        /* Its bytes are now unknown (old or new): adopt them. */
        memcpy (model + io->offset, mm.img + io->offset, io->count);
        continue;
      }
      if (io->op == RB_IO_READ)
        g_assert_cmpmem (data[i], io->count, model + io->offset, io->count);
      else if (io->op == RB_IO_WRITE)
        memcpy (model + io->offset, data[i], io->count);
      else
        memset (model + io->offset, 0, io->count);
    }
    g_assert_cmpmem (mm.img, size, model, size);
    for (i = 0; i < n; i++)
      g_free (data[i]);
  }
  g_free (mm.img);
  g_free (model);
  g_free (taken);
  g_rand_free (r);
}

static void
test_4k (void)
{
  run (4096, 256 * 1024, 1, false);
}

static void
test_short_last_block (void)
{
  /* A size that is not a multiple of the block: the last one is short. */
  run (4096, 64 * 1024 + 1536, 2, false);
}

static void
test_64k (void)
{
  run (65536, 1024 * 1024, 3, false);
}

static void
test_read_fails (void)
{
  run (4096, 128 * 1024, 4, true);
}

/* A batch whose requests all keep to the block goes through as it is. */
static void
test_aligned_passthrough (void)
{
  struct mem mm = { .m = 4096, .fail_read_at = UINT64_MAX };
  uint8_t buf[8192];
  struct rb_io io = { .op = RB_IO_WRITE, .buf = buf, .count = 8192,
                      .offset = 4096 };

  mm.s.handle = &mm;
  mm.s.size = 65536;
  mm.img = g_malloc0 (65536);
  memset (buf, 7, sizeof buf);
  g_assert_cmpint (rb_store_submit_widened (&mm.s, 4096, &io, 1,
                                            mem_submit), ==, 0);
  g_assert_cmpuint (mm.calls, ==, 1);
  g_assert_cmpuint (mm.img[4096], ==, 7);
  g_free (mm.img);
}

int
main (int argc, char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/widen/4k", test_4k);
  g_test_add_func ("/widen/short-last-block", test_short_last_block);
  g_test_add_func ("/widen/64k", test_64k);
  g_test_add_func ("/widen/read-fails", test_read_fails);
  g_test_add_func ("/widen/aligned-passthrough", test_aligned_passthrough);
  return g_test_run ();
}
