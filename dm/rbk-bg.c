// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: the flusher and the populator, one kthread each, looping
 * around lib/'s step functions (Open CAS Framework's shape: the engine
 * does one bounded pass and says how long to wait; the adapter waits).
 *
 * Flusher.  rbi_flush_step() (lib/engine/flush.c) is one sweep over the dirty
 * chunks and one cache flush of the backing device at its end, with
 * lib's fsyncgate rule: a write that failed, and everything written
 * since the last good flush when a flush fails, goes back to DIRTY and
 * is written again; a flush is never merely retried.  Every sweep covers
 * the sync tickets issued before it began, which is how rbk_sync() (the
 * "flush" message, suspend, remove) knows that all it asked for is on
 * stable storage.  rbi_flusher_wait() waits out what the step asked for:
 * nothing, a back-off after a failure (50 ms, doubling to 5 s), or work.
 * The flusher keeps going while the target is suspended if suspend could
 * not write everything back (rbk_drain), and after an interrupted remove
 * it is all that is left of the target (rbk_orphan in rbk-target.c):
 * once everything is written back and flushed it frees the RAM image and
 * exits.
 *
 * Populator.  From the first resume, rbi_populate_step()
 * (lib/engine/populate.c) loads EMPTY chunks upwards in batches, each
 * run under a LOAD range and rechecked under it, so a chunk that an
 * application write got to first (loaded or written on demand) is never
 * overwritten: the populate race.
 * It pauses while suspended, in writethrough mode (the backing device's
 * bandwidth then goes to draining dirty data) and after "nopopulate";
 * demand loads go on regardless.  A step in flight when suspend begins
 * is waited for (rbk_populator_wait_idle): a suspended target reads
 * nothing from the backing device.
 *
 * Stopping.  kthread_stop() ends a thread; rb.stopping is set first, so
 * that a wait inside a step (a rate cap) ends at once.  A stop is not a
 * drain: rbk_drain() is, before it.
 */

#include <linux/module.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>

#include "dm-ramback.h"

/*
 * map() cannot take rb.lock (a mutex) to wake an idle flusher
 * (rbi_flusher_kick), so io.c's fast path calls rb.kick_nowait, which
 * queues this, which does.
 */
void rbk_kick_work(struct work_struct *work)
{
	struct rbk *rbk = container_of(work, struct rbk, kick);

	rbi_flusher_kick(&rbk->rb);
}

void rbk_kick_nowait(struct rb *rb)
{
	struct rbk *rbk = container_of(rb, struct rbk, rb);

	if (rb_atomic_load(&rb->flusher_idle))
		queue_work(rbk->wq, &rbk->kick);
}

void rbk_kick_populator(struct rbk *rbk)
{
	wake_up(&rbk->populator_wait);
}

/* ---- flusher --------------------------------------------------------- */

/* Nothing writes to an orphan: clean, flushed and no failure left. */
static bool rbk_orphan_clean(struct rbk *rbk)
{
	struct rb *rb = &rbk->rb;

	return chunkmap_dirty(&rb->map) == 0 &&
	       rb_atomic_load(&rb->inflight_chunks) == 0 &&
	       rb_atomic_load(&rb->unsynced_bytes) == 0 &&
	       !rb_atomic_load(&rb->store_failing);
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
	struct rb *rb = &rbk->rb;
	struct rb_flusher_state *fs = &rb->flusher_state;
	u64 delay;

	rb_thread_background();
	rbi_flusher_state_init(fs);
	while (!kthread_should_stop()) {
		delay = rbi_flush_step(rb, fs);
		if (READ_ONCE(rbk->orphan) && rbk_orphan_clean(rbk))
			rbk_orphan_done(rbk);
		if (delay == RB_STEP_DONE) {
			/* Only once stopping: wait for kthread_stop(). */
			wait_event_idle(rb->flusher_cond.wq,
					kthread_should_stop());
			break;
		}
		if (delay && !kthread_should_stop())
			rbi_flusher_wait(rb, fs, delay);
		if (delay == RB_STEP_IDLE)
			rb_atomic_store(&rb->flusher_idle, false);
		cond_resched();
	}
	return 0;
}

/*
 * Wait for a sweep that begins after now to finish: then every chunk
 * dirty now is on the backing device, flushed.  0, -EIO if that sweep
 * failed (the data stays dirty in RAM), -EINTR if killed.
 */
int rbk_sync(struct rbk *rbk, bool killable)
{
	struct rb *rb = &rbk->rb;
	u64 t = rbi_sync_request(rb);
	int r;

	if (killable) {
		if (wait_event_killable(rb->sync_cond.wq,
					rbi_sync_answered(rb, t)))
			return -EINTR;
	} else {
		wait_event_idle(rb->sync_cond.wq, rbi_sync_answered(rb, t));
	}
	r = rbi_sync_answered(rb, t);
	return r > 0 ? 0 : -EIO;
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
		if (!r && !chunkmap_dirty(&rbk->rb.map))
			return 0;
		if (r) {
			DMERR_LIMIT("%s: %llu dirty chunks cannot be written back to %pg (error %d); retrying until it works or this is interrupted (the data stays in RAM)",
				    rbk_name(rbk), chunkmap_dirty(&rbk->rb.map),
				    rbk->bdev, READ_ONCE(rbk->error));
			if (current->flags & PF_KTHREAD)
				return r;
		}
	}
}

/* Holds dirty data that its last attempt failed to write back. */
bool rbk_stuck(struct rbk *rbk)
{
	return rb_atomic_load(&rbk->rb.store_failing) &&
	       chunkmap_dirty(&rbk->rb.map) > 0;
}

/* ---- populator --------------------------------------------------------- */

static bool rbk_populate_wanted(struct rbk *rbk)
{
	return READ_ONCE(rbk->populate) && !READ_ONCE(rbk->suspended) &&
	       rb_atomic_load(&rbk->rb.mode) == RB_MODE_WRITEBACK &&
	       !rb_atomic_load(&rbk->rb.populated);
}

/*
 * A step begins only if populate is wanted, decided under rbk->lock,
 * where rbk_set_suspended() sets 'suspended' and the step is marked.  So
 * once presuspend has run, either the populator saw 'suspended' and
 * starts nothing, or its step was marked first and
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

/* After 'suspended' is set: wait for a populate step in flight. */
void rbk_populator_wait_idle(struct rbk *rbk)
{
	wait_event(rbk->populator_idle, rbk_populator_idle(rbk));
}

static int rbk_populator(void *arg)
{
	struct rbk *rbk = arg;
	struct rb *rb = &rbk->rb;
	struct rb_populator_state ps;
	u64 delay;

	rb_thread_background();
	rbi_populator_state_init(&ps);
	for (;;) {
		wait_event_idle(rbk->populator_wait, kthread_should_stop() ||
				rbk_populate_wanted(rbk));
		if (kthread_should_stop())
			break;
		if (!rbk_populate_begin(rbk))
			continue;
		delay = rbi_populate_step(rb, &ps);
		rbk_populate_end(rbk);
		if (delay == RB_STEP_DONE) {
			/* Everything is loaded: the counter catches up. */
			rbi_check_populated(rb);
			WARN_ON_ONCE(!rb_atomic_load(&rb->populated));
			wait_event_idle(rbk->populator_wait,
					kthread_should_stop());
			break;
		}
		if (delay)
			wait_event_idle_timeout(rbk->populator_wait,
						kthread_should_stop(),
						nsecs_to_jiffies(delay));
		cond_resched();
	}
	rbi_populator_state_fini(&ps);
	return 0;
}

int rbk_start_threads(struct rbk *rbk)
{
	struct task_struct *t;

	t = kthread_run(rbk_flusher, rbk, "ramback_flush/%s", rbk_name(rbk));
	if (IS_ERR(t))
		return PTR_ERR(t);
	rbk->flusher = t;
	rb_mutex_lock(&rbk->rb.lock);
	rbk->rb.flusher_running = true;
	rb_mutex_unlock(&rbk->rb.lock);
	t = kthread_run(rbk_populator, rbk, "ramback_load/%s", rbk_name(rbk));
	if (IS_ERR(t))
		return PTR_ERR(t);
	rbk->populator = t;
	return 0;
}

/*
 * The threads exit only through kthread_stop() (or an orphan's flusher,
 * which nobody stops), so their tasks are alive.  rb.stopping ends a
 * wait inside a step; the flusher's wait ends on its condition.
 */
void rbk_stop_threads(struct rbk *rbk)
{
	struct rb *rb = &rbk->rb;

	if (rbk->rb_ready) {
		rb_mutex_lock(&rb->lock);
		rb_atomic_store(&rb->stopping, true);
		rb_cond_broadcast(&rb->flusher_cond);
		rb_cond_broadcast(&rb->populator_cond);
		rb_mutex_unlock(&rb->lock);
	}
	if (rbk->populator)
		kthread_stop(rbk->populator);
	rbk->populator = NULL;
	if (rbk->flusher)
		kthread_stop(rbk->flusher);
	rbk->flusher = NULL;
	if (rbk->rb_ready) {
		/* Nobody sweeps any more: answer every sync still waiting. */
		rb_mutex_lock(&rb->lock);
		rb->flusher_running = false;
		rbi_sync_answer_locked(rb, rb->sync_requested, EIO);
		rb_mutex_unlock(&rb->lock);
	}
}
