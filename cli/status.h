/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Fetching "status json" and showing it: human, one line, Prometheus. */

#ifndef RAMBACK_CLI_STATUS_H
#define RAMBACK_CLI_STATUS_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include <json-glib/json-glib.h>

#include "client.h"

/* One "status json" reply: the line as the plugin sent it, which
 * --json prints unchanged, and json-glib's parse of it.
 */
struct status {
  char *line;
  JsonParser *parser;         /* owns the tree */
  JsonObject *obj;            /* its root, an object with a "mode" */
};

/* Send "status json" and parse the reply.  A reply that is not one
 * JSON object with a "mode" field fails with CLI_EXIT_PROTOCOL.
 */
extern struct status *status_fetch (struct ctl *c, GError **err);
extern void status_free (struct status *st);

/* Typed look-ups: false (NULL) if the field is missing or of another
 * type; an integer look-up also fails for fractions and negative
 * numbers, a fraction look-up takes integers.
 */
extern bool status_has_u64 (const struct status *st, const char *name,
                            uint64_t *ret);
extern bool status_has_double (const struct status *st, const char *name,
                               double *ret);
extern const char *status_has_str (const struct status *st,
                                   const char *name);

/* Look-ups that read a missing field as 0 / false / "". */
extern uint64_t status_u64 (const struct status *st, const char *name);
extern double status_double (const struct status *st, const char *name);
extern bool status_bool (const struct status *st, const char *name);
extern const char *status_str (const struct status *st,
                               const char *name);

/* stored_bytes + zeroed_bytes: everything written back, data and zero
 * requests (what a drain of the pending bytes makes grow).
 */
extern uint64_t status_written_back (const struct status *st);

/* dirty_bytes + inflight_bytes: what is not yet on the backing store. */
extern uint64_t status_pending_bytes (const struct status *st);

/* Seconds to write back the pending bytes at the measured flush
 * bandwidth: 0 when nothing is pending, -1 when the bandwidth has not
 * been measured yet.  The plugin's drain_seconds if it sent one.
 */
extern double status_drain_seconds (const struct status *st);

struct status_view {
  bool bars;                  /* progress bars (--watch on a terminal) */
  int width;                  /* columns available */
  uint64_t peak_pending;      /* the drain bar's 0 %: most pending seen */
};

/* The "key: value" report of "ramback status". */
extern void status_format_human (GString *out, const struct status *st,
                                 const char *socket,
                                 const struct status_view *view);

/* One line for --watch when stdout is not a terminal. */
extern void status_format_line (GString *out, const struct status *st);

/* node_exporter textfile format.  st == NULL: the plugin is not
 * reachable, print only ramback_up 0.
 */
extern void status_format_prometheus (GString *out,
                                      const struct status *st,
                                      const char *socket);

#endif /* RAMBACK_CLI_STATUS_H */
