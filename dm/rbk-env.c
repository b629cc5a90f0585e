// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: the kernel's side of what the shared engine (lib/engine/flush.c,
 * lib/engine/populate.c) calls outside the OS shim's inline functions.  In
 * userspace these come from lib/error.c, lib/engine/throttle.c, lib/engine/core.c and
 * lib/ram/resume.c, which the module does not compile: they hold libc
 * (thread-local messages, locale-free strerror), floating point (the
 * kernel has none), the plugin's configuration and the ram= file.
 *
 *   rb_thread_*        kthreads (lib/env/kernel/env-impl.h)
 *   rb_set_error...    messages go to the kernel log, rate limited
 *   rb_rate_*, rb_bw_* the same rate cap and bandwidth estimate, in
 *                      integer arithmetic: the estimate moves toward a
 *                      sample by dt / (tau + dt) of the difference, the
 *                      first-order form of 1 - exp(-dt / tau)
 *   rbi_record_error    the target's sticky error (status) and the log
 *   rbi_recompute_limit the dirty limit: dirty_max, or with ups_window
 *                      what write back makes durable in that window less
 *                      20%, as lib/engine/core.c computes it, in integers
 *   rb_nb_*            the NB bitmap belongs to a ram= file, which the
 *                      kernel form does not have (rb->nb is NULL)
 *   ramimage_*         copies in and out of the RAM image, and zeroing
 *                      (lib/ram/ramimage.c gives zeroed memory back to the
 *                      system; the kernel image is one vmalloc area,
 *                      whose pages stay)
 */

#include <linux/completion.h>
#include <linux/kthread.h>
#include <linux/math64.h>
#include <linux/module.h>
#include <linux/slab.h>

#include "dm-ramback.h"
#include "error.h"

/* ---- threads ------------------------------------------------------------ */

struct rb_kthread {
	void *(*fn)(void *);
	void *arg;
	struct completion done;
};

static int rb_kthread_fn(void *p)
{
	struct rb_kthread *t = p;

	t->fn(t->arg);
	/* The joiner frees t: nothing here touches it after this. */
	kthread_complete_and_exit(&t->done, 0);
}

int rb_thread_create(rb_thread *tp, void *(*fn)(void *), void *arg)
{
	struct rb_kthread *t = kzalloc(sizeof(*t), GFP_KERNEL);
	struct task_struct *task;

	if (!t)
		return -1;
	t->fn = fn;
	t->arg = arg;
	init_completion(&t->done);
	task = kthread_run(rb_kthread_fn, t, "ramback/%ps", fn);
	if (IS_ERR(task)) {
		kfree(t);
		return -1;
	}
	*tp = t;
	return 0;
}

void rb_thread_join(rb_thread t)
{
	wait_for_completion(&t->done);
	kfree(t);
}

/* ---- messages (lib/error.h) ------------------------------------------- */

void rb_set_error(int errnum, const char *fmt, ...)
{
	char msg[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pr_debug("dm-ramback: %s (error %d)\n", msg, errnum);
}

/* The message is in the kernel log: the caller reports the errno. */
const char *rb_get_error(void)
{
	return "see the kernel log";
}

int rb_get_errno(void)
{
	return EIO;
}

const char *rb_strerror(int errnum)
{
	switch (errnum) {
	case EIO:	return "Input/output error";
	case ENOSPC:	return "No space left on device";
	case ENOMEM:	return "Cannot allocate memory";
	case ETIMEDOUT:	return "Connection timed out";
	case EROFS:	return "Read-only file system";
	case EOPNOTSUPP: return "Operation not supported";
	case EINTR:	return "Interrupted system call";
	case ENODEV:	return "No such device";
	case ENXIO:	return "No such device or address";
	default:	return "error";
	}
}

void rb_log(const char *fmt, ...)
{
	struct va_format vaf;
	va_list ap;

	va_start(ap, fmt);
	vaf.fmt = fmt;
	vaf.va = &ap;
	pr_debug("dm-ramback: %pV\n", &vaf);
	va_end(ap);
}

void rb_warn(const char *fmt, ...)
{
	struct va_format vaf;
	va_list ap;

	va_start(ap, fmt);
	vaf.fmt = fmt;
	vaf.va = &ap;
	pr_warn_ratelimited("dm-ramback: %pV\n", &vaf);
	va_end(ap);
}

/* ---- rate caps and bandwidth (lib/engine/throttle.h) -------------------------- */

uint64_t rbi_rate_ns(uint64_t bytes, uint64_t bps)
{
	return mul_u64_u64_div_u64(bytes, NSEC_PER_SEC, bps);
}

uint64_t rbi_rate_delay(struct rb_rate *r, uint64_t bytes, uint64_t now_ns)
{
	uint64_t start;

	if (r->bps == 0)
		return 0;
	/* Do not bank unused time: an idle minute must not allow a burst. */
	start = max(r->next_ns, now_ns);
	r->next_ns = start + rbi_rate_ns(bytes, r->bps);
	return start - now_ns;
}

/* RB_BW_TAU_S, a double in lib/engine/throttle.h. */
#define RB_BW_TAU_NS (3 * NSEC_PER_SEC)

void rbi_bw_sample(struct rb_bw *bw, uint64_t bytes, uint64_t elapsed_ns)
{
	uint64_t sample, old;

	if (elapsed_ns == 0 || bytes == 0)
		return;
	sample = mul_u64_u64_div_u64(bytes, NSEC_PER_SEC, elapsed_ns);
	old = rb_atomic_load(&bw->bps);
	if (bw->samples++ == 0 || old == 0) {
		rb_atomic_store(&bw->bps, sample);
	} else {
		uint64_t w = elapsed_ns + RB_BW_TAU_NS;
		uint64_t diff = sample > old ? sample - old : old - sample;
		uint64_t step = mul_u64_u64_div_u64(diff, elapsed_ns, w);

		rb_atomic_store(&bw->bps, sample > old ? old + step : old - step);
	}
}

void rbi_bw_bound(struct rb_bw *bw, uint64_t bytes, uint64_t elapsed_ns)
{
	uint64_t bound;

	if (elapsed_ns == 0)
		return;
	bound = mul_u64_u64_div_u64(bytes, NSEC_PER_SEC, elapsed_ns);
	if (bound < rb_atomic_load(&bw->bps))
		rb_atomic_store(&bw->bps, bound);
}

/* ---- what lib/engine/core.c and lib/ram/resume.c do for the plugin ---------------- */

void rbi_record_error(struct rb *rb, int err, const char *what)
{
	struct rbk *rbk = container_of(rb, struct rbk, rb);

	rb_atomic_add(&rb->store_errors, 1);
	cmpxchg(&rbk->error, 0, -err);
	DMERR_LIMIT("%s: %s", rbk_name(rbk), what ? what : rb_strerror(err));
}

#define RBK_UPS_BOOTSTRAP (16ULL << 20)	/* until a bandwidth is measured */

void rbi_recompute_limit(struct rb *rb)
{
	uint64_t limit = rb->cfg.dirty_max;

	if (rb->cfg.ups_window > 0) {
		uint64_t bw = rb_atomic_load(&rb->flush_bw.bps), ups;

		if (rb->cfg.flush_rate && (bw == 0 || bw > rb->cfg.flush_rate))
			bw = rb->cfg.flush_rate;
		/* A 20% safety margin, as lib/engine/core.c's UPS_SAFETY. */
		ups = bw ? mul_u64_u64_div_u64(bw, rb->cfg.ups_window * 4ULL, 5)
			 : RBK_UPS_BOOTSTRAP;
		/* Never below a few chunks, or writers could not progress. */
		ups = max_t(uint64_t, ups, 4ULL * rb->chunk_size);
		if (limit == 0 || ups < limit)
			limit = ups;
	}
	rb_atomic_store(&rb->dirty_limit, limit);
}

void rbi_nb_set(struct rb *rb, uint64_t c, uint64_t n)
{
	WARN_ON_ONCE(rb->nb);
}

void rbi_nb_retire(struct rb *rb, const struct rb_extents *synced)
{
	WARN_ON_ONCE(rb->nb);
}

/* ram-size= (lib/engine/slots.c) is userspace only: the target keeps
 * the whole device in RAM, rb->slotted is never set.
 */
int rbi_slots_reserve(struct rb *rb, uint64_t n)
{
	WARN_ON_ONCE(rb->slotted);
	return 0;
}

int rbi_slots_reserve_range(struct rb *rb, uint64_t off, uint64_t end,
			    uint64_t *n)
{
	WARN_ON_ONCE(rb->slotted);
	*n = 0;
	return 0;
}

uint64_t rbi_slots_try_reserve(struct rb *rb, uint64_t n)
{
	WARN_ON_ONCE(rb->slotted);
	return n;
}

void rbi_slots_unreserve(struct rb *rb, uint64_t n)
{
	WARN_ON_ONCE(rb->slotted && n);
}

void rbi_slots_notify(struct rb *rb)
{
}

void rbi_slots_trim(struct rb *rb)
{
}

/* lib/ds/evict.c: hit() touches the eviction table only when slotted. */
void evict_promote(struct evict *ev, uint64_t c)
{
	WARN_ON_ONCE(1);
}

/* ---- the RAM image (lib/ram/ramimage.h) ------------------------------------ */

void ramimage_zero(struct ramimage *ri, uint64_t offset, uint64_t count)
{
	memset(ri->base + offset, 0, count);
}

void ramimage_copy_in(struct ramimage *ri, uint64_t offset, const void *buf,
		      uint64_t count)
{
	memcpy(ri->base + offset, buf, count);
}

void ramimage_copy_out(struct ramimage *ri, uint64_t offset, void *buf,
		       uint64_t count)
{
	memcpy(buf, ri->base + offset, count);
}
