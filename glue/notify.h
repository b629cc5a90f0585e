/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the device's life in nbdkit's log and, under systemd, in
 * "systemctl status" (notify.c).  glue.c calls these in this order:
 *
 *   ramback_notify_start     once serving: the start line, READY=1, and
 *                            the monitor thread (STATUS= every second,
 *                            the end of populate, a store's recovery)
 *   ramback_notify_draining  before the clean stop's drain: STOPPING=1
 *   ramback_notify_stopped   after it: the monitor thread is joined, and
 *                            "wrote back N bytes in T s, store synced:
 *                            safe to power off" (or that it is not)
 */

#ifndef RAMBACK_GLUE_NOTIFY_H
#define RAMBACK_GLUE_NOTIFY_H

#include <stdbool.h>

#include "ramback.h"

/* One line on stderr, at every log level ("ramback: MSG"). */
extern void ramback_info (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));

/* NBD clients connected now: +1 at .open, -1 at .close. */
extern void ramback_notify_client (int delta);
extern void ramback_notify_start (struct rb *rb, const char *what);
extern void ramback_notify_draining (void);
extern void ramback_notify_stopped (bool ok);

#endif /* RAMBACK_GLUE_NOTIFY_H */
