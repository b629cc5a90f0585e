/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Human-readable numbers and progress bars. */

#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "format.h"

void
format_size (GString *out, uint64_t bytes)
{
  static const char *units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
  double v = bytes;
  int u = -1;

  if (bytes < 1024) {
    g_string_append_printf (out, "%" PRIu64 " B", bytes);
    return;
  }
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  /* Round before choosing the unit's precision so 1023.96 KiB does not
   * print as "1024.0 KiB".
   */
  if (v >= 1023.95 && u < 5) {
    v /= 1024;
    u++;
  }
  g_string_append_printf (out, "%.1f %s", v, units[u]);
}

void
format_rate (GString *out, uint64_t bytes_per_second)
{
  format_size (out, bytes_per_second);
  g_string_append (out, "/s");
}

void
format_duration (GString *out, double s)
{
  uint64_t t;

  if (s < 0 || isnan (s)) {
    g_string_append (out, "unknown");
    return;
  }
  if (s < 10) {
    g_string_append_printf (out, "%.1f s", s);
    return;
  }
  if (s < 60) {
    g_string_append_printf (out, "%.0f s", s);
    return;
  }
  t = s + 0.5;
  if (t < 3600)
    g_string_append_printf (out, "%" PRIu64 "m %02" PRIu64 "s",
                            t / 60, t % 60);
  else if (t < 86400)
    g_string_append_printf (out, "%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s",
                            t / 3600, t / 60 % 60, t % 60);
  else
    g_string_append_printf (out, "%" PRIu64 "d %02" PRIu64 "h %02" PRIu64 "m",
                            t / 86400, t / 3600 % 24, t / 60 % 60);
}

void
format_bar (GString *out, double fraction, int width)
{
  int i, filled;

  if (isnan (fraction) || fraction < 0)
    fraction = 0;
  if (fraction > 1)
    fraction = 1;
  if (width < 1)
    width = 1;
  filled = fraction * width;
  g_string_append_c (out, '[');
  for (i = 0; i < width; i++)
    g_string_append_c (out, i < filled ? '#' : '-');
  g_string_append_c (out, ']');
}

int
terminal_width (int fd)
{
  struct winsize ws;

  if (ioctl (fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
    return ws.ws_col;
  return 80;
}

int
terminal_rows (int fd)
{
  struct winsize ws;

  if (ioctl (fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row >= 2)
    return ws.ws_row;
  return 0;
}

void
progress_draw (FILE *fp, const char *label, double fraction,
               const char *detail)
{
  GString *line = g_string_new (NULL);
  int cols = terminal_width (fileno (fp));
  int dlen = detail ? strlen (detail) : 0;
  /* "LABEL [bar] 100.0%  DETAIL" in one line less than the width. */
  int bar = cols - 1 - (int) strlen (label) - 10 - (dlen ? dlen + 2 : 0);

  if (bar > 40)
    bar = 40;
  if (bar < 10)
    bar = 10;
  g_string_append_printf (line, "%s ", label);
  format_bar (line, fraction, bar);
  g_string_append_printf (line, " %5.1f%%", 100 * fmin (fmax (fraction, 0), 1));
  if (dlen) {
    g_string_append (line, "  ");
    g_string_append (line, detail);
  }
  /* Never wrap: a wrapped line cannot be redrawn with \r. */
  if (line->len >= (gsize) cols)
    g_string_truncate (line, cols - 1);
  fprintf (fp, "\r%s\033[K", line->str);
  fflush (fp);
  g_string_free (line, TRUE);
}

void
progress_done (FILE *fp)
{
  fputc ('\n', fp);
  fflush (fp);
}
