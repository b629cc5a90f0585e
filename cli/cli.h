/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback(1): what the parts of the command share.
 *
 * Every failure is a GError in RAMBACK_CLI_ERROR whose code is the exit
 * status of the command, so the place that detects an error decides
 * what it means to the caller, and main() only prints and exits.
 */

#ifndef RAMBACK_CLI_H
#define RAMBACK_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <signal.h>

#include <glib.h>

/* Exit statuses, documented in ramback.pod (EXIT STATUS).  Scripts and
 * the UPS hooks depend on these numbers: never renumber them.
 */
enum cli_exit {
  CLI_EXIT_OK = 0,
  CLI_EXIT_USAGE = 1,           /* bad command line */
  CLI_EXIT_CONNECT = 2,         /* no socket, not a socket, nobody listening */
  CLI_EXIT_PERMISSION = 3,      /* the socket (or its directory) is not ours */
  CLI_EXIT_LOST = 4,            /* connection lost before the reply */
  CLI_EXIT_PROTOCOL = 5,        /* a reply we do not understand */
  CLI_EXIT_REQUEST = 6,         /* the plugin answered ERR */
  CLI_EXIT_TIMEOUT = 7,         /* --timeout expired, or no reply in time */
  CLI_EXIT_INTERRUPTED = 130,   /* SIGINT/SIGTERM while waiting */
};

#define RAMBACK_CLI_ERROR (ramback_cli_error_quark ())
extern GQuark ramback_cli_error_quark (void);

/* Set by the SIGINT/SIGTERM handler; long waits poll it. */
extern volatile sig_atomic_t cli_interrupted;

/* Monotonic clock in seconds. */
extern double cli_now (void);

/* The options (ramback.c); each command's table there picks those that
 * apply.
 */
extern gboolean opt_json;
extern gboolean opt_prometheus;
extern gboolean opt_no_progress;
extern gboolean opt_watch;
extern gboolean opt_interval_given;
extern double opt_watch_interval;
extern gint opt_count;
extern double opt_timeout;          /* seconds, < 0: none */

/* Interruptible sleep (SIGINT/SIGTERM end it early). */
extern void cli_sleep_seconds (double s);
/* --timeout in milliseconds, -1: none. */
extern int cli_timeout_ms (void);
/* Progress bars: on a terminal, unless --no-progress. */
extern bool cli_show_progress (void);

/* The commands (cmd-*.c), run with their positional arguments. */
extern gboolean cmd_status (char **args, GError **err);
extern gboolean cmd_mode (char **args, GError **err);
extern gboolean cmd_trace (char **args, GError **err);
extern gboolean cmd_ups (char **args, GError **err);
extern gboolean cmd_sync (char **args, GError **err);
extern gboolean cmd_wait_populated (char **args, GError **err);
extern gboolean cmd_recover (char **args, GError **err);

struct ctl;
struct status;

/* cmd-mode.c: connect and fetch the status; with retry, while the
 * plugin is busy or not listening yet, for a few seconds.
 */
extern struct ctl *cli_connect_with_status (const char *socket, bool retry,
                                            struct status **st,
                                            GError **err);

/* cmd-sync.c: sync on c, and what it did (ups lowbatt uses it too). */
struct sync_result {
  double seconds;
  uint64_t pending_bytes;     /* dirty + in flight when sync started */
  uint64_t stored_bytes;      /* written back while it ran */
  uint64_t dirty_after;       /* dirty + in flight when it returned */
};
extern gboolean do_sync (struct ctl *c, struct sync_result *r, GError **err);
extern void sync_human (GString *o, const struct sync_result *r);

#endif /* RAMBACK_CLI_H */
