/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: the nbdkit functions that glue/params.c calls, for linking it
 * without nbdkit (nbdkit-shim.c).  test-shim.sh checks that they give
 * the results of nbdkit's own (Debian 12's nbdkit 1.32) on every value
 * of the corpus.
 */

#ifndef RAMBACK_FUZZ_NBDKIT_SHIM_H
#define RAMBACK_FUZZ_NBDKIT_SHIM_H

#include <nbdkit-plugin.h>

/* nbdkit_error() calls since the last shim_reset(), and the last one. */
extern unsigned shim_errors;
extern const char *shim_last_error (void);

/* Forget the errors and free every nbdkit_absolute_path() result (the
 * parameters that point to them must be dropped first).
 */
extern void shim_reset (void);

/* Print errors and debug messages to stderr as they happen. */
extern int shim_verbose;

#endif /* RAMBACK_FUZZ_NBDKIT_SHIM_H */
