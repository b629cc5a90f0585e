/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * dm-ramback: a device-mapper target that serves every I/O from RAM and
 * writes dirty chunks back to a backing device continuously.  The kernel
 * form of ramback (the 2008 "ramback" dm patch, redone).
 *
 * The engine is lib/'s, compiled unchanged through the kernel OS shim
 * (lib/env/kernel/env-impl.h), with its state in struct rb:
 *   io.c         the request path: reads, writes, writethrough, the
 *                dirty limit, discards and write-zeroes
 *   flush.c      the flusher: sweeps, syncs, the fsyncgate rule (a
 *                failed sync re-dirties everything it may have lost)
 *   populate.c   populate and demand loads
 *   chunkmap.c   chunk states (EMPTY/CLEAN/DIRTY/ZERO), lock-free, with
 *   sumbits.c    the hints that find dirty and empty chunks in O(found)
 *   rangelock.c  ordered range locks: the rule that closes the seed's
 *                populate race and flush race
 *
 * Files:  rbk-target.c  table, map, status, messages, suspend/resume
 *         rbk-io.c      the RAM image; bios through io.c (a copy
 *                       callback over their pages, the work item for
 *                       what map() defers)
 *         rbk-store.c   the backing store lib/ writes to: bios to the
 *                       backing device (struct rb_store)
 *         rbk-bg.c      the kthreads around lib's step functions, sync
 *                       and drain
 *         rbk-env.c     what lib/ calls beyond the shim (messages,
 *                       integer bandwidth arithmetic, the sticky error)
 *
 * Who touches what:
 *   map() fast path   io.c's rbi_try_pread/rbi_try_pwrite: loaded chunks,
 *                     writeback mode, under the dirty limit: copy to or
 *                     from RAM, then chunkmap_move() to DIRTY.  No lock,
 *                     no sleep: an idle flusher is woken through a work
 *                     item (rb.kick_nowait).
 *   workqueue         everything else map() defers, through io.c's
 *                     waiting calls: demand loads, writes to chunks
 *                     still EMPTY, writethrough, the dirty limit's wait,
 *                     discards and write-zeroes.  These take a range
 *                     (they may sleep).
 *   flusher kthread   rbi_flush_step() and rbi_flusher_wait() in a loop.
 *   populator kthread rbi_populate_step() in a loop, from the first resume.
 * Nothing holds a range across anything but its own backing I/O, and
 * map() never waits on backing I/O.
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

#include "internal.h"

#define DM_MSG_PREFIX "ramback"

struct rbk {
	struct rb rb;			/* the shared engine (lib/internal.h) */
	struct rb_store store;		/* rbk-store.c: rb.store */

	struct dm_target *ti;		/* NULL once orphaned */
	struct dm_dev *dev;		/* backing device; NULL once orphaned */
	struct block_device *bdev;	/* where backing I/O goes: dev's, or
					 * an orphan's own reference */
	fmode_t bdev_mode;		/* how an orphan opened bdev */
	struct mapped_device *md;	/* the device of ti's table */
	struct list_head list;		/* rbk_registry (rbk-target.c) */
	char name[16];			/* md's "major:minor", for messages */
	bool rb_ready;			/* rb's map, locks and conds set up */

	bool populate;			/* background populate wanted; ONCE */
	bool suspended;			/* written [lock]; read ONCE */
	bool populating;		/* a populate run is under way [lock] */
	bool resumed;			/* resumed at least once [registry] */
	bool handed_over;		/* a successor took the RAM image
					 * [registry] */
	bool orphan;			/* removed with dirty data; the flusher
					 * owns everything now; ONCE */

	struct workqueue_struct *wq;	/* deferred (slow path) bios */
	struct work_struct kick;	/* wakes an idle flusher for map() */
	struct bio_set bs;

	struct task_struct *flusher, *populator;
	wait_queue_head_t populator_wait; /* populate may run again, stop */
	wait_queue_head_t populator_idle; /* a populate run ended */
	spinlock_t lock;

	int error;			/* first backing error (-errno), sticks */
};

/* Per-bio data (ti->per_io_data_size): a bio deferred to the workqueue. */
struct rbk_bio {
	struct work_struct work;
	struct rbk *rbk;
	u64 offset, count;		/* bytes, relative to the target */
};

static inline const char *rbk_name(const struct rbk *rbk)
{
	return rbk->name;
}

/* rbk-io.c */
int rbk_ram_alloc(struct rbk *rbk);
void rbk_ram_free(struct rbk *rbk);
bool rbk_try_io(struct rbk *rbk, struct bio *bio, u64 offset);
void rbk_slow_work(struct work_struct *work);

/* rbk-store.c */
void rbk_store_init(struct rbk *rbk);

/* rbk-bg.c */
int rbk_start_threads(struct rbk *rbk);
void rbk_stop_threads(struct rbk *rbk);
void rbk_kick_nowait(struct rb *rb);
void rbk_kick_work(struct work_struct *work);
void rbk_kick_populator(struct rbk *rbk);
int rbk_sync(struct rbk *rbk, bool killable);
int rbk_drain(struct rbk *rbk);
bool rbk_stuck(struct rbk *rbk);
void rbk_populator_wait_idle(struct rbk *rbk);
void rbk_free(struct rbk *rbk);

#endif /* DM_RAMBACK_H */
