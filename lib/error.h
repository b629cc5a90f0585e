/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: per-thread error messages, as libnbd does it.
 *
 * A failing function calls rb_set_error() and returns -1; the caller
 * (the nbdkit glue, a test) reads rb_get_error()/rb_get_errno().  The
 * message lives in thread-local storage, so concurrent failures on
 * different threads do not clobber each other.
 */

#ifndef RAMBACK_ERROR_H
#define RAMBACK_ERROR_H

#include "env.h"

/* Record "<formatted message>: <strerror (errnum)>" (just the message if
 * errnum == 0, or if it ends with ": <strerror (errnum)>" already, as a
 * message that wraps rb_get_error() does) for this thread and set
 * errno = errnum.  rb_get_error() may be one of the arguments.
 */
/* Put back an error saved from rb_get_error()/rb_get_errno() (after a
 * cleanup that may have set another).
 */
extern void rb_restore_error (int errnum, const char *msg);
extern void rb_set_error (int errnum, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

/* The English text of an errno, without touching the locale: strerror()
 * may translate, which takes glibc's locale lock from our background
 * threads (seen to wedge process exit under ASan).
 */
extern const char *rb_strerror (int errnum);

/* Logging: debug messages and per-request trace (rb_log), events of the
 * device's life (rb_info) and warnings (rb_warn) go through the function
 * set by rb_set_log() (the plugin points it at nbdkit_debug).
 */
extern void rb_log (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));
extern void rb_info (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));
extern void rb_warn (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));

#endif /* RAMBACK_ERROR_H */
