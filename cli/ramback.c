/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback(1): control a running nbdkit-ramback-plugin.
 *
 * Every subcommand talks the line protocol of ramback-control(5) over
 * the plugin's control socket.  Each has a human form and a --json form
 * with the field names documented in ramback.pod; every failure is one
 * line on stderr and an exit status from cli.h.
 *
 * This file: the options, the command table and main.  The commands
 * are in cmd-status.c, cmd-mode.c (mode, trace, ups), cmd-sync.c (sync,
 * wait-populated) and cmd-recover.c; result.c builds their --json
 * results, status.c and format.c their human forms, client.c talks to
 * the socket and status.c parses the replies (with json-glib).
 */

#include <config.h>

#include <limits.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "cli.h"

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

/* Options.  Each command's table below picks those that apply. */
gboolean opt_json;
gboolean opt_prometheus;
gboolean opt_no_progress;
gboolean opt_watch;
double opt_watch_interval = 1.0;
gint opt_count;
double opt_timeout = -1;     /* seconds, < 0: none */

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

gboolean opt_interval_given;

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

/* Interruptible sleep (SIGINT/SIGTERM end it early). */
void
cli_sleep_seconds (double s)
{
  struct timespec ts = { .tv_sec = (time_t) s,
                         .tv_nsec = (long) ((s - floor (s)) * 1e9) };

  if (!cli_interrupted)
    nanosleep (&ts, NULL);
}

int
cli_timeout_ms (void)
{
  return opt_timeout < 0 ? -1 : (int) ceil (opt_timeout * 1000);
}

bool
cli_show_progress (void)
{
  return !opt_no_progress && isatty (STDERR_FILENO);
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
  { "recover", "BACK JOURNAL", 2,
    "replay a journal onto its backing store (offline)",
    "Replay the committed transactions of JOURNAL onto the backing store\n"
    "BACK, as the plugin does when it starts, and leave the journal empty:\n"
    "BACK alone then holds a point in time of the device.  BACK and\n"
    "JOURNAL are files, block devices or NBD URIs; nothing may be using\n"
    "them (no ramback running on them).",
    json_options, cmd_recover },
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
