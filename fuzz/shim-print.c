/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: print what nbdkit-shim.c makes of each argument, in the format
 * of shimcheck-plugin.c (which asks nbdkit itself); test-shim.sh
 * compares the two.
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbdkit-shim.h"
#include "shimcheck.h"

int
main (int argc, char *argv[])
{
  int i;

  for (i = 1; i < argc; i++) {
    char *eq = strchr (argv[i], '=');
    if (eq == NULL)
      return EXIT_FAILURE;
    *eq = '\0';
    if (shimcheck_one (argv[i], eq + 1) == -1)
      return EXIT_FAILURE;
    shim_reset ();
  }
  return EXIT_SUCCESS;
}
