// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: the backing store of the shared engine (lib/store/store.h) as
 * bios to the backing device.
 *
 * lib/ asks for batches of non-overlapping requests (struct rb_io) and
 * waits for all of them; here each request becomes as few bios as its
 * pages allow, all of the batch are submitted, then waited for, and each
 * request's err is the first error of its bios.  Its buffers always lie
 * in the RAM image (vmalloc), so a bio takes their pages directly: no
 * bounce copy, as in userspace.  A write with fua set (lib/engine/io.c's
 * writethrough, as the store says can_fua) goes with REQ_FUA: it is on
 * stable storage when it completes.  "flush" is a cache flush of the
 * backing device; a failed one is what lib/engine/flush.c's fsyncgate rule
 * handles (everything written since the last good flush is written
 * again).
 *
 * Process context only (the flusher, the populator, the workqueue): the
 * bio set's mempool may sleep, and each bio is submitted before the next
 * is allocated, so the pool always drains.
 */

#include <linux/blkdev.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>

#include "dm-ramback.h"
#include "error.h"

/* Bios in flight for a batch: the submitter's reference plus one each. */
struct rbk_sync {
	atomic_t pending;
	struct completion done;
};

/* One request of a batch: the first error of its bios. */
struct rbk_span {
	struct rbk_sync *sync;
	blk_status_t status;
};

static void rbk_sync_init(struct rbk_sync *sync)
{
	atomic_set(&sync->pending, 1);
	init_completion(&sync->done);
}

/* Drop the submitter's reference and wait for every bio of every span. */
static void rbk_sync_wait(struct rbk_sync *sync)
{
	if (!atomic_dec_and_test(&sync->pending))
		wait_for_completion_io(&sync->done);
}

static void rbk_span_endio(struct bio *bio)
{
	struct rbk_span *span = bio->bi_private;
	struct rbk_sync *sync = span->sync;

	if (bio->bi_status)
		WRITE_ONCE(span->status, bio->bi_status);
	bio_put(bio);
	if (atomic_dec_and_test(&sync->pending))
		complete(&sync->done);
}

/*
 * Read or write the RAM image's bytes at 'buf' (len bytes, vmalloc'd)
 * from or to device offset 'offset', in as few bios as the pages allow.
 * Submits only; rbk_sync_wait() on span->sync waits, and span->status
 * is then the first error of any of its bios.
 */
static void rbk_vm_io(struct rbk *rbk, blk_opf_t opf, void *buf, u64 offset,
		      u64 len, struct rbk_span *span)
{
	struct block_device *bdev = rbk->bdev;
	char *p = buf;

	while (len) {
		u64 pages = DIV_ROUND_UP_ULL(offset_in_page(p) + len, PAGE_SIZE);
		unsigned short nvec = min_t(u64, pages, BIO_MAX_VECS);
		struct bio *bio = bio_alloc_bioset(bdev, nvec, opf, GFP_NOIO,
						   &rbk->bs);

		bio->bi_iter.bi_sector = offset >> SECTOR_SHIFT;
		bio->bi_end_io = rbk_span_endio;
		bio->bi_private = span;
		while (len) {
			unsigned int po = offset_in_page(p);
			unsigned int n = min_t(u64, len, PAGE_SIZE - po);

			if (bio_add_page(bio, vmalloc_to_page(p), n, po) != n)
				break;
			p += n;
			offset += n;
			len -= n;
		}
		atomic_inc(&span->sync->pending);
		submit_bio(bio);
	}
}

#define RBK_SUBMIT_MAX 32

static int rbk_store_submit(struct rb_store *s, struct rb_io *ios, size_t n)
{
	struct rbk *rbk = s->handle;
	int first = 0;

	while (n) {
		struct rbk_span spans[RBK_SUBMIT_MAX];
		struct rbk_sync sync;
		size_t k = min_t(size_t, n, RBK_SUBMIT_MAX), i;

		rbk_sync_init(&sync);
		for (i = 0; i < k; i++) {
			struct rb_io *io = &ios[i];

			spans[i] = (struct rbk_span){ .sync = &sync };
			io->err = 0;
			switch (io->op) {
			case RB_IO_READ:
				rbk_vm_io(rbk, REQ_OP_READ, io->buf, io->offset,
					  io->count, &spans[i]);
				break;
			case RB_IO_WRITE:
				rbk_vm_io(rbk, io->fua ?
					  REQ_OP_WRITE | REQ_SYNC | REQ_FUA :
					  REQ_OP_WRITE, io->buf, io->offset,
					  io->count, &spans[i]);
				break;
			case RB_IO_ZERO:
				io->err = -blkdev_issue_zeroout(rbk->bdev,
					io->offset >> SECTOR_SHIFT,
					io->count >> SECTOR_SHIFT, GFP_NOIO, 0);
				break;
			}
		}
		rbk_sync_wait(&sync);
		for (i = 0; i < k; i++) {
			if (spans[i].status)
				ios[i].err = -blk_status_to_errno(spans[i].status);
			if (ios[i].err && !first)
				first = ios[i].err;
		}
		ios += k;
		n -= k;
	}
	if (first) {
		rb_set_error(first, "backing device I/O failed");
		return -1;
	}
	return 0;
}

static int rbk_store_flush(struct rb_store *s)
{
	struct rbk *rbk = s->handle;
	int r = blkdev_issue_flush(rbk->bdev);

	if (r) {
		rb_set_error(-r, "flush of %pg failed", rbk->bdev);
		return -1;
	}
	return 0;
}

static const struct rb_store_ops rbk_store_ops = {
	.name = "bio",
	.submit = rbk_store_submit,
	.flush = rbk_store_flush,
};

void rbk_store_init(struct rbk *rbk)
{
	rbk->store = (struct rb_store){
		.ops = &rbk_store_ops,
		.handle = rbk,
		.size = rbk->rb.size,
		.can_fua = true,
		.connections = 1,
	};
	rbk->rb.store = &rbk->store;
}
