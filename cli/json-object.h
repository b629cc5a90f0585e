/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Just enough JSON for "status json": one object whose values we keep
 * in order, with numbers kept as their text so 64-bit counters are
 * re-emitted exactly.  Nested values are validated and kept verbatim,
 * so a newer plugin that adds them does not break an older command.
 */

#ifndef RAMBACK_CLI_JSON_OBJECT_H
#define RAMBACK_CLI_JSON_OBJECT_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

enum json_type {
  JSON_STRING,
  JSON_NUMBER,
  JSON_BOOL,
  JSON_NULL,
  JSON_NESTED,                /* object or array, kept as raw text */
};

struct json_field {
  char *name;
  enum json_type type;
  char *text;                 /* decoded string, or the raw JSON text */
  bool b;                     /* JSON_BOOL */
};

struct json_object {
  GPtrArray *fields;          /* struct json_field *, in order */
  GHashTable *by_name;        /* name -> struct json_field * */
};

/* Parse text holding exactly one JSON object (surrounding white space
 * allowed).  NULL with *msg set to a static description on error.
 */
extern struct json_object *json_parse_object (const char *text,
                                              const char **msg);
extern void json_object_free (struct json_object *o);

extern const struct json_field *json_get (const struct json_object *o,
                                          const char *name);

/* Typed look-ups.  FALSE if the field is missing or of another type
 * (an integer look-up also fails for fractions and negative numbers).
 */
extern bool json_get_u64 (const struct json_object *o, const char *name,
                          uint64_t *ret);
extern bool json_get_double (const struct json_object *o, const char *name,
                             double *ret);
extern bool json_get_bool (const struct json_object *o, const char *name,
                           bool *ret);
extern const char *json_get_string (const struct json_object *o,
                                    const char *name);

/* Re-emit the whole object on one line. */
extern void json_object_append (GString *out, const struct json_object *o);

/* Append s as a JSON string literal, quotes included. */
extern void json_append_string (GString *out, const char *s);

#endif /* RAMBACK_CLI_JSON_OBJECT_H */
