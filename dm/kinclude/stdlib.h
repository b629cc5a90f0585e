/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramback: <stdlib.h> for the kernel build: calloc and free on kvmalloc
 * (the chunk map of a large device is megabytes, so it may come from
 * vmalloc), abort as BUG.  Functions, not macros, so that a struct
 * member called "free" in a kernel header is left alone.  The shared
 * code allocates only when a table is constructed (GFP_KERNEL).
 */
#ifndef RAMBACK_KINCLUDE_STDLIB_H
#define RAMBACK_KINCLUDE_STDLIB_H
#include <linux/bug.h>
#include <linux/compiler.h>
#include <linux/slab.h>
#include <linux/mm.h>

static inline void *calloc(size_t n, size_t size)
{
	return kvcalloc(n, size, GFP_KERNEL);
}

static inline void free(void *p)
{
	kvfree(p);
}

static inline __noreturn void abort(void)
{
	BUG();
}
#endif
