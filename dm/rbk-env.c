// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dm-ramback: what the shared lib files need from the kernel beyond
 * env-kernel.h's inline functions.
 */

#include <linux/bitops.h>
#include <linux/compiler.h>

/* kinclude/errno.h: the write-only errno of the shared code. */
int rb_errno_sink;

/*
 * lib/chunkmap.c counts chunk states with __builtin_popcountll().  The
 * kernel is built for plain x86-64, without -mpopcnt, so GCC turns the
 * builtin into a call to libgcc's __popcountdi2, and modules are not
 * linked with libgcc.  hweight64() uses POPCNT where the CPU has it
 * (alternatives) and a bit-twiddling fallback elsewhere.
 */
int __popcountdi2(long long a);	/* the compiler's name; no header has it */
int __popcountdi2(long long a)
{
	return hweight64((u64)a);
}
