/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Human-readable sizes, rates, durations and progress bars. */

#ifndef RAMBACK_CLI_FORMAT_H
#define RAMBACK_CLI_FORMAT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <glib.h>

/* 512 B, 64.0 KiB, 1.5 GiB (IEC, one decimal). */
extern void format_size (GString *out, uint64_t bytes);
/* 23.4 MiB/s */
extern void format_rate (GString *out, uint64_t bytes_per_second);
/* 0.6 s, 42 s, 3m 07s, 1h 02m 03s, 2d 03h 04m; "unknown" if < 0. */
extern void format_duration (GString *out, double seconds);
/* [#####-----] with width characters between the brackets. */
extern void format_bar (GString *out, double fraction, int width);

/* Columns of the terminal on fd, or 80. */
extern int terminal_width (int fd);
/* Rows of the terminal on fd, or 0 if unknown. */
extern int terminal_rows (int fd);

/* A one-line progress display on a terminal, redrawn in place:
 * "LABEL [####----]  42.0%  DETAIL".  progress_done ends the line.
 */
extern void progress_draw (FILE *fp, const char *label, double fraction,
                           const char *detail);
extern void progress_done (FILE *fp);

#endif /* RAMBACK_CLI_FORMAT_H */
