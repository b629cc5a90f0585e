/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback(1): control a running nbdkit-ramback-plugin.
 *
 * Every subcommand talks the line protocol of ramback-control(5) over
 * the plugin's control socket.  Each has a human form and a --json form
 * with the field names documented in ramback.pod; every failure is one
 * line on stderr and an exit status from cli.h.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "cli.h"
#include "control.h"
#include "format.h"
#include "json.h"
#include "status.h"

GQuark
ramback_cli_error_quark (void)
{
  return g_quark_from_static_string ("ramback-cli-error");
}

volatile sig_atomic_t cli_interrupted;

double
cli_now (void)
{
  return g_get_monotonic_time () / 1e6;
}

static void
on_signal (int sig)
{
  cli_interrupted = 1;
}

/* How often progress bars are redrawn while a request waits. */
#define PROGRESS_INTERVAL_MS 200

/* A sync/wait-populated reply may take this much longer than the
 * --timeout given to the plugin before we stop waiting for it: the
 * plugin enforces the timeout, this only bounds a hung plugin.
 */
#define REPLY_GRACE_MS 10000

/* Options.  Each command's table below picks those that apply. */
static gboolean opt_json;
static gboolean opt_prometheus;
static gboolean opt_no_progress;
static gboolean opt_watch;
static double opt_watch_interval = 1.0;
static gint opt_count;
static double opt_timeout = -1;     /* seconds, < 0: none */

/* Numbers on the command line have one form each, so that "-0", "+5",
 * " 5", "5s", "0x5" or "1e3" are errors, not guesses: seconds are
 * digits with an optional fraction (0, 30, 0.5; no leading zero), counts
 * are digits.
 */
static gboolean
is_decimal (const char *s, bool fraction)
{
  const char *p = s;

  if (!g_ascii_isdigit (*p) || (p[0] == '0' && g_ascii_isdigit (p[1])))
    return FALSE;
  while (g_ascii_isdigit (*p))
    p++;
  if (fraction && *p == '.' && g_ascii_isdigit (p[1]))
    for (p++; g_ascii_isdigit (*p); p++)
      ;
  return *p == '\0';
}

static gboolean
parse_seconds (const char *name, const char *value, double *ret,
               GError **err)
{
  double d;

  if (!is_decimal (value, true)) {
    g_set_error (err, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 "%s: '%s' is not a number of seconds (digits with an "
                 "optional fraction, e.g. 30 or 0.5)", name, value);
    return FALSE;
  }
  d = g_ascii_strtod (value, NULL);
  if (d > INT_MAX / 1000) {
    g_set_error (err, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 "%s: '%s' is too long (at most %d seconds)", name, value,
                 INT_MAX / 1000);
    return FALSE;
  }
  *ret = d;
  return TRUE;
}

static gboolean
parse_count (const char *name, const char *value, gpointer data,
             GError **err)
{
  gint64 v;

  if (!is_decimal (value, false) || value[0] == '0') {
    g_set_error (err, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 "%s: '%s' is not a whole number of updates (1 or more, "
                 "e.g. 10)", name, value);
    return FALSE;
  }
  v = g_ascii_strtoll (value, NULL, 10);
  if (strlen (value) > 10 || v > INT_MAX) {
    g_set_error (err, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 "%s: '%s' is too many (at most %d)", name, value, INT_MAX);
    return FALSE;
  }
  opt_count = (gint) v;
  return TRUE;
}

static gboolean opt_interval_given;

static gboolean
parse_interval (const char *name, const char *value, gpointer data,
                GError **err)
{
  if (!parse_seconds (name, value, &opt_watch_interval, err))
    return FALSE;
  if (opt_watch_interval < 0.05) {
    g_set_error (err, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 "%s: the interval must be at least 0.05 s", name);
    return FALSE;
  }
  opt_interval_given = TRUE;
  return TRUE;
}

static gboolean
parse_timeout (const char *name, const char *value, gpointer data,
               GError **err)
{
  return parse_seconds (name, value, &opt_timeout, err);
}

#define OPT_JSON \
  { "json", 'j', 0, G_OPTION_ARG_NONE, &opt_json, \
    "Print the result as one line of JSON", NULL }
#define OPT_TIMEOUT \
  { "timeout", 't', 0, G_OPTION_ARG_CALLBACK, parse_timeout, \
    "Give up after SECONDS (exit status 7)", "SECONDS" }
#define OPT_NO_PROGRESS \
  { "no-progress", 0, 0, G_OPTION_ARG_NONE, &opt_no_progress, \
    "No progress bar, even on a terminal", NULL }

static const GOptionEntry status_options[] = {
  OPT_JSON,
  { "prometheus", 'p', 0, G_OPTION_ARG_NONE, &opt_prometheus,
    "Print node_exporter textfile metrics", NULL },
  { "watch", 'w', 0, G_OPTION_ARG_NONE, &opt_watch,
    "Redraw until interrupted, every --interval", NULL },
  { "interval", 'i', 0, G_OPTION_ARG_CALLBACK, parse_interval,
    "With --watch: every SECONDS (default 1)", "SECONDS" },
  { "count", 'c', 0, G_OPTION_ARG_CALLBACK, parse_count,
    "With --watch: stop after N updates", "N" },
  { NULL }
};
static const GOptionEntry json_options[] = { OPT_JSON, { NULL } };
static const GOptionEntry wait_options[] = {
  OPT_TIMEOUT, OPT_JSON, OPT_NO_PROGRESS, { NULL }
};

/* JSON result objects: {"command":...,"socket":...,...}. */

static GString *
result_new (const char *command, const char *socket)
{
  GString *o = g_string_new ("{\"command\":");

  json_append_string (o, command);
  g_string_append (o, ",\"socket\":");
  json_append_string (o, socket);
  return o;
}

static void
result_key (GString *o, const char *key)
{
  g_string_append_c (o, ',');
  json_append_string (o, key);
  g_string_append_c (o, ':');
}

static void
result_str (GString *o, const char *key, const char *v)
{
  result_key (o, key);
  json_append_string (o, v);
}

static void
result_u64 (GString *o, const char *key, uint64_t v)
{
  result_key (o, key);
  g_string_append_printf (o, "%" PRIu64, v);
}

/* Durations with millisecond precision, never in exponent form. */
static void
result_seconds (GString *o, const char *key, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  result_key (o, key);
  g_string_append (o, g_ascii_formatd (buf, sizeof buf, "%.3f", v));
}

static void
result_bool (GString *o, const char *key, bool v)
{
  result_key (o, key);
  g_string_append (o, v ? "true" : "false");
}

static void
result_print (GString *o)
{
  g_string_append (o, "}\n");
  fputs (o->str, stdout);
  g_string_free (o, TRUE);
}

/* Interruptible sleep (SIGINT/SIGTERM end it early). */
static void
sleep_seconds (double s)
{
  struct timespec ts = { .tv_sec = (time_t) s,
                         .tv_nsec = (long) ((s - floor (s)) * 1e9) };

  if (!cli_interrupted)
    nanosleep (&ts, NULL);
}

static int
timeout_ms (void)
{
  return opt_timeout < 0 ? -1 : (int) ceil (opt_timeout * 1000);
}

static bool
show_progress (void)
{
  return !opt_no_progress && isatty (STDERR_FILENO);
}

/* status */

static gboolean
print_status_once (const char *socket, GError **err)
{
  struct ctl *c = ctl_connect (socket, err);
  struct json_object *st = c ? status_fetch (c, err) : NULL;
  GString *out = g_string_new (NULL);

  if (opt_prometheus)
    status_format_prometheus (out, st, socket);
  else if (st && opt_json) {
    json_object_append (out, st);
    g_string_append_c (out, '\n');
  }
  else if (st)
    status_format_human (out, st, socket, NULL);
  fputs (out->str, stdout);
  g_string_free (out, TRUE);
  json_object_free (st);
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
    struct json_object *st;
    GString *out;

    if (n > 0) {
      sleep_seconds (opt_watch_interval);
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
      json_object_append (out, st);
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
    json_object_free (st);
  }
  ctl_close (c);
  return TRUE;
}

static gboolean
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

/* mode and ups are the UPS path: while the plugin's control slots are
 * all busy (ERR EBUSY) or nobody listens on the socket yet (a plugin
 * restarting: connection refused), they try again for up to this long.
 */
#define BUSY_RETRY_S 5.0

/* Connect and fetch the status; with retry, as above. */
static struct ctl *
connect_with_status (const char *socket, bool retry,
                     struct json_object **st, GError **err)
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
    sleep_seconds (pause);
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
                struct json_object **before, struct json_object **after,
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
  c = connect_with_status (socket, retry, before, err);
  if (c == NULL)
    return FALSE;
  req = g_strdup_printf ("%s %s", verb, value);
  ok = ctl_request (c, req, NULL, err) &&
    (*after = status_fetch (c, err)) != NULL;
  g_free (req);
  ctl_close (c);
  return ok;
}

static gboolean
cmd_mode (char **args, GError **err)
{
  const char *socket = args[1];
  struct json_object *before, *after;
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
  json_object_free (before);
  json_object_free (after);
  return ok;
}

static gboolean
cmd_trace (char **args, GError **err)
{
  const char *socket = args[1];
  struct json_object *before, *after;
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
  json_object_free (before);
  json_object_free (after);
  return ok;
}

/* sync, wait-populated: a long request on one connection while a
 * second connection polls status for the progress bar.
 */

enum wait_kind { WAIT_SYNC, WAIT_POPULATED };

struct wait_state {
  enum wait_kind kind;
  struct ctl *poll;           /* second connection, NULL: no progress */
  uint64_t pending0;          /* sync: bytes to write back at the start */
  uint64_t stored0;           /* sync: stored_bytes at the start */
  bool drawn;
};

static double
sync_fraction (const struct wait_state *w, const struct json_object *st)
{
  uint64_t stored = status_u64 (st, "stored_bytes");
  uint64_t done = stored > w->stored0 ? stored - w->stored0 : 0;

  return w->pending0 ? MIN (1.0, (double) done / w->pending0) : 1.0;
}

static void
wait_draw (struct wait_state *w, const struct json_object *st, bool final)
{
  GString *d = g_string_new (NULL);
  double frac;

  if (w->kind == WAIT_SYNC) {
    uint64_t stored = status_u64 (st, "stored_bytes");
    uint64_t done = stored > w->stored0 ? stored - w->stored0 : 0;
    uint64_t bw = status_u64 (st, "flush_bandwidth");

    frac = final ? 1 : sync_fraction (w, st);
    format_size (d, final ? w->pending0 : MIN (done, w->pending0));
    g_string_append (d, " of ");
    format_size (d, w->pending0);
    if (!final) {
      g_string_append (d, ", ");
      format_rate (d, bw);
      g_string_append (d, ", ");
      format_duration (d, bw ? (double) (w->pending0 - MIN (done, w->pending0))
                              / bw : -1);
      g_string_append (d, " left");
    }
  }
  else {
    uint64_t chunks = status_u64 (st, "chunks");
    uint64_t loaded = status_u64 (st, "loaded_chunks");
    uint64_t bw = status_u64 (st, "populate_bandwidth");

    frac = final ? 1 : (chunks ? (double) loaded / chunks : 1);
    format_size (d, final ? status_u64 (st, "size")
                          : loaded * status_u64 (st, "chunk_size"));
    g_string_append (d, " of ");
    format_size (d, status_u64 (st, "size"));
    if (!final) {
      g_string_append (d, ", ");
      format_rate (d, bw);
      g_string_append (d, ", ");
      format_duration (d, bw ? (double) (chunks - MIN (loaded, chunks))
                       * status_u64 (st, "chunk_size") / bw : -1);
      g_string_append (d, " left");
    }
  }
  progress_draw (stderr, w->kind == WAIT_SYNC ? "sync    " : "populate",
                 frac, d->str);
  w->drawn = true;
  g_string_free (d, TRUE);
}

static void
wait_tick (void *opaque)
{
  struct wait_state *w = opaque;
  GError *err = NULL;
  struct json_object *st;

  if (w->poll == NULL)
    return;
  st = status_fetch (w->poll, &err);
  if (st == NULL) {
    /* The main connection will report what went wrong. */
    g_clear_error (&err);
    ctl_close (w->poll);
    w->poll = NULL;
    return;
  }
  wait_draw (w, st, false);
  json_object_free (st);
}

/* Send REQUEST [timeout-ms] on c and wait for its reply, with a
 * progress bar on a terminal.  Returns the status after success.
 */
static struct json_object *
wait_request (struct ctl *c, enum wait_kind kind,
              const struct json_object *st0, double *seconds, GError **err)
{
  struct wait_state w = { .kind = kind };
  int ms = timeout_ms ();
  const char *verb = kind == WAIT_SYNC ? "sync" : "wait-populated";
  char *req = ms >= 0 ? g_strdup_printf ("%s %d", verb, ms) : g_strdup (verb);
  struct json_object *st = NULL;
  double t0 = cli_now ();
  GError *perr = NULL;
  char *errno_name = NULL;
  gboolean ok;

  w.pending0 = status_pending_bytes (st0);
  w.stored0 = status_u64 (st0, "stored_bytes");
  if (show_progress ()) {
    w.poll = ctl_connect (ctl_path (c), &perr);
    g_clear_error (&perr);
    if (w.poll)
      wait_draw (&w, st0, false);
  }

  ok = ctl_send (c, req, err) &&
    ctl_wait_reply (c, ms >= 0 ? ms + REPLY_GRACE_MS : -1,
                    w.poll ? wait_tick : NULL, &w, PROGRESS_INTERVAL_MS,
                    NULL, &errno_name, err);
  *seconds = cli_now () - t0;
  if (ok)
    st = status_fetch (c, err);
  if (w.drawn) {
    if (st)
      wait_draw (&w, st, true);
    progress_done (stderr);
  }

  /* The plugin kept the timeout (ETIMEDOUT; if it did not answer at
   * all the connection is no use any more): say how far it got, as the
   * drain or populate goes on.
   */
  if (!ok && errno_name && strcmp (errno_name, "ETIMEDOUT") == 0) {
    struct json_object *now = status_fetch (c, &perr);
    GString *m = g_string_new (NULL);

    g_string_append_printf (m, "%s: %s did not finish within %.1f s",
                            ctl_path (c), verb, opt_timeout);
    if (now && kind == WAIT_SYNC) {
      g_string_append (m, " (");
      format_size (m, status_pending_bytes (now));
      g_string_append (m, " still dirty; write back goes on)");
    }
    else if (now)
      g_string_append_printf (m, " (%.1f%% in RAM; populate goes on)",
                              100 * status_double (now, "progress"));
    g_clear_error (&perr);
    json_object_free (now);
    g_clear_error (err);
    g_set_error_literal (err, RAMBACK_CLI_ERROR, CLI_EXIT_TIMEOUT, m->str);
    g_string_free (m, TRUE);
  }
  ctl_close (w.poll);
  g_free (errno_name);
  g_free (req);
  return st;
}

struct sync_result {
  double seconds;
  uint64_t pending_bytes;     /* dirty + in flight when sync started */
  uint64_t stored_bytes;      /* written back while it ran */
  uint64_t dirty_after;       /* dirty + in flight when it returned */
};

static gboolean
do_sync (struct ctl *c, struct sync_result *r, GError **err)
{
  struct json_object *st0 = status_fetch (c, err), *st1;

  if (st0 == NULL)
    return FALSE;
  st1 = wait_request (c, WAIT_SYNC, st0, &r->seconds, err);
  if (st1) {
    uint64_t s0 = status_u64 (st0, "stored_bytes");
    uint64_t s1 = status_u64 (st1, "stored_bytes");
    r->pending_bytes = status_pending_bytes (st0);
    r->stored_bytes = s1 > s0 ? s1 - s0 : 0;
    r->dirty_after = status_pending_bytes (st1);
  }
  json_object_free (st0);
  json_object_free (st1);
  return st1 != NULL;
}

static void
sync_human (GString *o, const struct sync_result *r)
{
  format_size (o, r->stored_bytes);
  g_string_append (o, " written back in ");
  format_duration (o, r->seconds);
}

static gboolean
cmd_sync (char **args, GError **err)
{
  const char *socket = args[0];
  struct ctl *c = ctl_connect (socket, err);
  struct sync_result r;

  if (c == NULL)
    return FALSE;
  if (!do_sync (c, &r, err)) {
    ctl_close (c);
    return FALSE;
  }
  ctl_close (c);
  if (opt_json) {
    GString *o = result_new ("sync", socket);
    result_seconds (o, "seconds", r.seconds);
    result_u64 (o, "pending_bytes", r.pending_bytes);
    result_u64 (o, "stored_bytes", r.stored_bytes);
    result_u64 (o, "dirty_bytes", r.dirty_after);
    result_print (o);
  }
  else {
    GString *o = g_string_new ("synced: ");
    sync_human (o, &r);
    g_string_append_c (o, '\n');
    fputs (o->str, stdout);
    g_string_free (o, TRUE);
  }
  return TRUE;
}

static gboolean
cmd_wait_populated (char **args, GError **err)
{
  const char *socket = args[0];
  struct ctl *c = ctl_connect (socket, err);
  struct json_object *st0, *st1 = NULL;
  double seconds;

  if (c == NULL)
    return FALSE;
  st0 = status_fetch (c, err);
  if (st0)
    st1 = wait_request (c, WAIT_POPULATED, st0, &seconds, err);
  ctl_close (c);
  json_object_free (st0);
  if (st1 == NULL)
    return FALSE;
  if (opt_json) {
    GString *o = result_new ("wait-populated", socket);
    result_seconds (o, "seconds", seconds);
    result_bool (o, "populated", status_bool (st1, "populated"));
    result_u64 (o, "size", status_u64 (st1, "size"));
    result_u64 (o, "loaded_chunks", status_u64 (st1, "loaded_chunks"));
    result_u64 (o, "loaded_bytes", status_u64 (st1, "loaded_bytes"));
    result_print (o);
  }
  else {
    GString *o = g_string_new ("populated: ");
    format_size (o, status_u64 (st1, "size"));
    g_string_append (o, " in RAM (waited ");
    format_duration (o, seconds);
    g_string_append (o, ")\n");
    fputs (o->str, stdout);
    g_string_free (o, TRUE);
  }
  json_object_free (st1);
  return TRUE;
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

static gboolean
cmd_ups (char **args, GError **err)
{
  const char *socket = args[1];
  struct json_object *before = NULL, *after = NULL;
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

  c = connect_with_status (socket, true, &before, err);
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
  json_object_free (before);
  json_object_free (after);
  ctl_close (c);
  return ok;
}

/* The command table and main. */

struct command {
  const char *name;
  const char *args;           /* positional arguments, for --help */
  int nargs;
  const char *brief;          /* one line for "ramback --help" */
  const char *summary;
  const GOptionEntry *options;
  gboolean (*run) (char **args, GError **err);
};

static const struct command commands[] = {
  { "status", "SOCKET", 1,
    "mode, populate progress, dirty data, flush rate",
    "Show the state of the ramback plugin: mode, populate progress, dirty\n"
    "data, data in flight, errors, the measured flush rate and the time\n"
    "to drain the dirty data at that rate.",
    status_options, cmd_status },
  { "mode", "writeback|writethrough SOCKET", 2,
    "switch the write mode",
    "Switch the write mode.  Switching to writethrough returns at once;\n"
    "the dirty data keeps draining (use 'ramback sync' to wait for it).",
    json_options, cmd_mode },
  { "sync", "SOCKET", 1,
    "wait until the dirty data is on the backing store",
    "Return when everything that was dirty is on the backing store and\n"
    "the store is synced.",
    wait_options, cmd_sync },
  { "wait-populated", "SOCKET", 1,
    "wait until the whole image is in RAM",
    "Return when the whole image is in RAM.",
    wait_options, cmd_wait_populated },
  { "trace", "on|off SOCKET", 2,
    "per-request tracing in nbdkit's debug output",
    "Turn per-request tracing (in nbdkit's debug output) on or off.",
    json_options, cmd_trace },
  { "ups", "EVENT SOCKET", 2,
    "act on a power event: onbatt, lowbatt, online",
    "Act on a power event.  EVENT is onbatt (writethrough, the dirty data\n"
    "keeps draining), lowbatt (writethrough and sync) or online\n"
    "(writeback).  NUT's ONBATT, LOWBATT, ONLINE, FSD, SHUTDOWN and\n"
    "apcupsd's onbattery, offbattery, doshutdown, ... are accepted too.",
    wait_options, cmd_ups },
};

static void
general_usage (FILE *fp)
{
  size_t i;

  fprintf (fp,
           "Usage: ramback COMMAND [OPTION...] ARGUMENTS\n"
           "\n"
           "Control a running nbdkit ramback plugin through its control "
           "socket.\n\nCommands:\n");
  for (i = 0; i < G_N_ELEMENTS (commands); i++) {
    char *s = g_strdup_printf ("%s %s", commands[i].name, commands[i].args);
    fprintf (fp, "  %-35s %s\n", s, commands[i].brief);
    g_free (s);
  }
  fprintf (fp,
           "\n'ramback COMMAND --help' lists the options of a command.\n"
           "Please read the ramback(1) manual page for the details and the "
           "exit statuses.\n");
}

static void
usage_error (const char *prefix, const char *msg)
{
  fprintf (stderr, "%s: %s (try '%s --help')\n", prefix, msg, prefix);
}

int
main (int argc, char **argv)
{
  const struct command *cmd = NULL;
  GOptionContext *ctx;
  GError *err = NULL;
  char *prefix;
  struct sigaction sa = { .sa_handler = on_signal };
  size_t i;
  int status;

  setlocale (LC_ALL, "");

  if (argc < 2) {
    usage_error ("ramback", "no command given");
    return CLI_EXIT_USAGE;
  }
  if (strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0 ||
      strcmp (argv[1], "help") == 0) {
    general_usage (stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp (argv[1], "--version") == 0 || strcmp (argv[1], "-V") == 0) {
    printf ("ramback %s\n", PACKAGE_VERSION);
    return CLI_EXIT_OK;
  }
  for (i = 0; i < G_N_ELEMENTS (commands); i++)
    if (strcmp (argv[1], commands[i].name) == 0)
      cmd = &commands[i];
  if (cmd == NULL) {
    char *m = g_strdup_printf ("unknown command '%s'", argv[1]);
    usage_error ("ramback", m);
    g_free (m);
    return CLI_EXIT_USAGE;
  }

  /* Parse "ramback CMD ..." as its own program, so that --help shows
   * that command's options and usage.
   */
  prefix = g_strdup_printf ("ramback %s", cmd->name);
  g_set_prgname (prefix);
  argv[1] = prefix;
  argv++;
  argc--;
  ctx = g_option_context_new (cmd->args);
  g_option_context_set_summary (ctx, cmd->summary);
  g_option_context_set_description (ctx,
    "Exit status: 0 success, 1 usage, 2 cannot connect, 3 permission\n"
    "denied, 4 connection lost, 5 reply not understood, 6 request\n"
    "failed, 7 timed out.  See ramback(1).");
  g_option_context_add_main_entries (ctx, cmd->options, NULL);
  /* --watch used to take the period (--watch=SECONDS), which made
   * "--watch SOCKET" read the socket as a number.  Say where it went.
   */
  for (i = 1; cmd->options == status_options && i < (size_t) argc &&
         strcmp (argv[i], "--") != 0; i++)
    if (g_str_has_prefix (argv[i], "--watch=")) {
      usage_error (prefix, "--watch takes no value; give the period with "
                   "--interval=SECONDS");
      status = CLI_EXIT_USAGE;
      goto out;
    }
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    usage_error (prefix, err->message);
    g_error_free (err);
    status = CLI_EXIT_USAGE;
    goto out;
  }
  if (argc - 1 != cmd->nargs) {
    char *m = g_strdup_printf ("expected %s", cmd->args);
    usage_error (prefix, m);
    g_free (m);
    status = CLI_EXIT_USAGE;
    goto out;
  }

  sigemptyset (&sa.sa_mask);
  /* No SA_RESTART: a signal must end poll() and nanosleep() early. */
  sigaction (SIGINT, &sa, NULL);
  sigaction (SIGTERM, &sa, NULL);

  if (cmd->run (&argv[1], &err))
    status = CLI_EXIT_OK;
  else {
    g_assert (err != NULL);
    status = err->domain == RAMBACK_CLI_ERROR ? err->code : CLI_EXIT_USAGE;
    if (status == CLI_EXIT_USAGE)
      usage_error (prefix, err->message);
    else
      fprintf (stderr, "ramback: %s\n", err->message);
    g_error_free (err);
  }
  if (fflush (stdout) == EOF || ferror (stdout)) {
    fprintf (stderr, "ramback: error writing to standard output\n");
    if (status == CLI_EXIT_OK)
      status = CLI_EXIT_USAGE;
  }
 out:
  g_option_context_free (ctx);
  g_free (prefix);
  return status;
}
