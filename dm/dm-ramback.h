/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * dm-ramback: a device-mapper target that serves every I/O from RAM and
 * writes dirty chunks back to a backing device continuously.  The kernel
 * form of ramback (the 2008 "ramback" dm patch, redone).
 *
 * Shared with the userspace core, compiled from lib/ unchanged:
 *   chunkmap.c   chunk states (EMPTY/CLEAN/DIRTY/ZERO), lock-free, with
 *                the hints that find dirty and empty chunks in O(found)
 *   sumbits.c    those hints
 *   rangelock.c  ordered range locks: the rule that closes the seed's
 *                populate race and flush race
 * through the kernel shim lib/env/kernel/env-impl.h.
 *
 * Files:  rbk-target.c  table, map, status, messages, suspend/resume
 *         rbk-io.c      the RAM image, backing I/O, the slow paths
 *         rbk-bg.c      the flusher and populator threads
 *
 * Who touches what:
 *   map() fast path   loaded chunks, writeback mode: copy to/from RAM,
 *                     then chunkmap_move() to DIRTY.  No lock, no sleep.
 *   workqueue         everything else map() defers: demand loads, writes
 *                     to chunks still EMPTY, every writethrough write.
 *                     These take a range (they may sleep).
 *   flusher kthread   sweeps dirty chunks to the backing device.
 *   populator kthread loads EMPTY chunks in order, from the first resume.
 * Nothing holds a range across anything but its own backing I/O, and
 * map() never waits on backing I/O (a bio submitted from map() is only
 * queued, on current->bio_list, until map() returns).
 *
 * Data that cannot be written back is never dropped (rbk-bg.c,
 * rbk_drain): an interrupted suspend leaves it in RAM with the device
 * suspended; a table of the same geometry loaded over it takes the RAM
 * image over (rbk-target.c, rbk_take_over); an interrupted remove leaves
 * it to an orphan that writes it back when the backing device works.
 */

#ifndef DM_RAMBACK_H
#define DM_RAMBACK_H

#include <linux/bio.h>
#include <linux/blkdev.h>
#include <linux/device-mapper.h>
#include <linux/kthread.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "chunkmap.h"
#include "rangelock.h"

#define DM_MSG_PREFIX "ramback"

enum rbk_mode {
	RBK_WRITEBACK,
	RBK_WRITETHROUGH,
};

/* Largest single backing I/O (a run of chunks) and one flusher batch. */
#define RBK_RUN_BYTES		(1024 * 1024)
#define RBK_BATCH_RUNS		32
#define RBK_BATCH_BYTES		(32 * 1024 * 1024)
/* Runs loaded in parallel by one demand load. */
#define RBK_LOAD_RUNS		8
/* Retry delays after backing I/O errors. */
#define RBK_BACKOFF_MIN_MS	50
#define RBK_BACKOFF_MAX_MS	5000
/* CPU priority of the flusher and populator: never starve application I/O. */
#define RBK_BG_NICE		5

struct rbk_run {
	u64 first, n;		/* chunks */
	u64 taken;		/* moved DIRTY -> CLEAN by the flusher */
};

struct rbk {
	struct dm_target *ti;		/* NULL once orphaned */
	struct dm_dev *dev;		/* backing device; NULL once orphaned */
	struct block_device *bdev;	/* where backing I/O goes: dev's, or
					 * an orphan's own reference */
	fmode_t bdev_mode;		/* how an orphan opened bdev */
	struct mapped_device *md;	/* the device of ti's table */
	struct list_head list;		/* rbk_registry (rbk-target.c) */
	char name[16];			/* md's "major:minor", for messages */
	u64 size;			/* bytes */
	unsigned int chunk_shift;	/* log2 of the chunk size in bytes */
	u64 nchunks;

	struct page **pages;		/* the RAM image, one page each */
	unsigned long npages;

	struct chunkmap map;		/* lib/chunkmap.c */
	bool map_ready;
	struct rangelock rl;		/* lib/rangelock.c */

	int mode;			/* enum rbk_mode; READ/WRITE_ONCE */
	bool populate;			/* background populate wanted; ONCE */
	bool populated;			/* all loaded; acquire/release */
	bool suspended;			/* written [lock]; read ONCE */
	bool populating;		/* a populate run is under way [lock] */
	bool resumed;			/* resumed at least once [registry] */
	bool handed_over;		/* a successor took the RAM image
					 * [registry] */
	bool orphan;			/* removed with dirty data; the flusher
					 * owns everything now; ONCE */
	bool sweep_failed;		/* the last sweep failed [lock] */

	struct workqueue_struct *wq;	/* deferred (slow path) bios */
	struct bio_set bs;

	struct task_struct *flusher, *populator;
	wait_queue_head_t flusher_wait;	/* dirty data, a sync request, stop */
	wait_queue_head_t populator_wait; /* populate may run again, stop */
	wait_queue_head_t populator_idle; /* a populate run ended */
	wait_queue_head_t sync_wait;	/* a sweep finished */

	/*
	 * Sync tickets: rbk_sync() takes ++sync_requested; a flusher sweep
	 * covers every ticket issued before it began and ends with a
	 * backing flush per batch.  sync_done/sync_failed: the highest
	 * tickets a sweep completed or failed.  [lock]
	 */
	spinlock_t lock;
	u64 sync_requested, sync_done, sync_failed;

	/* The flusher's batch (too big for its stack). [flusher] */
	struct rbk_run runs[RBK_BATCH_RUNS];
	struct rl_node nodes[RBK_BATCH_RUNS];

	/* Statistics, in chunks unless noted. */
	atomic64_t inflight;		/* being written back now */
	atomic64_t demand_loaded;	/* loaded ahead of the populator */
	atomic64_t stored;		/* written back by the flusher */
	atomic64_t written_through;	/* application writes, in bios */
	int error;			/* first backing error (-errno), sticks */
};

/* Per-bio data (ti->per_io_data_size): a bio deferred to the workqueue. */
struct rbk_bio {
	struct work_struct work;
	struct rbk *rbk;
	u64 offset, count;		/* bytes, relative to the target */
};

static inline u64 rbk_chunk_of(const struct rbk *rbk, u64 offset)
{
	return offset >> rbk->chunk_shift;
}

static inline u64 rbk_chunk_offset(const struct rbk *rbk, u64 c)
{
	return c << rbk->chunk_shift;
}

/* Bytes of chunks [c, c+n) that exist (the last chunk may be short). */
static inline u64 rbk_chunks_bytes(const struct rbk *rbk, u64 c, u64 n)
{
	u64 start = rbk_chunk_offset(rbk, c), end = rbk_chunk_offset(rbk, c + n);

	return min(end, rbk->size) - start;
}

static inline const char *rbk_name(const struct rbk *rbk)
{
	return rbk->name;
}

/*
 * Every chunk of [c0, c1] has been loaded (they never become EMPTY again).
 * The acquire pairs with the xchg() in rbk_check_populated(), which comes
 * after the chunk moves of the loads, so RAM is seen loaded too.
 */
static inline bool rbk_loaded(struct rbk *rbk, u64 c0, u64 c1)
{
	return smp_load_acquire(&rbk->populated) ||
	       chunkmap_all(&rbk->map, c0, c1 - c0 + 1, CS_LOADED);
}

/* rbk-io.c */
int rbk_ram_alloc(struct rbk *rbk);
void rbk_ram_free(struct rbk *rbk);
void rbk_copy_bio(struct rbk *rbk, struct bio *bio, u64 offset, bool to_ram);
void rbk_mark_dirty(struct rbk *rbk, u64 c0, u64 c1);
void rbk_record_error(struct rbk *rbk, int err, const char *what,
		      u64 offset, u64 count);
int rbk_load_chunks(struct rbk *rbk, u64 first, u64 n, u64 *loaded);
void rbk_check_populated(struct rbk *rbk);
void rbk_slow_work(struct work_struct *work);

struct rbk_sync;
struct rbk_span {
	struct rbk_sync *sync;
	blk_status_t status;
};
struct rbk_sync {
	atomic_t pending;
	struct completion done;
};
void rbk_sync_init(struct rbk_sync *sync);
void rbk_sync_wait(struct rbk_sync *sync);
void rbk_ram_io(struct rbk *rbk, blk_opf_t opf, u64 offset, u64 len,
		struct rbk_span *span);

/* rbk-bg.c */
int rbk_start_threads(struct rbk *rbk);
void rbk_stop_threads(struct rbk *rbk);
void rbk_kick_flusher(struct rbk *rbk);
void rbk_kick_populator(struct rbk *rbk);
int rbk_sync(struct rbk *rbk, bool killable);
int rbk_drain(struct rbk *rbk);
bool rbk_stuck(struct rbk *rbk);
void rbk_populator_wait_idle(struct rbk *rbk);
void rbk_free(struct rbk *rbk);

#endif /* DM_RAMBACK_H */
