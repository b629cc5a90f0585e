/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback filter: a backing store that is the next plugin (or filter) in
 * nbdkit's chain, through nbdkit_next contexts (store-next.c).  It is an
 * implementation of lib/store/store.h's ops table; it lives beside the filter
 * rather than in lib/ because it calls nbdkit, and lib/ stays free of
 * nbdkit.
 */

#ifndef RAMBACK_FILTER_STORE_NEXT_H
#define RAMBACK_FILTER_STORE_NEXT_H

#include <stdbool.h>
#include <stdint.h>

#include <nbdkit-filter.h>

#include "store.h"

struct rb_store_next_params {
  nbdkit_backend *backend;    /* from .after_fork, valid until .cleanup */
  int thread_model;           /* the final one, from .get_ready */
  int contexts;               /* connections=, 0: automatic */
  int inflight;               /* inflight=, 0: automatic */
  uint32_t chunk_size;        /* checked against the minimum block size */
};

/* Open the contexts, ask the plugin what it can do, start the workers.
 * Call from .after_fork (or later).  NULL with the error in
 * rb_get_error() on failure; nothing is left open then.
 */
extern struct rb_store *rb_store_next_open (const struct rb_store_next_params *p);

/* What the plugin can do, for the filter's checks and capabilities. */
extern bool rb_store_next_can_flush (struct rb_store *s);

#endif /* RAMBACK_FILTER_STORE_NEXT_H */
