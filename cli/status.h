/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Fetching "status json" and showing it: human, one line, Prometheus. */

#ifndef RAMBACK_CLI_STATUS_H
#define RAMBACK_CLI_STATUS_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "client.h"
#include "json-object.h"

/* Send "status json" and parse the reply.  A reply that is not one
 * JSON object with a "mode" field fails with CLI_EXIT_PROTOCOL.
 */
extern struct json_object *status_fetch (struct ctl *c, GError **err);

/* Look-ups that read a missing field as 0 / false / "". */
extern uint64_t status_u64 (const struct json_object *st, const char *name);
extern double status_double (const struct json_object *st, const char *name);
extern bool status_bool (const struct json_object *st, const char *name);
extern const char *status_str (const struct json_object *st,
                               const char *name);

/* stored_bytes + zeroed_bytes: everything written back, data and zero
 * requests (what a drain of the pending bytes makes grow).
 */
extern uint64_t status_written_back (const struct json_object *st);

/* dirty_bytes + inflight_bytes: what is not yet on the backing store. */
extern uint64_t status_pending_bytes (const struct json_object *st);

/* Seconds to write back the pending bytes at the measured flush
 * bandwidth: 0 when nothing is pending, -1 when the bandwidth has not
 * been measured yet.  The plugin's drain_seconds if it sent one.
 */
extern double status_drain_seconds (const struct json_object *st);

struct status_view {
  bool bars;                  /* progress bars (--watch on a terminal) */
  int width;                  /* columns available */
  uint64_t peak_pending;      /* the drain bar's 0 %: most pending seen */
};

/* The "key: value" report of "ramback status". */
extern void status_format_human (GString *out, const struct json_object *st,
                                 const char *socket,
                                 const struct status_view *view);

/* One line for --watch when stdout is not a terminal. */
extern void status_format_line (GString *out, const struct json_object *st);

/* node_exporter textfile format.  st == NULL: the plugin is not
 * reachable, print only ramback_up 0.
 */
extern void status_format_prometheus (GString *out,
                                      const struct json_object *st,
                                      const char *socket);

#endif /* RAMBACK_CLI_STATUS_H */
