// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * ramback: lib/engine/io.c, compiled unchanged into dm-ramback.ko.  The kernel
 * shim (lib/env/kernel/env-impl.h) makes it build.  It is the target's
 * whole request path: map() calls its lock-free fast path, the
 * workqueue its waiting calls, both with the bio's pages behind a
 * struct rb_data (rbk-io.c).
 */
#include "../lib/engine/io.c"
