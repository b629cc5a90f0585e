// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: the target.  Table line:
 *
 *   <start> <len> ramback <backing dev> [<chunk sectors> [<#features> <feature>...]]
 *
 *   chunk sectors  power of two, 8 (4 KiB, the default) to 32768 (16 MiB)
 *   features       writethrough   start in writethrough mode
 *                  nopopulate     no background populate: chunks are
 *                                 loaded only when first read or
 *                                 partly written
 *                  flush_rate <B/s>     cap write back (0: none)
 *                  populate_rate <B/s>  cap background populate
 *                  dirty_max <bytes>    writers wait while dirty, in
 *                                       flight and unsynced data reach it
 *                  ups_window <s>       ... or what write back can make
 *                                       durable in that many seconds
 *
 * The RAM image is allocated by the target (len sectors of zeroed pages)
 * and the backing device holds the data at the same offsets, from
 * sector 0.  Loading a table reads nothing: populate starts at the first
 * resume, so on a table reload it begins only after the old table's
 * postsuspend wrote back all it held.
 *
 * Messages:  writeback | writethrough   switch the mode
 *            flush                       wait until everything written
 *                                        so far is on the backing
 *                                        device, flushed (-EIO if not)
 *            populate | nopopulate       resume or pause the background
 *                                        populate
 *
 * Status (INFO):
 *   <error> <chunks> <loaded> <dirty> <inflight> <mode> <populate>
 *   <demand loaded> <stored> <written through>
 *   <stored bytes> <loaded bytes> <unsynced bytes> <write back B/s>
 *   <populate B/s> <syncs> <dirty limit> <throttled>
 * error is the first backing device error (-errno, 0 if none); chunks,
 * loaded, dirty and inflight (being written back now) count chunks;
 * populate is populated, populating, paused or off; demand loaded and
 * stored count chunks; written through counts bios; unsynced bytes are
 * written and not yet covered by a good flush of the backing device;
 * the two rates are measured (0: not yet); syncs counts good flushes;
 * dirty limit is the limit in force (bytes, 0: none), throttled counts
 * writes that had to wait for it.
 * Fields are only ever appended.
 *
 * Flushes (REQ_PREFLUSH) complete at once and FUA means nothing in
 * writeback mode: the data is safe in RAM, as with the 2008 patch and the
 * nbdkit plugin's fsync=ignore; writethrough mode writes through with FUA.
 * Suspend writes back every dirty chunk before it returns, and so does
 * remove; the RAM image is freed only after that.
 *
 * When the backing device fails, suspend and remove retry until it works
 * or dmsetup is killed (rbk_drain).  Dirty data is never dropped:
 *   - an interrupted suspend leaves the device suspended with the data in
 *     RAM; resume makes it usable again;
 *   - a table of the same length and chunk size loaded over it takes the
 *     RAM image over at its first resume (rbk_take_over), so the data can
 *     move to another backing device; a table of another geometry is
 *     refused while the live table holds data it cannot write back;
 *   - remove cannot fail once dm has begun it, so an interrupted remove
 *     leaves an orphan (rbk_orphan): the RAM image, the flusher and an
 *     open reference to the backing device, which write the data back
 *     when the device works and then free themselves.  The module stays
 *     loaded until then.
 *
 * Why one file of over 700 lines: it is the target's device-mapper side
 * only (table parsing, map, suspend and resume, take-over, orphans,
 * messages, status), whose life-cycle rules above tie the callbacks to
 * one another, as dm targets keep them in one file.  Everything else is
 * apart: the engine in lib/, its environment in rbk-env.c, bios in
 * rbk-io.c, the kthreads in rbk-bg.c, the backing device in rbk-store.c.
 */

#include <linux/module.h>
#include <linux/slab.h>

#include "dm-ramback.h"

#define RBK_DEFAULT_CHUNK_SECTORS	8
#define RBK_MAX_CHUNK_SECTORS		32768
#define RBK_MAX_ZERO_SECTORS		(1U << 21)	/* 1 GiB */

/*
 * Every ramback target, so that a table loaded over a live one on the
 * same mapped device and sector can find it: to refuse a geometry that
 * could not take its dirty data over (rbk_ctr), and to take it over
 * (rbk_take_over).  Entries come and go with ctr and dtr.
 * [rbk_registry_lock, which also guards each entry's resumed and
 * handed_over]
 */
static LIST_HEAD(rbk_registry);
static DEFINE_MUTEX(rbk_registry_lock);

/* The live table's target that 'rbk' would replace (registry lock held). */
static struct rbk *rbk_predecessor(struct rbk *rbk)
{
	struct rbk *o;

	list_for_each_entry(o, &rbk_registry, list)
		if (o != rbk && o->md == rbk->md &&
		    o->ti->begin == rbk->ti->begin &&
		    o->ti->table != rbk->ti->table &&
		    o->resumed && !o->handed_over)
			return o;
	return NULL;
}

static bool rbk_same_geometry(const struct rbk *a, const struct rbk *b)
{
	return a->rb.size == b->rb.size &&
	       a->rb.chunk_shift == b->rb.chunk_shift;
}

static void rbk_set_suspended(struct rbk *rbk, bool suspended)
{
	spin_lock(&rbk->lock);		/* see rbk_populate_begin() */
	WRITE_ONCE(rbk->suspended, suspended);
	spin_unlock(&rbk->lock);
}

static const char *rbk_mode_name(int mode)
{
	return mode == RB_MODE_WRITETHROUGH ? "writethrough" : "writeback";
}

static const char *rbk_populate_state(struct rbk *rbk)
{
	if (rb_atomic_load(&rbk->rb.populated))
		return "populated";
	if (!READ_ONCE(rbk->populate))
		return "off";
	if (READ_ONCE(rbk->suspended) ||
	    rb_atomic_load(&rbk->rb.mode) == RB_MODE_WRITETHROUGH)
		return "paused";
	return "populating";
}

static int rbk_map(struct dm_target *ti, struct bio *bio)
{
	struct rbk *rbk = ti->private;
	struct rbk_bio *pb = dm_per_bio_data(bio, sizeof(*pb));
	u64 offset;

	/* Empty flushes: RAM is the durable copy (see above). */
	if (!bio->bi_iter.bi_size) {
		bio_endio(bio);
		return DM_MAPIO_SUBMITTED;
	}
	switch (bio_op(bio)) {
	case REQ_OP_READ:
	case REQ_OP_WRITE:
	case REQ_OP_DISCARD:
	case REQ_OP_WRITE_ZEROES:
		break;
	default:
		return DM_MAPIO_KILL;
	}

	offset = (u64)dm_target_offset(ti, bio->bi_iter.bi_sector) << SECTOR_SHIFT;

	/* io.c's fast path: no lock, no sleep, nothing submitted. */
	if ((bio_op(bio) == REQ_OP_READ || bio_op(bio) == REQ_OP_WRITE) &&
	    rbk_try_io(rbk, bio, offset)) {
		bio_endio(bio);
		return DM_MAPIO_SUBMITTED;
	}

	/* It may wait (a load, a range, the dirty limit, backing I/O): defer. */
	pb->rbk = rbk;
	pb->offset = offset;
	pb->count = bio->bi_iter.bi_size;
	INIT_WORK(&pb->work, rbk_slow_work);
	queue_work(rbk->wq, &pb->work);
	return DM_MAPIO_SUBMITTED;
}

/* Everything but the threads and the dm device (gone, or put already). */
void rbk_free(struct rbk *rbk)
{
	struct rb *rb = &rbk->rb;

	bioset_exit(&rbk->bs);
	if (rbk->rb_ready) {
		chunkmap_free(&rb->map);
		rangelock_destroy(&rb->rl);
		rb_free(rb->unsynced.v);
		rb_mutex_destroy(&rb->lock);
		rb_mutex_destroy(&rb->sync_lock);
		rb_cond_destroy(&rb->flusher_cond);
		rb_cond_destroy(&rb->populator_cond);
		rb_cond_destroy(&rb->space_cond);
		rb_cond_destroy(&rb->sync_cond);
		rb_cond_destroy(&rb->populated_cond);
	}
	rbk_ram_free(rbk);
	if (rbk->orphan)
		blkdev_put(rbk->bdev, rbk->bdev_mode);
	kfree(rbk);
}

/*
 * The table is being destroyed with dirty data that could not be
 * written back (the remove, or the reload nothing took the data over
 * in, was interrupted).  The device goes whatever a target does; its
 * data must not.  Keep the RAM image, the flusher and our own open
 * reference to the backing device, pin the module, and let the flusher
 * free it all once a sweep has written everything back (rbk-bg.c).
 *
 * The backing device is claimed exclusively once dm lets go of it: a
 * new table or a mount on it would read data older than ours, and our
 * late write back would then land under its newer writes.
 * False if the backing device cannot be held: then the data is lost.
 */
static bool rbk_orphan(struct rbk *rbk, struct dm_target *ti)
{
	const fmode_t mode = FMODE_READ | FMODE_WRITE;
	u64 dirty = chunkmap_dirty(&rbk->rb.map);
	dev_t dev = rbk->bdev->bd_dev;
	struct block_device *bdev, *excl;

	/* The same block_device as rbk->bdev, opened once more. */
	bdev = blkdev_get_by_dev(dev, mode, NULL);
	if (IS_ERR(bdev)) {
		DMERR("%s: %llu dirty chunks are lost: they were not written back and %pg cannot be held open (error %ld)",
		      rbk_name(rbk), dirty, rbk->bdev, PTR_ERR(bdev));
		return false;
	}
	if (rbk->populator)
		kthread_stop(rbk->populator);
	rbk->populator = NULL;
	dm_put_device(ti, rbk->dev);
	rbk->dev = NULL;
	rbk->ti = NULL;
	rbk->bdev_mode = mode;
	excl = blkdev_get_by_dev(dev, mode | FMODE_EXCL, rbk);
	if (!IS_ERR(excl)) {
		blkdev_put(bdev, mode);
		bdev = excl;
		rbk->bdev_mode = mode | FMODE_EXCL;
	} else {
		DMWARN("%s: %pg is claimed by someone else, so it cannot be reserved for the data left in RAM (error %ld)",
		       rbk_name(rbk), bdev, PTR_ERR(excl));
	}
	rbk->bdev = bdev;
	__module_get(THIS_MODULE);	/* put by the flusher as it exits */
	rbk->flusher = NULL;		/* it ends by itself, nobody stops it */
	WRITE_ONCE(rbk->orphan, true);
	/*
	 * The final drain, as at the plugin's clean stop: a flusher waiting
	 * for work (it may have cleaned everything since the drain gave up)
	 * wakes, and its next step finds the orphan clean (rbk-bg.c).
	 */
	rb_mutex_lock(&rbk->rb.lock);
	rb_atomic_store(&rbk->rb.stopping, true);
	rb_cond_broadcast(&rbk->rb.flusher_cond);
	rb_mutex_unlock(&rbk->rb.lock);
	DMERR("%s: removed with %llu dirty chunks not written back to %pg: they stay in RAM and are written back when it works (dm_ramback stays loaded until then)",
	      rbk_name(rbk), dirty, bdev);
	return true;
}

/* Safe on a half-built object: every constructor failure comes here. */
static void rbk_dtr(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	if (!rbk)
		return;
	ti->private = NULL;
	mutex_lock(&rbk_registry_lock);
	list_del_init(&rbk->list);
	mutex_unlock(&rbk_registry_lock);
	if (rbk->wq)
		destroy_workqueue(rbk->wq);	/* waits for deferred bios */
	/*
	 * Normally postsuspend has drained already, or a successor took the
	 * data over.  Never drop data.
	 */
	if (rbk->flusher && rbk->rb_ready && !rbk->handed_over &&
	    chunkmap_dirty(&rbk->rb.map) && rbk_drain(rbk) &&
	    chunkmap_dirty(&rbk->rb.map) && rbk_orphan(rbk, ti))
		return;
	rbk_stop_threads(rbk);
	if (rbk->dev)
		dm_put_device(ti, rbk->dev);
	rbk_free(rbk);
}

static int rbk_parse_features(struct rbk *rbk, struct dm_arg_set *as,
			      char **error)
{
	static const struct dm_arg _args[] = {
		{0, 10, "Invalid number of feature arguments"},
	};
	unsigned int n;
	int r;

	if (!as->argc)
		return 0;
	r = dm_read_arg_group(_args, as, &n, error);
	if (r)
		return r;
	while (n--) {
		const char *f = dm_shift_arg(as);

		if (!strcasecmp(f, "writethrough")) {
			rbk->rb.mode = RB_MODE_WRITETHROUGH;
		} else if (!strcasecmp(f, "nopopulate")) {
			rbk->populate = false;
		} else if (!strcasecmp(f, "flush_rate") ||
			   !strcasecmp(f, "populate_rate") ||
			   !strcasecmp(f, "dirty_max") ||
			   !strcasecmp(f, "ups_window")) {
			const char *v = n ? dm_shift_arg(as) : NULL;
			u64 x;

			if (!v || kstrtou64(v, 10, &x) ||
			    (!strcasecmp(f, "ups_window") && x > 86400)) {
				*error = "flush_rate, populate_rate (bytes per second), dirty_max (bytes) and ups_window (seconds, at most 86400) take a number; 0: off";
				return -EINVAL;
			}
			n--;
			if (!strcasecmp(f, "flush_rate"))
				rbk->rb.cfg.flush_rate = x;
			else if (!strcasecmp(f, "populate_rate"))
				rbk->rb.cfg.populate_rate = x;
			else if (!strcasecmp(f, "dirty_max"))
				rbk->rb.cfg.dirty_max = x;
			else
				rbk->rb.cfg.ups_window = x;
		} else {
			*error = "Unknown feature argument";
			return -EINVAL;
		}
	}
	if (as->argc) {
		*error = "Too many arguments";
		return -EINVAL;
	}
	return 0;
}

/* The shared engine's state, as lib/engine/core.c sets it up for the plugin. */
static int rbk_rb_init(struct rbk *rbk)
{
	struct rb *rb = &rbk->rb;

	if (chunkmap_init(&rb->map, rb->nchunks) == -1)
		return -ENOMEM;
	rangelock_init(&rb->rl);
	rb_mutex_init(&rb->lock);
	rb_mutex_init(&rb->sync_lock);
	rb_cond_init(&rb->flusher_cond);
	rb_cond_init(&rb->populator_cond);
	rb_cond_init(&rb->space_cond);
	rb_cond_init(&rb->sync_cond);
	rb_cond_init(&rb->populated_cond);
	rb->start_ns = rb_now_ns();
	rb->flush_rate.bps = rb->cfg.flush_rate;
	rb->populate_rate.bps = rb->cfg.populate_rate;
	rbi_recompute_limit(rb);
	rb->cfg.populate = rbk->populate;
	rb->kick_nowait = rbk_kick_nowait;	/* map() */
	rbk->rb_ready = true;
	return 0;
}

static int rbk_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct dm_arg_set as = { .argc = argc, .argv = argv };
	unsigned int chunk_sectors = RBK_DEFAULT_CHUNK_SECTORS;
	struct rbk *rbk, *old;
	const char *arg;
	char dummy;
	int r;

	if (argc < 1) {
		ti->error = "Usage: <backing dev> [<chunk sectors> [<#features> <feature>...]]";
		return -EINVAL;
	}
	rbk = kzalloc(sizeof(*rbk), GFP_KERNEL);
	if (!rbk) {
		ti->error = "Cannot allocate the ramback structure";
		return -ENOMEM;
	}
	ti->private = rbk;
	rbk->ti = ti;
	rbk->md = dm_table_get_md(ti->table);
	strscpy(rbk->name, dm_device_name(rbk->md), sizeof(rbk->name));
	INIT_LIST_HEAD(&rbk->list);
	rbk->rb.mode = RB_MODE_WRITEBACK;
	rbk->populate = true;
	rbk->suspended = true;		/* until the first resume */
	spin_lock_init(&rbk->lock);
	init_waitqueue_head(&rbk->populator_wait);
	init_waitqueue_head(&rbk->populator_idle);
	INIT_WORK(&rbk->kick, rbk_kick_work);

	arg = dm_shift_arg(&as);
	r = dm_get_device(ti, arg, dm_table_get_mode(ti->table), &rbk->dev);
	if (r) {
		ti->error = "Backing device lookup failed";
		goto bad;
	}
	rbk->bdev = rbk->dev->bdev;
	arg = dm_shift_arg(&as);
	if (arg && (sscanf(arg, "%u%c", &chunk_sectors, &dummy) != 1 ||
		    !is_power_of_2(chunk_sectors) ||
		    chunk_sectors < PAGE_SIZE >> SECTOR_SHIFT ||
		    chunk_sectors > RBK_MAX_CHUNK_SECTORS)) {
		ti->error = "Invalid chunk size (sectors: a power of two, 8 to 32768)";
		r = -EINVAL;
		goto bad;
	}
	r = rbk_parse_features(rbk, &as, &ti->error);
	if (r)
		goto bad;

	if (bdev_nr_sectors(rbk->dev->bdev) < ti->len) {
		ti->error = "Backing device is smaller than the target";
		r = -EINVAL;
		goto bad;
	}
	rbk->rb.size = (u64)ti->len << SECTOR_SHIFT;
	rbk->rb.chunk_shift = ilog2(chunk_sectors) + SECTOR_SHIFT;
	rbk->rb.chunk_size = 1U << rbk->rb.chunk_shift;
	rbk->rb.nchunks = DIV_ROUND_UP_ULL(rbk->rb.size, rbk->rb.chunk_size);
	if (rbk->rb.size >= rb_phys_mem()) {
		ti->error = "Target is larger than the machine's memory";
		r = -ENOMEM;
		goto bad;
	}
	/* It must be able to take over what the live table cannot write. */
	mutex_lock(&rbk_registry_lock);
	old = rbk_predecessor(rbk);
	r = old && rbk_stuck(old) && !rbk_same_geometry(old, rbk) ? -EBUSY : 0;
	mutex_unlock(&rbk_registry_lock);
	if (r) {
		ti->error = "The live table holds dirty data it cannot write back: a table that takes it over must have the same length and chunk size";
		goto bad;
	}

	rbk_store_init(rbk);
	r = rbk_rb_init(rbk);
	if (r) {
		ti->error = "Cannot allocate the chunk map";
		goto bad;
	}
	r = rbk_ram_alloc(rbk);
	if (r) {
		ti->error = "Cannot allocate the RAM image";
		goto bad;
	}
	r = bioset_init(&rbk->bs, BIO_POOL_SIZE, 0, BIOSET_NEED_BVECS);
	if (r) {
		ti->error = "Cannot allocate the bio set";
		goto bad;
	}
	rbk->wq = alloc_workqueue("kramback/%s", WQ_MEM_RECLAIM | WQ_UNBOUND,
				  0, rbk_name(rbk));
	if (!rbk->wq) {
		ti->error = "Cannot allocate the workqueue";
		r = -ENOMEM;
		goto bad;
	}
	r = rbk_start_threads(rbk);
	if (r) {
		ti->error = "Cannot start the flusher and populator";
		goto bad;
	}

	ti->per_io_data_size = sizeof(struct rbk_bio);
	ti->num_flush_bios = 1;
	/* RAM takes discards whatever the backing device does; write
	 * zeroes only if the backing device has them (dm's rule).
	 */
	ti->num_discard_bios = 1;
	ti->discards_supported = true;
	ti->num_write_zeroes_bios = 1;
	ti->flush_supported = true;	/* RAM is a volatile cache, whatever the backing */
	mutex_lock(&rbk_registry_lock);
	list_add(&rbk->list, &rbk_registry);
	mutex_unlock(&rbk_registry_lock);
	DMINFO("%s: %llu chunks of %u sectors over %s, %s%s",
	       rbk_name(rbk), rbk->rb.nchunks, chunk_sectors, rbk->dev->name,
	       rbk_mode_name(rbk->rb.mode), rbk->populate ? "" : ", nopopulate");
	return 0;
bad:
	rbk_dtr(ti);
	return r;
}

static void rbk_presuspend(struct dm_target *ti)
{
	rbk_set_suspended(ti->private, true);	/* the populator pauses */
}

/* The suspend failed (interrupted while bios were in flight). */
static void rbk_presuspend_undo(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	rbk_set_suspended(rbk, false);
	rbk_kick_populator(rbk);
}

/*
 * No application I/O is left.  Wait for a populate read in flight, then
 * write everything back.  If that fails and dmsetup is killed, dm leaves
 * the device suspended anyway (postsuspend cannot fail): the data stays
 * in RAM, and the flusher keeps retrying it in the background.
 */
static void rbk_postsuspend(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	rbk_set_suspended(rbk, true);
	flush_workqueue(rbk->wq);
	rbk_populator_wait_idle(rbk);
	if (rbk_drain(rbk))
		DMERR("%s: %llu dirty chunks are not written back to %pg: they stay in RAM",
		      rbk_name(rbk), chunkmap_dirty(&rbk->rb.map), rbk->bdev);
}

/*
 * At a table's first resume: the table it replaces, suspended and
 * swapped out by now, may still hold dirty data (its postsuspend could
 * not write it back and was interrupted).  Take its RAM image over
 * rather than leave the data to its destructor.  Its threads are
 * stopped first, so nothing touches the image any more; then the pages
 * change hands (same length, so the same number) and the chunk states
 * are copied.  On another backing device CLEAN chunks become DIRTY: only
 * the old device matched them.  EMPTY chunks stay EMPTY and are loaded
 * from the new device.
 */
static void rbk_take_over(struct rbk *rbk)
{
	u64 c, n, dirty, loaded;
	struct rbk *old;
	bool same_dev;

	mutex_lock(&rbk_registry_lock);
	old = rbk_predecessor(rbk);
	if (old && !chunkmap_dirty(&old->rb.map))
		old = NULL;
	if (old && !rbk_same_geometry(old, rbk)) {
		DMERR("%s: cannot take over %llu dirty chunks from the previous table: the length or chunk size differs",
		      rbk_name(rbk), chunkmap_dirty(&old->rb.map));
		old = NULL;
	}
	if (old)
		old->handed_over = true;
	rbk->resumed = true;
	mutex_unlock(&rbk_registry_lock);
	if (!old)
		return;

	rbk_stop_threads(old);
	swap(rbk->rb.ram.base, old->rb.ram.base);
	same_dev = old->bdev->bd_dev == rbk->bdev->bd_dev;
	for (c = 0; c < rbk->rb.nchunks; c += n) {
		enum chunk_state s = chunkmap_get(&old->rb.map, c);

		n = chunkmap_run(&old->rb.map, c, rbk->rb.nchunks - c, CS_BIT(s));
		if (s != CS_EMPTY)
			chunkmap_move(&rbk->rb.map, c, n, CS_BIT(CS_EMPTY),
				      s == CS_CLEAN && same_dev ? CS_CLEAN : CS_DIRTY,
				      NULL);
	}
	dirty = chunkmap_dirty(&rbk->rb.map);
	loaded = chunkmap_loaded(&rbk->rb.map);
	DMINFO("%s: took over the previous table's RAM image: %llu chunks loaded, %llu of them dirty; %llu to write back to %pg",
	       rbk_name(rbk), loaded, chunkmap_dirty(&old->rb.map), dirty,
	       rbk->bdev);
	rbi_check_populated(&rbk->rb);
	rbi_flusher_kick(&rbk->rb);
}

static int rbk_preresume(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	if (!rbk->resumed)
		rbk_take_over(rbk);
	return 0;
}

static void rbk_resume(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	rbk_set_suspended(rbk, false);
	rbk_kick_populator(rbk);
}

static int rbk_message(struct dm_target *ti, unsigned int argc, char **argv,
		       char *result, unsigned int maxlen)
{
	struct rbk *rbk = ti->private;

	if (argc != 1) {
		DMWARN("%s: messages take no arguments", rbk_name(rbk));
		return -EINVAL;
	}
	if (!strcasecmp(argv[0], "writeback")) {
		rb_atomic_store(&rbk->rb.mode, RB_MODE_WRITEBACK);
		rbk_kick_populator(rbk);
	} else if (!strcasecmp(argv[0], "writethrough")) {
		rb_atomic_store(&rbk->rb.mode, RB_MODE_WRITETHROUGH);
	} else if (!strcasecmp(argv[0], "flush")) {
		return rbk_sync(rbk, true);
	} else if (!strcasecmp(argv[0], "populate")) {
		WRITE_ONCE(rbk->populate, true);
		rbk_kick_populator(rbk);
	} else if (!strcasecmp(argv[0], "nopopulate")) {
		WRITE_ONCE(rbk->populate, false);
	} else {
		DMWARN("%s: unrecognised message '%s'", rbk_name(rbk), argv[0]);
		return -EINVAL;
	}
	return 0;
}

static void rbk_status(struct dm_target *ti, status_type_t type,
		       unsigned int status_flags, char *result,
		       unsigned int maxlen)
{
	struct rbk *rbk = ti->private;
	struct rb *rb = &rbk->rb;
	unsigned int chunk_sectors = 1U << (rb->chunk_shift - SECTOR_SHIFT);
	int mode = rb_atomic_load(&rb->mode);
	bool populate = READ_ONCE(rbk->populate);
	unsigned int sz = 0, nf;

	switch (type) {
	case STATUSTYPE_INFO:
		DMEMIT("%d %llu %llu %llu %lld %s %s %lld %lld %lld",
		       READ_ONCE(rbk->error), rb->nchunks,
		       chunkmap_loaded(&rb->map), chunkmap_dirty(&rb->map),
		       (long long)rb_atomic_load(&rb->inflight_chunks),
		       rbk_mode_name(mode), rbk_populate_state(rbk),
		       (long long)(rb_atomic_load(&rb->demand_loaded_bytes) >>
				   rb->chunk_shift),
		       (long long)(rb_atomic_load(&rb->stored_bytes) >>
				   rb->chunk_shift),
		       (long long)rb_atomic_load(&rb->written_through));
		DMEMIT(" %llu %llu %llu %llu %llu %llu",
		       rb_atomic_load(&rb->stored_bytes),
		       rb_atomic_load(&rb->loaded_bytes),
		       rb_atomic_load(&rb->unsynced_bytes),
		       rb_atomic_load(&rb->flush_bw.bps),
		       rb_atomic_load(&rb->populate_bw.bps),
		       rb_atomic_load(&rb->syncs));
		DMEMIT(" %llu %llu", rb_atomic_load(&rb->dirty_limit),
		       rb_atomic_load(&rb->throttled));
		DMEMIT(" %llu", rb_atomic_load(&rb->zeroed_bytes));
		break;
	case STATUSTYPE_TABLE:
		/* The current mode, so a reload keeps what a message set. */
		DMEMIT("%s %u", rbk->dev->name, chunk_sectors);
		nf = (mode == RB_MODE_WRITETHROUGH) + !populate +
		     2 * !!rb->cfg.flush_rate + 2 * !!rb->cfg.populate_rate +
		     2 * !!rb->cfg.dirty_max + 2 * !!rb->cfg.ups_window;
		if (nf)
			DMEMIT(" %u", nf);
		if (mode == RB_MODE_WRITETHROUGH)
			DMEMIT(" writethrough");
		if (!populate)
			DMEMIT(" nopopulate");
		if (rb->cfg.flush_rate)
			DMEMIT(" flush_rate %llu", rb->cfg.flush_rate);
		if (rb->cfg.populate_rate)
			DMEMIT(" populate_rate %llu", rb->cfg.populate_rate);
		if (rb->cfg.dirty_max)
			DMEMIT(" dirty_max %llu", rb->cfg.dirty_max);
		if (rb->cfg.ups_window)
			DMEMIT(" ups_window %u", rb->cfg.ups_window);
		break;
	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(ti->type);
		DMEMIT(",backing_device=%s,chunk_sectors=%u,mode=%s,populate=%c,flush_rate=%llu,populate_rate=%llu,dirty_max=%llu,ups_window=%u;",
		       rbk->dev->name, chunk_sectors, rbk_mode_name(mode),
		       populate ? 'y' : 'n', rb->cfg.flush_rate,
		       rb->cfg.populate_rate, rb->cfg.dirty_max,
		       rb->cfg.ups_window);
		break;
	}
}

/*
 * Discards and write-zeroes go through lib's rb_zero (rbk-io.c) in
 * pieces, so any length works; chunk-sized pieces are the ones that
 * free nothing but become ZERO chunks without a load.
 */
static void rbk_io_hints(struct dm_target *ti, struct queue_limits *limits)
{
	struct rbk *rbk = ti->private;

	limits->discard_granularity = rbk->rb.chunk_size;
	limits->max_discard_sectors = RBK_MAX_ZERO_SECTORS;
	limits->max_hw_discard_sectors = RBK_MAX_ZERO_SECTORS;
	limits->max_write_zeroes_sectors = RBK_MAX_ZERO_SECTORS;
}

static int rbk_iterate_devices(struct dm_target *ti,
			       iterate_devices_callout_fn fn, void *data)
{
	struct rbk *rbk = ti->private;

	return fn(ti, rbk->dev, 0, ti->len, data);
}

static struct target_type rbk_target = {
	.name			= "ramback",
	.version		= {1, 2, 0},
	.module			= THIS_MODULE,
	.ctr			= rbk_ctr,
	.dtr			= rbk_dtr,
	.map			= rbk_map,
	.presuspend		= rbk_presuspend,
	.presuspend_undo	= rbk_presuspend_undo,
	.postsuspend		= rbk_postsuspend,
	.preresume		= rbk_preresume,
	.resume			= rbk_resume,
	.message		= rbk_message,
	.status			= rbk_status,
	.iterate_devices	= rbk_iterate_devices,
	.io_hints		= rbk_io_hints,
};

static int __init dm_ramback_init(void)
{
	int r = dm_register_target(&rbk_target);

	if (r < 0)
		DMERR("register failed %d", r);
	return r;
}

static void __exit dm_ramback_exit(void)
{
	dm_unregister_target(&rbk_target);
}

module_init(dm_ramback_init);
module_exit(dm_ramback_exit);

MODULE_DESCRIPTION(DM_NAME " ramback: a RAM disk written back to a backing device");
MODULE_AUTHOR("The ramback authors");
MODULE_LICENSE("GPL");
