/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: main() of every fuzz target (driver.h).
 *
 *   fuzz-X FILE|DIR...     replay these inputs (a directory: each
 *                          regular file in it, in name order)
 *   fuzz-X                 with FUZZ_CORPUS_ROOT set: replay
 *                          $FUZZ_CORPUS_ROOT/X (what make check does)
 *   fuzz-X < input         one input from stdin; built with afl++'s
 *                          compiler, persistent mode under afl-fuzz
 *
 * A replayed input that hangs is a failure: each gets a generous alarm
 * (FUZZ_TIMEOUT seconds, default 60) that kills the process.
 */

#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "driver.h"

int fuzz_verbose;

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT ();
#endif

static unsigned timeout_s = 60;

static void
die (const char *what, const char *path)
{
  fprintf (stderr, "fuzz-%s: %s: %s: %s\n", fuzz_target_name, what, path,
           rb_strerror (errno));
  exit (EXIT_FAILURE);
}

static void
replay_file (const char *path)
{
  FILE *fp = fopen (path, "rb");
  uint8_t *data = NULL;
  size_t size = 0, cap = 0, n;

  if (fp == NULL)
    die ("open", path);
  do {
    if (size == cap) {
      cap = cap ? cap * 2 : 4096;
      if ((data = realloc (data, cap)) == NULL)
        die ("realloc", path);
    }
    n = fread (data + size, 1, cap - size, fp);
    size += n;
  } while (n > 0);
  if (ferror (fp))
    die ("read", path);
  fclose (fp);
  if (fuzz_verbose)
    fprintf (stderr, "== %s (%zu bytes)\n", path, size);
  alarm (timeout_s);
  fuzz_one (data, size);
  alarm (0);
  free (data);
}

static int
is_regular (const struct dirent *d)
{
  return d->d_name[0] != '.';
}

/* Returns the number of inputs replayed. */
static size_t
replay (const char *path)
{
  struct dirent **names;
  struct stat st;
  size_t count = 0;
  int i, n;

  if (stat (path, &st) == -1)
    die ("stat", path);
  if (!S_ISDIR (st.st_mode)) {
    replay_file (path);
    return 1;
  }
  n = scandir (path, &names, is_regular, alphasort);
  if (n == -1)
    die ("scandir", path);
  for (i = 0; i < n; i++) {
    char *p;
    if (asprintf (&p, "%s/%s", path, names[i]->d_name) == -1)
      die ("asprintf", path);
    if (stat (p, &st) == 0 && S_ISREG (st.st_mode)) {
      replay_file (p);
      count++;
    }
    free (p);
    free (names[i]);
  }
  free (names);
  return count;
}

static void
one_from_stdin (void)
{
#ifdef __AFL_FUZZ_TESTCASE_LEN
  /* Persistent mode: the fork server started before main(), so the
   * target's threads (fuzz_setup) belong to this child.
   */
  unsigned char *buf = __AFL_FUZZ_TESTCASE_BUF;

  while (__AFL_LOOP (10000))
    fuzz_one (buf, __AFL_FUZZ_TESTCASE_LEN);
#else
  replay_file ("/dev/stdin");
#endif
}

int
main (int argc, char *argv[])
{
  const char *root = getenv ("FUZZ_CORPUS_ROOT");
  const char *s;
  size_t count = 0;
  int i;

  if ((s = getenv ("FUZZ_VERBOSE")) != NULL)
    fuzz_verbose = atoi (s);
  if ((s = getenv ("FUZZ_TIMEOUT")) != NULL && atoi (s) > 0)
    timeout_s = atoi (s);

  fuzz_setup ();
  if (argc > 1) {
    for (i = 1; i < argc; i++)
      count += replay (argv[i]);
  }
  else if (root && *root) {
    char *dir;
    if (asprintf (&dir, "%s/%s", root, fuzz_target_name) == -1)
      die ("asprintf", root);
    count = replay (dir);
    if (count == 0) {
      fprintf (stderr, "fuzz-%s: no inputs in %s\n", fuzz_target_name, dir);
      exit (EXIT_FAILURE);
    }
    free (dir);
  }
  else
    one_from_stdin ();
  fuzz_teardown ();
  if (count)
    printf ("fuzz-%s: %zu inputs replayed, all as documented\n",
            fuzz_target_name, count);
  return EXIT_SUCCESS;
}
