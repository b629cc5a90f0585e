/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the JSON string escaper of "status json".
 *
 * Every string in "status json" (docs/ramback-control.pod) goes through
 * rb_json_string(): the core's fields (lib/stats.c) and those of the
 * stores (a back= path or URI holds whatever the user typed, quotes,
 * backslashes and control characters included).  No state, no locks.
 */

#ifndef RAMBACK_JSON_H
#define RAMBACK_JSON_H

#include <stddef.h>

/* Write 'str' as a JSON string (quotes included) into 'buf' of 'len'
 * bytes: '"' and '\' are escaped with a backslash, control characters
 * as \u00XX, the rest is copied as is (UTF-8 passes through).  Like
 * snprintf: returns the length the whole string needs (not counting
 * the NUL), writes at most len - 1 bytes and a NUL if len > 0; 'buf'
 * may be NULL when len is 0.
 */
extern size_t rb_json_string (char *buf, size_t len, const char *str);

#endif /* RAMBACK_JSON_H */
