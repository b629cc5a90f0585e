/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback mode, trace and ups: switch a setting, with a status
 * snapshot before and after it so the command can say what changed.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>

#include "cli.h"
#include "client.h"
#include "format.h"
#include "result.h"
#include "status.h"

/* mode and ups are the UPS path: while the plugin's control slots are
 * all busy (ERR EBUSY) or nobody listens on the socket yet (a plugin
 * restarting: connection refused), they try again for up to this long.
 */
#define BUSY_RETRY_S 5.0

/* Connect and fetch the status; with retry, as above. */
struct ctl *
cli_connect_with_status (const char *socket, bool retry,
                     struct status **st, GError **err)
{
  double give_up = cli_now () + BUSY_RETRY_S, pause = 0.05;

  for (;;) {
    struct ctl *c = ctl_connect (socket, err);

    if (c && (*st = status_fetch (c, err)) != NULL)
      return c;
    ctl_close (c);
    if (!retry || !ctl_failure_transient () || cli_interrupted ||
        cli_now () + pause > give_up)
      return NULL;
    g_clear_error (err);
    cli_sleep_seconds (pause);
    pause = MIN (pause * 2, 0.5);
  }
}

/* mode, trace */

/* Send "VERB VALUE" (VALUE one of a or b), with a status snapshot before
 * and after it so the command can say what changed.  The caller frees
 * both snapshots.
 */
static gboolean
switch_setting (const char *socket, const char *verb, const char *value,
                const char *a, const char *b, bool retry,
                struct status **before, struct status **after,
                GError **err)
{
  struct ctl *c;
  char *req;
  gboolean ok;

  *before = *after = NULL;
  if (strcmp (value, a) != 0 && strcmp (value, b) != 0) {
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_USAGE,
                 "%s must be %s or %s, not '%s'", verb, a, b, value);
    return FALSE;
  }
  c = cli_connect_with_status (socket, retry, before, err);
  if (c == NULL)
    return FALSE;
  req = g_strdup_printf ("%s %s", verb, value);
  ok = ctl_request (c, req, NULL, err) &&
    (*after = status_fetch (c, err)) != NULL;
  g_free (req);
  ctl_close (c);
  return ok;
}

gboolean
cmd_mode (char **args, GError **err)
{
  const char *socket = args[1];
  struct status *before, *after;
  gboolean ok = switch_setting (socket, "mode", args[0], "writeback",
                                "writethrough", true, &before, &after, err);

  if (ok) {
    uint64_t pending = status_pending_bytes (after);
    double drain = status_drain_seconds (after);

    if (opt_json) {
      GString *o = result_new ("mode", socket);
      result_str (o, "previous_mode", status_str (before, "mode"));
      result_str (o, "mode", status_str (after, "mode"));
      result_u64 (o, "pending_bytes", pending);
      result_seconds (o, "drain_seconds", drain);
      result_print (o);
    }
    else {
      GString *o = g_string_new (NULL);
      g_string_append_printf (o, "mode: %s (was %s)\n",
                              status_str (after, "mode"),
                              status_str (before, "mode"));
      if (pending) {
        g_string_append (o, "pending: ");
        format_size (o, pending);
        g_string_append (o, " not yet written back, ");
        format_duration (o, drain);
        g_string_append (o, " to drain\n");
      }
      fputs (o->str, stdout);
      g_string_free (o, TRUE);
    }
  }
  status_free (before);
  status_free (after);
  return ok;
}

gboolean
cmd_trace (char **args, GError **err)
{
  const char *socket = args[1];
  struct status *before, *after;
  gboolean ok = switch_setting (socket, "trace", args[0], "on", "off",
                                false, &before, &after, err);

  if (ok) {
    if (opt_json) {
      GString *o = result_new ("trace", socket);
      result_bool (o, "previous_trace", status_bool (before, "trace"));
      result_bool (o, "trace", status_bool (after, "trace"));
      result_print (o);
    }
    else
      printf ("trace: %s (was %s)\n",
              status_bool (after, "trace") ? "on" : "off",
              status_bool (before, "trace") ? "on" : "off");
  }
  status_free (before);
  status_free (after);
  return ok;
}

/* ups: power events from NUT, apcupsd or anything else. */

enum ups_event { UPS_ONBATT, UPS_ONLINE, UPS_LOWBATT };

static const struct {
  const char *name;
  enum ups_event event;
} ups_names[] = {
  { "onbatt", UPS_ONBATT },     /* NUT notify type ONBATT */
  { "onbattery", UPS_ONBATT },  /* apcupsd */
  { "powerout", UPS_ONBATT },   /* apcupsd, before onbattery */
  { "online", UPS_ONLINE },     /* NUT ONLINE */
  { "offbattery", UPS_ONLINE }, /* apcupsd */
  { "mainsback", UPS_ONLINE },  /* apcupsd */
  { "lowbatt", UPS_LOWBATT },   /* NUT LOWBATT */
  { "fsd", UPS_LOWBATT },       /* NUT: forced shutdown */
  { "shutdown", UPS_LOWBATT },  /* NUT: the system is going down */
  { "doshutdown", UPS_LOWBATT },/* apcupsd: battery low, runtime, timeout */
  { "battlow", UPS_LOWBATT },
  { "runlimit", UPS_LOWBATT },  /* apcupsd */
  { "timeout", UPS_LOWBATT },   /* apcupsd: TIMEOUT on battery expired */
  { "loadlimit", UPS_LOWBATT }, /* apcupsd */
  { "emergency", UPS_LOWBATT }, /* apcupsd: battery failure */
};

static const char *ups_canonical[] = { "onbatt", "online", "lowbatt" };

gboolean
cmd_ups (char **args, GError **err)
{
  const char *socket = args[1];
  struct status *before = NULL, *after = NULL;
  struct sync_result r = { 0 };
  enum ups_event ev;
  const char *want;
  struct ctl *c;
  size_t i;
  gboolean ok = FALSE;

  for (i = 0; i < G_N_ELEMENTS (ups_names); i++)
    if (g_ascii_strcasecmp (args[0], ups_names[i].name) == 0)
      break;
  if (i == G_N_ELEMENTS (ups_names)) {
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_USAGE,
                 "unknown power event '%s' (onbatt, online or lowbatt; "
                 "see ramback(1) for the NUT and apcupsd names)", args[0]);
    return FALSE;
  }
  ev = ups_names[i].event;
  want = ev == UPS_ONLINE ? "writeback" : "writethrough";

  c = cli_connect_with_status (socket, true, &before, err);
  if (c == NULL)
    return FALSE;
  {
    char *req = g_strdup_printf ("mode %s", want);
    ok = ctl_request (c, req, NULL, err);
    g_free (req);
  }
  /* Low battery: the power will go, so wait until the dirty data is on
   * the backing store (writethrough already stops new dirty data).
   */
  if (ok && ev == UPS_LOWBATT)
    ok = do_sync (c, &r, err);
  if (ok)
    ok = (after = status_fetch (c, err)) != NULL;
  /* The mode did change: a script must not think nothing happened. */
  if (!ok && ev == UPS_LOWBATT && before && *err) {
    char *m = g_strdup_printf ("%s (mode %s is set)", (*err)->message, want);
    g_free ((*err)->message);
    (*err)->message = m;
  }

  if (ok && opt_json) {
    GString *o = result_new ("ups", socket);
    result_str (o, "event", ups_canonical[ev]);
    result_str (o, "previous_mode", status_str (before, "mode"));
    result_str (o, "mode", status_str (after, "mode"));
    result_u64 (o, "pending_bytes", status_pending_bytes (after));
    result_seconds (o, "drain_seconds", status_drain_seconds (after));
    result_bool (o, "synced", ev == UPS_LOWBATT);
    if (ev == UPS_LOWBATT) {
      result_seconds (o, "sync_seconds", r.seconds);
      result_u64 (o, "stored_bytes", r.stored_bytes);
    }
    result_print (o);
  }
  else if (ok) {
    GString *o = g_string_new (NULL);
    uint64_t pending = status_pending_bytes (after);

    g_string_append_printf (o, "%s: mode %s (was %s)", ups_canonical[ev],
                            status_str (after, "mode"),
                            status_str (before, "mode"));
    if (ev == UPS_LOWBATT) {
      g_string_append (o, "; synced, ");
      sync_human (o, &r);
    }
    else if (pending) {
      g_string_append (o, "; ");
      format_size (o, pending);
      g_string_append (o, ev == UPS_ONBATT ? " draining, " : " dirty, ");
      format_duration (o, status_drain_seconds (after));
      g_string_append (o, " to drain");
    }
    g_string_append_c (o, '\n');
    fputs (o->str, stdout);
    g_string_free (o, TRUE);
  }
  status_free (before);
  status_free (after);
  ctl_close (c);
  return ok;
}
