/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: a test plugin that prints what nbdkit's own helpers make of
 * its parameters (shimcheck.h), for test-shim.sh.  It serves an empty
 * disk, so that nbdkit --run can start it.
 */

#include <config.h>

#define NBDKIT_API_VERSION 2
#define SHIMCHECK_IN_NBDKIT 1
#include <nbdkit-plugin.h>

#include "shimcheck.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

static int
shimcheck_config (const char *key, const char *value)
{
  return shimcheck_one (key, value);
}

static void *
shimcheck_open (int readonly)
{
  return NBDKIT_HANDLE_NOT_NEEDED;
}

static int64_t
shimcheck_get_size (void *handle)
{
  return 0;
}

static int
shimcheck_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
                 uint32_t flags)
{
  memset (buf, 0, count);
  return 0;
}

static struct nbdkit_plugin plugin = {
  .name     = "shimcheck",
  .config   = shimcheck_config,
  .open     = shimcheck_open,
  .get_size = shimcheck_get_size,
  .pread    = shimcheck_pread,
};

NBDKIT_REGISTER_PLUGIN (plugin)
