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

#endif /* RAMBACK_CLI_H */
