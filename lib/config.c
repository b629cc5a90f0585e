/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the one validation of a struct rb_config (ramback.h).
 *
 * The hosts parse, lib judges.  glue/params.c (for the plugin and the
 * filter) turns each key=value into a field and refuses only what the
 * field cannot hold: text that is not a number, a negative number, 0
 * where 0 means "not given", a number too large for the field.  Every
 * range and every rule between parameters is here, once, and rb_open()
 * applies the same rules to what an embedder or a test passes it.
 *
 * Messages name the parameter as the user wrote it (key=value, with the
 * value as stored: chunk=96K reads chunk=98304) and say what to do.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ramback.h"
#include "cleanup.h"
#include "error.h"

/* The message as it is, without ": Invalid argument" after it: it is
 * what nbdkit prints for a bad parameter.  errno and rb_get_errno() are
 * EINVAL.
 */
static int __attribute__ ((format (printf, 1, 2)))
invalid (const char *fmt, ...)
{
  char msg[512];
  va_list args;

  va_start (args, fmt);
  vsnprintf (msg, sizeof msg, fmt, args);
  va_end (args);
  rb_restore_error (EINVAL, msg);
  return -1;
}

static int
in_range (const char *key, int64_t v, int64_t min, int64_t max)
{
  if (v >= min && v <= max)
    return 0;
  return invalid ("%s=%" PRId64 ": expected a whole number from %"
                  PRId64 " to %" PRId64, key, v, min, max);
}

/* Each value on its own; 0 stands for "not given" where the field says so. */
static int
check_values (const struct rb_config *c)
{
  const struct rb_store_params *s = &c->store;

  if (c->chunk_size &&
      (!rb_is_power_of_2 (c->chunk_size) || c->chunk_size < RB_MIN_CHUNK_SIZE ||
       c->chunk_size > RB_MAX_CHUNK_SIZE))
    return invalid ("chunk=%" PRIu32 ": the chunk size must be a "
                    "power of two from %d to %d bytes (e.g. chunk=64K)",
                    c->chunk_size, RB_MIN_CHUNK_SIZE, RB_MAX_CHUNK_SIZE);
  if (c->mode != RB_MODE_WRITEBACK && c->mode != RB_MODE_WRITETHROUGH)
    return invalid ("mode: must be writeback or writethrough");
  if (c->resume != RB_RESUME_AUTO && c->resume != RB_RESUME_DISCARD &&
      c->resume != RB_RESUME_FORCE)
    return invalid ("resume: must be auto, discard or force");
  if (c->commit_interval_ms &&
      (c->commit_interval_ms < RB_MIN_COMMIT_INTERVAL_MS ||
       c->commit_interval_ms > RB_MAX_COMMIT_INTERVAL_MS))
    return invalid ("commit-interval=%g: expected seconds from %g to "
                    "%g (e.g. commit-interval=5 or 0.5)",
                    c->commit_interval_ms / 1000.0,
                    RB_MIN_COMMIT_INTERVAL_MS / 1000.0,
                    RB_MAX_COMMIT_INTERVAL_MS / 1000.0);
  if (c->flush_delay_ms > RB_MAX_FLUSH_DELAY_MS)
    return invalid ("flush-delay=%g: expected seconds from 0 to %d "
                    "(e.g. flush-delay=5 or 0.5)",
                    c->flush_delay_ms / 1000.0, RB_MAX_FLUSH_DELAY_MS / 1000);
  if (c->dirty_expire_ms > RB_MAX_DIRTY_EXPIRE_MS)
    return invalid ("dirty-expire=%g: expected seconds from 0 to %d "
                    "(e.g. dirty-expire=30; 0: nothing held back)",
                    c->dirty_expire_ms / 1000.0,
                    RB_MAX_DIRTY_EXPIRE_MS / 1000);
  if ((c->ups_window &&
       in_range ("ups-window", c->ups_window, 1, RB_MAX_UPS_WINDOW) == -1) ||
      (s->connections &&
       in_range ("connections", s->connections, 1, RB_MAX_CONNECTIONS) == -1) ||
      (s->max_inflight &&
       in_range ("inflight", s->max_inflight, 1, RB_MAX_INFLIGHT) == -1) ||
      in_range ("request-timeout", s->request_timeout,
                0, RB_MAX_REQUEST_TIMEOUT) == -1)
    return -1;
  return 0;
}

/* The store is opened from store.uri: back= is required, size= creates
 * only a file, the NBD store's options need an NBD URI and the RBD
 * store's an rbd: image (they would be ignored otherwise: say so rather
 * than run without them).
 */
static int
check_uri_store (const struct rb_config *c)
{
  const struct rb_store_params *s = &c->store;
  const char *nbd_only, *rbd_only;
  bool rbd = rb_store_is_rbd_uri (s->uri) ||
    (c->journal && rb_store_is_rbd_uri (c->journal));

  if (s->uri == NULL)
    return invalid ("the back= parameter is required: the backing "
                    "file, block device, nbd:// URI or rbd:POOL/IMAGE that "
                    "holds the data");
  if (c->size && strstr (s->uri, "://"))
    return invalid ("size= only applies to a backing file (an NBD "
                    "export has its own size)");
  if (c->size && rb_store_is_rbd_uri (s->uri))
    return invalid ("size= only applies to a backing file (an RBD image "
                    "has its own size: rbd create --size, rbd resize)");
  rbd_only =
    s->rbd_conf ? "rbd-conf" :
    s->rbd_id ? "rbd-id" :
    s->rbd_keyring ? "rbd-keyring" : NULL;
  if (rbd_only && !rbd)
    return invalid ("%s= only applies to an RBD backing store or journal "
                    "(back=rbd:POOL/IMAGE or journal=rbd:POOL/IMAGE): "
                    "remove %s=", rbd_only, rbd_only);
  if (rb_store_is_nbd_uri (s->uri))
    return 0;
  nbd_only =
    s->tls_certificates ? "tls-certificates" :
    s->tls_psk_file ? "tls-psk" :
    s->tls_username ? "tls-username" :
    s->tls_verify_peer != -1 ? "tls-verify" :
    s->connections ? "connections" :
    /* inflight= applies to an RBD image too */
    s->max_inflight && !rb_store_is_rbd_uri (s->uri) ? "inflight" :
    s->request_timeout ? "request-timeout" : NULL;
  if (nbd_only)
    return invalid ("%s= only applies to an NBD backing store (back=nbd://, "
                    "nbds://, nbd+unix://...), and back=%s is %s: remove "
                    "%s=", nbd_only, s->uri,
                    rb_store_is_rbd_uri (s->uri) ? "an RBD image"
                    : "a file or device", nbd_only);
  return 0;
}

/* The parameters that go together. */
static int
check_together (const struct rb_config *c, unsigned flags)
{
  if ((flags & RB_CHECK_URI_STORE) && check_uri_store (c) == -1)
    return -1;
  if ((flags & RB_CHECK_FILTER) &&
      c->store.max_inflight > RB_MAX_FILTER_INFLIGHT)
    return invalid ("inflight=%d: the filter runs at most %d requests "
                    "to the plugin at once", c->store.max_inflight,
                    RB_MAX_FILTER_INFLIGHT);
  if (c->commit_interval_ms && c->journal == NULL)
    return invalid ("commit-interval= only applies with journal= "
                    "(without a journal there are no commits): add journal= "
                    "or remove commit-interval=");
  if (c->journal && c->store.uri && strcmp (c->journal, c->store.uri) == 0)
    return invalid ("journal=%s is the backing store itself: the "
                    "journal needs a store of its own (another file, device "
                    "or export, ideally on another disk)", c->journal);
  if (c->resume_set && c->ram == NULL)
    return invalid ("resume= only applies with ram=PATH (an image in "
                    "anonymous memory does not outlive ramback): add ram= "
                    "or remove resume=");
  if (c->flush_delay_ms && c->journal)
    return invalid ("flush-delay= does not apply with journal= (the "
                    "journal commits on its own interval, commit-interval=): "
                    "remove one of them");
  return 0;
}

int
rb_config_check (const struct rb_config *c, unsigned flags)
{
  if (check_values (c) == -1)
    return -1;
  if ((flags & RB_CHECK_ALL) && check_together (c, flags) == -1)
    return -1;
  return 0;
}
