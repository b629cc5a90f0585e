// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * ramback: lib/io.c, compiled unchanged into dm-ramback.ko.  The kernel
 * shim (lib/env/kernel/env-impl.h) makes it build.  The target calls its
 * zero path (rb_zero: discards and write-zeroes); its data paths take a
 * flat buffer, which a bio is not (see rbk-io.c).
 */
#include "../lib/io.c"
