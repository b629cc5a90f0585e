/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the nbdkit glue shared by the plugin (plugin/ramback.c) and
 * the filter (filter/ramback.c): everything but the nbdkit entry points.
 *
 * One RAM image per nbdkit process (ramback_rb).  Its lifecycle, in the
 * order both forms call it:
 *
 *   ramback_glue_load        route the core's messages to nbdkit's log
 *   ramback_glue_open        rb_open(): the store is opened (plugin form)
 *                            or handed in (filter form), RAM allocated
 *   ramback_glue_bind        bind control= (before nbdkit forks, so a bad
 *                            path fails at startup)
 *   ramback_glue_start       after the fork: populate and flush threads,
 *                            control server
 *   ramback_glue_cleanup     clean stop: drain and sync while the control
 *                            socket still answers, then stop it and free
 *
 * The plugin calls open and bind in .get_ready; the filter binds in
 * .get_ready and opens in .after_fork, because only then can it reach
 * the plugin below it (filter/ramback.c explains).
 *
 * I/O: each call returns 0, or -1 with the error logged (nbdkit_error)
 * and errno set to what the client should see.  The plugin hands that
 * to nbdkit_set_error, the filter to *err.
 */

#ifndef RAMBACK_GLUE_GLUE_H
#define RAMBACK_GLUE_GLUE_H

#include <stdint.h>

#include "ramback.h"

extern struct rb *ramback_rb;

extern void ramback_glue_load (void);
/* Log the core's error for this thread; returns its errno (never 0). */
extern int ramback_glue_error (void);
extern int ramback_glue_open (const struct rb_config *cfg, const char *what);
extern int ramback_glue_bind (void);
/* A client connected (.open) and went (.close): counted for the status
 * line, which says how many a stop waits for.
 */
extern void ramback_glue_client (int delta);
extern int ramback_glue_start (void);
extern void ramback_glue_cleanup (void);

/* NBD block size constraints (.block_size): none (all 0), but with
 * journal= and ram-size= the largest request (rb_get_max_request).
 */
extern void ramback_glue_block_size (uint32_t *minimum, uint32_t *preferred,
                                     uint32_t *maximum);

/* The data path.  flags are nbdkit's (NBDKIT_FLAG_FUA, _FAST_ZERO). */
extern int ramback_glue_pread (void *buf, uint32_t count, uint64_t offset);
extern int ramback_glue_pwrite (const void *buf, uint32_t count,
                                uint64_t offset, uint32_t flags);
extern int ramback_glue_zero (uint32_t count, uint64_t offset,
                              uint32_t flags);
extern int ramback_glue_trim (uint32_t count, uint64_t offset,
                              uint32_t flags);
extern int ramback_glue_flush (void);
extern int ramback_glue_cache (uint32_t count, uint64_t offset);
/* Block status into nbdkit's extents list; flags are nbdkit's
 * (NBDKIT_FLAG_REQ_ONE).
 */
struct nbdkit_extents;
extern int ramback_glue_extents (uint32_t count, uint64_t offset,
                                 uint32_t flags,
                                 struct nbdkit_extents *extents);

#endif /* RAMBACK_GLUE_GLUE_H */
