/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: nbdkit's parameter helpers outside nbdkit (nbdkit-shim.h).
 *
 * nbdkit exports these to plugins from its own executable, so nothing
 * outside nbdkit can link them.  Each one here does what nbdkit-plugin(3)
 * and nbdkit 1.32's behaviour say, result for result:
 *
 *  nbdkit_parse_size   a decimal number (strtoimax: leading blanks and
 *                      a sign allowed), then at most one suffix letter:
 *                      b (bytes), k m g t p e (powers of 1024), s (512
 *                      byte sectors), either case; negative values,
 *                      out of range values, anything else after the
 *                      number, and results over INT64_MAX are errors
 *  nbdkit_parse_bool   "1", "0" and, ignoring ASCII case, true t yes y
 *                      on / false f no n off
 *  nbdkit_absolute_path  NULL or "" is an error; "/..." is copied; a
 *                      relative path gets the working directory and "/"
 *                      in front (no other checks)
 *
 * Errors are formatted (so a bad format string or argument shows up
 * under the sanitizers) and counted, since a parameter that fails
 * without saying why is a bug the fuzzer looks for.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbdkit-shim.h"

unsigned shim_errors;
int shim_verbose;
static char last_error[1024];

/* nbdkit_absolute_path() results, freed by shim_reset(). */
static char **paths;
static size_t npaths, paths_cap;

const char *
shim_last_error (void)
{
  return last_error;
}

void
shim_reset (void)
{
  size_t i;

  for (i = 0; i < npaths; i++)
    free (paths[i]);
  npaths = 0;
  shim_errors = 0;
  last_error[0] = '\0';
}

void
nbdkit_verror (const char *fs, va_list args)
{
  int err = errno;              /* for %m */

  vsnprintf (last_error, sizeof last_error, fs, args);
  shim_errors++;
  if (shim_verbose)
    fprintf (stderr, "nbdkit: error: %s\n", last_error);
  errno = err;
}

void
nbdkit_error (const char *fs, ...)
{
  va_list args;

  va_start (args, fs);
  nbdkit_verror (fs, args);
  va_end (args);
}

void
nbdkit_vdebug (const char *fs, va_list args)
{
  char msg[1024];

  vsnprintf (msg, sizeof msg, fs, args);
  if (shim_verbose)
    fprintf (stderr, "nbdkit: debug: %s\n", msg);
}

void
nbdkit_debug (const char *fs, ...)
{
  va_list args;

  va_start (args, fs);
  nbdkit_vdebug (fs, args);
  va_end (args);
}

int64_t
nbdkit_parse_size (const char *str)
{
  intmax_t v;
  int64_t scale;
  char *end;

  errno = 0;
  v = strtoimax (str, &end, 10);
  if (end == str) {
    nbdkit_error ("could not parse size string (%s)", str);
    return -1;
  }
  if (v < 0) {
    nbdkit_error ("size cannot be negative (%s)", str);
    return -1;
  }
  if (errno) {
    nbdkit_error ("size (%s) exceeds maximum value", str);
    return -1;
  }
  switch (*end) {
  case '\0':           scale = 1; break;
  case 'b': case 'B':  scale = 1; break;
  case 's': case 'S':  scale = 512; break;
  case 'k': case 'K':  scale = INT64_C (1) << 10; break;
  case 'm': case 'M':  scale = INT64_C (1) << 20; break;
  case 'g': case 'G':  scale = INT64_C (1) << 30; break;
  case 't': case 'T':  scale = INT64_C (1) << 40; break;
  case 'p': case 'P':  scale = INT64_C (1) << 50; break;
  case 'e': case 'E':  scale = INT64_C (1) << 60; break;
  default:             scale = 0;
  }
  if (scale == 0 || (*end && end[1])) {
    nbdkit_error ("could not parse size: unknown suffix '%s'", end);
    return -1;
  }
  if (v > INT64_MAX / scale) {
    nbdkit_error ("overflow computing size (%s)", str);
    return -1;
  }
  return v * scale;
}

static bool
ascii_caseeq (const char *a, const char *b)
{
  for (; *a && *b; a++, b++) {
    char x = *a >= 'A' && *a <= 'Z' ? *a - 'A' + 'a' : *a;
    char y = *b >= 'A' && *b <= 'Z' ? *b - 'A' + 'a' : *b;
    if (x != y)
      return false;
  }
  return *a == *b;
}

static bool
any_of (const char *str, const char *const *words)
{
  for (; *words; words++)
    if (ascii_caseeq (str, *words))
      return true;
  return false;
}

int
nbdkit_parse_bool (const char *str)
{
  static const char *const yes[] = { "1", "true", "t", "yes", "y", "on", NULL };
  static const char *const no[] = { "0", "false", "f", "no", "n", "off", NULL };

  if (any_of (str, yes))
    return 1;
  if (any_of (str, no))
    return 0;
  nbdkit_error ("could not decipher boolean (%s)", str);
  return -1;
}

char *
nbdkit_absolute_path (const char *path)
{
  char *r, *cwd;

  if (path == NULL || *path == '\0') {
    nbdkit_error ("cannot convert null or empty path to an absolute path");
    return NULL;
  }
  if (*path == '/')
    r = strdup (path);
  else {
    if ((cwd = getcwd (NULL, 0)) == NULL) {
      nbdkit_error ("getcwd: %m");
      return NULL;
    }
    if (asprintf (&r, "%s/%s", cwd, path) == -1)
      r = NULL;
    free (cwd);
  }
  if (r == NULL) {
    nbdkit_error ("absolute path: %m");
    return NULL;
  }
  if (npaths == paths_cap) {
    char **p = realloc (paths, (paths_cap * 2 + 8) * sizeof *p);
    if (p == NULL) {
      free (r);
      nbdkit_error ("realloc: %m");
      return NULL;
    }
    paths = p;
    paths_cap = paths_cap * 2 + 8;
  }
  paths[npaths++] = r;
  return r;
}
