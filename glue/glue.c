/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the nbdkit glue shared by the plugin and the filter (glue.h). */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

#include <nbdkit-plugin.h>

#include "ramback.h"
#include "params.h"
#include "control-server.h"
#include "notify.h"
#include "glue.h"

struct rb *ramback_rb;
/* The store, for the start line (notify.c). */
static char store_name[256];

/* The core's messages: progress to debug output (-v), events of the
 * device's life and warnings always.
 */
static void
log_to_nbdkit (enum rb_log_level level, const char *msg)
{
  switch (level) {
  case RB_LOG_WARN: nbdkit_error ("%s", msg); break;
  case RB_LOG_INFO: ramback_info ("%s", msg); break;
  case RB_LOG_DEBUG: nbdkit_debug ("%s", msg); break;
  }
}

void
ramback_glue_load (void)
{
  rb_set_log (log_to_nbdkit);
}

int
ramback_glue_error (void)
{
  int err = rb_get_errno ();

  nbdkit_error ("%s", rb_get_error () ? rb_get_error () : "failed");
  errno = err ? err : EIO;
  return errno;
}

/* 'what' names the store in the debug line (the back= value, or the
 * plugin below the filter).
 */
int
ramback_glue_open (const struct rb_config *cfg, const char *what)
{
  ramback_rb = rb_open (cfg);
  if (ramback_rb == NULL) {
    ramback_glue_error ();
    return -1;
  }
  if (ramback_trace)
    rb_set_trace (ramback_rb, true);
  snprintf (store_name, sizeof store_name, "%s", what);
  nbdkit_debug ("ramback: %s, %" PRIu64 " bytes in %u-byte chunks",
                what, rb_get_size (ramback_rb),
                rb_get_chunk_size (ramback_rb));
  return 0;
}

void
ramback_glue_client (int delta)
{
  ramback_notify_client (delta);
}

int
ramback_glue_bind (void)
{
  if (ramback_control_path &&
      control_server_bind (ramback_control_path) == -1) {
    /* The start failed: give back what rb_open made. */
    rb_abandon (ramback_rb);
    ramback_rb = NULL;
    return -1;
  }
  return 0;
}

int
ramback_glue_start (void)
{
  if (rb_start (ramback_rb) == -1) {
    ramback_glue_error ();
    return -1;
  }
  if (control_server_start (ramback_rb) == -1)
    return -1;
  ramback_notify_start (ramback_rb, store_name);
  return 0;
}

void
ramback_glue_cleanup (void)
{
  if (ramback_rb) {
    /* Drain while the control socket still answers status requests. */
    int r;

    ramback_notify_draining ();
    r = rb_shutdown (ramback_rb);
    if (r == -1)
      nbdkit_error ("clean stop failed: %s: DATA WAS NOT WRITTEN BACK",
                    rb_get_error ());
    ramback_notify_stopped (r == 0);
  }
  control_server_stop ();
  if (ramback_rb == NULL)
    return;
  rb_close (ramback_rb);
  ramback_rb = NULL;
  ramback_config_free ();
  /* Tests look for this line (see tests/functions.sh.in). */
  nbdkit_debug ("ramback: clean stop complete");
}

void
ramback_glue_block_size (uint32_t *minimum, uint32_t *preferred,
                         uint32_t *maximum)
{
  uint32_t max = ramback_rb ? rb_get_max_request (ramback_rb) : 0;

  *minimum = *preferred = *maximum = 0;
  if (max == 0)
    return;
  /* Any alignment; preferred a power of two (4096 if it fits: what
   * RAM is written by without a penalty).
   */
  *minimum = 1;
  *preferred = 4096;
  while (*preferred > max)
    *preferred /= 2;
  *maximum = max;
}

static unsigned
flags_of (uint32_t flags)
{
  return ((flags & NBDKIT_FLAG_FUA) ? RB_FUA : 0) |
    ((flags & NBDKIT_FLAG_FAST_ZERO) ? RB_FAST_ZERO : 0);
}

static int
result (int r)
{
  if (r == -1) {
    ramback_glue_error ();
    return -1;
  }
  return 0;
}

int
ramback_glue_pread (void *buf, uint32_t count, uint64_t offset)
{
  return result (rb_pread (ramback_rb, buf, count, offset));
}

int
ramback_glue_pwrite (const void *buf, uint32_t count, uint64_t offset,
                     uint32_t flags)
{
  return result (rb_pwrite (ramback_rb, buf, count, offset,
                            flags_of (flags)));
}

int
ramback_glue_zero (uint32_t count, uint64_t offset, uint32_t flags)
{
  return result (rb_zero (ramback_rb, count, offset, flags_of (flags)));
}

int
ramback_glue_trim (uint32_t count, uint64_t offset, uint32_t flags)
{
  return result (rb_trim (ramback_rb, count, offset, flags_of (flags)));
}

int
ramback_glue_flush (void)
{
  return result (rb_flush (ramback_rb));
}

int
ramback_glue_cache (uint32_t count, uint64_t offset)
{
  return result (rb_cache (ramback_rb, count, offset));
}

/* rb_extents' types are NBD's, so nbdkit's too. */
_Static_assert (RB_EXTENT_HOLE == NBDKIT_EXTENT_HOLE &&
                RB_EXTENT_ZERO == NBDKIT_EXTENT_ZERO,
                "rb_extents' types are nbdkit's");

static int
add_extent (void *opaque, uint64_t offset, uint64_t length, uint32_t type)
{
  return nbdkit_add_extent (opaque, offset, length, type);
}

int
ramback_glue_extents (uint32_t count, uint64_t offset, uint32_t flags,
                      struct nbdkit_extents *extents)
{
  return result (rb_extents (ramback_rb, count, offset,
                             (flags & NBDKIT_FLAG_REQ_ONE)
                             ? RB_EXTENTS_REQ_ONE : 0,
                             add_extent, extents));
}
