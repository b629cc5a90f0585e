/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback-sim: the model of acknowledged operations.
 *
 * The device is modelled in units of 512 bytes (every request of the
 * workload is unit aligned).  A write of record id fills each unit u
 * with a pattern made from (id, u), so a unit read back names the write
 * it came from, and a unit that is neither a whole pattern nor zeroes
 * is garbage (a torn or misplaced copy).
 *
 * Each unit keeps the ids of the last SIM_HIST acknowledged writes over
 * it, in acknowledgement order (sim_unit_hist).  Logical time ticks at
 * every request's start and end, and a record keeps both, so two
 * requests are concurrent when each started before the other ended.
 *
 * A read that began at ts may return, per unit: the newest write
 * answered before ts (P) and every write concurrent with P, every write
 * answered after ts, and any write still in flight (linearizability:
 * overlapping requests are unordered).  A failed write may or may not
 * have happened: it is allowed, and never counts as P.
 *
 * Durability: a record is durable if its own contract made it so (FUA
 * under fsync=wait) or it was acknowledged before a FLUSH or sync that
 * succeeded by contract began (ack <= durable_seq).  After a crash or
 * power cut a unit may hold, newest first, any write back to the newest
 * durable one D, any write concurrent with D, or a write whose process
 * died before answering it (orphan).  What the restart finds is noted
 * as an alias record, so that later reads and crashes count from it.
 *
 * A unit whose history kept (SIM_HIST writes) does not reach back from
 * its newest durable one D to a write that ended before D began is not
 * checked after a crash (the model does not know how far back it may
 * go, nor which older writes were concurrent with D); with syncs in
 * every workload that is rare.
 */

#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "sim.h"

uint64_t
model_tick (void)
{
  return ++sim->clock;
}

static struct sim_rec *
rec (uint32_t id)
{
  return &sim->recs[id];
}

static uint32_t
new_rec (enum sim_rec_kind kind, uint32_t u0, uint32_t nu)
{
  struct sim_rec *r;

  if (sim->nrecs >= sim->maxrecs)
    sim_fail ("model: out of records (%u)", sim->maxrecs);
  r = rec (sim->nrecs);
  memset (r, 0, sizeof *r);
  r->kind = kind;
  r->u0 = u0;
  r->nu = nu;
  r->value = kind == REC_ZERO ? 0 : sim->nrecs;
  return sim->nrecs++;
}

static uint64_t
mix (uint64_t x)
{
  x ^= x >> 33;
  x *= UINT64_C (0xff51afd7ed558ccd);
  x ^= x >> 33;
  x *= UINT64_C (0xc4ceb9fe1a85ec53);
  x ^= x >> 33;
  return x;
}

static void
fill_unit (uint32_t value, uint32_t u, uint8_t *p)
{
  uint64_t x = mix (((uint64_t) value << 32) | u), w[SIM_UNIT / 8];
  size_t i;

  if (value == 0) {
    memset (p, 0, SIM_UNIT);
    return;
  }
  w[0] = value;
  w[1] = u;
  for (i = 2; i < SIM_UNIT / 8; i++)
    w[i] = x = mix (x + i);
  memcpy (p, w, SIM_UNIT);
}

void
model_fill (uint32_t id, uint32_t u0, uint32_t n, uint8_t *buf)
{
  uint32_t i;

  for (i = 0; i < n; i++)
    fill_unit (rec (id)->value, u0 + i, buf + (size_t) i * SIM_UNIT);
}

/* The value a unit holds (a record's value), or -1 for garbage. */
static int64_t
decode (const uint8_t *p, uint32_t u)
{
  uint8_t want[SIM_UNIT];
  uint64_t v, uu;
  static const uint8_t zero[SIM_UNIT];

  if (memcmp (p, zero, SIM_UNIT) == 0)
    return 0;
  memcpy (&v, p, 8);
  memcpy (&uu, p + 8, 8);
  if (uu != u || v == 0 || v >= sim->nrecs)
    return -1;
  fill_unit ((uint32_t) v, u, want);
  return memcmp (p, want, SIM_UNIT) == 0 ? (int64_t) v : -1;
}

void
model_init (bool initial_zero)
{
  uint32_t u, id;
  struct sim_rec *r;

  sim->nrecs = 1;               /* id 0 is never used */
  id = new_rec (initial_zero ? REC_ZERO : REC_DATA, 0, sim->nunits);
  r = rec (id);
  r->start = r->end = model_tick ();
  r->ack = ++sim->ack_seq;
  r->fua_durable = 1;
  for (u = 0; u < sim->nunits; u++) {
    sim->hist[u].total = 1;
    sim->hist[u].ids[0] = id;
  }
  /* The initial contents, on both images of the store. */
  for (u = 0; u < sim->nunits; u++)
    fill_unit (r->value, u, sim->back.pending + (size_t) u * SIM_UNIT);
  memcpy (sim->back.durable, sim->back.pending, sim->back.size);
}

static void
hist_append (uint32_t u, uint32_t id)
{
  struct sim_unit_hist *h = &sim->hist[u];

  h->ids[h->total % SIM_HIST] = id;
  h->total++;
}

static bool
durable (const struct sim_rec *r)
{
  return !r->failed && (r->fua_durable ||
                        (r->ack && r->ack <= sim->durable_seq));
}

uint32_t
model_begin (int client, enum sim_rec_kind kind, uint32_t u0, uint32_t nu)
{
  uint32_t id = new_rec (kind, u0, nu);

  rec (id)->start = model_tick ();
  if (client >= 0)
    sim->inflight[client] = id;
  return id;
}

void
model_end (int client, uint32_t id, bool ok, bool fua_durable)
{
  struct sim_rec *r = rec (id);
  uint32_t u;

  r->end = model_tick ();
  r->ack = ++sim->ack_seq;
  r->failed = !ok;
  r->fua_durable = ok && fua_durable;
  if (r->fua_durable && r->start > sim->durable_clock)
    sim->durable_clock = r->start;
  for (u = r->u0; u < r->u0 + r->nu; u++)
    hist_append (u, id);
  if (client >= 0)
    sim->inflight[client] = 0;
}

struct model_flush
model_flush_begin (void)
{
  struct model_flush b;

  b.clock = model_tick ();
  b.seq = sim->ack_seq;
  return b;
}

void
model_flush_ok (struct model_flush begin)
{
  if (begin.seq > sim->durable_seq)
    sim->durable_seq = begin.seq;
  if (begin.clock > sim->durable_clock)
    sim->durable_clock = begin.clock;
}

static bool
covers (const struct sim_rec *r, uint32_t u)
{
  return u >= r->u0 && u < r->u0 + r->nu;
}

/* Does value v at unit u belong to what a read that began at ts may
 * return?  -1: the model cannot tell (history lost), 1 yes, 0 no.
 */
static int
read_allows (uint32_t u, int64_t v, uint64_t ts)
{
  const struct sim_unit_hist *h = &sim->hist[u];
  uint32_t n = h->total < SIM_HIST ? h->total : SIM_HIST, i;
  const struct sim_rec *p = NULL;
  int c;

  for (c = 0; c < SIM_MAX_CLIENTS; c++)
    if (sim->inflight[c] && covers (rec (sim->inflight[c]), u) &&
        rec (sim->inflight[c])->value == v)
      return 1;
  for (i = 0; i < n; i++) {
    const struct sim_rec *r = rec (h->ids[(h->total - 1 - i) % SIM_HIST]);

    if (p == NULL) {
      if (r->value == v)
        return 1;
      if (r->end < ts && !r->failed)
        p = r;
    }
    else {
      if (r->end <= p->start)
        return 0;
      if (r->value == v)
        return 1;
    }
  }
  return h->total > SIM_HIST ? -1 : 0;
}

/* A unit after a restart: newest first, back to the newest durable
 * write and those concurrent with it; orphans too.
 */
static int
crash_allows (uint32_t u, int64_t v)
{
  const struct sim_unit_hist *h = &sim->hist[u];
  uint32_t n = h->total < SIM_HIST ? h->total : SIM_HIST, i;
  const struct sim_rec *d = NULL;

  for (i = 0; i < n; i++) {
    const struct sim_rec *r = rec (h->ids[(h->total - 1 - i) % SIM_HIST]);

    if (d && r->end <= d->start)
      return 0;
    if (r->value == v)
      return 1;
    if (d == NULL && durable (r))
      d = r;
  }
  /* The history kept ends before a write that ended before D began:
   * older writes, acknowledged before D but concurrent with it, may
   * hold v.
   */
  return d && h->total <= SIM_HIST ? 0 : -1;
}

/* Was v the only value a read of u that began at ts could return?  If
 * not, the read settled which of the unordered writes came last, and
 * everything after must agree (observe()).
 */
static bool
settled (uint32_t u, int64_t v, uint64_t ts)
{
  const struct sim_unit_hist *h = &sim->hist[u];
  const struct sim_rec *newest = rec (h->ids[(h->total - 1) % SIM_HIST]);
  int c;

  if (newest->value != v || newest->end >= ts || newest->failed)
    return false;
  if (h->total > 1) {
    const struct sim_rec *prev = rec (h->ids[(h->total - 2) % SIM_HIST]);
    if (prev->end > newest->start && prev->value != v)
      return false;
  }
  for (c = 0; c < SIM_MAX_CLIENTS; c++)
    if (sim->inflight[c] && covers (rec (sim->inflight[c]), u) &&
        rec (sim->inflight[c])->value != v)
      return false;
  return true;
}

/* A read that found v where writes were unordered: from now on the
 * unit holds v or something newer (linearizability), so a store that
 * later holds the other write's data, while RAM served v, is caught.
 * Noted as an alias record, answered now.
 */
static void
observe (uint32_t u, int64_t v, uint64_t ts)
{
  const struct sim_unit_hist *h = &sim->hist[u];
  uint32_t n = h->total < SIM_HIST ? h->total : SIM_HIST, i, id;
  bool found = false;
  int c;

  /* Only when every write over the unit had been answered before the
   * read began (a read overlapping a write may have come before it).
   * A failed write whose data a read found counts too: the engine
   * keeps it in RAM and retries it (writethrough), so it is the
   * device's content from then on.
   */
  for (c = 0; c < SIM_MAX_CLIENTS; c++)
    if (sim->inflight[c] && covers (rec (sim->inflight[c]), u))
      return;
  for (i = 0; i < n; i++) {
    const struct sim_rec *r = rec (h->ids[(h->total - 1 - i) % SIM_HIST]);
    if (r->end >= ts)
      return;
    if (r->value == v)
      found = true;
  }
  if (!found)
    return;
  id = new_rec (REC_ALIAS, u, 1);

  rec (id)->value = (uint32_t) v;
  rec (id)->start = rec (id)->end = model_tick ();
  rec (id)->ack = ++sim->ack_seq;
  hist_append (u, id);
}

static void
explain (char *out, size_t len, uint32_t u)
{
  const struct sim_unit_hist *h = &sim->hist[u];
  uint32_t n = h->total < SIM_HIST ? h->total : SIM_HIST, i;
  size_t o = 0;

  for (i = 0; i < n && o < len - 60; i++) {
    uint32_t id = h->ids[(h->total - 1 - i) % SIM_HIST];
    const struct sim_rec *r = rec (id);
    o += snprintf (out + o, len - o, " #%u(%s v%u t%" PRIu64 "-%" PRIu64
                   "%s%s)", id, r->kind == REC_ZERO ? "zero" :
                   r->kind == REC_ALIAS ? "found" : "data", r->value,
                   r->start, r->end, durable (r) ? " durable" : "",
                   r->failed ? " failed" : "");
  }
}

void
model_check_read (const uint8_t *buf, uint32_t u0, uint32_t n, uint64_t ts,
                  const char *what, bool client)
{
  uint32_t i;

  for (i = 0; i < n; i++) {
    int64_t v = decode (buf + (size_t) i * SIM_UNIT, u0 + i);
    char why[1200];

    if (v < 0)
      sim_fail ("%s: unit %u (byte %" PRIu64 ") holds garbage (no whole "
                "write's data)", what, u0 + i, (uint64_t) (u0 + i) * SIM_UNIT);
    if (read_allows (u0 + i, v, ts) == 0) {
      explain (why, sizeof why, u0 + i);
      sim_fail ("%s: unit %u (byte %" PRIu64 ") reads the data of #%"
                PRId64 ", not allowed; its writes, newest first:%s", what,
                u0 + i, (uint64_t) (u0 + i) * SIM_UNIT, v, why);
    }
    if (client && !settled (u0 + i, v, ts))
      observe (u0 + i, v, ts);
    sim->reads_checked++;
  }
}

void
model_orphan_inflight (void)
{
  int c;

  for (c = 0; c < SIM_MAX_CLIENTS; c++)
    if (sim->inflight[c]) {
      rec (sim->inflight[c])->orphan = 1;
      sim->inflight[c] = 0;
    }
}

void
model_check_recovered (const uint8_t *buf, const char *what)
{
  uint32_t u, id;
  uint64_t t = model_tick ();

  for (u = 0; u < sim->nunits; u++) {
    int64_t v = decode (buf + (size_t) u * SIM_UNIT, u);
    const struct sim_unit_hist *h = &sim->hist[u];
    bool orphan = false;
    uint32_t i;
    char why[1200];

    if (v < 0)
      sim_fail ("%s: unit %u (byte %" PRIu64 ") holds garbage after the "
                "restart", what, u, (uint64_t) u * SIM_UNIT);
    if (v == rec (h->ids[(h->total - 1) % SIM_HIST])->value)
      continue;                 /* the newest: nothing lost */
    /* An orphan's data (a write whose process died) may be there. */
    for (i = sim->nrecs; i-- > 1 && !orphan; )
      orphan = rec (i)->orphan && covers (rec (i), u) &&
        rec (i)->value == v;
    if (!orphan && crash_allows (u, v) == 0) {
      explain (why, sizeof why, u);
      sim_fail ("%s: unit %u (byte %" PRIu64 ") holds the data of #%"
                PRId64 " after the restart: a write made durable was "
                "lost; its writes, newest first:%s", what, u,
                (uint64_t) u * SIM_UNIT, v, why);
    }
    id = new_rec (REC_ALIAS, u, 1);
    rec (id)->value = (uint32_t) v;
    rec (id)->rebase = 1;
    rec (id)->start = rec (id)->end = t;
    rec (id)->ack = ++sim->ack_seq;
    hist_append (u, id);
  }
}

void
model_check_durable (const uint8_t *img, uint32_t u, const char *what)
{
  int64_t v = decode (img + (size_t) u * SIM_UNIT, u);
  char why[1200];
  int c;

  if (v < 0)
    sim_fail ("%s: unit %u (byte %" PRIu64 ") holds garbage", what, u,
              (uint64_t) u * SIM_UNIT);
  for (c = 0; c < SIM_MAX_CLIENTS; c++)
    if (sim->inflight[c] && covers (rec (sim->inflight[c]), u) &&
        rec (sim->inflight[c])->value == v)
      return;
  if (crash_allows (u, v) == 0) {
    uint32_t i;

    /* A write whose process died may land any time (it is in a cache). */
    for (i = sim->nrecs; i-- > 1; )
      if (rec (i)->orphan && covers (rec (i), u) && rec (i)->value == v)
        return;
    explain (why, sizeof why, u);
    sim_fail ("%s: unit %u (byte %" PRIu64 ") now holds the data of #%"
              PRId64 ", older than a write made durable; a power cut now "
              "would lose it; its writes, newest first:%s", what, u,
              (uint64_t) u * SIM_UNIT, v, why);
  }
}

/* ---- journal: one point in time ---- */

/* The times a unit's value v allows, as closed ranges [lo, hi] of x
 * (T lies between logical ticks x and x+1): for each record c in its
 * history that may be what it holds, T is after c began (x >= start)
 * and before any write w over the unit that began after c ended has
 * ended (x < w.end): such a w, answered before T, would be in the
 * content at T.  A value the read of a unit settled counts from the
 * write that put it there; what a restart found, from the restart.
 * Returns the number of ranges, or -1 if the model cannot tell.
 */
struct pit_range { uint64_t lo, hi; };

static int
pit_ranges (uint32_t u, int64_t v, struct pit_range *out,
            const uint32_t *orphans, uint32_t norphans)
{
  const struct sim_unit_hist *h = &sim->hist[u];
  uint32_t n = h->total < SIM_HIST ? h->total : SIM_HIST, i, k;
  int nr = 0;

  /* A write whose process died, unordered from its start on.  Zeroes
   * are one value for every zero request: of several over the unit
   * (two clients' zeroes in flight at the crash), the one that began
   * first, not the newest, says from when the unit may hold them.
   */
  {
    uint64_t first = UINT64_MAX;

    for (i = 0; i < norphans; i++)
      if (rec (orphans[i])->value == v && covers (rec (orphans[i]), u) &&
          rec (orphans[i])->start < first)
        first = rec (orphans[i])->start;
    if (first != UINT64_MAX)
      out[nr++] = (struct pit_range) { first, UINT64_MAX };
  }
  for (i = 0; i < n; i++) {
    const struct sim_rec *c = rec (h->ids[(h->total - 1 - i) % SIM_HIST]);
    uint64_t start = c->start, end = c->end, hi = UINT64_MAX;

    if (c->value != v)
      continue;
    if (c->kind == REC_ALIAS && !c->rebase && v > 0)
      start = rec ((uint32_t) v)->start;
    for (k = 0; k < i; k++) {
      const struct sim_rec *w = rec (h->ids[(h->total - 1 - k) % SIM_HIST]);
      if (!w->failed && w->value != v && w->start > end && w->end &&
          w->end - 1 < hi)
        hi = w->end - 1;
    }
    if (start <= hi)
      out[nr++] = (struct pit_range) { start, hi };
  }
  if (h->total > SIM_HIST) {
    /* A write older than the history kept, acknowledged before its
     * oldest entry: the entries that began after that one ended began
     * after it too.
     */
    const struct sim_rec *o = rec (h->ids[h->total % SIM_HIST]);
    uint64_t hi = UINT64_MAX;

    for (k = 0; k < n; k++) {
      const struct sim_rec *w = rec (h->ids[(h->total - 1 - k) % SIM_HIST]);
      if (!w->failed && w->value != v && w->start > o->end && w->end &&
          w->end - 1 < hi)
        hi = w->end - 1;
    }
    out[nr++] = (struct pit_range) { 0, hi };
  }
  if (nr == 0 && v == 0)
    return -1;                  /* an orphan's zeroes, further back */
  return nr;
}

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

  return x < y ? -1 : x > y;
}

void
model_check_point_in_time (const uint8_t *buf, const char *what)
{
  uint32_t nu = sim->nunits, u, nc = 0, j;
  struct pit_range *r = malloc ((size_t) nu * (SIM_HIST + 2) *
                                sizeof *r);
  int *nr = malloc ((size_t) nu * sizeof *nr);
  uint64_t *cand = malloc (((size_t) nu * (SIM_HIST + 2) + 1) *
                           sizeof *cand);
  uint64_t floor = sim->durable_clock;
  uint32_t orphans[64], norphans = 0, o;

  if (r == NULL || nr == NULL || cand == NULL)
    sim_fail ("out of memory");
  for (o = sim->nrecs; o-- > 1 && norphans < 64; )
    if (rec (o)->orphan)
      orphans[norphans++] = o;
  cand[nc++] = floor;
  for (u = 0; u < nu; u++) {
    int64_t v = decode (buf + (size_t) u * SIM_UNIT, u);
    int i;

    nr[u] = v < 0 ? -1 : pit_ranges (u, v, r + (size_t) u * (SIM_HIST + 2),
                                     orphans, norphans);
    for (i = 0; i < nr[u]; i++)
      if (r[(size_t) u * (SIM_HIST + 2) + i].lo > floor)
        cand[nc++] = r[(size_t) u * (SIM_HIST + 2) + i].lo;
  }
  qsort (cand, nc, sizeof *cand, cmp_u64);
  /* The earliest x that every unit allows, if any: one of the ranges'
   * starts (or the floor).
   */
  for (j = 0; j < nc; j++) {
    uint64_t x = cand[j];
    bool all = true;

    if (j > 0 && cand[j - 1] == x)
      continue;
    for (u = 0; u < nu && all; u++) {
      int i;
      bool any = nr[u] < 0;
      for (i = 0; i < nr[u] && !any; i++)
        any = r[(size_t) u * (SIM_HIST + 2) + i].lo <= x &&
          x <= r[(size_t) u * (SIM_HIST + 2) + i].hi;
      all = any;
    }
    if (all) {
      free (r);
      free (nr);
      free (cand);
      return;
    }
  }
  /* None: name a unit that allows nothing at or after the floor, or
   * two whose ranges do not meet: the one whose earliest time at or
   * after the floor is latest, and the one whose latest is earliest
   * (ranges wholly before the floor left out: a unit that may hold a
   * value from long ago, or only from the newest write, is not bounded
   * from below by the old range).
   */
  {
    char why[700], whyb[700];
    uint32_t a = nu, b = nu;
    uint64_t alo = 0, bhi = UINT64_MAX;

    for (u = 0; u < nu; u++) {
      int i;
      uint64_t lo = UINT64_MAX, hi = 0;
      if (nr[u] < 0)
        continue;
      for (i = 0; i < nr[u]; i++) {
        const struct pit_range *g = &r[(size_t) u * (SIM_HIST + 2) + i];
        if (g->hi < floor)
          continue;
        lo = RB_MIN (lo, RB_MAX (g->lo, floor));
        hi = RB_MAX (hi, g->hi);
      }
      if (nr[u] == 0 || hi < floor) {
        a = b = u;
        break;
      }
      if (a == nu || lo > alo) {
        a = u;
        alo = lo;
      }
      if (b == nu || hi < bhi) {
        b = u;
        bhi = hi;
      }
    }
    if (a == nu)
      a = b = 0;
    explain (why, sizeof why, a);
    explain (whyb, sizeof whyb, b);
    sim_fail ("%s: with journal= the device is no point in time no older "
              "than the last FLUSH (began at t%" PRIu64 "): unit %u holds "
              "#%" PRId64 " (from t%" PRIu64 " on), unit %u holds #%" PRId64
              " (until t%" PRIu64 "); unit %u's writes, newest first:%s; "
              "unit %u's:%s", what, floor, a,
              decode (buf + (size_t) a * SIM_UNIT, a), alo, b,
              decode (buf + (size_t) b * SIM_UNIT, b), bhi, a, why, b, whyb);
  }
}
