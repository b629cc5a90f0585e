/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback tests: keep a preloaded sanitizer runtime in nbdkit only.
 *
 * A sanitizer build of ramback is loaded into an uninstrumented nbdkit,
 * so the tests preload the sanitizer's runtime into nbdkit
 * (functions.sh), with this library last in LD_PRELOAD.  By the time
 * its constructor runs, the dynamic loader has loaded every preloaded
 * library, so it can take LD_PRELOAD out of nbdkit's environment: the
 * programs nbdkit starts (the sh plugin's scripts and everything they
 * run, once per request) are not instrumented and would pay the
 * runtime's start, a large part of a second each on a busy machine,
 * for nothing.
 */

#include <stdlib.h>

__attribute__ ((constructor)) static void
scrub_preload (void)
{
  unsetenv ("LD_PRELOAD");
}
