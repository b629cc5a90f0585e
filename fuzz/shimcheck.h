/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: one line of output per parameter, the same whether nbdkit's
 * helpers come from nbdkit (shimcheck-plugin.c) or from nbdkit-shim.c
 * (shim-print.c):
 *
 *   size=V   ->  "size HEX(V) RESULT"    nbdkit_parse_size
 *   bool=V   ->  "bool HEX(V) RESULT"    nbdkit_parse_bool
 *   path=V   ->  "path HEX(V) HEX(RESULT)|NULL"  nbdkit_absolute_path
 *
 * Values are printed in hex so that any byte survives.
 */

#ifndef RAMBACK_FUZZ_SHIMCHECK_H
#define RAMBACK_FUZZ_SHIMCHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-plugin.h>

static inline void
shimcheck_hex (const char *s)
{
  if (*s == '\0')
    printf ("-");
  for (; *s; s++)
    printf ("%02x", (unsigned char) *s);
}

static inline int
shimcheck_one (const char *key, const char *value)
{
  printf ("%s ", key);
  shimcheck_hex (value);
  if (strcmp (key, "size") == 0)
    printf (" %" PRId64 "\n", nbdkit_parse_size (value));
  else if (strcmp (key, "bool") == 0)
    printf (" %d\n", nbdkit_parse_bool (value));
  else if (strcmp (key, "path") == 0) {
    char *p = nbdkit_absolute_path (value);
    printf (" ");
    if (p)
      shimcheck_hex (p);
    else
      printf ("NULL");
    printf ("\n");
    /* nbdkit's result is the caller's; the shim's is the shim's. */
#ifdef SHIMCHECK_IN_NBDKIT
    free (p);
#endif
  }
  else {
    fprintf (stderr, "shimcheck: unknown key %s\n", key);
    return -1;
  }
  fflush (stdout);
  return 0;
}

#endif /* RAMBACK_FUZZ_SHIMCHECK_H */
