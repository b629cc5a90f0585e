// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * ramback: lib/ds/rangelock.c, compiled unchanged into dm-ramback.ko.  The kernel
 * shim (lib/env/kernel/env-impl.h) makes it build.
 */
#include "../lib/ds/rangelock.c"
