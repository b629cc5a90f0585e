// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: bios through the shared request path, and the RAM image.
 *
 * The request path is lib/engine/io.c's, as in the nbdkit plugin: demand
 * reads, partial head and tail chunks loaded under a range, writes to
 * chunks still EMPTY, writethrough, the dirty limit, discards and
 * write-zeroes (rb_zero).  What is the kernel's is how a bio gets there:
 *
 *  - A bio is a list of pages, not a flat buffer.  io.c takes its data
 *    through a struct rb_data, whose copy callback here walks the bio's
 *    segments to or from the request's place in RAM.
 *
 *  - map() must not sleep.  It calls rbi_try_pread / rbi_try_pwrite,
 *    io.c's lock-free fast path: when every chunk is loaded (and for a
 *    write the mode is writeback and the dirty limit is not reached)
 *    the bio is done there; otherwise nothing is done and the bio goes
 *    to the target's workqueue, where rbk_slow_work() makes io.c's
 *    waiting calls (rbi_pread_data, rbi_pwrite_data, rb_zero) with the
 *    same bio.  They may sleep there: range locks, loads, the dirty
 *    limit (writers wait, never fail), backing I/O.  The fast path
 *    wakes an idle flusher through rb.kick_nowait, a work item
 *    (rbk-bg.c), since map() cannot take rb.lock.
 *
 *  - Writethrough writes go to the backing device from RAM, not from
 *    the bio's pages, with FUA (rbk-store.c's store sets can_fua): a
 *    completed write is on stable storage, and an application that
 *    changes its pages while the write is in flight cannot make the
 *    backing device and RAM differ.  If the backing write fails, the
 *    range stays dirty in RAM (the flusher retries) and the bio fails.
 */

#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>

#include "dm-ramback.h"

/*
 * The RAM image: one virtually contiguous area, as lib/ addresses it
 * (rb.ram.base + offset), of zeroed pages, so no stale kernel memory can
 * ever be read through the device even if a bug let a read see a chunk
 * before its load.  RETRY_MAYFAIL: a table too big for free memory fails
 * to load instead of setting off the OOM killer.
 */
int rbk_ram_alloc(struct rbk *rbk)
{
	struct rb *rb = &rbk->rb;

	rb->ram.base = __vmalloc(PAGE_ALIGN(rb->size),
				 GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN |
				 __GFP_RETRY_MAYFAIL);
	if (!rb->ram.base)
		return -ENOMEM;
	rb->ram.size = rb->size;
	rb->ram.mapped = PAGE_ALIGN(rb->size);
	rb->ram.fd = -1;
	return 0;
}

void rbk_ram_free(struct rbk *rbk)
{
	vfree(rbk->rb.ram.base);
	rbk->rb.ram.base = NULL;
}

/* A bio as io.c's data: its segments, in order, are the request's bytes. */
struct rbk_data {
	struct rb_data data;
	struct bio *bio;
};

/*
 * Copy the whole bio to (a write) or from (a read) RAM at 'ram', its
 * place in the image.  Each segment lies in one page of the bio; the
 * image is virtually contiguous, so one copy per segment.  Never sleeps
 * (map() calls it).
 */
static void rbk_bio_copy(struct rb_data *d, void *ram, u64 count, bool to_ram)
{
	struct bio *bio = container_of(d, struct rbk_data, data)->bio;
	struct bio_vec bv;
	struct bvec_iter iter;
	char *p = ram;

	WARN_ON_ONCE(count != bio->bi_iter.bi_size);
	bio_for_each_segment(bv, bio, iter) {
		if (to_ram)
			memcpy_from_bvec(p, &bv);
		else
			memcpy_to_bvec(&bv, p);
		p += bv.bv_len;
	}
}

static void rbk_data_init(struct rbk_data *d, struct bio *bio)
{
	d->data.copy = rbk_bio_copy;
	d->bio = bio;
}

/* map(): a read or write done on io.c's fast path, or false (defer it). */
bool rbk_try_io(struct rbk *rbk, struct bio *bio, u64 offset)
{
	struct rbk_data d;

	rbk_data_init(&d, bio);
	if (bio_op(bio) == REQ_OP_READ)
		return rbi_try_pread(&rbk->rb, &d.data, bio->bi_iter.bi_size,
				    offset);
	return rbi_try_pwrite(&rbk->rb, &d.data, bio->bi_iter.bi_size, offset,
			     bio->bi_opf & REQ_FUA ? RB_FUA : 0);
}

/* Discard and write-zeroes: lib's zero path, in pieces rb_zero takes. */
static blk_status_t rbk_zero(struct rbk *rbk, struct rbk_bio *pb)
{
	u64 offset = pb->offset, left = pb->count;

	while (left) {
		u32 n = min_t(u64, left, SZ_1G);

		if (rb_zero(&rbk->rb, n, offset, 0))
			return BLK_STS_IOERR;
		offset += n;
		left -= n;
	}
	return BLK_STS_OK;
}

/* The workqueue: io.c's waiting calls, where sleeping is fine. */
void rbk_slow_work(struct work_struct *work)
{
	struct rbk_bio *pb = container_of(work, struct rbk_bio, work);
	struct bio *bio = dm_bio_from_per_bio_data(pb, sizeof(*pb));
	struct rbk *rbk = pb->rbk;
	struct rbk_data d;
	int r;

	rbk_data_init(&d, bio);
	switch (bio_op(bio)) {
	case REQ_OP_DISCARD:
	case REQ_OP_WRITE_ZEROES:
		bio->bi_status = rbk_zero(rbk, pb);
		break;
	case REQ_OP_READ:
		r = rbi_pread_data(&rbk->rb, &d.data, pb->count, pb->offset);
		bio->bi_status = r ? BLK_STS_IOERR : BLK_STS_OK;
		break;
	default:
		r = rbi_pwrite_data(&rbk->rb, &d.data, pb->count, pb->offset,
				   bio->bi_opf & REQ_FUA ? RB_FUA : 0);
		bio->bi_status = r ? BLK_STS_IOERR : BLK_STS_OK;
		break;
	}
	bio_endio(bio);
}
