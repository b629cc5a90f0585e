// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: the RAM image, bios to and from it, and the slow paths
 * that map() defers to the workqueue.
 *
 * The request path is the one part of the engine the kernel form does
 * not share: lib/io.c works on a flat buffer and may wait in the
 * caller (the dirty limit, range locks, store I/O), while a bio is a
 * list of pages and map() must not sleep.  What it calls is shared:
 * loads go through lib/populate.c (rb_load_chunks), chunk states
 * through lib/chunkmap.c, ordering through lib/rangelock.c, and the
 * flusher is lib/flush.c's.  The slow paths follow lib/io.c:
 *
 *  - Demand read: some chunk of the bio is still EMPTY.  Take a LOAD
 *    range over its chunks, load what is still EMPTY, release, copy.
 *
 *  - Write in writeback mode with some chunk EMPTY: take a WRITE range,
 *    load the head and tail chunks if the bio covers them only partly,
 *    copy into RAM, mark dirty, release.  Holding the range is what keeps
 *    a background load from landing on top of the write (the populate
 *    race); fully covered EMPTY chunks go straight to DIRTY, unread.
 *
 *  - Writethrough: take a WRITE range (so it is ordered after any write
 *    back already in flight over those chunks, and later ones wait for
 *    it: the flush race), load edges, copy into RAM, then write the same
 *    bytes *from RAM* to the backing device with FUA.  Writing from RAM,
 *    not from the application's pages, means a racy application that
 *    changes its buffer during the write cannot make the backing device
 *    and RAM differ.  If the backing write fails, the range stays dirty
 *    in RAM (RAM is the truth; the flusher retries) and the bio fails.
 *
 * Discards and write-zeroes are lib's own path: rb_zero (lib/io.c) makes
 * fully covered chunks ZERO (written back as zeroes, which the backing
 * device may turn into a discard), loads and zeroes partial edges, and in
 * writethrough mode zeroes the backing device at once.
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

/* Copy the bio's data to (write) or from (read) RAM at byte 'offset'. */
void rbk_copy_bio(struct rbk *rbk, struct bio *bio, u64 offset, bool to_ram)
{
	struct bio_vec bv;
	struct bvec_iter iter;

	bio_for_each_segment(bv, bio, iter) {
		/*
		 * bv lies in one page; RAM pages may split it in two (the
		 * image is contiguous, but a copy stays in a page).  bv
		 * itself must stay intact: the iterator advances by its
		 * length.
		 */
		unsigned int done = 0;

		while (done < bv.bv_len) {
			unsigned int po = offset & ~PAGE_MASK;
			unsigned int n = min_t(unsigned int, bv.bv_len - done,
					       PAGE_SIZE - po);
			struct bio_vec part = {
				.bv_page = bv.bv_page,
				.bv_offset = bv.bv_offset + done,
				.bv_len = n,
			};
			char *ram = (char *)rbk->rb.ram.base + offset;

			if (to_ram)
				memcpy_from_bvec(ram, &part);
			else
				memcpy_to_bvec(&part, ram);
			done += n;
			offset += n;
		}
	}
}

/*
 * After RAM changed: chunks [c0, c1] are dirty.  Data first, state
 * second: the flusher moves a chunk to CLEAN before it captures the
 * data, so it either writes the new data or sees the chunk dirty again.
 */
void rbk_mark_dirty(struct rbk *rbk, u64 c0, u64 c1)
{
	/*
	 * "Data first, state second" needs a store-load fence here.  The
	 * copy into RAM is plain stores; on a chunk that is already DIRTY,
	 * chunkmap_move() below does no read-modify-write, only a load of
	 * the state word, and on x86 rb_atomic_load() is a plain load.  The
	 * flusher does the mirror image: a CAS of the state word (fully
	 * ordered) DIRTY -> CLEAN, then it reads the data (the bio's pages).
	 * That is the store-buffering pattern:
	 *
	 *   writer:  store data;   load state   (sees DIRTY: nothing to do)
	 *   flusher: CAS state;    load data    (captures the old bytes)
	 *
	 * Without a full barrier between the writer's store and its load,
	 * both loads may see the old values (x86's store buffer lets the
	 * load pass the stores still buffered), and the chunk ends CLEAN
	 * with the new bytes never written back.  With smp_mb() here and
	 * the CAS's full ordering on the flusher's side, one of the two
	 * loads must see the other side's store: either the writer sees
	 * CLEAN and its CAS makes the chunk DIRTY again, or the flusher's
	 * capture includes the new bytes.  The CLEAN -> DIRTY case is
	 * already ordered by its own CAS; this barrier costs one locked
	 * instruction per write bio on x86.
	 */
	smp_mb();
	if (chunkmap_move(&rbk->rb.map, c0, c1 - c0 + 1,
			  CS_BIT(CS_EMPTY) | CS_BIT(CS_CLEAN) | CS_BIT(CS_ZERO),
			  CS_DIRTY, NULL))
		rbk_kick_flusher(rbk);
}

/* ---- the slow paths ------------------------------------------------------ */

static void rbk_range(struct rb *rb, u64 c0, u64 c1, u64 *start, u64 *end)
{
	*start = chunk_offset(rb, c0);
	*end = *start + chunks_bytes(rb, c0, c1 - c0 + 1);
}

/* Does [offset, offset+count) cover chunk c only partly? */
static bool rbk_partial(struct rb *rb, u64 offset, u64 count, u64 c)
{
	u64 s = chunk_offset(rb, c), e = s + chunks_bytes(rb, c, 1);

	return offset > s || offset + count < e;
}

/* The chunks the write covers fully: [*f, *l]; false if there are none. */
static bool rbk_full_chunks(struct rb *rb, u64 offset, u64 count,
			    u64 c0, u64 c1, u64 *f, u64 *l)
{
	bool head = rbk_partial(rb, offset, count, c0);
	bool tail = rbk_partial(rb, offset, count, c1);

	if (c0 == c1) {
		*f = *l = c0;
		return !head;
	}
	*f = c0 + head;
	*l = c1 - tail;
	return *f <= *l;
}

/* lib's loader (populate.c); the caller holds a range over the chunks. */
static int rbk_load(struct rb *rb, u64 first, u64 n)
{
	return rb_load_chunks(rb, first, n) ? -EIO : 0;
}

/*
 * Load the head and tail chunks of a write that covers them only partly
 * (the rest of those chunks must come from the backing device).  The
 * caller holds the range.
 */
static int rbk_load_edges(struct rb *rb, u64 offset, u64 count, u64 c0, u64 c1)
{
	int r = 0;

	if (rbk_partial(rb, offset, count, c0))
		r = rbk_load(rb, c0, 1);
	if (!r && c1 != c0 && rbk_partial(rb, offset, count, c1))
		r = rbk_load(rb, c1, 1);
	return r;
}

static blk_status_t rbk_demand_read(struct rbk *rbk, struct bio *bio,
				    struct rbk_bio *pb)
{
	struct rb *rb = &rbk->rb;
	u64 c0 = chunk_of(rb, pb->offset);
	u64 c1 = chunk_of(rb, pb->offset + pb->count - 1);
	struct rl_node node;
	u64 start, end;
	int r;

	if (!rbk_loaded(rbk, c0, c1)) {
		rbk_range(rb, c0, c1, &start, &end);
		rangelock_acquire(&rb->rl, &node, start, end, RL_LOAD);
		r = rbk_load(rb, c0, c1 - c0 + 1);
		rangelock_release(&rb->rl, &node);
		rb_check_populated(rb);
		if (r)
			return errno_to_blk_status(r);
	}
	/* Loaded chunks never go back to EMPTY: no range needed to copy. */
	rbk_copy_bio(rbk, bio, pb->offset, false);
	return BLK_STS_OK;
}

static blk_status_t rbk_slow_write(struct rbk *rbk, struct bio *bio,
				   struct rbk_bio *pb)
{
	struct rb *rb = &rbk->rb;
	u64 c0 = chunk_of(rb, pb->offset);
	u64 c1 = chunk_of(rb, pb->offset + pb->count - 1);
	struct rl_node node;
	u64 start, end;
	int r;

	rbk_range(rb, c0, c1, &start, &end);
	rangelock_acquire(&rb->rl, &node, start, end, RL_WRITE);
	r = rbk_load_edges(rb, pb->offset, pb->count, c0, c1);
	if (!r) {
		rbk_copy_bio(rbk, bio, pb->offset, true);
		rbk_mark_dirty(rbk, c0, c1);
	}
	rangelock_release(&rb->rl, &node);
	rb_check_populated(rb);
	return r ? errno_to_blk_status(r) : BLK_STS_OK;
}

/*
 * Written from RAM with FUA: durable when it completes, so it needs no
 * sync and is not noted for one (lib's rb_write_done): the fsyncgate rule
 * is about writes a later cache flush must cover.
 */
static blk_status_t rbk_writethrough(struct rbk *rbk, struct bio *bio,
				     struct rbk_bio *pb)
{
	struct rb *rb = &rbk->rb;
	u64 c0 = chunk_of(rb, pb->offset);
	u64 c1 = chunk_of(rb, pb->offset + pb->count - 1);
	struct rbk_span span;
	struct rbk_sync sync;
	struct rl_node node;
	u64 start, end, f, l;
	int r;

	rbk_range(rb, c0, c1, &start, &end);
	rangelock_acquire(&rb->rl, &node, start, end, RL_WRITE);
	r = rbk_load_edges(rb, pb->offset, pb->count, c0, c1);
	if (r)
		goto out;
	rbk_copy_bio(rbk, bio, pb->offset, true);
	/*
	 * A ZERO chunk that now holds data must not be written back as a
	 * hole later: it is plain dirty now (still under our range, so the
	 * flusher cannot have seen it in between), as in lib/io.c.
	 */
	chunkmap_move(&rb->map, c0, c1 - c0 + 1, CS_BIT(CS_ZERO), CS_DIRTY,
		      NULL);

	rbk_sync_init(&sync);
	span = (struct rbk_span){ .sync = &sync };
	rbk_vm_io(rbk, REQ_OP_WRITE | REQ_SYNC | REQ_FUA,
		  (char *)rb->ram.base + pb->offset, pb->offset, pb->count,
		  &span);
	rbk_sync_wait(&sync);
	if (span.status) {
		char msg[100];

		r = blk_status_to_errno(span.status);
		snprintf(msg, sizeof(msg), "writethrough of %llu bytes at %llu: error %d",
			 pb->count, pb->offset, r);
		rb_record_error(rb, -r, msg);
		rb_atomic_store(&rb->store_failing, true);
		rbk_mark_dirty(rbk, c0, c1);
		goto out;
	}
	/*
	 * Fully covered chunks that were never loaded now match the backing
	 * device.  Loaded chunks keep their state: a CLEAN one still matches
	 * it, a DIRTY one may hold other writes not stored yet.
	 */
	if (rbk_full_chunks(rb, pb->offset, pb->count, c0, c1, &f, &l))
		chunkmap_move(&rb->map, f, l - f + 1, CS_BIT(CS_EMPTY),
			      CS_CLEAN, NULL);
	rb_atomic_add(&rb->stored_bytes, pb->count);
	atomic64_inc(&rbk->written_through);
out:
	rangelock_release(&rb->rl, &node);
	rb_check_populated(rb);
	return r ? errno_to_blk_status(r) : BLK_STS_OK;
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

void rbk_slow_work(struct work_struct *work)
{
	struct rbk_bio *pb = container_of(work, struct rbk_bio, work);
	struct bio *bio = dm_bio_from_per_bio_data(pb, sizeof(*pb));
	struct rbk *rbk = pb->rbk;

	if (bio_op(bio) == REQ_OP_DISCARD || bio_op(bio) == REQ_OP_WRITE_ZEROES)
		bio->bi_status = rbk_zero(rbk, pb);
	else if (bio_op(bio) == REQ_OP_READ)
		bio->bi_status = rbk_demand_read(rbk, bio, pb);
	else if (rb_atomic_load(&rbk->rb.mode) == RB_MODE_WRITETHROUGH)
		bio->bi_status = rbk_writethrough(rbk, bio, pb);
	else {
		/* The dirty limit: writers wait, never fail (lib/io.c). */
		rb_throttle(&rbk->rb);
		bio->bi_status = rbk_slow_write(rbk, bio, pb);
	}
	bio_endio(bio);
}
