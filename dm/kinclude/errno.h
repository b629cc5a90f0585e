/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramback: <errno.h> for the kernel build.
 *
 * The shared code sets errno only together with a -1 return from an
 * allocation (chunkmap_init, sumbits_init), and the kernel callers map
 * that -1 to -ENOMEM themselves.  So errno is a write-only sink here:
 * nobody reads it, and concurrent writers (two tables being created at
 * once) cannot change any result.
 */
#ifndef RAMBACK_KINCLUDE_ERRNO_H
#define RAMBACK_KINCLUDE_ERRNO_H
#include <linux/errno.h>
extern int rb_errno_sink;
#define errno rb_errno_sink
#endif
