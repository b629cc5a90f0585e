/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the control protocol (control.h). */

#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cleanup.h"
#include "control.h"
#include "internal.h"
#include "json.h"

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
                rbi_errno_name (err)[0] ? rbi_errno_name (err) : "EIO",
                msg) == -1)
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

/* Optional timeout in ms: absent means forever.  Numbers have one form:
 * decimal digits, without sign, leading zero or unit, so that "-0",
 * "+5", "0x5" and "5s" are errors rather than guesses.
 */
static int
parse_timeout (int nw, char **w, int *ms)
{
  const char *s;
  long v = 0;

  *ms = -1;
  if (nw < 2)
    return 0;
  s = w[1];
  if (!isdigit ((unsigned char) s[0]) || (s[0] == '0' && s[1] != '\0'))
    return -1;
  for (; *s; s++) {
    if (!isdigit ((unsigned char) *s))
      return -1;
    v = v * 10 + (*s - '0');
    if (v > INT_MAX)
      return -1;
  }
  *ms = (int) v;
  return 0;
}

/* sync 0: is everything written before now stored and synced, without
 * waiting?  Under rb->lock an idle flusher stays idle, and it is the
 * only one that takes dirty chunks to the store, so nothing moves from
 * dirty to in flight meanwhile.  Every other way out of unsynced_bytes
 * (a FUA write's sync that failed) re-dirties the data first (flush.c),
 * so reading unsynced_bytes before dirty_chunks cannot miss data in
 * between.  A flusher that is busy, even with nothing left to store,
 * counts as not done.
 */
static bool
stored_now (struct rb *rb)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
  return rb->flusher_running && rb_atomic_load (&rb->flusher_idle) &&
    rb_atomic_load (&rb->unsynced_bytes) == 0 &&
    chunkmap_dirty (&rb->map) == 0 &&
    rb_atomic_load (&rb->inflight_chunks) == 0;
}

static char *
do_sync_now (struct rb *rb)
{
  struct rb_stats st;
  bool running;

  if (stored_now (rb))
    return reply_ok (NULL);
  rb_get_stats (rb, &st);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    running = rb->flusher_running;
  }
  if (!running || st.dirty_bytes + st.inflight_bytes +
      st.unsynced_bytes == 0) {
    /* Not running (the errors are rb_sync's), or busy finishing. */
    if (rb_sync (rb, 0) == 0)
      return reply_ok (NULL);
    return reply_last_error ();
  }
  return reply_err (ETIMEDOUT, "sync: %" PRIu64 " bytes dirty, %" PRIu64
                    " in flight and %" PRIu64 " not yet synced (write "
                    "back continues)", st.dirty_bytes, st.inflight_bytes,
                    st.unsynced_bytes);
}

/* The core's fields and then the store's, through one writer (json.h).
 * A back= path or URI can be long, and longer escaped, and cut JSON is
 * no JSON: so grow the buffer until the whole reply fits.
 */
static char *
do_status (struct rb *rb, bool json)
{
  struct rb_stats st;
  size_t size = 4096;

  rb_get_stats (rb, &st);
  for (;;) {
    const char *end = json ? "\nOK\n" : "OK\n";
    char *buf = malloc (size);
    struct rb_status_out o;

    if (buf == NULL)
      return NULL;
    rb_status_begin (&o, json, buf, size);
    rbi_stats_fields (&st, &o);
    if (rb->store->ops->status)
      rb->store->ops->status (rb->store, &o);
    rb_status_end (&o);
    if (o.pos + strlen (end) < size) {
      strcpy (buf + o.pos, end);
      return buf;
    }
    free (buf);
    if (size >= 1024 * 1024)
      return reply_err (ENOMEM, "status does not fit");
    size *= 2;
  }
}

char *
rb_control_request (struct rb *rb, const char *line, size_t len)
{
  CLEANUP_FREE char *copy = NULL;
  char *w[MAX_WORDS];
  int nw, ms;
  size_t i;

  /* A NUL would end the copy early: what follows it would go unchecked
   * and unseen ("mode writethrough\0junk").
   */
  if (memchr (line, '\0', len))
    return reply_err (EINVAL, "request contains a NUL byte");
  if ((copy = strndup (line, len)) == NULL)
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
    if (nw > 2)
      return reply_err (EINVAL, "usage: %s [TIMEOUT-MS]", w[0]);
    if (parse_timeout (nw, w, &ms) == -1)
      return reply_err (EINVAL, "%s: '%.32s' is not a number of "
                        "milliseconds (digits only, at most %d, e.g. 5000)",
                        w[0], w[1], INT_MAX);
    if (sync && ms == 0)
      return do_sync_now (rb);
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
rb_control_reserved_refusal (struct rb_control_reserved *r,
                             const char *line, size_t len)
{
  size_t i = 0, n;
  bool ok;

  while (i < len && (line[i] == ' ' || line[i] == '\t'))
    i++;
  for (n = 0; i + n < len && line[i + n] != ' ' && line[i + n] != '\t'; n++)
    ;
#define IS(word) (n == strlen (word) && memcmp (line + i, word, n) == 0)
  if (IS ("mode"))
    ok = r->mode_seen = true;
  else if (IS ("status"))
    ok = r->mode_seen || r->requests == 0;
  else if (IS ("sync"))
    ok = r->mode_seen;
  else
    ok = false;
#undef IS
  if (!ok)
    return "ERR EBUSY too many control connections: this one is reserved "
      "for mode changes\n";
  r->requests++;
  return NULL;
}

const char *
rb_control_too_long (void)
{
  return "ERR EINVAL line too long\n";
}
