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
 * error is the first backing device error (-errno, 0 if none); chunks,
 * loaded, dirty and inflight (being written back now) count chunks;
 * populate is populated, populating, paused or off; demand loaded and
 * stored count chunks; written through counts bios.
 *
 * Flushes (REQ_PREFLUSH) complete at once and FUA means nothing in
 * writeback mode: the data is safe in RAM, as with the 2008 patch and the
 * nbdkit plugin's fsync=ignore; writethrough mode writes through with FUA.
 * Suspend writes back every dirty chunk before it returns, and so does
 * remove; the RAM image is freed only after that.
 */

#include <linux/module.h>
#include <linux/slab.h>

#include "dm-ramback.h"

#define RBK_DEFAULT_CHUNK_SECTORS	8
#define RBK_MAX_CHUNK_SECTORS		32768

static const char *rbk_mode_name(int mode)
{
	return mode == RBK_WRITETHROUGH ? "writethrough" : "writeback";
}

static const char *rbk_populate_state(struct rbk *rbk)
{
	if (READ_ONCE(rbk->populated))
		return "populated";
	if (!READ_ONCE(rbk->populate))
		return "off";
	if (READ_ONCE(rbk->suspended) ||
	    READ_ONCE(rbk->mode) == RBK_WRITETHROUGH)
		return "paused";
	return "populating";
}

static int rbk_map(struct dm_target *ti, struct bio *bio)
{
	struct rbk *rbk = ti->private;
	struct rbk_bio *pb = dm_per_bio_data(bio, sizeof(*pb));
	u64 offset, count, c0, c1;

	/* Empty flushes: RAM is the durable copy (see above). */
	if (!bio->bi_iter.bi_size) {
		bio_endio(bio);
		return DM_MAPIO_SUBMITTED;
	}
	if (bio_op(bio) != REQ_OP_READ && bio_op(bio) != REQ_OP_WRITE)
		return DM_MAPIO_KILL;

	offset = (u64)dm_target_offset(ti, bio->bi_iter.bi_sector) << SECTOR_SHIFT;
	count = bio->bi_iter.bi_size;
	c0 = rbk_chunk_of(rbk, offset);
	c1 = rbk_chunk_of(rbk, offset + count - 1);

	/* The fast path: no lock, no sleep, nothing submitted. */
	if (rbk_loaded(rbk, c0, c1)) {
		if (bio_op(bio) == REQ_OP_READ) {
			rbk_copy_bio(rbk, bio, offset, false);
			bio_endio(bio);
			return DM_MAPIO_SUBMITTED;
		}
		if (READ_ONCE(rbk->mode) == RBK_WRITEBACK) {
			rbk_copy_bio(rbk, bio, offset, true);
			rbk_mark_dirty(rbk, c0, c1);
			bio_endio(bio);
			return DM_MAPIO_SUBMITTED;
		}
	}

	/* Needs backing I/O, which map() must not wait for: defer. */
	pb->rbk = rbk;
	pb->offset = offset;
	pb->count = count;
	INIT_WORK(&pb->work, rbk_slow_work);
	queue_work(rbk->wq, &pb->work);
	return DM_MAPIO_SUBMITTED;
}

/* Safe on a half-built object: every constructor failure comes here. */
static void rbk_dtr(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	if (!rbk)
		return;
	if (rbk->wq)
		destroy_workqueue(rbk->wq);	/* waits for deferred bios */
	/* Normally postsuspend has drained already; never drop data. */
	if (rbk->flusher && rbk->map_ready && chunkmap_dirty(&rbk->map))
		rbk_drain(rbk);
	rbk_stop_threads(rbk);
	bioset_exit(&rbk->bs);
	if (rbk->map_ready)
		chunkmap_free(&rbk->map);
	rangelock_destroy(&rbk->rl);
	rbk_ram_free(rbk);
	if (rbk->dev)
		dm_put_device(ti, rbk->dev);
	kfree(rbk);
	ti->private = NULL;
}

static int rbk_parse_features(struct rbk *rbk, struct dm_arg_set *as,
			      char **error)
{
	static const struct dm_arg _args[] = {
		{0, 2, "Invalid number of feature arguments"},
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
			rbk->mode = RBK_WRITETHROUGH;
		} else if (!strcasecmp(f, "nopopulate")) {
			rbk->populate = false;
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

static int rbk_ctr(struct dm_target *ti, unsigned int argc, char **argv)
{
	struct dm_arg_set as = { .argc = argc, .argv = argv };
	unsigned int chunk_sectors = RBK_DEFAULT_CHUNK_SECTORS;
	struct rbk *rbk;
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
	rbk->mode = RBK_WRITEBACK;
	rbk->populate = true;
	rbk->suspended = true;		/* until the first resume */
	spin_lock_init(&rbk->lock);
	init_waitqueue_head(&rbk->flusher_wait);
	init_waitqueue_head(&rbk->populator_wait);
	init_waitqueue_head(&rbk->sync_wait);
	atomic64_set(&rbk->inflight, 0);
	atomic64_set(&rbk->demand_loaded, 0);
	atomic64_set(&rbk->stored, 0);
	atomic64_set(&rbk->written_through, 0);
	rangelock_init(&rbk->rl);

	arg = dm_shift_arg(&as);
	r = dm_get_device(ti, arg, dm_table_get_mode(ti->table), &rbk->dev);
	if (r) {
		ti->error = "Backing device lookup failed";
		goto bad;
	}
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
	rbk->size = (u64)ti->len << SECTOR_SHIFT;
	rbk->chunk_shift = ilog2(chunk_sectors) + SECTOR_SHIFT;
	rbk->nchunks = DIV_ROUND_UP_ULL(rbk->size, 1ULL << rbk->chunk_shift);
	if (rbk->size >= rb_phys_mem()) {
		ti->error = "Target is larger than the machine's memory";
		r = -ENOMEM;
		goto bad;
	}

	if (chunkmap_init(&rbk->map, rbk->nchunks) == -1) {
		ti->error = "Cannot allocate the chunk map";
		r = -ENOMEM;
		goto bad;
	}
	rbk->map_ready = true;
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
	ti->flush_supported = true;	/* RAM is a volatile cache, whatever the backing */
	DMINFO("%s: %llu chunks of %u sectors over %s, %s%s",
	       rbk_name(rbk), rbk->nchunks, chunk_sectors, rbk->dev->name,
	       rbk_mode_name(rbk->mode), rbk->populate ? "" : ", nopopulate");
	return 0;
bad:
	rbk_dtr(ti);
	return r;
}

static void rbk_presuspend(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	WRITE_ONCE(rbk->suspended, true);	/* the populator pauses */
}

static void rbk_postsuspend(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	WRITE_ONCE(rbk->suspended, true);
	flush_workqueue(rbk->wq);
	rbk_drain(rbk);
}

static void rbk_resume(struct dm_target *ti)
{
	struct rbk *rbk = ti->private;

	WRITE_ONCE(rbk->suspended, false);
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
		WRITE_ONCE(rbk->mode, RBK_WRITEBACK);
		rbk_kick_populator(rbk);
	} else if (!strcasecmp(argv[0], "writethrough")) {
		WRITE_ONCE(rbk->mode, RBK_WRITETHROUGH);
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
	unsigned int chunk_sectors = 1U << (rbk->chunk_shift - SECTOR_SHIFT);
	int mode = READ_ONCE(rbk->mode);
	bool populate = READ_ONCE(rbk->populate);
	unsigned int sz = 0;

	switch (type) {
	case STATUSTYPE_INFO:
		DMEMIT("%d %llu %llu %llu %lld %s %s %lld %lld %lld",
		       READ_ONCE(rbk->error), rbk->nchunks,
		       chunkmap_loaded(&rbk->map), chunkmap_dirty(&rbk->map),
		       (long long)atomic64_read(&rbk->inflight),
		       rbk_mode_name(mode), rbk_populate_state(rbk),
		       (long long)atomic64_read(&rbk->demand_loaded),
		       (long long)atomic64_read(&rbk->stored),
		       (long long)atomic64_read(&rbk->written_through));
		break;
	case STATUSTYPE_TABLE:
		/* The current mode, so a reload keeps what a message set. */
		DMEMIT("%s %u", rbk->dev->name, chunk_sectors);
		if (mode == RBK_WRITETHROUGH || !populate)
			DMEMIT(" %u%s%s",
			       (unsigned int)(mode == RBK_WRITETHROUGH) + !populate,
			       mode == RBK_WRITETHROUGH ? " writethrough" : "",
			       populate ? "" : " nopopulate");
		break;
	case STATUSTYPE_IMA:
		DMEMIT_TARGET_NAME_VERSION(ti->type);
		DMEMIT(",backing_device=%s,chunk_sectors=%u,mode=%s,populate=%c;",
		       rbk->dev->name, chunk_sectors, rbk_mode_name(mode),
		       populate ? 'y' : 'n');
		break;
	}
}

static int rbk_iterate_devices(struct dm_target *ti,
			       iterate_devices_callout_fn fn, void *data)
{
	struct rbk *rbk = ti->private;

	return fn(ti, rbk->dev, 0, ti->len, data);
}

static struct target_type rbk_target = {
	.name			= "ramback",
	.version		= {1, 0, 0},
	.module			= THIS_MODULE,
	.ctr			= rbk_ctr,
	.dtr			= rbk_dtr,
	.map			= rbk_map,
	.presuspend		= rbk_presuspend,
	.postsuspend		= rbk_postsuspend,
	.resume			= rbk_resume,
	.message		= rbk_message,
	.status			= rbk_status,
	.iterate_devices	= rbk_iterate_devices,
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
