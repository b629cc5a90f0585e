/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the requests a remote store has in flight (inflight.h). */

#include <config.h>

#include "env.h"
#include "json.h"
#include "inflight.h"

void
rb_inflight_issue (struct rb_inflight_list *l, struct rb_inflight_counts *c,
                   struct rb_inflight_req *r, uint64_t now_ns)
{
  r->issued_ns = now_ns;
  r->next = NULL;
  r->prev = l->tail;
  if (l->tail)
    l->tail->next = r;
  else
    l->head = r;
  l->tail = r;
  l->n++;
  c->requests++;
  if (++c->inflight > c->inflight_max)
    c->inflight_max = c->inflight;
}

void
rb_inflight_end (struct rb_inflight_list *l, struct rb_inflight_counts *c,
                 struct rb_inflight_req *r, bool failed)
{
  rb_assert (r->prev ? r->prev->next == r : l->head == r);
  rb_assert (r->next ? r->next->prev == r : l->tail == r);
  if (r->prev)
    r->prev->next = r->next;
  else
    l->head = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    l->tail = r->prev;
  r->prev = r->next = NULL;
  l->n--;
  c->inflight--;
  if (failed)
    c->failed++;
}

uint64_t
rb_inflight_oldest_ms (const struct rb_inflight_list *l, uint64_t now_ns)
{
  if (l->head == NULL || now_ns <= l->head->issued_ns)
    return 0;
  return (now_ns - l->head->issued_ns) / 1000000;
}

void
rb_inflight_status (struct rb_status_out *o,
                    const struct rb_inflight_counts *c, unsigned limit,
                    uint64_t oldest_ms)
{
  rb_status_u64 (o, "store_requests", c->requests);
  rb_status_u64 (o, "store_failed_requests", c->failed);
  rb_status_u64 (o, "store_inflight", c->inflight);
  rb_status_u64 (o, "store_inflight_max", c->inflight_max);
  rb_status_u64 (o, "store_inflight_limit", limit);
  rb_status_u64 (o, "store_oldest_request_ms", oldest_ms);
}
