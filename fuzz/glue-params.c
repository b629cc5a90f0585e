/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: glue/params.c exactly as the plugin compiles it, for
 * fuzz-params (nbdkit's helpers come from nbdkit-shim.c).
 */
#include "../glue/params.c"
