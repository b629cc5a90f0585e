/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: the interface between a fuzz target and driver.c.
 *
 * A target (fuzz-control.c, fuzz-params.c) feeds one input, a string of
 * arbitrary bytes, to the code under test and checks what came back
 * against the documentation; a violation aborts (a crash for afl++, a
 * failed test for make check).  driver.c owns main(): under afl++ it
 * runs the target in persistent mode, otherwise it replays the files of
 * the committed corpus (or the files and directories given as
 * arguments).
 */

#ifndef RAMBACK_FUZZ_DRIVER_H
#define RAMBACK_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The corpus subdirectory of this target: corpus/<name>. */
extern const char fuzz_target_name[];

/* Called once per process before the first input (under afl++: in each
 * forked child, so threads started here are real), and once after the
 * last one.
 */
extern void fuzz_setup (void);
extern void fuzz_teardown (void);

/* One input.  Must leave no state behind that changes how the next
 * input is handled (persistent mode runs thousands in one process).
 */
extern void fuzz_one (const uint8_t *data, size_t size);

/* Set by the driver: print what the target does (FUZZ_VERBOSE=1). */
extern int fuzz_verbose;

/* A broken promise: say which and abort, so afl++ records a crash. */
#define fuzz_assert(cond, ...)                                          \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf (stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf (stderr, __VA_ARGS__);                                    \
      fputc ('\n', stderr);                                             \
      abort ();                                                         \
    }                                                                   \
  } while (0)

#endif /* RAMBACK_FUZZ_DRIVER_H */
