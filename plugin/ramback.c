/* SPDX-License-Identifier: GPL-2.0-or-later */
/* nbdkit-ramback-plugin: a RAM block device written back to a backing
 * store.  Only the nbdkit entry points live here: what they do is in
 * glue.c, shared with the filter form (filter/ramback.c); the caching
 * core is lib/.
 *
 * Lifecycle (nbdkit 1.32):
 *   .config / .config_complete  parse parameters (params.c); lib checks
 *                               them (rb_config_check, lib/config.c)
 *   .get_ready                  open the store, allocate RAM, bind the
 *                               control socket: every error on bad input
 *                               surfaces here, before nbdkit forks
 *   .after_fork                 start the populate and flush threads and
 *                               the control server (threads do not
 *                               survive fork)
 *   .open / .close              count the clients, for the status line
 *   .cleanup                    clean stop: drain all dirty data, sync,
 *                               then stop the control server and free
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#include <nbdkit-plugin.h>

#include "ramback.h"
#include "params.h"
#include "glue.h"

/* The glue reports the error and leaves it in errno (glue.h). */
static int
fail (void)
{
  nbdkit_set_error (errno);
  return -1;
}

static void
ramback_load (void)
{
  ramback_glue_load ();
}

static int
ramback_config (const char *key, const char *value)
{
  return ramback_config_key (key, value);
}

static int
ramback_config_complete (void)
{
  return ramback_config_check (RB_CHECK_URI_STORE);
}

static int
ramback_get_ready (void)
{
  if (ramback_glue_open (&ramback_params, ramback_params.store.uri) == -1)
    return -1;
  return ramback_glue_bind ();
}

static int
ramback_after_fork (void)
{
  return ramback_glue_start ();
}

static void
ramback_cleanup (void)
{
  ramback_glue_cleanup ();
}

static void *
ramback_open (int readonly)
{
  ramback_glue_client (1);
  return NBDKIT_HANDLE_NOT_NEEDED;
}

static void
ramback_close (void *handle)
{
  ramback_glue_client (-1);
}

static int64_t
ramback_get_size (void *handle)
{
  return rb_get_size (ramback_rb);
}

static int
ramback_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                    uint32_t *maximum)
{
  ramback_glue_block_size (minimum, preferred, maximum);
  return 0;
}

/* All connections share one RAM image and FLUSH syncs everything, so
 * what one connection's FLUSH or FUA makes durable is visible and
 * durable for all of them: multi-conn is safe with fsync=ignore (no
 * promises to break) and with fsync=wait (a sync covers every
 * connection's writes).
 */
static int
ramback_can_multi_conn (void *handle)
{
  return 1;
}

static int
ramback_can_flush (void *handle)
{
  return 1;
}

/* FUA is handled by the core: with fsync=wait a FUA write goes through
 * to the store and syncs it; with fsync=ignore it is ignored like FLUSH.
 */
static int
ramback_can_fua (void *handle)
{
  return NBDKIT_FUA_NATIVE;
}

static int
ramback_can_trim (void *handle)
{
  return 1;
}

static int
ramback_can_zero (void *handle)
{
  return 1;
}

/* Zeroing is a RAM operation, never slower than writing, except where it
 * must reach the store at once (writethrough, FUA with fsync=wait) and
 * the store cannot zero cheaply: rb_zero refuses those with ENOTSUP.
 */
static int
ramback_can_fast_zero (void *handle)
{
  return 1;
}

static int
ramback_can_cache (void *handle)
{
  return NBDKIT_CACHE_NATIVE;
}

/* Block status: zeroed and trimmed chunks and the store's holes read
 * as zeroes, so sparse copies skip them (lib/engine/extents.c).
 */
static int
ramback_can_extents (void *handle)
{
  return 1;
}

static int
ramback_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
               uint32_t flags)
{
  return ramback_glue_pread (buf, count, offset) == -1 ? fail () : 0;
}

static int
ramback_pwrite (void *handle, const void *buf, uint32_t count,
                uint64_t offset, uint32_t flags)
{
  return ramback_glue_pwrite (buf, count, offset, flags) == -1 ? fail () : 0;
}

static int
ramback_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return ramback_glue_zero (count, offset, flags) == -1 ? fail () : 0;
}

static int
ramback_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return ramback_glue_trim (count, offset, flags) == -1 ? fail () : 0;
}

static int
ramback_flush (void *handle, uint32_t flags)
{
  return ramback_glue_flush () == -1 ? fail () : 0;
}

static int
ramback_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  return ramback_glue_cache (count, offset) == -1 ? fail () : 0;
}

static int
ramback_extents (void *handle, uint32_t count, uint64_t offset,
                 uint32_t flags, struct nbdkit_extents *extents)
{
  return ramback_glue_extents (count, offset, flags, extents) == -1
    ? fail () : 0;
}

static struct nbdkit_plugin plugin = {
  .name              = "ramback",
  .version           = PACKAGE_VERSION,
  .longname          = "nbdkit ramback plugin: RAM disk written back to a backing store",
  .load              = ramback_load,
  .config            = ramback_config,
  .config_complete   = ramback_config_complete,
  .config_help       = ramback_config_help,
  .magic_config_key  = "back",
  .get_ready         = ramback_get_ready,
  .after_fork        = ramback_after_fork,
  .cleanup           = ramback_cleanup,
  .open              = ramback_open,
  .close             = ramback_close,
  .get_size          = ramback_get_size,
  .block_size        = ramback_block_size,
  .can_multi_conn    = ramback_can_multi_conn,
  .can_flush         = ramback_can_flush,
  .can_fua           = ramback_can_fua,
  .can_trim          = ramback_can_trim,
  .can_zero          = ramback_can_zero,
  .can_fast_zero     = ramback_can_fast_zero,
  .can_cache         = ramback_can_cache,
  .can_extents       = ramback_can_extents,
  .pread             = ramback_pread,
  .pwrite            = ramback_pwrite,
  .zero              = ramback_zero,
  .trim              = ramback_trim,
  .flush             = ramback_flush,
  .cache             = ramback_cache,
  .extents           = ramback_extents,
  .errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN (plugin)
