/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramback: <assert.h> for the kernel build.  The shared code asserts
 * chunk-state and range-tree invariants; a broken one means the map or
 * tree is corrupt, so it stops the task like abort() does in userspace
 * rather than carry on and write wrong data to the backing device.
 */
#ifndef RAMBACK_KINCLUDE_ASSERT_H
#define RAMBACK_KINCLUDE_ASSERT_H
#include <linux/bug.h>
#define assert(expr) BUG_ON(!(expr))
#endif
