/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: per-thread error messages (error.h). */

#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ramback.h"
#include "error.h"

const char *
rb_strerror (int errnum)
{
  const char *s = strerrordesc_np (errnum);
  return s ? s : "Unknown error";
}

static __thread char last_error[2048];
static __thread int last_errno;

void
rb_set_error (int errnum, const char *fmt, ...)
{
  va_list args;
  char msg[sizeof last_error];
  int n;

  /* Formatted apart: a message that wraps the previous one passes
   * rb_get_error() (last_error itself) as an argument.
   */
  va_start (args, fmt);
  n = vsnprintf (msg, sizeof msg, fmt, args);
  va_end (args);
  if (errnum != 0 && n >= 0 && (size_t) n < sizeof msg) {
    /* The errno text once: a wrapped message ends with it already. */
    const char *e = rb_strerror (errnum);
    size_t el = strlen (e);

    if (!((size_t) n >= el + 2 && strcmp (msg + n - el, e) == 0 &&
          memcmp (msg + n - el - 2, ": ", 2) == 0))
      snprintf (msg + n, sizeof msg - n, ": %s", e);
  }
  snprintf (last_error, sizeof last_error, "%s", msg);
  last_errno = errnum;
  errno = errnum;
}

void
rb_restore_error (int errnum, const char *msg)
{
  snprintf (last_error, sizeof last_error, "%s", msg);
  last_errno = errnum;
  errno = errnum;
}

const char *
rb_get_error (void)
{
  return last_error[0] ? last_error : NULL;
}

int
rb_get_errno (void)
{
  return last_errno;
}

static rb_log_fn log_fn;

void
rb_set_log (rb_log_fn fn)
{
  log_fn = fn;
}

static void
emit (enum rb_log_level level, const char *fmt, va_list args)
{
  char msg[2048];
  int saved_errno = errno;

  vsnprintf (msg, sizeof msg, fmt, args);
  if (log_fn)
    log_fn (level, msg);
  else
    fprintf (stderr, "ramback: %s\n", msg);
  errno = saved_errno;
}

void
rb_log (const char *fmt, ...)
{
  va_list args;

  va_start (args, fmt);
  emit (RB_LOG_DEBUG, fmt, args);
  va_end (args);
}

void
rb_info (const char *fmt, ...)
{
  va_list args;

  va_start (args, fmt);
  emit (RB_LOG_INFO, fmt, args);
  va_end (args);
}

void
rb_warn (const char *fmt, ...)
{
  va_list args;

  va_start (args, fmt);
  emit (RB_LOG_WARN, fmt, args);
  va_end (args);
}
