// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: the flusher and the populator, one kthread each, as in
 * lib/flush.c and lib/populate.c.
 *
 * Flusher.  It works in sweeps from chunk 0 upwards, collecting runs of
 * dirty chunks through the chunk map's hints (a sweep costs O(dirty),
 * never a scan of the device).  Per batch of up to RBK_BATCH_RUNS runs:
 *   1. take a STORE range over every run as one arrival (this waits for
 *      writethrough writes already in flight there, and later ones wait
 *      for it: the flush race);
 *   2. move the chunks DIRTY -> CLEAN *before* the data is captured, so
 *      a write that lands while the store is in flight re-dirties the
 *      chunk and it is stored again (the backing device converges on RAM);
 *   3. write straight from the RAM pages, all runs in parallel;
 *   4. release the ranges, then flush the backing device's cache;
 *   5. a run whose write failed, or every run if the cache flush failed,
 *      goes back to DIRTY ("fsyncgate": a failed flush may have dropped
 *      any of the writes before it, so they are all written again; a
 *      flush is never merely retried).
 * Every sweep covers the sync tickets issued before it began, which is
 * how rbk_sync() (the "flush" message, suspend, remove) knows that all
 * it asked for is on stable storage.  After a failure the flusher backs
 * off (50 ms, doubling to 5 s) and sweeps again; data stays in RAM.  It
 * keeps doing so while the target is suspended if suspend could not
 * write everything back (rbk_drain), and after an interrupted remove it
 * is all that is left of the target (rbk_orphan in rbk-target.c): once
 * a sweep succeeds it frees the RAM image and exits.
 *
 * Populator.  From the first resume it loads EMPTY chunks upwards in
 * runs of up to RBK_RUN_BYTES, each under a LOAD range and rechecked
 * under it, so a chunk that an application write got to first (loaded
 * or written on demand) is never overwritten: the populate race.  It
 * pauses while suspended, in writethrough mode (the backing device's
 * bandwidth then goes to draining dirty data) and after "nopopulate";
 * demand loads go on regardless.  A run in flight when suspend begins
 * is waited for (rbk_populator_wait_idle): a suspended target reads
 * nothing from the backing device.
 */

#include <linux/module.h>
#include <linux/sched.h>

#include "dm-ramback.h"

void rbk_kick_flusher(struct rbk *rbk)
{
	/* Pairs with the barrier in wait_event's prepare_to_wait(). */
	if (wq_has_sleeper(&rbk->flusher_wait))
		wake_up(&rbk->flusher_wait);
}

void rbk_kick_populator(struct rbk *rbk)
{
	wake_up(&rbk->populator_wait);
}

/* ---- flusher --------------------------------------------------------- */

/* Collect up to RBK_BATCH_RUNS runs of dirty chunks from *cursor up. */
static size_t rbk_collect(struct rbk *rbk, u64 *cursor)
{
	u64 per_io = max_t(u64, RBK_RUN_BYTES >> rbk->chunk_shift, 1);
	u64 c = *cursor, bytes = 0;
	size_t k = 0;

	while (k < RBK_BATCH_RUNS && bytes < RBK_BATCH_BYTES) {
		u64 n;

		c = chunkmap_next(&rbk->map, c, CS_ANY_DIRTY);
		if (c == U64_MAX)
			break;
		n = chunkmap_run(&rbk->map, c, per_io, CS_ANY_DIRTY);
		if (!n) {
			c++;
			continue;
		}
		rbk->runs[k++] = (struct rbk_run){ .first = c, .n = n };
		bytes += rbk_chunks_bytes(rbk, c, n);
		c += n;
	}
	*cursor = c == U64_MAX ? rbk->nchunks : c;
	return k;
}

/* Steps 1-5 above.  Returns 0 or the first -errno. */
static int rbk_store_batch(struct rbk *rbk, size_t k)
{
	struct rbk_span spans[RBK_BATCH_RUNS];
	struct rbk_sync sync;
	bool any_ok = false;
	int err = 0, ferr;
	size_t i;

	for (i = 0; i < k; i++) {
		u64 off = rbk_chunk_offset(rbk, rbk->runs[i].first);

		rbk->nodes[i] = (struct rl_node){
			.start = off,
			.end = off + rbk_chunks_bytes(rbk, rbk->runs[i].first,
						      rbk->runs[i].n),
			.kind = RL_STORE,
		};
	}
	rangelock_acquire_batch(&rbk->rl, rbk->nodes, k);

	rbk_sync_init(&sync);
	for (i = 0; i < k; i++) {
		struct rbk_run *run = &rbk->runs[i];

		spans[i] = (struct rbk_span){ .sync = &sync };
		run->taken = chunkmap_move(&rbk->map, run->first, run->n,
					   CS_ANY_DIRTY, CS_CLEAN, NULL);
		if (!run->taken)
			continue;
		atomic64_add(run->taken, &rbk->inflight);
		rbk_ram_io(rbk, REQ_OP_WRITE, rbk->nodes[i].start,
			   rbk->nodes[i].end - rbk->nodes[i].start, &spans[i]);
	}
	rbk_sync_wait(&sync);
	for (i = 0; i < k; i++) {
		rangelock_release(&rbk->rl, &rbk->nodes[i]);
		if (rbk->runs[i].taken && !spans[i].status)
			any_ok = true;
	}

	ferr = any_ok ? blkdev_issue_flush(rbk->bdev) : 0;
	if (ferr)
		rbk_record_error(rbk, ferr, "backing device flush", 0, 0);

	for (i = 0; i < k; i++) {
		struct rbk_run *run = &rbk->runs[i];

		if (!run->taken)
			continue;
		if (spans[i].status || ferr) {
			if (spans[i].status) {
				int e = blk_status_to_errno(spans[i].status);

				rbk_record_error(rbk, e, "write back",
					rbk->nodes[i].start,
					rbk->nodes[i].end - rbk->nodes[i].start);
				if (!err)
					err = e;
			}
			chunkmap_move(&rbk->map, run->first, run->n,
				      CS_BIT(CS_CLEAN), CS_DIRTY, NULL);
		} else {
			atomic64_add(run->taken, &rbk->stored);
		}
		atomic64_sub(run->taken, &rbk->inflight);
	}
	return err ? err : ferr;
}

/* One sweep over the device; 0 or the first -errno (the sweep stops). */
static int rbk_sweep(struct rbk *rbk)
{
	u64 cursor = 0;
	size_t k;
	int err;

	while ((k = rbk_collect(rbk, &cursor)) > 0) {
		err = rbk_store_batch(rbk, k);
		if (err)
			return err;
		cond_resched();
	}
	return 0;
}

static bool rbk_flusher_has_work(struct rbk *rbk)
{
	u64 req, done, failed;

	spin_lock(&rbk->lock);
	req = rbk->sync_requested;
	done = rbk->sync_done;
	failed = rbk->sync_failed;
	spin_unlock(&rbk->lock);
	return chunkmap_dirty(&rbk->map) > 0 || req > max(done, failed) ||
	       READ_ONCE(rbk->orphan);
}

/* An orphan's data is all written back: free everything, drop the module. */
static void __noreturn rbk_orphan_done(struct rbk *rbk)
{
	DMINFO("%s: the dirty chunks left in RAM by remove are written back to %pg; RAM freed",
	       rbk_name(rbk), rbk->bdev);
	rbk_free(rbk);
	module_put_and_kthread_exit(0);
}

static int rbk_flusher(void *arg)
{
	struct rbk *rbk = arg;
	unsigned int backoff = RBK_BACKOFF_MIN_MS;

	set_user_nice(current, RBK_BG_NICE);
	for (;;) {
		u64 ticket;
		int err;

		wait_event_idle(rbk->flusher_wait, kthread_should_stop() ||
				rbk_flusher_has_work(rbk));
		if (kthread_should_stop())
			break;

		spin_lock(&rbk->lock);
		ticket = rbk->sync_requested;
		spin_unlock(&rbk->lock);

		err = rbk_sweep(rbk);

		spin_lock(&rbk->lock);
		if (!err)
			rbk->sync_done = max(rbk->sync_done, ticket);
		else
			rbk->sync_failed = max(rbk->sync_failed, ticket);
		rbk->sweep_failed = err != 0;
		spin_unlock(&rbk->lock);
		wake_up_all(&rbk->sync_wait);

		/* Nothing writes to an orphan: a good sweep leaves it clean. */
		if (!err && READ_ONCE(rbk->orphan) && !chunkmap_dirty(&rbk->map))
			rbk_orphan_done(rbk);

		if (err) {
			wait_event_idle_timeout(rbk->flusher_wait,
						kthread_should_stop(),
						msecs_to_jiffies(backoff));
			backoff = min(backoff * 2, RBK_BACKOFF_MAX_MS);
		} else {
			backoff = RBK_BACKOFF_MIN_MS;
		}
	}
	/* Stopped: no sweep will answer the tickets still waiting. */
	spin_lock(&rbk->lock);
	rbk->sync_failed = rbk->sync_requested;
	spin_unlock(&rbk->lock);
	wake_up_all(&rbk->sync_wait);
	return 0;
}

static bool rbk_ticket_answered(struct rbk *rbk, u64 t)
{
	bool r;

	spin_lock(&rbk->lock);
	r = rbk->sync_done >= t || rbk->sync_failed >= t;
	spin_unlock(&rbk->lock);
	return r;
}

/*
 * Wait for a sweep that begins after now to finish: then every chunk
 * dirty now is on the backing device, flushed.  0, -EIO if that sweep
 * failed (the data stays dirty in RAM), -EINTR if killed.
 */
int rbk_sync(struct rbk *rbk, bool killable)
{
	u64 t;
	bool ok;

	spin_lock(&rbk->lock);
	t = ++rbk->sync_requested;
	spin_unlock(&rbk->lock);
	wake_up(&rbk->flusher_wait);

	if (killable) {
		if (wait_event_killable(rbk->sync_wait,
					rbk_ticket_answered(rbk, t)))
			return -EINTR;
	} else {
		wait_event_idle(rbk->sync_wait, rbk_ticket_answered(rbk, t));
	}
	spin_lock(&rbk->lock);
	ok = rbk->sync_done >= t;
	spin_unlock(&rbk->lock);
	return ok ? 0 : -EIO;
}

/*
 * Write back everything (suspend, remove).  No application I/O is in
 * flight, so a successful sweep leaves nothing dirty.  While the backing
 * device fails, each sweep (after the flusher's back-off) is retried
 * until one works or the caller is killed.  Dropping the data instead
 * would lose acknowledged writes, which is what ramback exists to
 * prevent; waiting uninterruptibly would leave the caller (dmsetup) in D
 * state for as long as the device stays dead, with no way out.  A kernel
 * thread (a deferred remove) cannot be killed, so it stops after one
 * failed sweep.  Returns 0, or -EINTR or -EIO with the data still dirty
 * in RAM, for the caller to keep (see rbk-target.c).
 */
int rbk_drain(struct rbk *rbk)
{
	int r;

	for (;;) {
		r = rbk_sync(rbk, true);
		if (r == -EINTR)
			return r;
		if (!r && !chunkmap_dirty(&rbk->map))
			return 0;
		if (r) {
			DMERR_LIMIT("%s: %llu dirty chunks cannot be written back to %pg (error %d); retrying until it works or this is interrupted (the data stays in RAM)",
				    rbk_name(rbk), chunkmap_dirty(&rbk->map),
				    rbk->bdev, READ_ONCE(rbk->error));
			if (current->flags & PF_KTHREAD)
				return r;
		}
	}
}

/* Holds dirty data that its last attempt failed to write back. */
bool rbk_stuck(struct rbk *rbk)
{
	bool failed;

	spin_lock(&rbk->lock);
	failed = rbk->sweep_failed;
	spin_unlock(&rbk->lock);
	return failed && chunkmap_dirty(&rbk->map) > 0;
}

/* ---- populator --------------------------------------------------------- */

static bool rbk_populate_wanted(struct rbk *rbk)
{
	return READ_ONCE(rbk->populate) && !READ_ONCE(rbk->suspended) &&
	       READ_ONCE(rbk->mode) == RBK_WRITEBACK &&
	       !READ_ONCE(rbk->populated);
}

/*
 * A run begins only if populate is wanted, decided under rbk->lock,
 * where rbk_set_suspended() sets 'suspended' and the run is marked.  So
 * once presuspend has run, either the populator saw 'suspended' and
 * starts nothing, or its run was marked first and
 * rbk_populator_wait_idle() waits for it to end.
 */
static bool rbk_populate_begin(struct rbk *rbk)
{
	bool go;

	spin_lock(&rbk->lock);
	go = rbk_populate_wanted(rbk);
	rbk->populating = go;
	spin_unlock(&rbk->lock);
	return go;
}

static void rbk_populate_end(struct rbk *rbk)
{
	spin_lock(&rbk->lock);
	rbk->populating = false;
	spin_unlock(&rbk->lock);
	wake_up_all(&rbk->populator_idle);
}

static bool rbk_populator_idle(struct rbk *rbk)
{
	bool idle;

	spin_lock(&rbk->lock);
	idle = !rbk->populating;
	spin_unlock(&rbk->lock);
	return idle;
}

/* After 'suspended' is set: wait for a populate run in flight. */
void rbk_populator_wait_idle(struct rbk *rbk)
{
	wait_event(rbk->populator_idle, rbk_populator_idle(rbk));
}

static int rbk_populator(void *arg)
{
	struct rbk *rbk = arg;
	u64 per_io = max_t(u64, RBK_RUN_BYTES >> rbk->chunk_shift, 1);
	unsigned int backoff = RBK_BACKOFF_MIN_MS;
	u64 c = 0;

	set_user_nice(current, RBK_BG_NICE);
	for (;;) {
		struct rl_node node;
		u64 n, loaded;
		int r;

		wait_event_idle(rbk->populator_wait, kthread_should_stop() ||
				rbk_populate_wanted(rbk));
		if (kthread_should_stop())
			break;
		if (!rbk_populate_begin(rbk))
			continue;

		c = chunkmap_next(&rbk->map, c, CS_BIT(CS_EMPTY));
		if (c == U64_MAX)
			c = chunkmap_next(&rbk->map, 0, CS_BIT(CS_EMPTY));
		if (c == U64_MAX) {
			rbk_populate_end(rbk);
			/* Nothing EMPTY: the counter catches up, or is wrong. */
			rbk_check_populated(rbk);
			WARN_ON_ONCE(!READ_ONCE(rbk->populated));
			wait_event_idle(rbk->populator_wait,
					kthread_should_stop());
			break;
		}
		n = chunkmap_run(&rbk->map, c, per_io, CS_BIT(CS_EMPTY));
		if (!n) {
			rbk_populate_end(rbk);
			c++;
			continue;
		}

		rangelock_acquire(&rbk->rl, &node, rbk_chunk_offset(rbk, c),
				  rbk_chunk_offset(rbk, c) +
				  rbk_chunks_bytes(rbk, c, n), RL_LOAD);
		/* Only what is still EMPTY under the range is loaded. */
		r = rbk_load_chunks(rbk, c, n, &loaded);
		rangelock_release(&rbk->rl, &node);
		rbk_populate_end(rbk);
		rbk_check_populated(rbk);

		if (r) {
			wait_event_idle_timeout(rbk->populator_wait,
						kthread_should_stop(),
						msecs_to_jiffies(backoff));
			backoff = min(backoff * 2, RBK_BACKOFF_MAX_MS);
		} else {
			backoff = RBK_BACKOFF_MIN_MS;
			c += n;
		}
		cond_resched();
	}
	return 0;
}

int rbk_start_threads(struct rbk *rbk)
{
	struct task_struct *t;

	t = kthread_run(rbk_flusher, rbk, "ramback_flush/%s", rbk_name(rbk));
	if (IS_ERR(t))
		return PTR_ERR(t);
	rbk->flusher = t;
	t = kthread_run(rbk_populator, rbk, "ramback_load/%s", rbk_name(rbk));
	if (IS_ERR(t))
		return PTR_ERR(t);
	rbk->populator = t;
	return 0;
}

/* The threads exit only through kthread_stop(), so their tasks are alive. */
void rbk_stop_threads(struct rbk *rbk)
{
	if (rbk->populator)
		kthread_stop(rbk->populator);
	rbk->populator = NULL;
	if (rbk->flusher)
		kthread_stop(rbk->flusher);
	rbk->flusher = NULL;
}
