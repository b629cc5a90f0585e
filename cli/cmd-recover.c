/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback recover: replay a journal offline. */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>

#include <glib.h>

#include "cli.h"
#include "error.h"
#include "journal.h"
#include "ramback.h"
#include "result.h"

/* Offline recovery: the journal's committed transactions onto the
 * backing store, as a start of the plugin does (lib/journal/journal.c), without
 * nbdkit, so the backing store can be used elsewhere.
 */
/* The core's messages: warnings only (its progress is for nbdkit -v). */
static void
log_warnings (enum rb_log_level level, const char *msg)
{
  if (level == RB_LOG_WARN)
    fprintf (stderr, "ramback: %s\n", msg);
}

gboolean
cmd_recover (char **args, GError **err)
{
  /* Named as given (BACK, JOURNAL), not as plugin parameters. */
  struct rb_store_params back = { .uri = args[0], .param = "",
                                  .tls_verify_peer = -1 };
  struct rb_store_params journal = back;
  struct rbj_replay rp;

  rb_set_log (log_warnings);
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
    result_print (o);
  }
  else {
    printf ("replayed %" PRIu64 " transactions (%" PRIu64 " bytes) onto %s"
            "; the journal is empty now\n", rp.txns, rp.bytes, args[0]);
    if (rp.torn)
      printf ("ignored a damaged or incomplete transaction after them "
              "(one cut short by a crash)\n");
  }
  return TRUE;
}
