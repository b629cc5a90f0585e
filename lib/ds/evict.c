/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the eviction policy (evict.h for the design). */

#include "env.h"
#include "error.h"
#include "evict.h"

int
evict_init (struct evict *ev, uint64_t n, uint64_t active_max)
{
  ev->n = n;
  ev->hand = 0;
  ev->nactive = 0;
  ev->active_max = active_max;
  ev->flags = rb_calloc (n ? n : 1, sizeof *ev->flags);
  if (ev->flags == NULL) {
    rb_set_error (ENOMEM, "cannot allocate the eviction table for %"
                  PRIu64 " chunks", n);
    return -1;
  }
  return 0;
}

void
evict_free (struct evict *ev)
{
  rb_free (ev->flags);
  ev->flags = NULL;
}

void
evict_forget (struct evict *ev, uint64_t c)
{
  uint32_t old = rb_atomic_xchg (&ev->flags[c], (uint32_t) 0);

  if (old & EV_ACTIVE)
    rb_atomic_sub (&ev->nactive, 1);
}

/* Inactive chunk c moves to the active set (once, by whoever's CAS
 * wins).
 */
void
evict_promote (struct evict *ev, uint64_t c)
{
  uint32_t old = rb_atomic_load (&ev->flags[c]);

  while (!(old & EV_ACTIVE))
    if (rb_atomic_cas (&ev->flags[c], &old,
                       (uint32_t) ((old & ~(EV_SEEN | EV_REF)) | EV_ACTIVE))) {
      rb_atomic_add (&ev->nactive, 1);
      return;
    }
}

/* Active chunk c goes back to the inactive set, if still active. */
static void
demote (struct evict *ev, uint64_t c)
{
  uint32_t old = rb_atomic_load (&ev->flags[c]);

  while (old & EV_ACTIVE)
    if (rb_atomic_cas (&ev->flags[c], &old,
                       (uint32_t) (old & ~(EV_ACTIVE | EV_SEEN | EV_REF)))) {
      rb_atomic_sub (&ev->nactive, 1);
      return;
    }
}

static void
clear_flag (struct evict *ev, uint64_t c, uint32_t f)
{
  rb_atomic_and (&ev->flags[c], (uint32_t) ~f);
}

static void
set_flag (struct evict *ev, uint64_t c, uint32_t f)
{
  rb_atomic_or (&ev->flags[c], f);
}

/* The hand at resident chunk c: age its flags; is it the victim? */
static bool
visit (struct evict *ev, uint64_t c, bool desperate, evict_pred evictable,
       void *opaque)
{
  uint32_t f = rb_atomic_load (&ev->flags[c]);

  if (f & EV_ACTIVE) {
    if (f & EV_REF)
      clear_flag (ev, c, EV_REF);
    else if (rb_atomic_load (&ev->nactive) > ev->active_max)
      demote (ev, c);
    return desperate && evictable (opaque, c);
  }
  if (f & EV_REF) {
    if (f & EV_SEEN)
      evict_promote (ev, c);
    else {
      clear_flag (ev, c, EV_REF);
      set_flag (ev, c, EV_SEEN);
    }
    return desperate && evictable (opaque, c);
  }
  return evictable (opaque, c);
}

uint64_t
evict_pick (struct evict *ev, uint64_t *steps, bool desperate,
            evict_pred resident, evict_pred evictable, void *opaque)
{
  while (*steps > 0 && ev->n > 0) {
    uint64_t c = ev->hand;

    ev->hand = c + 1 == ev->n ? 0 : c + 1;
    (*steps)--;
    if (resident (opaque, c) && visit (ev, c, desperate, evictable, opaque))
      return c;
  }
  return UINT64_MAX;
}
