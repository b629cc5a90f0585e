/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the control protocol (docs/ramback-control.pod), without the
 * socket.  The plugin's control server reads a line, passes it here and
 * writes back the reply; the unit tests call this directly.
 */

#ifndef RAMBACK_CONTROL_H
#define RAMBACK_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#include "ramback.h"

#define RB_CONTROL_MAX_LINE 1024

/* Execute one request: the len bytes of line, without its newline (any
 * NUL among them is an error).  Returns the whole reply (data lines,
 * then "OK\n" or "ERR <ERRNO> <message>\n") in a malloc'd string, or
 * NULL if out of memory.  May block (sync, wait-populated).
 */
extern char *rb_control_request (struct rb *rb, const char *line,
                                 size_t len);

/* Reserved slots.  While every ordinary slot of the control server is
 * taken, a connection gets a reserved one, which serves only what a mode
 * switch needs ("ramback mode" and "ramback ups" send status, mode,
 * status, and for lowbatt sync, status): the first request must be
 * "mode" or "status", a "mode" must come by the second, and after it
 * "status" and "sync" are served too.  So a "status --watch" or a
 * "sync" cannot settle in a reserved slot.  Start with the struct
 * zeroed; for each request line (len bytes) returns NULL if it may be
 * served, else the reply refusing it (the server then closes the
 * connection).
 */
struct rb_control_reserved {
  unsigned requests;
  bool mode_seen;
};
extern const char *rb_control_reserved_refusal (struct rb_control_reserved *r,
                                                const char *line, size_t len);

/* The reply to a request line that was too long. */
extern const char *rb_control_too_long (void);

#endif /* RAMBACK_CONTROL_H */
