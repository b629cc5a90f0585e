/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the control protocol (docs/ramback-control.pod), without the
 * socket.  The plugin's control server reads a line, passes it here and
 * writes back the reply; the unit tests call this directly.
 */

#ifndef RAMBACK_CONTROL_H
#define RAMBACK_CONTROL_H

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

/* The reply to a request line that was too long. */
extern const char *rb_control_too_long (void);

#endif /* RAMBACK_CONTROL_H */
