/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the status writer and its JSON string escaper.
 *
 * "status" (text: one "key: value" line per field) and "status json"
 * (one JSON object) are written field by field through one writer: the
 * core's fields first (lib/stats.c), then the store's, which its
 * ops->status appends to the same reply (lib/store.h).  So both forms
 * come from the same calls and every string is escaped one way: in
 * JSON by rb_json_string (a back= path or URI holds whatever the user
 * typed, quotes, backslashes and control characters included), in text
 * so that a field stays one line (docs/ramback-control.pod).  The field
 * names are an interface; tests/test-status-fields.sh checks them
 * against the manual.  No state, no locks.
 */

#ifndef RAMBACK_JSON_H
#define RAMBACK_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Write 'str' as a JSON string (quotes included) into 'buf' of 'len'
 * bytes: '"' and '\' are escaped with a backslash, control characters
 * as \u00XX, the rest is copied as is (UTF-8 passes through).  Like
 * snprintf: returns the length the whole string needs (not counting
 * the NUL), writes at most len - 1 bytes and a NUL if len > 0; 'buf'
 * may be NULL when len is 0.
 */
extern size_t rb_json_string (char *buf, size_t len, const char *str);

/* A status reply being written into buf of len bytes.  Like snprintf,
 * it never writes past len (and keeps a NUL at the end when len > 0)
 * but counts in pos the length the whole reply needs: pos >= len means
 * it was cut, and the caller writes it again into a larger buffer.
 */
struct rb_status_out {
  char *buf;
  size_t len, pos;
  bool json;
  unsigned fields;            /* written so far */
};

/* Start a reply (JSON: the opening brace). */
extern void rb_status_begin (struct rb_status_out *o, bool json,
                             char *buf, size_t len);
/* End it (JSON: the closing brace; no newline in either form). */
extern void rb_status_end (struct rb_status_out *o);

extern void rb_status_u64 (struct rb_status_out *o, const char *key,
                           uint64_t v);
extern void rb_status_bool (struct rb_status_out *o, const char *key,
                            bool v);
extern void rb_status_str (struct rb_status_out *o, const char *key,
                           const char *v);
/* With three decimals. */
extern void rb_status_dbl (struct rb_status_out *o, const char *key,
                           double v);

#endif /* RAMBACK_JSON_H */
