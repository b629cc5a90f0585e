/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the status writer and its JSON string escaper (see json.h). */

#include <config.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "json.h"

size_t
rb_json_string (char *buf, size_t len, const char *str)
{
  size_t n = 0;
  const unsigned char *p;

#define PUT(ch) do { if (n + 1 < len) buf[n] = (ch); n++; } while (0)
  PUT ('"');
  for (p = (const unsigned char *) str; *p; p++) {
    if (*p == '"' || *p == '\\') {
      PUT ('\\');
      PUT (*p);
    }
    else if (*p < 0x20) {
      char esc[8];
      int i;

      snprintf (esc, sizeof esc, "\\u%04x", *p);
      for (i = 0; esc[i]; i++)
        PUT (esc[i]);
    }
    else
      PUT (*p);
  }
  PUT ('"');
#undef PUT
  if (len > 0)
    buf[n < len ? n : len - 1] = '\0';
  return n;
}

static void __attribute__ ((format (printf, 2, 3)))
put (struct rb_status_out *o, const char *fmt, ...)
{
  va_list args;
  int n;

  va_start (args, fmt);
  n = vsnprintf (o->pos < o->len ? o->buf + o->pos : NULL,
                 o->pos < o->len ? o->len - o->pos : 0, fmt, args);
  va_end (args);
  if (n > 0)
    o->pos += n;
}

static void
put_json_string (struct rb_status_out *o, const char *s)
{
  size_t avail = o->pos < o->len ? o->len - o->pos : 0;

  o->pos += rb_json_string (avail ? o->buf + o->pos : NULL, avail, s);
}

/* Text strings: the text form is one line per field, so a string must
 * not hold a newline (a path ending in "\nOK" would end the reply
 * early).  Backslash, control characters and DEL are escaped as \\,
 * \n, \r, \t and \xHH (docs/ramback-control.pod); the rest is as is.
 */
static void
put_text_string (struct rb_status_out *o, const char *s)
{
  for (; *s; s++) {
    unsigned char c = *s;
    switch (c) {
    case '\\': put (o, "\\\\"); break;
    case '\n': put (o, "\\n"); break;
    case '\r': put (o, "\\r"); break;
    case '\t': put (o, "\\t"); break;
    default:
      if (c < 0x20 || c == 0x7f)
        put (o, "\\x%02x", c);
      else
        put (o, "%c", c);
    }
  }
}

void
rb_status_begin (struct rb_status_out *o, bool json, char *buf, size_t len)
{
  *o = (struct rb_status_out) { .buf = buf, .len = len, .json = json };
  if (len > 0)
    buf[0] = '\0';
  if (json)
    put (o, "{");
}

void
rb_status_end (struct rb_status_out *o)
{
  if (o->json)
    put (o, "}");
}

/* The key, and the separator before the value. */
static void
key (struct rb_status_out *o, const char *k)
{
  if (o->json)
    put (o, "%s\"%s\":", o->fields ? "," : "", k);
  else
    put (o, "%s: ", k);
  o->fields++;
}

static void
eol (struct rb_status_out *o)
{
  if (!o->json)
    put (o, "\n");
}

void
rb_status_u64 (struct rb_status_out *o, const char *k, uint64_t v)
{
  key (o, k);
  put (o, "%" PRIu64, v);
  eol (o);
}

void
rb_status_bool (struct rb_status_out *o, const char *k, bool v)
{
  key (o, k);
  put (o, "%s", v ? "true" : "false");
  eol (o);
}

void
rb_status_str (struct rb_status_out *o, const char *k, const char *v)
{
  key (o, k);
  if (o->json)
    put_json_string (o, v);
  else
    put_text_string (o, v);
  eol (o);
}

void
rb_status_dbl (struct rb_status_out *o, const char *k, double v)
{
  key (o, k);
  put (o, "%.3f", v);
  eol (o);
}
