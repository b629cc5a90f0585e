// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * ramback: lib/rangelock.c, compiled unchanged into dm-ramback.ko.  The kernel
 * shim (env-kernel.h) and the libc stand-ins (kinclude/) make it build.
 */
#include "../lib/rangelock.c"
