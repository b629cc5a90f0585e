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

extern const char *rb_errno_name (int e);
extern int rb_text_escape (char *buf, size_t len, const char *s, size_t n);

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

/* Decode the JSON string at *p (after its opening quote) into out
 * (room for strlen (*p) bytes); *p is left after the closing quote.
 * Returns the decoded length, or -1 if it is not a JSON string.
 */
static ssize_t
json_string_decode (const char **p, char *out)
{
  const char *s = *p;
  size_t n = 0;

  for (;;) {
    unsigned char c = *s++;
    unsigned long u;
    char hex[5];
    int i;

    if (c == '"')
      break;
    if (c < 0x20)                       /* also the end of the text */
      return -1;
    if (c != '\\') {
      out[n++] = c;
      continue;
    }
    switch (c = *s++) {
    case '"': case '\\': case '/': out[n++] = c; continue;
    case 'b': out[n++] = '\b'; continue;
    case 'f': out[n++] = '\f'; continue;
    case 'n': out[n++] = '\n'; continue;
    case 'r': out[n++] = '\r'; continue;
    case 't': out[n++] = '\t'; continue;
    case 'u': break;
    default: return -1;
    }
    for (i = 0; i < 4; i++) {
      if (!isxdigit ((unsigned char) s[i]))   /* stops at the end too */
        return -1;
      hex[i] = s[i];
    }
    hex[4] = '\0';
    u = strtoul (hex, NULL, 16);
    s += 4;
    /* Six bytes of input make at most three of output (no surrogates:
     * the stores only escape control characters).
     */
    if (u >= 0xd800 && u <= 0xdfff)
      return -1;
    if (u < 0x80)
      out[n++] = u;
    else if (u < 0x800) {
      out[n++] = 0xc0 | (u >> 6);
      out[n++] = 0x80 | (u & 0x3f);
    }
    else {
      out[n++] = 0xe0 | (u >> 12);
      out[n++] = 0x80 | ((u >> 6) & 0x3f);
      out[n++] = 0x80 | (u & 0x3f);
    }
  }
  *p = s;
  return n;
}

/* The store describes its own fields once, as JSON members
 * (,"key":value...).  The text status shows them as "key: value" lines,
 * strings unquoted and escaped like the core's (rb_text_escape), so
 * whatever a path or URI holds, each field stays one line.  Returns the
 * malloc'd text, or NULL if out of memory; members that do not parse
 * (a store's status cut short) are left out.
 */
static char *
store_fields_text (const char *p)
{
  size_t cap = strlen (p) * 4 + 64, n = 0;   /* \xHH: 4 bytes per byte */
  char *text = malloc (cap), *val = malloc (strlen (p) + 1);

  if (text == NULL || val == NULL) {
    free (text);
    free (val);
    return NULL;
  }
  text[0] = '\0';
  while (*p == ',' && p[1] == '"') {
    const char *key = p + 2, *kend = key, *v;
    ssize_t vlen;
    int r;

    while (islower ((unsigned char) *kend) || isdigit ((unsigned char) *kend) ||
           *kend == '_')
      kend++;
    if (kend == key || kend[0] != '"' || kend[1] != ':')
      break;
    v = kend + 2;
    if (*v == '"') {
      v++;
      if ((vlen = json_string_decode (&v, val)) == -1)
        break;
    }
    else {
      /* A number, true, false or null. */
      vlen = strspn (v, "0123456789+-.eEtruefalsn");
      if (vlen == 0)
        break;
      memcpy (val, v, vlen);
      v += vlen;
    }
    if (*v != ',' && *v != '\0')
      break;
    r = snprintf (text + n, cap - n, "%.*s: ", (int) (kend - key), key);
    if (r < 0 || (size_t) r >= cap - n)
      break;
    r += rb_text_escape (text + n + r, cap - n - r, val, vlen);
    if ((size_t) r + 1 >= cap - n)
      break;
    n += r;
    text[n++] = '\n';
    text[n] = '\0';
    p = v;
  }
  text[n] = '\0';                       /* a member cut short is left out */
  free (val);
  return text;
}

static char *
do_status (struct rb *rb, bool json)
{
  struct rb_stats st;
  char buf[4096];
  CLEANUP_FREE char *extra = NULL;
  size_t n = 0, size = 2048;
  int len;

  rb_get_stats (rb, &st);
  len = rb_stats_format (&st, json, buf, sizeof buf - 2);
  if (len < 0 || (size_t) len >= sizeof buf - 2)
    return reply_err (ENOMEM, "status does not fit");
  /* The store's fields: a back= path or URI can be long, and longer
   * escaped.  Cut JSON is no JSON, so grow the buffer until they fit.
   */
  for (;;) {
    char *p = realloc (extra, size);

    if (p == NULL)
      return NULL;
    extra = p;
    extra[0] = '\0';
    n = 0;
    if (rb->store->ops->status)
      n = rb->store->ops->status (rb->store, true, extra, size);
    if (n + 1 < size)
      break;
    if (size >= 1024 * 1024)
      return reply_err (ENOMEM, "status does not fit");
    size *= 2;
  }
  extra[n] = '\0';
  if (json) {
    char *r;
    buf[len - 1] = '\0';                      /* drop the closing brace */
    if (asprintf (&r, "%s%s}\nOK\n", buf, extra) == -1)
      return NULL;
    return r;
  }
  {
    CLEANUP_FREE char *text = store_fields_text (extra);
    char *r;
    if (text == NULL || asprintf (&r, "%s%sOK\n", buf, text) == -1)
      return NULL;
    return r;
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
