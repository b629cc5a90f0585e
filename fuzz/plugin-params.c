/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: plugin/params.c exactly as the plugin compiles it, for
 * fuzz-params (nbdkit's helpers come from nbdkit-shim.c).
 */
#include "../plugin/params.c"
