/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: the plugin's parameter parsing (glue/params.c) against
 * docs/nbdkit-ramback-plugin.pod.
 *
 * An input is an nbdkit command line after the plugin name, one argument
 * per line.  Each is passed as nbdkit 1.32 does: "key=value" with a key
 * that nbdkit accepts (a letter, then letters, digits, '.', '_', '-')
 * goes to .config as is, anything else is a value of the magic key
 * back=.  The first error ends the run, as it ends nbdkit; after the
 * last argument .config_complete runs.  params.c is compiled as it is,
 * with nbdkit's helpers from nbdkit-shim.c.
 *
 * Every result is checked against the man page: each known parameter
 * accepts exactly the values documented for it and stores them where
 * the plugin reads them, a repeated or unknown parameter is refused,
 * and every refusal comes with an error message.
 */

#include <config.h>

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbdkit-shim.h"
#include "params.h"

#include "driver.h"

const char fuzz_target_name[] = "params";

static struct rb_config initial_params;
static const char *initial_control_path;
static bool initial_trace;

void
fuzz_setup (void)
{
  initial_params = ramback_params;
  initial_control_path = ramback_control_path;
  initial_trace = ramback_trace;
  shim_verbose = fuzz_verbose;
}

void
fuzz_teardown (void)
{
}

enum kind {
  K_PATH,       /* made absolute */
  K_BACK,       /* a path made absolute, or a URI kept as it is */
  K_STRING,     /* kept as it is */
  K_SIZE,       /* nbdkit_parse_size, at least 1 */
  K_CHUNK,      /* a size, a power of two in [RB_MIN_CHUNK_SIZE, ..MAX..] */
  K_INT,        /* a decimal number in [min, max] */
  K_BOOL,       /* nbdkit_parse_bool */
  K_CHOICE,     /* a or b */
  K_SECONDS,    /* digits with an optional fraction, in [0.01, 3600] */
};

/* The parameters of the man page. */
static const struct param {
  const char *key;
  enum kind kind;
  int min, max;
  const char *a, *b;
} params[] = {
  { "back", K_BACK },
  { "journal", K_BACK },
  { "commit-interval", K_SECONDS },
  { "ram", K_PATH },
  { "size", K_SIZE },
  { "chunk", K_CHUNK },
  { "mode", K_CHOICE, .a = "writeback", .b = "writethrough" },
  { "fsync", K_CHOICE, .a = "ignore", .b = "wait" },
  { "dirty-max", K_SIZE },
  { "ups-window", K_INT, 1, 86400 },
  { "populate", K_BOOL },
  { "populate-rate", K_SIZE },
  { "flush-rate", K_SIZE },
  { "control", K_PATH },
  { "overcommit", K_BOOL },
  { "trace", K_BOOL },
  { "tls-certificates", K_PATH },
  { "tls-psk", K_PATH },
  { "tls-username", K_STRING },
  { "tls-verify", K_BOOL },
  { "connections", K_INT, 1, 64 },
  { "inflight", K_INT, 1, 1024 },
  { "request-timeout", K_INT, 0, 86400 },
};

static const struct param *
find (const char *key)
{
  size_t i;

  for (i = 0; i < sizeof params / sizeof params[0]; i++)
    if (strcmp (params[i].key, key) == 0)
      return &params[i];
  return NULL;
}

/* Where params.c stores each one. */
static const char *
field_str (const char *key)
{
  const struct rb_config *c = &ramback_params;

  if (strcmp (key, "back") == 0) return c->store.uri;
  if (strcmp (key, "journal") == 0) return c->journal;
  if (strcmp (key, "ram") == 0) return c->ram;
  if (strcmp (key, "control") == 0) return ramback_control_path;
  if (strcmp (key, "tls-certificates") == 0) return c->store.tls_certificates;
  if (strcmp (key, "tls-psk") == 0) return c->store.tls_psk_file;
  if (strcmp (key, "tls-username") == 0) return c->store.tls_username;
  abort ();
}

static int64_t
field_num (const char *key)
{
  const struct rb_config *c = &ramback_params;

  if (strcmp (key, "size") == 0) return c->size;
  if (strcmp (key, "commit-interval") == 0) return c->commit_interval_ms;
  if (strcmp (key, "chunk") == 0) return c->chunk_size;
  if (strcmp (key, "mode") == 0) return c->mode == RB_MODE_WRITETHROUGH;
  if (strcmp (key, "fsync") == 0) return c->fsync_wait;
  if (strcmp (key, "dirty-max") == 0) return c->dirty_max;
  if (strcmp (key, "ups-window") == 0) return c->ups_window;
  if (strcmp (key, "populate") == 0) return c->populate;
  if (strcmp (key, "populate-rate") == 0) return c->populate_rate;
  if (strcmp (key, "flush-rate") == 0) return c->flush_rate;
  if (strcmp (key, "overcommit") == 0) return c->allow_overcommit;
  if (strcmp (key, "trace") == 0) return ramback_trace;
  if (strcmp (key, "tls-verify") == 0) return c->store.tls_verify_peer;
  if (strcmp (key, "connections") == 0) return c->store.connections;
  if (strcmp (key, "inflight") == 0) return c->store.max_inflight;
  if (strcmp (key, "request-timeout") == 0) return c->store.request_timeout;
  abort ();
}

/* nbdkit's helpers as a reference, without counting their errors. */
static int64_t
ref_size (const char *value)
{
  unsigned saved = shim_errors;
  int64_t r = nbdkit_parse_size (value);

  shim_errors = saved;
  return r;
}

static int
ref_bool (const char *value)
{
  unsigned saved = shim_errors;
  int r = nbdkit_parse_bool (value);

  shim_errors = saved;
  return r;
}

/* A plain decimal number (optional sign, digits) in [min, max]; the
 * plugin may accept more spellings (leading blanks), never fewer.
 */
static bool
plain_int_in (const char *v, int min, int max)
{
  const char *p = v;
  int64_t n = 0;
  bool neg = false;

  if (*p == '+' || *p == '-')
    neg = *p++ == '-';
  if (*p == '\0')
    return false;
  for (; *p; p++) {
    if (*p < '0' || *p > '9')
      return false;
    n = n * 10 + (*p - '0');
    if (n > INT_MAX)
      return false;
  }
  if (neg)
    n = -n;
  return n >= min && n <= max;
}

/* Plain seconds: digits, an optional fraction, in [0.01, 3600]; the
 * plugin may accept more spellings (strtod's), never fewer.
 */
static bool
plain_seconds_in (const char *v)
{
  const char *p = v;
  char *end;
  double d;

  if (*p < '0' || *p > '9')
    return false;
  while (*p >= '0' && *p <= '9')
    p++;
  if (*p == '.') {
    p++;
    if (*p < '0' || *p > '9')
      return false;
    while (*p >= '0' && *p <= '9')
      p++;
  }
  if (*p || p - v > 12)
    return false;
  d = strtod (v, &end);
  return d >= 0.01 && d <= 3600;
}

static bool
ends_with (const char *s, const char *suffix)
{
  size_t n = strlen (s), m = strlen (suffix);

  return n >= m && strcmp (s + n - m, suffix) == 0;
}

/* Check one .config call that returned r. */
static void
check_key (const char *key, const char *value, int r, bool repeated)
{
  const struct param *p = find (key);
  int64_t s;

  if (r == -1)
    fuzz_assert (shim_errors > 0, "%s=%s: refused without an error message",
                 key, value);
  else
    fuzz_assert (shim_errors == 0, "%s=%s: accepted with an error: %s",
                 key, value, shim_last_error ());
  fuzz_assert (r == 0 || r == -1, "%s=%s: returned %d", key, value, r);

  if (p == NULL) {
    fuzz_assert (r == -1, "unknown parameter %s=%s accepted (if it is new: "
                 "document it, and add it to fuzz-params.c)", key, value);
    return;
  }
  if (repeated) {
    fuzz_assert (r == -1, "%s=%s: accepted a second time", key, value);
    return;
  }

  switch (p->kind) {
  case K_BACK:
    fuzz_assert ((r == 0) == (*value != '\0'), "back=%s: r=%d", value, r);
    if (r == 0 && strstr (value, "://"))
      fuzz_assert (field_str (key) == value, "back=%s: URI not kept as is",
                   value);
    else if (r == 0)
      fuzz_assert (field_str (key)[0] == '/' &&
                   ends_with (field_str (key), value),
                   "back=%s: stored as '%s'", value, field_str (key));
    break;
  case K_PATH:
    fuzz_assert ((r == 0) == (*value != '\0'), "%s=%s: r=%d", key, value, r);
    if (r == 0)
      fuzz_assert (field_str (key)[0] == '/' &&
                   ends_with (field_str (key), value),
                   "%s=%s: stored as '%s'", key, value, field_str (key));
    break;
  case K_STRING:
    fuzz_assert (r == 0 && field_str (key) == value, "%s=%s: r=%d",
                 key, value, r);
    break;
  case K_SIZE:
    s = ref_size (value);
    fuzz_assert ((r == 0) == (s >= 1), "%s=%s: r=%d, size %" PRId64,
                 key, value, r, s);
    if (r == 0)
      fuzz_assert (field_num (key) == s, "%s=%s: stored %" PRId64
                   ", not %" PRId64, key, value, field_num (key), s);
    break;
  case K_CHUNK:
    s = ref_size (value);
    fuzz_assert ((r == 0) == (s >= RB_MIN_CHUNK_SIZE &&
                              s <= RB_MAX_CHUNK_SIZE && (s & (s - 1)) == 0),
                 "chunk=%s: r=%d, size %" PRId64, value, r, s);
    if (r == 0)
      fuzz_assert (field_num (key) == s, "chunk=%s: stored %" PRId64,
                   value, field_num (key));
    break;
  case K_INT:
    if (plain_int_in (value, p->min, p->max))
      fuzz_assert (r == 0, "%s=%s: refused", key, value);
    if (r == 0)
      fuzz_assert (field_num (key) >= p->min && field_num (key) <= p->max &&
                   field_num (key) == strtol (value, NULL, 10),
                   "%s=%s: stored %" PRId64, key, value, field_num (key));
    break;
  case K_BOOL:
    s = ref_bool (value);
    fuzz_assert ((r == 0) == (s != -1), "%s=%s: r=%d", key, value, r);
    if (r == 0)
      fuzz_assert (field_num (key) == s, "%s=%s: stored %" PRId64,
                   key, value, field_num (key));
    break;
  case K_SECONDS:
    if (plain_seconds_in (value))
      fuzz_assert (r == 0, "%s=%s: refused", key, value);
    if (r == 0)
      fuzz_assert (field_num (key) >= 10 && field_num (key) <= 3600000,
                   "%s=%s: stored %" PRId64 " ms", key, value,
                   field_num (key));
    break;
  case K_CHOICE:
    fuzz_assert ((r == 0) == (strcmp (value, p->a) == 0 ||
                              strcmp (value, p->b) == 0),
                 "%s=%s: r=%d", key, value, r);
    if (r == 0)
      fuzz_assert (field_num (key) == (strcmp (value, p->b) == 0),
                   "%s=%s: stored %" PRId64, key, value, field_num (key));
    break;
  }
}

/* nbdkit's test for "key=value" rather than a bare value. */
static bool
nbdkit_is_key (const char *arg, size_t len)
{
  size_t i;

  if (len == 0 || !((arg[0] >= 'a' && arg[0] <= 'z') ||
                    (arg[0] >= 'A' && arg[0] <= 'Z')))
    return false;
  for (i = 1; i < len; i++)
    if (!strchr ("._-0123456789abcdefghijklmnopqrstuvwxyz"
                 "ABCDEFGHIJKLMNOPQRSTUVWXYZ", arg[i]) || arg[i] == '\0')
      return false;
  return true;
}

void
fuzz_one (const uint8_t *data, size_t size)
{
  char *buf = malloc (size + 1), *arg, *next;
  const char *keys[64];
  size_t nkeys = 0, i;
  bool ok = true;

  fuzz_assert (buf != NULL, "malloc");
  memcpy (buf, data, size);
  buf[size] = '\0';

  /* Arguments are C strings: one ends at a NUL or at its line's end. */
  for (arg = buf; ok && arg < buf + size; arg = next) {
    char *nl = memchr (arg, '\n', buf + size - arg), *eq;
    const char *key, *value;
    bool repeated = false;
    int r;

    next = nl ? nl + 1 : buf + size;
    if (nl)
      *nl = '\0';
    eq = strchr (arg, '=');
    if (eq && nbdkit_is_key (arg, eq - arg)) {
      *eq = '\0';
      key = arg;
      value = eq + 1;
    }
    else {
      key = "back";
      value = arg;
    }
    for (i = 0; i < nkeys; i++)
      repeated |= strcmp (keys[i], key) == 0;
    if (nkeys < sizeof keys / sizeof keys[0])
      keys[nkeys++] = key;

    shim_errors = 0;
    r = ramback_config_key (key, value);
    if (fuzz_verbose)
      fprintf (stderr, "%s=%s -> %d%s%s\n", key, value, r,
               r ? ": " : "", r ? shim_last_error () : "");
    check_key (key, value, r, repeated);
    ok = r == 0;
  }

  if (ok) {
    const char *uri = ramback_params.store.uri;
    const struct rb_store_params *sp = &ramback_params.store;
    bool rbd = rb_store_is_rbd_uri (uri);
    bool nbd_only = sp->tls_certificates || sp->tls_psk_file ||
      sp->tls_username || sp->tls_verify_peer != -1 || sp->connections ||
      (sp->max_inflight && !rbd) || sp->request_timeout;
    bool rbd_only = sp->rbd_conf || sp->rbd_id || sp->rbd_keyring;
    const char *journal = ramback_params.journal;
    bool want = uri != NULL &&
      !(ramback_params.size && (strstr (uri, "://") || rbd)) &&
      !(nbd_only && !rb_store_is_nbd_uri (uri)) &&
      !(rbd_only && !rbd && !(journal && rb_store_is_rbd_uri (journal))) &&
      !(ramback_params.commit_interval_ms && journal == NULL) &&
      !(journal && strcmp (journal, uri) == 0);
    int r;

    shim_errors = 0;
    r = ramback_config_check (RB_CHECK_URI_STORE);
    if (fuzz_verbose)
      fprintf (stderr, "config_complete -> %d%s%s\n", r,
               r ? ": " : "", r ? shim_last_error () : "");
    fuzz_assert ((r == 0) == want, "config_complete: r=%d (back=%s)", r,
                 uri ? uri : "(none)");
    fuzz_assert ((r == -1) == (shim_errors > 0),
                 "config_complete: r=%d with %u errors", r, shim_errors);
  }

  /* Back to the state nbdkit loads the plugin in. */
  ramback_config_free ();
  shim_reset ();
  ramback_params = initial_params;
  ramback_control_path = initial_control_path;
  ramback_trace = initial_trace;
  free (buf);
}
