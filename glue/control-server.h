/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback glue: the control socket server.
 *
 * Owns the listening Unix socket (control=) and one thread per client
 * connection.  The protocol itself is lib/control.c.  The socket is
 * bound before nbdkit forks (so a bad path fails at startup), the accept
 * thread starts after the fork.  It keeps serving during the final
 * drain of a clean stop, so `ramback status` can watch it.
 */

#ifndef RAMBACK_CONTROL_SERVER_H
#define RAMBACK_CONTROL_SERVER_H

#include "ramback.h"

extern int control_server_bind (const char *path);
extern int control_server_start (struct rb *rb);
/* Stop accepting, let requests still executing send their replies,
 * disconnect clients, join their threads, unlink the socket.
 */
extern void control_server_stop (void);

#endif /* RAMBACK_CONTROL_SERVER_H */
