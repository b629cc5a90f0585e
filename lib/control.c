/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the control protocol (control.h). */

#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "control.h"
#include "internal.h"

extern const char *rb_errno_name (int e);

#define MAX_WORDS 4

static const char help_text[] =
  "status            counters as key: value lines\n"
  "status json       counters as one JSON object\n"
  "mode writeback    writes complete in RAM, written back later\n"
  "mode writethrough writes reach the backing store before completing\n"
  "sync [MS]         wait until everything dirty now is stored and synced\n"
  "wait-populated [MS] wait until the whole image is in RAM\n"
  "trace on|off      per-request tracing in nbdkit's debug output\n"
  "help              this list\n";

static char * __attribute__ ((format (printf, 2, 3)))
reply_err (int err, const char *fmt, ...)
{
  char msg[512], *r;
  va_list args;
  size_t i;

  va_start (args, fmt);
  vsnprintf (msg, sizeof msg, fmt, args);
  va_end (args);
  for (i = 0; msg[i]; i++)            /* the reply is one line */
    if (msg[i] == '\n' || msg[i] == '\r')
      msg[i] = ' ';
  if (asprintf (&r, "ERR %s %s\n",
                rb_errno_name (err)[0] ? rb_errno_name (err) : "EIO", msg) == -1)
    return NULL;
  return r;
}

static char *
reply_ok (const char *data)
{
  char *r;

  if (asprintf (&r, "%sOK\n", data ? data : "") == -1)
    return NULL;
  return r;
}

static char *
reply_last_error (void)
{
  return reply_err (rb_get_errno () ? rb_get_errno () : EIO, "%s",
                    rb_get_error () ? rb_get_error () : "failed");
}

/* Split into at most MAX_WORDS words; -1 if there are more. */
static int
split (char *line, char *words[MAX_WORDS])
{
  int n = 0;
  char *p = line;

  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p == '\0')
      return n;
    if (n == MAX_WORDS)
      return -1;
    words[n++] = p;
    while (*p && *p != ' ' && *p != '\t')
      p++;
    if (*p)
      *p++ = '\0';
  }
}

/* Optional timeout in ms: absent means forever. */
static int
parse_timeout (int nw, char **w, int *ms)
{
  char *end;
  long v;

  *ms = -1;
  if (nw < 2)
    return 0;
  errno = 0;
  v = strtol (w[1], &end, 10);
  if (errno || end == w[1] || *end || v < 0 || v > INT_MAX)
    return -1;
  *ms = (int) v;
  return 0;
}

static char *
do_status (struct rb *rb, bool json)
{
  struct rb_stats st;
  char buf[4096], extra[2048] = "";
  size_t n = 0;
  int len;

  rb_get_stats (rb, &st);
  len = rb_stats_format (&st, json, buf, sizeof buf - 2);
  if (len < 0 || (size_t) len >= sizeof buf - 2)
    return reply_err (ENOMEM, "status does not fit");
  if (rb->store->ops->status)
    n = rb->store->ops->status (rb->store, json, extra, sizeof extra);
  extra[n < sizeof extra ? n : sizeof extra - 1] = '\0';
  if (json) {
    char *r;
    buf[len - 1] = '\0';                      /* drop the closing brace */
    if (asprintf (&r, "%s%s}\nOK\n", buf, extra) == -1)
      return NULL;
    return r;
  }
  {
    char *r;
    if (asprintf (&r, "%s%sOK\n", buf, extra) == -1)
      return NULL;
    return r;
  }
}

char *
rb_control_request (struct rb *rb, const char *line)
{
  CLEANUP_FREE char *copy = strdup (line);
  char *w[MAX_WORDS];
  int nw, ms;
  size_t i;

  if (copy == NULL)
    return NULL;
  for (i = 0; copy[i]; i++)
    if (!isprint ((unsigned char) copy[i]) && copy[i] != '\t')
      return reply_err (EINVAL, "request contains non-printable bytes");
  nw = split (copy, w);
  if (nw == -1)
    return reply_err (EINVAL, "too many words (try 'help')");
  if (nw == 0)
    return reply_err (EINVAL, "empty request (try 'help')");

  if (strcmp (w[0], "status") == 0) {
    if (nw == 1)
      return do_status (rb, false);
    if (nw == 2 && strcmp (w[1], "json") == 0)
      return do_status (rb, true);
    return reply_err (EINVAL, "usage: status [json]");
  }
  if (strcmp (w[0], "mode") == 0) {
    enum rb_mode m;
    if (nw == 2 && strcmp (w[1], "writeback") == 0)
      m = RB_MODE_WRITEBACK;
    else if (nw == 2 && strcmp (w[1], "writethrough") == 0)
      m = RB_MODE_WRITETHROUGH;
    else
      return reply_err (EINVAL, "usage: mode writeback|writethrough");
    if (rb_set_mode (rb, m) == -1)
      return reply_last_error ();
    return reply_ok (NULL);
  }
  if (strcmp (w[0], "sync") == 0 || strcmp (w[0], "wait-populated") == 0) {
    bool sync = w[0][0] == 's';
    if (nw > 2 || parse_timeout (nw, w, &ms) == -1)
      return reply_err (EINVAL, "usage: %s [TIMEOUT-MS]", w[0]);
    if ((sync ? rb_sync (rb, ms) : rb_wait_populated (rb, ms)) == -1)
      return reply_last_error ();
    return reply_ok (NULL);
  }
  if (strcmp (w[0], "trace") == 0) {
    if (nw == 2 && strcmp (w[1], "on") == 0)
      rb_set_trace (rb, true);
    else if (nw == 2 && strcmp (w[1], "off") == 0)
      rb_set_trace (rb, false);
    else
      return reply_err (EINVAL, "usage: trace on|off");
    return reply_ok (NULL);
  }
  if (strcmp (w[0], "help") == 0 && nw == 1)
    return reply_ok (help_text);

  {
    char shown[64];
    snprintf (shown, sizeof shown, "%s", w[0]);
    return reply_err (EINVAL, "unknown request '%s' (try 'help')", shown);
  }
}

const char *
rb_control_too_long (void)
{
  return "ERR EINVAL line too long\n";
}
