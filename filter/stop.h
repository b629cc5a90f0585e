/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The filter's stop: SIGINT, SIGQUIT, SIGTERM and SIGHUP write back
 * first, then shut nbdkit down (stop.c).
 */

#ifndef RAMBACK_FILTER_STOP_H
#define RAMBACK_FILTER_STOP_H

struct rb;

/* From .after_fork, once rb serves: take the stop signals. */
extern int stop_intercept_start (struct rb *rb);

/* From .cleanup: give the signals up, end the thread. */
extern void stop_intercept_end (void);

#endif /* RAMBACK_FILTER_STOP_H */
