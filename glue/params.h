/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback glue: parsing of the nbdkit command line parameters into a
 * struct rb_config.  Owns the parameter globals; nothing else parses,
 * and lib judges (rb_config_check).
 */

#ifndef RAMBACK_GLUE_PARAMS_H
#define RAMBACK_GLUE_PARAMS_H

#include "ramback.h"

extern struct rb_config ramback_params;
extern const char *ramback_control_path;
extern bool ramback_trace;

extern int ramback_config_key (const char *key, const char *value);
/* All parameters given: lib's rules for them (RB_CHECK_ALL), and the
 * form's: RB_CHECK_URI_STORE (the plugin) or RB_CHECK_FILTER.
 */
extern int ramback_config_check (unsigned flags);
extern void ramback_config_free (void);

/* The pacing parameters, the same in the plugin and the filter. */
#define ramback_config_help_rates \
  "dirty-max=SIZE          Writers wait above this much dirty data.\n" \
  "ups-window=SECONDS      Keep dirty data drainable in this time.\n" \
  "populate-rate=SIZE      Cap on populate bandwidth (bytes/s).\n" \
  "flush-rate=SIZE         Cap on write back bandwidth (bytes/s).\n" \
  "flush-delay=SECONDS     Hold dirty data back this long (0-60, default 1).\n" \
  "dirty-expire=SECONDS    Under write pressure, keep rewritten data dirty\n" \
  "                        at most about this long (0-600, default 30).\n" \
  "populate=true|false     Populate in the background (default true).\n"

#define ramback_config_help \
  "back=PATH|NBD-URI|rbd:POOL/IMAGE  (required) The backing store.\n" \
  "journal=PATH|NBD-URI|rbd:POOL/IMAGE  Crash-consistent write back\n" \
  "                        through a journal.\n" \
  "commit-interval=SECONDS With journal=: commit at least this often (5).\n" \
  "ram=PATH                RAM image file on tmpfs/hugetlbfs (resumable).\n" \
  "ram-size=SIZE           RAM the image may use (default: the device size).\n" \
  "resume=auto|discard|force  What to do with an existing ram= image.\n" \
  "size=SIZE               Create a missing backing file of this size.\n" \
  "chunk=SIZE              Chunk size (power of 2, default 64K).\n" \
  "mode=writeback|writethrough  Initial mode (default writeback).\n" \
  "fsync=ignore|wait       Whether FLUSH/FUA wait for the store.\n" \
  ramback_config_help_rates \
  "direct-io=auto|true|false  O_DIRECT write back to a file or device.\n" \
  "overcommit=true         Allow a device larger than RAM, do not reserve ram=.\n" \
  "control=SOCKET          Unix socket for status and control.\n" \
  "trace=true|false        Trace every request (debug output).\n" \
  "tls-certificates=DIR tls-psk=FILE tls-username=NAME tls-verify=BOOL\n" \
  "connections=N inflight=N request-timeout=SECONDS\n" \
  "                        NBD backing store only (inflight= also RBD).\n" \
  "rbd-conf=FILE rbd-id=NAME rbd-keyring=FILE\n" \
  "                        RBD backing store only: the ceph.conf, the\n" \
  "                        client name (without client.), its keyring."

#endif /* RAMBACK_GLUE_PARAMS_H */
