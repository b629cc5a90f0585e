/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A strict parser for one flat JSON object (RFC 8259 grammar). */

#include <config.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json-object.h"

/* Deeper nesting than this is not a status reply. */
#define MAX_DEPTH 32

struct cursor {
  const char *p;
  const char *msg;
};

static void
skip_ws (struct cursor *c)
{
  while (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')
    c->p++;
}

static bool
fail (struct cursor *c, const char *msg)
{
  if (c->msg == NULL)
    c->msg = msg;
  return false;
}

static int
hex4 (const char *s)
{
  int i, v = 0;

  for (i = 0; i < 4; i++) {
    int d = g_ascii_xdigit_value (s[i]);
    if (d < 0)
      return -1;
    v = v * 16 + d;
  }
  return v;
}

/* Parse a string literal at c->p; if out is not NULL, decode into it. */
static bool
parse_string (struct cursor *c, GString *out)
{
  if (*c->p != '"')
    return fail (c, "expected a string");
  c->p++;
  for (;;) {
    unsigned char ch = *c->p;

    if (ch == '\0')
      return fail (c, "unterminated string");
    if (ch < 0x20)
      return fail (c, "control character in a string");
    if (ch == '"') {
      c->p++;
      return true;
    }
    if (ch != '\\') {
      if (out)
        g_string_append_c (out, ch);
      c->p++;
      continue;
    }
    c->p++;
    switch (*c->p) {
    case '"': case '\\': case '/':
      if (out) g_string_append_c (out, *c->p);
      break;
    case 'b': if (out) g_string_append_c (out, '\b'); break;
    case 'f': if (out) g_string_append_c (out, '\f'); break;
    case 'n': if (out) g_string_append_c (out, '\n'); break;
    case 'r': if (out) g_string_append_c (out, '\r'); break;
    case 't': if (out) g_string_append_c (out, '\t'); break;
    case 'u': {
      int u = hex4 (c->p + 1);
      if (u < 0)
        return fail (c, "bad \\u escape");
      c->p += 4;
      if (u >= 0xd800 && u <= 0xdbff) {
        int lo = c->p[1] == '\\' && c->p[2] == 'u' ? hex4 (c->p + 3) : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
          return fail (c, "lone surrogate in \\u escape");
        u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        c->p += 6;
      }
      else if (u >= 0xdc00 && u <= 0xdfff)
        return fail (c, "lone surrogate in \\u escape");
      if (u == 0)
        return fail (c, "NUL in a string");
      if (out)
        g_string_append_unichar (out, u);
      break;
    }
    default:
      return fail (c, "bad escape in a string");
    }
    c->p++;
  }
}

static bool
parse_number (struct cursor *c)
{
  const char *p = c->p;

  if (*p == '-')
    p++;
  if (*p == '0')
    p++;
  else if (g_ascii_isdigit (*p))
    while (g_ascii_isdigit (*p)) p++;
  else
    return fail (c, "bad number");
  if (*p == '.') {
    p++;
    if (!g_ascii_isdigit (*p))
      return fail (c, "bad number");
    while (g_ascii_isdigit (*p)) p++;
  }
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-')
      p++;
    if (!g_ascii_isdigit (*p))
      return fail (c, "bad number");
    while (g_ascii_isdigit (*p)) p++;
  }
  c->p = p;
  return true;
}

static bool
parse_literal (struct cursor *c, const char *word)
{
  size_t n = strlen (word);

  if (strncmp (c->p, word, n) != 0)
    return fail (c, "unexpected character");
  c->p += n;
  return true;
}

static bool parse_value (struct cursor *c, int depth);

/* Validate a nested object or array. */
static bool
parse_container (struct cursor *c, int depth)
{
  char close = *c->p == '{' ? '}' : ']';
  bool object = close == '}';

  if (depth > MAX_DEPTH)
    return fail (c, "nested too deeply");
  c->p++;
  skip_ws (c);
  if (*c->p == close) {
    c->p++;
    return true;
  }
  for (;;) {
    skip_ws (c);
    if (object) {
      if (!parse_string (c, NULL))
        return false;
      skip_ws (c);
      if (*c->p != ':')
        return fail (c, "expected ':'");
      c->p++;
      skip_ws (c);
    }
    if (!parse_value (c, depth + 1))
      return false;
    skip_ws (c);
    if (*c->p == ',') {
      c->p++;
      continue;
    }
    if (*c->p == close) {
      c->p++;
      return true;
    }
    return fail (c, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static bool
parse_value (struct cursor *c, int depth)
{
  switch (*c->p) {
  case '"': return parse_string (c, NULL);
  case '{': case '[': return parse_container (c, depth);
  case 't': return parse_literal (c, "true");
  case 'f': return parse_literal (c, "false");
  case 'n': return parse_literal (c, "null");
  default: return parse_number (c);
  }
}

static void
field_free (gpointer p)
{
  struct json_field *f = p;

  g_free (f->name);
  g_free (f->text);
  g_free (f);
}

void
json_object_free (struct json_object *o)
{
  if (o == NULL)
    return;
  g_hash_table_unref (o->by_name);
  g_ptr_array_unref (o->fields);
  g_free (o);
}

struct json_object *
json_parse_object (const char *text, const char **msg)
{
  struct cursor c = { .p = text };
  struct json_object *o = g_new0 (struct json_object, 1);

  o->fields = g_ptr_array_new_with_free_func (field_free);
  o->by_name = g_hash_table_new (g_str_hash, g_str_equal);

  skip_ws (&c);
  if (*c.p != '{') {
    fail (&c, "not a JSON object");
    goto err;
  }
  c.p++;
  skip_ws (&c);
  if (*c.p == '}')
    c.p++;
  else {
    for (;;) {
      GString *name = g_string_new (NULL);
      struct json_field *f;
      const char *start;

      skip_ws (&c);
      if (!parse_string (&c, name)) {
        g_string_free (name, TRUE);
        goto err;
      }
      skip_ws (&c);
      if (*c.p != ':') {
        g_string_free (name, TRUE);
        fail (&c, "expected ':'");
        goto err;
      }
      c.p++;
      skip_ws (&c);

      f = g_new0 (struct json_field, 1);
      f->name = g_string_free (name, FALSE);
      start = c.p;
      if (*c.p == '"') {
        GString *s = g_string_new (NULL);
        f->type = JSON_STRING;
        if (!parse_string (&c, s)) {
          g_string_free (s, TRUE);
          field_free (f);
          goto err;
        }
        f->text = g_string_free (s, FALSE);
      }
      else {
        if (!parse_value (&c, 1)) {
          field_free (f);
          goto err;
        }
        f->text = g_strndup (start, c.p - start);
        if (*start == '{' || *start == '[')
          f->type = JSON_NESTED;
        else if (*start == 't' || *start == 'f') {
          f->type = JSON_BOOL;
          f->b = *start == 't';
        }
        else if (*start == 'n')
          f->type = JSON_NULL;
        else
          f->type = JSON_NUMBER;
      }
      if (g_hash_table_contains (o->by_name, f->name)) {
        field_free (f);
        fail (&c, "duplicate field");
        goto err;
      }
      g_ptr_array_add (o->fields, f);
      g_hash_table_insert (o->by_name, f->name, f);

      skip_ws (&c);
      if (*c.p == ',') {
        c.p++;
        continue;
      }
      if (*c.p == '}') {
        c.p++;
        break;
      }
      fail (&c, "expected ',' or '}'");
      goto err;
    }
  }
  skip_ws (&c);
  if (*c.p != '\0') {
    fail (&c, "trailing characters after the object");
    goto err;
  }
  return o;

 err:
  *msg = c.msg;
  json_object_free (o);
  return NULL;
}

const struct json_field *
json_get (const struct json_object *o, const char *name)
{
  return g_hash_table_lookup (o->by_name, name);
}

bool
json_get_u64 (const struct json_object *o, const char *name, uint64_t *ret)
{
  const struct json_field *f = json_get (o, name);
  char *end;
  guint64 v;

  if (f == NULL || f->type != JSON_NUMBER || f->text[0] == '-')
    return false;
  errno = 0;
  v = g_ascii_strtoull (f->text, &end, 10);
  if (errno || *end != '\0') {
    /* 1e3 or 2.0: accept whole numbers written that way. */
    double d = g_ascii_strtod (f->text, &end);
    if (*end != '\0' || d < 0 || d != floor (d) || d >= 18446744073709551616.0)
      return false;
    v = (guint64) d;
  }
  *ret = v;
  return true;
}

bool
json_get_double (const struct json_object *o, const char *name, double *ret)
{
  const struct json_field *f = json_get (o, name);

  if (f == NULL || f->type != JSON_NUMBER)
    return false;
  *ret = g_ascii_strtod (f->text, NULL);
  return true;
}

bool
json_get_bool (const struct json_object *o, const char *name, bool *ret)
{
  const struct json_field *f = json_get (o, name);

  if (f == NULL || f->type != JSON_BOOL)
    return false;
  *ret = f->b;
  return true;
}

const char *
json_get_string (const struct json_object *o, const char *name)
{
  const struct json_field *f = json_get (o, name);

  if (f == NULL || f->type != JSON_STRING)
    return NULL;
  return f->text;
}

void
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

void
json_object_append (GString *out, const struct json_object *o)
{
  guint i;

  g_string_append_c (out, '{');
  for (i = 0; i < o->fields->len; i++) {
    const struct json_field *f = g_ptr_array_index (o->fields, i);

    if (i > 0)
      g_string_append_c (out, ',');
    json_append_string (out, f->name);
    g_string_append_c (out, ':');
    if (f->type == JSON_STRING)
      json_append_string (out, f->text);
    else
      g_string_append (out, f->text);
  }
  g_string_append_c (out, '}');
}
