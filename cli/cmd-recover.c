/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback recover: replay a journal offline. */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>

#include <glib.h>

#include "cli.h"
#include "journal.h"
#include "ramback.h"
#include "result.h"

/* Offline recovery: the journal's committed transactions onto the
 * backing store, as a start of the plugin does (lib/journal/journal.c), without
 * nbdkit, so the backing store can be used elsewhere.
 */
gboolean
cmd_recover (char **args, GError **err)
{
  struct rb_store_params back = { .uri = args[0], .tls_verify_peer = -1 };
  struct rb_store_params journal = back;
  struct rbj_replay rp;

  journal.uri = args[1];
  if (rbj_recover (&back, &journal, &rp) == -1) {
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_REQUEST, "recover: %s",
                 rb_get_error ());
    return FALSE;
  }
  if (opt_json) {
    GString *o = g_string_new ("{\"command\":\"recover\"");

    result_str (o, "back", args[0]);
    result_str (o, "journal", args[1]);
    result_u64 (o, "replayed", rp.txns);
    result_u64 (o, "replayed_bytes", rp.bytes);
    result_u64 (o, "first_seq", rp.first_seq);
    result_u64 (o, "last_seq", rp.last_seq);
    result_bool (o, "torn_tail", rp.torn);
    result_bool (o, "formatted", rp.formatted);
    result_print (o);
  }
  else if (rp.formatted)
    printf ("%s was not a journal yet: formatted it, nothing to replay\n",
            args[1]);
  else {
    printf ("replayed %" PRIu64 " transactions (%" PRIu64 " bytes) onto %s"
            "; the journal is empty now\n", rp.txns, rp.bytes, args[0]);
    if (rp.torn)
      printf ("ignored a damaged or incomplete transaction after them "
              "(one cut short by a crash)\n");
  }
  return TRUE;
}
