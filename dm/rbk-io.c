// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: the RAM image, I/O to the backing device, and the slow
 * paths that map() defers to the workqueue.
 *
 * The slow paths follow lib/io.c:
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
 * The kernel form never creates ZERO chunks: it does not take discards
 * or write-zeroes.
 */

#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>

#include "dm-ramback.h"

int rbk_ram_alloc(struct rbk *rbk)
{
	unsigned long i;

	rbk->npages = DIV_ROUND_UP_ULL(rbk->size, PAGE_SIZE);
	rbk->pages = kvcalloc(rbk->npages, sizeof(*rbk->pages), GFP_KERNEL);
	if (!rbk->pages)
		return -ENOMEM;
	/*
	 * Zeroed, so no stale kernel memory can ever be read through the
	 * device even if a bug let a read see a chunk before its load.
	 * RETRY_MAYFAIL: a table too big for free memory fails to load
	 * instead of setting off the OOM killer.
	 */
	for (i = 0; i < rbk->npages; i++) {
		rbk->pages[i] = alloc_page(GFP_HIGHUSER | __GFP_ZERO |
					   __GFP_NOWARN | __GFP_RETRY_MAYFAIL);
		if (!rbk->pages[i])
			return -ENOMEM;
		if (!(i % 1024))
			cond_resched();
	}
	return 0;
}

void rbk_ram_free(struct rbk *rbk)
{
	unsigned long i;

	if (!rbk->pages)
		return;
	for (i = 0; i < rbk->npages && rbk->pages[i]; i++) {
		__free_page(rbk->pages[i]);
		if (!(i % 1024))
			cond_resched();
	}
	kvfree(rbk->pages);
	rbk->pages = NULL;
}

/* Copy the bio's data to (write) or from (read) RAM at byte 'offset'. */
void rbk_copy_bio(struct rbk *rbk, struct bio *bio, u64 offset, bool to_ram)
{
	struct bio_vec bv;
	struct bvec_iter iter;

	bio_for_each_segment(bv, bio, iter) {
		/*
		 * bv lies in one page; RAM pages may split it in two.  bv
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
			char *ram = kmap_local_page(rbk->pages[offset >> PAGE_SHIFT]);

			if (to_ram)
				memcpy_from_bvec(ram + po, &part);
			else
				memcpy_to_bvec(&part, ram + po);
			kunmap_local(ram);
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
	if (chunkmap_move(&rbk->map, c0, c1 - c0 + 1,
			  CS_BIT(CS_EMPTY) | CS_BIT(CS_CLEAN) | CS_BIT(CS_ZERO),
			  CS_DIRTY, NULL))
		rbk_kick_flusher(rbk);
}

void rbk_record_error(struct rbk *rbk, int err, const char *what,
		      u64 offset, u64 count)
{
	cmpxchg(&rbk->error, 0, err);
	DMERR_LIMIT("%s: %s of %llu bytes at %llu failed: error %d",
		    rbk_name(rbk), what, count, offset, err);
}

/* ---- I/O between RAM pages and the backing device ---------------------- */

void rbk_sync_init(struct rbk_sync *sync)
{
	atomic_set(&sync->pending, 1);
	init_completion(&sync->done);
}

/* Drop the submitter's reference and wait for every bio of every span. */
void rbk_sync_wait(struct rbk_sync *sync)
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
 * Read or write RAM bytes [offset, offset+len) from or to the same
 * place on the backing device, in as few bios as the pages allow.
 * Submits only; rbk_sync_wait() on span->sync waits, and span->status
 * is then the first error of any of its bios.  Process context only
 * (never map()): the bio set's mempool may sleep, and each bio is
 * submitted before the next is allocated so the pool always drains.
 */
void rbk_ram_io(struct rbk *rbk, blk_opf_t opf, u64 offset, u64 len,
		struct rbk_span *span)
{
	struct block_device *bdev = rbk->bdev;

	while (len) {
		u64 pages = DIV_ROUND_UP_ULL((offset & ~PAGE_MASK) + len,
					     PAGE_SIZE);
		unsigned short nvec = min_t(u64, pages, BIO_MAX_VECS);
		struct bio *bio = bio_alloc_bioset(bdev, nvec, opf, GFP_NOIO,
						   &rbk->bs);

		bio->bi_iter.bi_sector = offset >> SECTOR_SHIFT;
		bio->bi_end_io = rbk_span_endio;
		bio->bi_private = span;
		while (len) {
			unsigned int po = offset & ~PAGE_MASK;
			unsigned int n = min_t(u64, len, PAGE_SIZE - po);

			if (bio_add_page(bio, rbk->pages[offset >> PAGE_SHIFT],
					 n, po) != n)
				break;
			offset += n;
			len -= n;
		}
		atomic_inc(&span->sync->pending);
		submit_bio(bio);
	}
}

/*
 * Load every EMPTY chunk of [first, first+n) from the backing device,
 * up to RBK_LOAD_RUNS runs in parallel.  The caller holds a range over
 * them, so nothing else can load or write them meanwhile.  Returns 0
 * or -errno; *loaded counts the chunks loaded.
 */
int rbk_load_chunks(struct rbk *rbk, u64 first, u64 n, u64 *loaded)
{
	u64 per_io = max_t(u64, RBK_RUN_BYTES >> rbk->chunk_shift, 1);
	u64 c = first, end = first + n;
	int err = 0;

	*loaded = 0;
	while (c < end && !err) {
		struct rbk_span spans[RBK_LOAD_RUNS];
		u64 run_first[RBK_LOAD_RUNS], run_n[RBK_LOAD_RUNS];
		struct rbk_sync sync;
		int k = 0, i;

		rbk_sync_init(&sync);
		while (c < end && k < RBK_LOAD_RUNS) {
			u64 len = chunkmap_run(&rbk->map, c,
					       min(end - c, per_io),
					       CS_BIT(CS_EMPTY));

			if (!len) {
				c++;
				continue;
			}
			run_first[k] = c;
			run_n[k] = len;
			spans[k] = (struct rbk_span){ .sync = &sync };
			rbk_ram_io(rbk, REQ_OP_READ, rbk_chunk_offset(rbk, c),
				   rbk_chunks_bytes(rbk, c, len), &spans[k]);
			k++;
			c += len;
		}
		rbk_sync_wait(&sync);

		for (i = 0; i < k; i++) {
			if (spans[i].status) {
				err = blk_status_to_errno(spans[i].status);
				rbk_record_error(rbk, err, "load",
					rbk_chunk_offset(rbk, run_first[i]),
					rbk_chunks_bytes(rbk, run_first[i],
							 run_n[i]));
				continue;
			}
			chunkmap_move(&rbk->map, run_first[i], run_n[i],
				      CS_BIT(CS_EMPTY), CS_CLEAN, NULL);
			*loaded += run_n[i];
		}
	}
	return err;
}

/* xchg() is fully ordered: after the loads' chunk moves (see rbk_loaded). */
void rbk_check_populated(struct rbk *rbk)
{
	if (READ_ONCE(rbk->populated) ||
	    chunkmap_loaded(&rbk->map) < rbk->nchunks)
		return;
	if (!xchg(&rbk->populated, true))
		DMINFO("%s: populated: all %llu chunks are in RAM",
		       rbk_name(rbk), rbk->nchunks);
}

/* ---- the slow paths ------------------------------------------------------ */

static void rbk_range(struct rbk *rbk, u64 c0, u64 c1, u64 *start, u64 *end)
{
	*start = rbk_chunk_offset(rbk, c0);
	*end = *start + rbk_chunks_bytes(rbk, c0, c1 - c0 + 1);
}

/* Does [offset, offset+count) cover chunk c only partly? */
static bool rbk_partial(struct rbk *rbk, u64 offset, u64 count, u64 c)
{
	u64 s = rbk_chunk_offset(rbk, c), e = s + rbk_chunks_bytes(rbk, c, 1);

	return offset > s || offset + count < e;
}

/* The chunks the write covers fully: [*f, *l]; false if there are none. */
static bool rbk_full_chunks(struct rbk *rbk, u64 offset, u64 count,
			    u64 c0, u64 c1, u64 *f, u64 *l)
{
	bool head = rbk_partial(rbk, offset, count, c0);
	bool tail = rbk_partial(rbk, offset, count, c1);

	if (c0 == c1) {
		*f = *l = c0;
		return !head;
	}
	*f = c0 + head;
	*l = c1 - tail;
	return *f <= *l;
}

/*
 * Load the head and tail chunks of a write that covers them only partly
 * (the rest of those chunks must come from the backing device).  The
 * caller holds the range.
 */
static int rbk_load_edges(struct rbk *rbk, u64 offset, u64 count,
			  u64 c0, u64 c1, u64 *loaded)
{
	u64 l;
	int r = 0;

	*loaded = 0;
	if (rbk_partial(rbk, offset, count, c0)) {
		r = rbk_load_chunks(rbk, c0, 1, &l);
		*loaded += l;
	}
	if (!r && c1 != c0 && rbk_partial(rbk, offset, count, c1)) {
		r = rbk_load_chunks(rbk, c1, 1, &l);
		*loaded += l;
	}
	return r;
}

static blk_status_t rbk_demand_read(struct rbk *rbk, struct bio *bio,
				    struct rbk_bio *pb)
{
	u64 c0 = rbk_chunk_of(rbk, pb->offset);
	u64 c1 = rbk_chunk_of(rbk, pb->offset + pb->count - 1);
	struct rl_node node;
	u64 start, end, loaded;
	int r;

	if (!rbk_loaded(rbk, c0, c1)) {
		rbk_range(rbk, c0, c1, &start, &end);
		rangelock_acquire(&rbk->rl, &node, start, end, RL_LOAD);
		r = rbk_load_chunks(rbk, c0, c1 - c0 + 1, &loaded);
		rangelock_release(&rbk->rl, &node);
		atomic64_add(loaded, &rbk->demand_loaded);
		rbk_check_populated(rbk);
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
	u64 c0 = rbk_chunk_of(rbk, pb->offset);
	u64 c1 = rbk_chunk_of(rbk, pb->offset + pb->count - 1);
	struct rl_node node;
	u64 start, end, loaded;
	int r;

	rbk_range(rbk, c0, c1, &start, &end);
	rangelock_acquire(&rbk->rl, &node, start, end, RL_WRITE);
	r = rbk_load_edges(rbk, pb->offset, pb->count, c0, c1, &loaded);
	if (!r) {
		rbk_copy_bio(rbk, bio, pb->offset, true);
		rbk_mark_dirty(rbk, c0, c1);
	}
	rangelock_release(&rbk->rl, &node);
	atomic64_add(loaded, &rbk->demand_loaded);
	rbk_check_populated(rbk);
	return r ? errno_to_blk_status(r) : BLK_STS_OK;
}

static blk_status_t rbk_writethrough(struct rbk *rbk, struct bio *bio,
				     struct rbk_bio *pb)
{
	u64 c0 = rbk_chunk_of(rbk, pb->offset);
	u64 c1 = rbk_chunk_of(rbk, pb->offset + pb->count - 1);
	struct rbk_span span;
	struct rbk_sync sync;
	struct rl_node node;
	u64 start, end, loaded, f, l;
	int r;

	rbk_range(rbk, c0, c1, &start, &end);
	rangelock_acquire(&rbk->rl, &node, start, end, RL_WRITE);
	r = rbk_load_edges(rbk, pb->offset, pb->count, c0, c1, &loaded);
	atomic64_add(loaded, &rbk->demand_loaded);
	if (r)
		goto out;
	rbk_copy_bio(rbk, bio, pb->offset, true);

	rbk_sync_init(&sync);
	span = (struct rbk_span){ .sync = &sync };
	rbk_ram_io(rbk, REQ_OP_WRITE | REQ_SYNC | REQ_FUA, pb->offset,
		   pb->count, &span);
	rbk_sync_wait(&sync);
	if (span.status) {
		r = blk_status_to_errno(span.status);
		rbk_record_error(rbk, r, "writethrough", pb->offset, pb->count);
		rbk_mark_dirty(rbk, c0, c1);
		goto out;
	}
	/*
	 * Fully covered chunks that were never loaded now match the backing
	 * device.  Loaded chunks keep their state: a CLEAN one still matches
	 * it, a DIRTY one may hold other writes not stored yet.
	 */
	if (rbk_full_chunks(rbk, pb->offset, pb->count, c0, c1, &f, &l))
		chunkmap_move(&rbk->map, f, l - f + 1, CS_BIT(CS_EMPTY),
			      CS_CLEAN, NULL);
	atomic64_inc(&rbk->written_through);
out:
	rangelock_release(&rbk->rl, &node);
	rbk_check_populated(rbk);
	return r ? errno_to_blk_status(r) : BLK_STS_OK;
}

void rbk_slow_work(struct work_struct *work)
{
	struct rbk_bio *pb = container_of(work, struct rbk_bio, work);
	struct bio *bio = dm_bio_from_per_bio_data(pb, sizeof(*pb));
	struct rbk *rbk = pb->rbk;

	if (bio_op(bio) == REQ_OP_READ)
		bio->bi_status = rbk_demand_read(rbk, bio, pb);
	else if (READ_ONCE(rbk->mode) == RBK_WRITETHROUGH)
		bio->bi_status = rbk_writethrough(rbk, bio, pb);
	else
		bio->bi_status = rbk_slow_write(rbk, bio, pb);
	bio_endio(bio);
}
