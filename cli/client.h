/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The client side of the control-socket protocol (ramback-control(5)).
 *
 * A request is one line; the reply is data lines and a final "OK" or
 * "ERR ERRNO-NAME message".  Every way this can go wrong is mapped to one
 * exit status here (cli.h), with a message that names the socket.
 */

#ifndef RAMBACK_CLI_CLIENT_H
#define RAMBACK_CLI_CLIENT_H

#include <glib.h>

struct ctl;

/* How long any request except sync/wait-populated may take to answer:
 * a plugin that does not reply to "status" in this long is hung.
 */
#define CTL_DEFAULT_REPLY_MS 30000

/* Connect to the control socket at path.  NULL with *err set
 * (CLI_EXIT_CONNECT or CLI_EXIT_PERMISSION) on failure.
 */
extern struct ctl *ctl_connect (const char *path, GError **err);
extern void ctl_close (struct ctl *c);
extern const char *ctl_path (const struct ctl *c);
extern int ctl_fd (const struct ctl *c);

/* Whether the last ctl_connect or request failed because the plugin was
 * busy (ERR EBUSY: all its control slots taken) or nobody listened on
 * the socket yet (a plugin restarting): worth another try soon.
 */
extern gboolean ctl_failure_transient (void);

/* Send one request line (without the newline). */
extern gboolean ctl_send (struct ctl *c, const char *request, GError **err);

/* Called about every interval_ms while ctl_wait_reply waits. */
typedef void (*ctl_tick_fn) (void *opaque);

/* Wait for the reply to the request sent last.  timeout_ms < 0: wait
 * for ever.  On "OK" returns TRUE and, if lines is not NULL, the data
 * lines (free with g_ptr_array_unref).  On "ERR" fails with
 * CLI_EXIT_TIMEOUT for ETIMEDOUT and CLI_EXIT_REQUEST otherwise; the
 * errno name is also returned in *errno_name if not NULL.
 */
extern gboolean ctl_wait_reply (struct ctl *c, int timeout_ms,
                                ctl_tick_fn tick, void *opaque,
                                int interval_ms,
                                GPtrArray **lines, char **errno_name,
                                GError **err);

/* ctl_send + ctl_wait_reply with CTL_DEFAULT_REPLY_MS and no tick. */
extern gboolean ctl_request (struct ctl *c, const char *request,
                             GPtrArray **lines, GError **err);

#endif /* RAMBACK_CLI_CLIENT_H */
