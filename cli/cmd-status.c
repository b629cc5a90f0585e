/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback status: once, --json, --prometheus or --watch. */

#include <config.h>

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "cli.h"
#include "client.h"
#include "format.h"
#include "status.h"

/* status */

static gboolean
print_status_once (const char *socket, GError **err)
{
  struct ctl *c = ctl_connect (socket, err);
  struct status *st = c ? status_fetch (c, err) : NULL;
  GString *out = g_string_new (NULL);

  if (opt_prometheus)
    status_format_prometheus (out, st, socket);
  else if (st && opt_json) {
    g_string_append (out, st->line);
    g_string_append_c (out, '\n');
  }
  else if (st)
    status_format_human (out, st, socket, NULL);
  fputs (out->str, stdout);
  g_string_free (out, TRUE);
  status_free (st);
  ctl_close (c);
  return st != NULL;
}

/* --watch: on a terminal redraw the report in place with progress bars;
 * otherwise one line (or one JSON object) per update, for logs.
 */
static gboolean
watch_status (const char *socket, GError **err)
{
  struct ctl *c = ctl_connect (socket, err);
  bool tty = isatty (STDOUT_FILENO) && !opt_json;
  struct status_view view = { .bars = true };
  int n, prev_lines = 0;

  if (c == NULL)
    return FALSE;
  for (n = 0; opt_count <= 0 || n < opt_count; n++) {
    struct status *st;
    GString *out;

    if (n > 0) {
      cli_sleep_seconds (opt_watch_interval);
      if (cli_interrupted)
        break;
    }
    st = status_fetch (c, err);
    /* The plugin closes a connection idle for 30 s (a long --interval):
     * connect again, once.  If that fails too (nbdkit is gone), the
     * first error is the one to report.
     */
    if (st == NULL && n > 0 &&
        g_error_matches (*err, RAMBACK_CLI_ERROR, CLI_EXIT_LOST)) {
      GError *again = NULL;
      struct ctl *c2 = ctl_connect (socket, &again);

      if (c2 && (st = status_fetch (c2, &again)) != NULL) {
        g_clear_error (err);
        ctl_close (c);
        c = c2;
      }
      else
        ctl_close (c2);
      g_clear_error (&again);
    }
    if (st == NULL) {
      if (g_error_matches (*err, RAMBACK_CLI_ERROR, CLI_EXIT_INTERRUPTED)) {
        g_clear_error (err);
        break;
      }
      ctl_close (c);
      return FALSE;
    }
    out = g_string_new (NULL);
    if (opt_json) {
      g_string_append (out, st->line);
      g_string_append_c (out, '\n');
    }
    else if (!tty)
      status_format_line (out, st);
    else {
      GString *frame = g_string_new (NULL);
      char stamp[32];
      time_t t = time (NULL);
      struct tm tm;
      char **lines;
      int i, rows = terminal_rows (STDOUT_FILENO);

      view.width = terminal_width (STDOUT_FILENO);
      strftime (stamp, sizeof stamp, "%H:%M:%S", localtime_r (&t, &tm));
      g_string_append_printf (frame, "Every %.1f s: ramback status %s  %s\n",
                              opt_watch_interval, socket, stamp);
      status_format_human (frame, st, socket, &view);
      view.peak_pending = MAX (view.peak_pending, status_pending_bytes (st));

      /* Back to the top of the previous frame, then overwrite each
       * line and clear what is left of it and below it.  A frame
       * taller than the terminal would scroll and could not be
       * redrawn in place, so it is cut to fit.
       */
      if (prev_lines > 0)
        g_string_append_printf (out, "\r\033[%dA", prev_lines);
      lines = g_strsplit (frame->str, "\n", -1);
      prev_lines = 0;
      for (i = 0; lines[i] && lines[i+1] && (rows == 0 || i < rows - 1); i++) {
        g_string_append_printf (out, "%s\033[K\n", lines[i]);
        prev_lines++;
      }
      g_string_append (out, "\033[J");
      g_strfreev (lines);
      g_string_free (frame, TRUE);
    }
    fputs (out->str, stdout);
    fflush (stdout);
    g_string_free (out, TRUE);
    status_free (st);
  }
  ctl_close (c);
  return TRUE;
}

gboolean
cmd_status (char **args, GError **err)
{
  if (opt_prometheus && (opt_json || opt_watch)) {
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_USAGE,
                 "--prometheus cannot be combined with --%s",
                 opt_json ? "json" : "watch");
    return FALSE;
  }
  if ((opt_count || opt_interval_given) && !opt_watch) {
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_USAGE,
                 "--%s needs --watch", opt_count ? "count" : "interval");
    return FALSE;
  }
  return opt_watch ? watch_status (args[0], err)
                   : print_status_once (args[0], err);
}
