/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the requests a remote store has in flight, for its status.
 *
 * The NBD store (a list per connection) and the RBD store (one for the
 * image) put each request on an in-flight list when they issue it,
 * oldest first, and take it off when it is over: its completion ran,
 * or the call that was to issue it refused it.  A request leaves from
 * wherever it is on the list: requests of several threads are issued
 * in one order and end in any other, and a refusal can come while
 * another thread has issued more behind it.  Status shows the age of
 * the oldest (a request waiting on a server or an OSD that is gone
 * makes it grow) and the counters kept beside the lists.
 *
 * Locking: none of its own.  A list and its counters belong to a store
 * and are protected by that store's lock, held for every call here
 * (the status call takes copies made under it).  The list is
 * intrusive: a request embeds its struct rb_inflight_req, and stays
 * valid while it is listed.
 */

#ifndef RAMBACK_INFLIGHT_H
#define RAMBACK_INFLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rb_status_out;

/* A request this old makes a store show its state as "offline": a
 * store that waits for a server, an OSD or a plugin, however long,
 * fails nothing, so status says it instead.
 */
#define RB_INFLIGHT_STALL_MS 10000

struct rb_inflight_req {
  struct rb_inflight_req *prev, *next;
  uint64_t issued_ns;
};

struct rb_inflight_list {
  struct rb_inflight_req *head, *tail;  /* oldest first */
  unsigned n;                 /* on the list */
};

/* Counters over all of a store's lists. */
struct rb_inflight_counts {
  uint64_t requests;          /* issued so far */
  uint64_t failed;            /* of them, failed or refused */
  uint64_t inflight;          /* on a list now */
  uint64_t inflight_max;      /* most at once so far */
};

/* The request that embeds r as its member 'member'. */
#define RB_INFLIGHT_ENTRY(r, type, member) \
  ((type *) ((char *) (r) - offsetof (type, member)))

/* r is issued now: append it to l and count it. */
extern void rb_inflight_issue (struct rb_inflight_list *l,
                               struct rb_inflight_counts *c,
                               struct rb_inflight_req *r, uint64_t now_ns);

/* r, on l, is over (failed: it failed or was refused): take it off,
 * from wherever it is, and count it.
 */
extern void rb_inflight_end (struct rb_inflight_list *l,
                             struct rb_inflight_counts *c,
                             struct rb_inflight_req *r, bool failed);

/* How long the oldest request on l has waited, in ms (0: none). */
extern uint64_t rb_inflight_oldest_ms (const struct rb_inflight_list *l,
                                       uint64_t now_ns);

/* The status fields they make: store_requests, store_failed_requests,
 * store_inflight, store_inflight_max, store_inflight_limit (limit) and
 * store_oldest_request_ms (oldest_ms, the largest over the lists).
 */
extern void rb_inflight_status (struct rb_status_out *o,
                                const struct rb_inflight_counts *c,
                                unsigned limit, uint64_t oldest_ms);

#endif /* RAMBACK_INFLIGHT_H */
