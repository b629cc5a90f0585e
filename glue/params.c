/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback plugin and filter: parsing of the parameters (params.h).
 *
 * Each key=value becomes a field of ramback_params.  A value is refused
 * here only when the field cannot hold it (not a number, negative, 0
 * where 0 means "not given", too large for the field); its range and the
 * rules between parameters are lib's (rb_config_check in lib/config.c),
 * checked after every key and again when the parameters are complete.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-plugin.h>

#include "params.h"

struct rb_config ramback_params = {
  .mode = RB_MODE_WRITEBACK,
  .populate = true,
  .store.tls_verify_peer = -1,
};
const char *ramback_control_path;
bool ramback_trace;
/* The plugin's and the filter's default flush-delay= applies unless one
 * is given (ramback_config_check).
 */
static bool flush_delay_given;
static bool dirty_expire_given;   /* the same for dirty-expire= */

/* Each parameter may be given once: a repeated key is almost always a
 * mistake in a unit file, and silently taking the last one hides it.
 */
static const char *seen[32];
static size_t nseen;

static int
once (const char *key)
{
  size_t i;

  for (i = 0; i < nseen; i++)
    if (strcmp (seen[i], key) == 0) {
      nbdkit_error ("%s= given more than once", key);
      return -1;
    }
  if (nseen < sizeof seen / sizeof seen[0])
    seen[nseen++] = key;
  return 0;
}

/* Seconds, with fractions, as whole milliseconds of at least min_ms
 * that fit the field.  False for anything else; the caller says what
 * it expected.
 */
static bool
parse_ms (const char *value, uint32_t min_ms, uint32_t *out)
{
  char *end;
  double d;

  errno = 0;
  d = strtod (value, &end);
  if (errno || end == value || *end || !(d >= 0) ||
      !(d * 1000 + 0.5 >= min_ms) || d * 1000 + 0.5 >= UINT32_MAX)
    return false;
  *out = d * 1000 + 0.5;
  return true;
}

/* Sizes and rates: 0 means "not given" (unlimited, the default). */
static int
parse_size (const char *key, const char *value, uint64_t max, uint64_t *out)
{
  int64_t r = nbdkit_parse_size (value);

  if (r == -1)
    return -1;                  /* nbdkit_parse_size printed the error */
  if (r < 1 || (uint64_t) r > max) {
    nbdkit_error ("%s=%s: must be from 1 to %" PRIu64, key, value, max);
    return -1;
  }
  *out = r;
  return 0;
}

static int
parse_bool (const char *key, const char *value, bool *out)
{
  int r = nbdkit_parse_bool (value);

  if (r == -1)
    return -1;
  *out = r;
  return 0;
}

/* min is 1 where 0 means "not given", else 0. */
static int
parse_int (const char *key, const char *value, int min, int *out)
{
  char *end;
  long v;

  errno = 0;
  v = strtol (value, &end, 10);
  if (errno || end == value || *end || v < min || v > INT_MAX) {
    nbdkit_error ("%s=%s: expected a whole number of at least %d",
                  key, value, min);
    return -1;
  }
  *out = (int) v;
  return 0;
}

static int
parse_choice (const char *key, const char *value, const char *a,
              const char *b, int *out)
{
  if (strcmp (value, a) == 0)
    *out = 0;
  else if (strcmp (value, b) == 0)
    *out = 1;
  else {
    nbdkit_error ("%s=%s: expected %s or %s", key, value, a, b);
    return -1;
  }
  return 0;
}

static int
parse_key (const char *key, const char *value)
{
  struct rb_config *c = &ramback_params;
  uint64_t u;
  int i;
  bool b;

  if (strcmp (key, "back") == 0) {
    /* Paths are made absolute: nbdkit changes directory to / later. */
    if (strstr (value, "://") || rb_store_is_rbd_uri (value))
      c->store.uri = value;
    else if ((c->store.uri = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "journal") == 0) {
    if (strstr (value, "://") || rb_store_is_rbd_uri (value))
      c->journal = value;
    else if ((c->journal = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "commit-interval") == 0) {
    if (!parse_ms (value, 1, &c->commit_interval_ms)) {
      nbdkit_error ("commit-interval=%s: expected seconds, more than 0 "
                    "(e.g. commit-interval=5 or 0.5)", value);
      return -1;
    }
  }
  else if (strcmp (key, "ram") == 0) {
    if ((c->ram = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "size") == 0)
    return parse_size (key, value, INT64_MAX, &c->size);
  else if (strcmp (key, "ram-size") == 0)
    return parse_size (key, value, INT64_MAX, &c->ram_size);
  else if (strcmp (key, "chunk") == 0) {
    if (parse_size (key, value, UINT32_MAX, &u) == -1)
      return -1;
    c->chunk_size = u;
  }
  else if (strcmp (key, "mode") == 0) {
    if (parse_choice (key, value, "writeback", "writethrough", &i) == -1)
      return -1;
    c->mode = i ? RB_MODE_WRITETHROUGH : RB_MODE_WRITEBACK;
  }
  else if (strcmp (key, "fsync") == 0) {
    if (parse_choice (key, value, "ignore", "wait", &i) == -1)
      return -1;
    c->fsync_wait = i;
  }
  else if (strcmp (key, "dirty-max") == 0) {
    if (parse_size (key, value, INT64_MAX, &c->dirty_max) == -1)
      return -1;
  }
  else if (strcmp (key, "ups-window") == 0) {
    if (parse_int (key, value, 1, &i) == -1)
      return -1;
    c->ups_window = i;
  }
  else if (strcmp (key, "flush-delay") == 0) {
    if (!parse_ms (value, 0, &c->flush_delay_ms)) {
      nbdkit_error ("flush-delay=%s: expected seconds from 0 to %d "
                    "(e.g. flush-delay=5 or 0.5)", value,
                    RB_MAX_FLUSH_DELAY_MS / 1000);
      return -1;
    }
    flush_delay_given = true;
  }
  else if (strcmp (key, "dirty-expire") == 0) {
    if (!parse_ms (value, 0, &c->dirty_expire_ms) ||
        c->dirty_expire_ms > RB_MAX_DIRTY_EXPIRE_MS) {
      nbdkit_error ("dirty-expire=%s: expected seconds from 0 to %d "
                    "(e.g. dirty-expire=30; 0: nothing held back)", value,
                    RB_MAX_DIRTY_EXPIRE_MS / 1000);
      return -1;
    }
    dirty_expire_given = true;
  }
  else if (strcmp (key, "populate-rate") == 0)
    return parse_size (key, value, INT64_MAX, &c->populate_rate);
  else if (strcmp (key, "flush-rate") == 0)
    return parse_size (key, value, INT64_MAX, &c->flush_rate);
  else if (strcmp (key, "populate") == 0)
    return parse_bool (key, value, &c->populate);
  else if (strcmp (key, "resume") == 0) {
    if (strcmp (value, "auto") == 0)
      c->resume = RB_RESUME_AUTO;
    else if (strcmp (value, "discard") == 0)
      c->resume = RB_RESUME_DISCARD;
    else if (strcmp (value, "force") == 0)
      c->resume = RB_RESUME_FORCE;
    else {
      nbdkit_error ("resume=%s: expected auto, discard or force", value);
      return -1;
    }
    c->resume_set = true;
  }
  else if (strcmp (key, "direct-io") == 0) {
    if (strcmp (value, "auto") == 0)
      c->store.direct_io = RB_DIRECT_AUTO;
    else {
      int r = nbdkit_parse_bool (value);
      if (r == -1) {
        nbdkit_error ("direct-io=%s: expected auto, true or false", value);
        return -1;
      }
      c->store.direct_io = r ? RB_DIRECT_ON : RB_DIRECT_OFF;
    }
  }
  else if (strcmp (key, "overcommit") == 0)
    return parse_bool (key, value, &c->allow_overcommit);
  else if (strcmp (key, "trace") == 0) {
    return parse_bool (key, value, &ramback_trace);
  }
  else if (strcmp (key, "control") == 0) {
    if ((ramback_control_path = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "tls-certificates") == 0) {
    if ((c->store.tls_certificates = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "tls-psk") == 0) {
    if ((c->store.tls_psk_file = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "tls-username") == 0)
    c->store.tls_username = value;
  else if (strcmp (key, "tls-verify") == 0) {
    if (parse_bool (key, value, &b) == -1)
      return -1;
    c->store.tls_verify_peer = b;
  }
  else if (strcmp (key, "connections") == 0)
    return parse_int (key, value, 1, &c->store.connections);
  else if (strcmp (key, "inflight") == 0)
    return parse_int (key, value, 1, &c->store.max_inflight);
  else if (strcmp (key, "request-timeout") == 0)
    return parse_int (key, value, 0, &c->store.request_timeout);
  else if (strcmp (key, "rbd-conf") == 0) {
    if ((c->store.rbd_conf = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else if (strcmp (key, "rbd-id") == 0)
    c->store.rbd_id = value;
  else if (strcmp (key, "rbd-keyring") == 0) {
    if ((c->store.rbd_keyring = nbdkit_absolute_path (value)) == NULL)
      return -1;
  }
  else {
    nbdkit_error ("unknown parameter '%s' (see nbdkit-ramback-plugin(1) "
                  "or nbdkit ramback --help)", key);
    return -1;
  }
  return 0;
}

/* lib's verdict on ramback_params, as nbdkit's error. */
static int
check (unsigned flags)
{
  if (rb_config_check (&ramback_params, flags) == 0)
    return 0;
  nbdkit_error ("%s", rb_get_error ());
  return -1;
}

int
ramback_config_key (const char *key, const char *value)
{
  if (once (key) == -1 || parse_key (key, value) == -1)
    return -1;
  /* The value's range now, so that the error names the key at once. */
  return check (RB_CHECK_VALUES);
}

int
ramback_config_check (unsigned flags)
{
  struct rb_config *c = &ramback_params;

  if (check (RB_CHECK_ALL | flags) == -1)
    return -1;
  /* A journal commits on its own interval (commit-interval=). */
  if (!flush_delay_given && c->journal == NULL)
    c->flush_delay_ms = RB_DEFAULT_FLUSH_DELAY_MS;
  if (!dirty_expire_given)
    c->dirty_expire_ms = RB_DEFAULT_DIRTY_EXPIRE_MS;
  if (c->ups_window && c->dirty_max == 0 && c->flush_rate == 0)
    nbdkit_debug ("ups-window=%u: the dirty limit follows the measured "
                  "write back bandwidth", c->ups_window);
  return 0;
}

/* nbdkit_absolute_path() results are freed by nbdkit; nothing of ours
 * is allocated, but the parameters must not outlive the plugin.
 */
void
ramback_config_free (void)
{
  memset (&ramback_params, 0, sizeof ramback_params);
  ramback_control_path = NULL;
  flush_delay_given = false;
  dirty_expire_given = false;
  nseen = 0;
}
