/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the JSON string escaper (see json.h). */

#include <config.h>

#include <stdio.h>

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
