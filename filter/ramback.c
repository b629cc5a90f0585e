/* SPDX-License-Identifier: GPL-2.0-or-later */
/* nbdkit-ramback-filter: RAM speed in front of any nbdkit plugin.
 *
 *   nbdkit --filter=ramback PLUGIN [plugin args] [ramback parameters]
 *
 * The whole ramback engine (lib/) with the plugin below the filter as
 * its backing store (store-next.c): populate while serving, background
 * coalesced write back, writethrough, dirty limit, UPS window, status
 * and control socket, clean stop.  Only the nbdkit entry points live
 * here; what they do is shared with the plugin form in glue/glue.c.
 *
 * Design.  The plugin form opens its store and allocates RAM in
 * .get_ready, before nbdkit forks.  A filter cannot: it reaches the
 * plugin only through a context, which can be opened from .after_fork
 * on (the backend pointer is documented valid from .after_fork until
 * .cleanup), and a plugin may start threads when a context is opened.
 * The device size, whether the plugin can write, flush, zero, and its
 * thread model are only known then.  So:
 *
 *   .config            ramback's own keys are parsed by glue/params.c;
 *                      back= is refused (the plugin is the store), and
 *                      request-timeout= (the plugin form's NBD store's);
 *                      every other key goes down the chain, so size=,
 *                      tls-*= and the like reach the plugin that owns
 *                      them (nbdkit --filter=ramback memory 1G works)
 *   .config_complete   lib's checks of the parameters (rb_config_check),
 *                      then the plugin's
 *   .get_ready         remember the final thread model; claim the
 *                      plugin's file= files as the plugin form claims
 *                      back= (claim.c); bind control= (a bad path fails
 *                      before the fork)
 *   .after_fork        open the store (contexts into the plugin, its
 *                      capabilities, workers), refuse what cannot work
 *                      (fsync=wait on a plugin that cannot flush), then
 *                      rb_open (RAM, chunk map) and rb_start (populate,
 *                      flush) and the control server, and takes the
 *                      stop signals (stop.c): the first one writes
 *                      everything back while nbdkit still serves, and
 *                      only then shuts nbdkit down, since filters below
 *                      that sleep refuse all I/O once it shuts down.  An
 *                      error here makes nbdkit exit non-zero; in the
 *                      foreground (-f, systemd) that is the exit status,
 *                      in the background nbdkit has already detached and
 *                      the message is in its log
 *   .open              no context into the plugin per client: clients
 *                      are served from RAM, through the one image;
 *                      .open and .close count them for the status line
 *   .cleanup           nbdkit 1.32 calls it after the last client is gone
 *                      and before the plugin's .cleanup and any .unload:
 *                      the clean stop drains and syncs through the
 *                      store's contexts (what the stop signal's drain
 *                      left, normally nothing), then closes them
 *
 * Capabilities to clients are those of the plugin form (RAM does every
 * operation, FUA and flush per fsync=, block status), except can_write, which follows
 * the plugin: a read-only plugin gives a read-only export.  nbdkit
 * applies the plugin's thread model to client requests as well; the
 * store applies it to its own calls (store-next.c).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "ramback.h"
#include "params.h"
#include "glue.h"
#include "control-server.h"
#include "store-next.h"
#include "claim.h"
#include "stop.h"

static int thread_model = NBDKIT_THREAD_MODEL_PARALLEL;
static bool read_only;

/* The keys that are ramback's in the filter form.  The plugin form's
 * store parameters (back=, size=, tls-*=) are not among them: the
 * plugin below is the store and has its own.
 */
static const char *const own_keys[] = {
  "ram", "ram-size", "resume", "chunk", "mode", "fsync", "dirty-max", "ups-window",
  "populate-rate", "flush-rate", "flush-delay", "dirty-expire",
  "populate", "overcommit",
  "trace", "control", "connections", "inflight", "journal",
  "commit-interval", NULL
};

/* What stands for back= in a ram= image (ramimage.h): the parameters
 * given to the plugin below, "(plugin) key=value ...", with the value
 * of an existing path made absolute and canonical, and a password never
 * written down.  A RAM image is resumed only onto a plugin given the
 * same parameters (and of the same size).
 */
static char plugin_id[1024] = "(plugin)";

static void
plugin_id_add (const char *key, const char *value)
{
  size_t used = strlen (plugin_id);
  char *real = NULL;

  if (strstr (key, "password") != NULL)
    value = "(hidden)";
  else if (*value && access (value, F_OK) == 0 &&
           (real = nbdkit_realpath (value)) != NULL)
    value = real;
  snprintf (plugin_id + used, sizeof plugin_id - used, " %s=%s",
            key, value);
  free (real);
}

static bool
own_key (const char *key)
{
  size_t i;

  for (i = 0; own_keys[i]; i++)
    if (strcmp (key, own_keys[i]) == 0)
      return true;
  return false;
}

/* nbdkit loads a filter given twice (--filter=ramback twice) once, so
 * both would share one RAM image and one set of claims: counted here,
 * refused in .config_complete with that said.
 */
static unsigned loads;

static void
ramback_filter_load (void)
{
  if (loads++ == 0)
    ramback_glue_load ();
}

static int
ramback_filter_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
                       const char *key, const char *value)
{
  if (strcmp (key, "back") == 0) {
    nbdkit_error ("back=%s: the ramback filter takes no back= parameter: "
                  "its backing store is the plugin named after the filter "
                  "(nbdkit --filter=ramback file disk.img); back= belongs "
                  "to the plugin form (nbdkit ramback back=...)", value);
    return -1;
  }
  if (strcmp (key, "request-timeout") == 0) {
    nbdkit_error ("request-timeout=%s: applies to the NBD backing store of "
                  "the plugin form (nbdkit ramback back=nbd://...); the "
                  "filter calls the plugin below it, which has its own "
                  "timeouts if any", value);
    return -1;
  }
  if (own_key (key))
    return ramback_config_key (key, value);
  if (strcmp (key, "file") == 0 && claim_add (value) == -1)
    return -1;
  plugin_id_add (key, value);
  return next (nxdata, key, value);
}

static int
ramback_filter_config_complete (nbdkit_next_config_complete *next,
                                nbdkit_backend *nxdata)
{
  /* lib's rules (config.c), with the filter's limit on requests in
   * flight to the plugin: RB_MAX_FILTER_INFLIGHT workers (store-next.c).
   */
  if (loads > 1) {
    nbdkit_error ("the ramback filter is given %u times (--filter=ramback "
                  "more than once): nbdkit loads it once, so they would "
                  "share one RAM image in this same process; give "
                  "--filter=ramback once", loads);
    return -1;
  }
  if (ramback_config_check (RB_CHECK_FILTER) == -1)
    return -1;
  return next (nxdata);
}

static void
ramback_filter_unload (void)
{
  claim_release ();
}

/* Before the fork, as in the plugin form: the backing files are claimed
 * (claim.h) and control= is bound, so that either fails at startup.
 */
static int
ramback_filter_get_ready (int model)
{
  const char *back;

  thread_model = model;
  if (claim_all () == -1)
    return -1;
  if (ramback_params.ram && (back = claim_find (ramback_params.ram))) {
    nbdkit_error ("ram=%s is the backing store itself (the same file as "
                  "file=%s): the RAM image would overwrite the data it "
                  "caches; give ram= a file of its own on a memory file "
                  "system, e.g. ram=/dev/shm/NAME.ramimg (ramback creates "
                  "it)", ramback_params.ram, back);
    return -1;
  }
  if (ramback_params.journal &&
      (back = claim_find (ramback_params.journal))) {
    nbdkit_error ("journal=%s is the backing store itself (the same file "
                  "as file=%s): the journal needs a store of its own "
                  "(another file, device or export, ideally on another "
                  "disk)", ramback_params.journal, back);
    return -1;
  }
  return ramback_glue_bind ();
}

static int
ramback_filter_after_fork (nbdkit_backend *backend)
{
  struct rb_config cfg = ramback_params;
  struct rb_store_next_params sp = {
    .backend = backend,
    .thread_model = thread_model,
    .contexts = cfg.store.connections,
    .inflight = cfg.store.max_inflight,
    .chunk_size = cfg.chunk_size ? cfg.chunk_size : RB_DEFAULT_CHUNK_SIZE,
  };
  struct rb_store *s = rb_store_next_open (&sp);

  if (s == NULL) {
    ramback_glue_error ();
    goto fail;
  }
  if (cfg.fsync_wait && !rb_store_next_can_flush (s)) {
    nbdkit_error ("fsync=wait: the plugin cannot flush (can_flush is "
                  "false), so no write could ever be confirmed durable; "
                  "use fsync=ignore (the default) with this plugin");
    rb_store_close (s);
    goto fail;
  }
  read_only = s->read_only;
  if (read_only)
    nbdkit_debug ("ramback: the plugin is read-only: serving a read-only "
                  "export");
  cfg.store.uri = plugin_id;
  cfg.store.read_only = read_only;
  cfg.store_override = s;     /* rb_open owns it from here, even on error */
  if (ramback_glue_open (&cfg, "the plugin below the filter") == -1)
    goto fail;
  if (ramback_glue_start () == -1)
    return -1;
  return stop_intercept_start (ramback_rb);

 fail:
  control_server_stop ();     /* unlink the socket bound in .get_ready */
  return -1;
}

static void
ramback_filter_cleanup (nbdkit_backend *backend)
{
  stop_intercept_end ();
  ramback_glue_cleanup ();
}

/* One image for every export name: list only the default. */
static int
ramback_filter_list_exports (nbdkit_next_list_exports *next,
                             nbdkit_backend *nxdata, int readonly,
                             int is_tls, struct nbdkit_exports *exports)
{
  return nbdkit_use_default_export (exports);
}

static const char *
ramback_filter_default_export (nbdkit_next_default_export *next,
                               nbdkit_backend *nxdata, int readonly,
                               int is_tls)
{
  return "";
}

static void *
ramback_filter_open (nbdkit_next_open *next, nbdkit_context *context,
                     int readonly, const char *exportname, int is_tls)
{
  ramback_glue_client (1);
  return NBDKIT_HANDLE_NOT_NEEDED;
}

static void
ramback_filter_close (void *handle)
{
  ramback_glue_client (-1);
}

static int64_t
ramback_filter_get_size (nbdkit_next *next, void *handle)
{
  return rb_get_size (ramback_rb);
}

static const char *
ramback_filter_export_description (nbdkit_next *next, void *handle)
{
  return NULL;
}

/* RAM takes any alignment and size; with journal= and ram-size=, up
 * to the largest request (glue.c).
 */
static int
ramback_filter_block_size (nbdkit_next *next, void *handle,
                           uint32_t *minimum, uint32_t *preferred,
                           uint32_t *maximum)
{
  ramback_glue_block_size (minimum, preferred, maximum);
  return 0;
}

static int
ramback_filter_can_write (nbdkit_next *next, void *handle)
{
  return !read_only;
}

static int
ramback_filter_can_flush (nbdkit_next *next, void *handle)
{
  return 1;
}

static int
ramback_filter_is_rotational (nbdkit_next *next, void *handle)
{
  return 0;
}

static int
ramback_filter_can_trim (nbdkit_next *next, void *handle)
{
  return 1;
}

static int
ramback_filter_can_zero (nbdkit_next *next, void *handle)
{
  return NBDKIT_ZERO_NATIVE;
}

/* As in the plugin form: rb_zero refuses a fast zero with ENOTSUP when
 * it must reach the store at once and the plugin cannot zero natively.
 */
static int
ramback_filter_can_fast_zero (nbdkit_next *next, void *handle)
{
  return 1;
}

/* Block status from RAM and, for chunks not loaded or clean, from the
 * plugin's own extents (lib/engine/extents.c, store-next.c): offered
 * whatever the plugin offers (without its extents, those are data).
 */
static int
ramback_filter_can_extents (nbdkit_next *next, void *handle)
{
  return 1;
}

static int
ramback_filter_can_fua (nbdkit_next *next, void *handle)
{
  return NBDKIT_FUA_NATIVE;
}

/* One RAM image for all connections, and FLUSH syncs everything (see
 * plugin/ramback.c).
 */
static int
ramback_filter_can_multi_conn (nbdkit_next *next, void *handle)
{
  return 1;
}

static int
ramback_filter_can_cache (nbdkit_next *next, void *handle)
{
  return NBDKIT_CACHE_NATIVE;
}

/* The glue reports the error and leaves it in errno (glue.h). */
static int
fail (int *err)
{
  *err = errno;
  return -1;
}

static int
ramback_filter_pread (nbdkit_next *next, void *handle, void *buf,
                      uint32_t count, uint64_t offset, uint32_t flags,
                      int *err)
{
  return ramback_glue_pread (buf, count, offset) == -1 ? fail (err) : 0;
}

static int
ramback_filter_pwrite (nbdkit_next *next, void *handle, const void *buf,
                       uint32_t count, uint64_t offset, uint32_t flags,
                       int *err)
{
  return ramback_glue_pwrite (buf, count, offset, flags) == -1
    ? fail (err) : 0;
}

static int
ramback_filter_zero (nbdkit_next *next, void *handle, uint32_t count,
                     uint64_t offset, uint32_t flags, int *err)
{
  return ramback_glue_zero (count, offset, flags) == -1 ? fail (err) : 0;
}

static int
ramback_filter_trim (nbdkit_next *next, void *handle, uint32_t count,
                     uint64_t offset, uint32_t flags, int *err)
{
  return ramback_glue_trim (count, offset, flags) == -1 ? fail (err) : 0;
}

static int
ramback_filter_flush (nbdkit_next *next, void *handle, uint32_t flags,
                      int *err)
{
  return ramback_glue_flush () == -1 ? fail (err) : 0;
}

static int
ramback_filter_cache (nbdkit_next *next, void *handle, uint32_t count,
                      uint64_t offset, uint32_t flags, int *err)
{
  return ramback_glue_cache (count, offset) == -1 ? fail (err) : 0;
}

static int
ramback_filter_extents (nbdkit_next *next, void *handle, uint32_t count,
                        uint64_t offset, uint32_t flags,
                        struct nbdkit_extents *extents, int *err)
{
  return ramback_glue_extents (count, offset, flags, extents) == -1
    ? fail (err) : 0;
}

#define ramback_filter_config_help \
  "ram=PATH                RAM image file on tmpfs/hugetlbfs (resumable).\n" \
  "resume=auto|discard|force  What to do with an existing ram= image.\n" \
  "chunk=SIZE              Chunk size (power of 2, default 64K).\n" \
  "mode=writeback|writethrough  Initial mode (default writeback).\n" \
  "fsync=ignore|wait       Whether FLUSH/FUA wait for the plugin.\n" \
  ramback_config_help_rates \
  "overcommit=true         Allow a device larger than RAM, do not reserve ram=.\n" \
  "control=SOCKET          Unix socket for status and control.\n" \
  "trace=true|false        Trace every request (debug output).\n" \
  "connections=N           Contexts opened into the plugin.\n" \
  "inflight=N              Requests to the plugin at once (at most 64).\n" \
  "journal=PATH|URI        Write-back journal: crash-consistent plugin.\n" \
  "commit-interval=SECONDS Commit at least this often (with journal=).\n" \
  "Every other parameter is the plugin's."

static struct nbdkit_filter filter = {
  .name               = "ramback",
  .longname           = "nbdkit ramback filter: RAM in front of any plugin, written back to it",
  .load               = ramback_filter_load,
  .unload             = ramback_filter_unload,
  .config             = ramback_filter_config,
  .config_complete    = ramback_filter_config_complete,
  .config_help        = ramback_filter_config_help,
  .get_ready          = ramback_filter_get_ready,
  .after_fork         = ramback_filter_after_fork,
  .cleanup            = ramback_filter_cleanup,
  .list_exports       = ramback_filter_list_exports,
  .default_export     = ramback_filter_default_export,
  .open               = ramback_filter_open,
  .close              = ramback_filter_close,
  .get_size           = ramback_filter_get_size,
  .export_description = ramback_filter_export_description,
  .block_size         = ramback_filter_block_size,
  .can_write          = ramback_filter_can_write,
  .can_flush          = ramback_filter_can_flush,
  .is_rotational      = ramback_filter_is_rotational,
  .can_trim           = ramback_filter_can_trim,
  .can_zero           = ramback_filter_can_zero,
  .can_fast_zero      = ramback_filter_can_fast_zero,
  .can_extents        = ramback_filter_can_extents,
  .can_fua            = ramback_filter_can_fua,
  .can_multi_conn     = ramback_filter_can_multi_conn,
  .can_cache          = ramback_filter_can_cache,
  .pread              = ramback_filter_pread,
  .pwrite             = ramback_filter_pwrite,
  .zero               = ramback_filter_zero,
  .trim               = ramback_filter_trim,
  .flush              = ramback_filter_flush,
  .cache              = ramback_filter_cache,
  .extents            = ramback_filter_extents,
};

NBDKIT_REGISTER_FILTER (filter)
