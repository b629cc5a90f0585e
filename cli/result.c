/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The JSON result objects of the commands (--json):
 * {"command":...,"socket":...,...} on one line.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>

#include <glib.h>

#include "cli.h"
#include "result.h"

/* s as a JSON string literal, quotes included. */
static void
json_append_string (GString *out, const char *s)
{
  g_string_append_c (out, '"');
  for (; *s; s++) {
    unsigned char ch = *s;
    switch (ch) {
    case '"': g_string_append (out, "\\\""); break;
    case '\\': g_string_append (out, "\\\\"); break;
    case '\n': g_string_append (out, "\\n"); break;
    case '\r': g_string_append (out, "\\r"); break;
    case '\t': g_string_append (out, "\\t"); break;
    default:
      if (ch < 0x20)
        g_string_append_printf (out, "\\u%04x", ch);
      else
        g_string_append_c (out, ch);
    }
  }
  g_string_append_c (out, '"');
}

GString *
result_new (const char *command, const char *socket)
{
  GString *o = g_string_new ("{\"command\":");

  json_append_string (o, command);
  g_string_append (o, ",\"socket\":");
  json_append_string (o, socket);
  return o;
}

void
result_key (GString *o, const char *key)
{
  g_string_append_c (o, ',');
  json_append_string (o, key);
  g_string_append_c (o, ':');
}

void
result_str (GString *o, const char *key, const char *v)
{
  result_key (o, key);
  json_append_string (o, v);
}

void
result_u64 (GString *o, const char *key, uint64_t v)
{
  result_key (o, key);
  g_string_append_printf (o, "%" PRIu64, v);
}

/* Durations with millisecond precision, never in exponent form. */
void
result_seconds (GString *o, const char *key, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  result_key (o, key);
  g_string_append (o, g_ascii_formatd (buf, sizeof buf, "%.3f", v));
}

void
result_bool (GString *o, const char *key, bool v)
{
  result_key (o, key);
  g_string_append (o, v ? "true" : "false");
}

void
result_print (GString *o)
{
  g_string_append (o, "}\n");
  fputs (o->str, stdout);
  g_string_free (o, TRUE);
}
