/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback-sim: deterministic simulation of the engine.
 *
 *   ramback-sim --seed=N [--ops=M]      one seed: its trace hash, PASS/FAIL
 *   ramback-sim --seconds=S [--seed=N]  successive seeds for S seconds
 *   ramback-sim --seeds=K [--seed=N]    K successive seeds
 *   ramback-sim --seed=N --twice        run it twice, compare trace hashes
 *
 * The engine (lib/, built against lib/env/sim) runs with its real
 * threads as fibers under the seeded scheduler of env-sim.c, on
 * simulated disks (sim-world.c), driven by client fibers and a nemesis
 * (this file), checked against the model (sim-model.c).  See
 * docs/ramback-sim.pod.
 *
 * The seed chooses everything: the configuration (chunk size, device
 * size with its partial last chunk, journal=, ram=, fsync=, dirty-max=,
 * flush-delay=, ...), the scheduler's switch rate, the workload, the
 * faults and their timing.  A run is a sequence of lifetimes, each a
 * forked process (sim.h): a crash ends one at a scheduling point, a
 * power cut also applies the disks' cache rules and removes ram=.
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "control.h"
#include "internal.h"
#include "ramback.h"
#include "sim.h"
#include "splitmix.h"

struct sim_shared *sim;

static bool quiet;              /* no trace on failure (shrinking) */

/* ---- trace ---- */

static void
trace_line (bool hash, const char *fmt, va_list ap)
{
  char *line = sim->trace[sim->ntrace % SIM_TRACE_LINES];
  int n = snprintf (line, SIM_TRACE_LEN, "[%u %" PRIu64 "ms %s] ",
                    sim->lifetime, (rb_now_ns () - UINT64_C (1000000000))
                    / 1000000, sim_task_name ());
  const char *p;

  if (n < 0 || n >= SIM_TRACE_LEN)
    n = 0;
  vsnprintf (line + n, SIM_TRACE_LEN - n, fmt, ap);
  sim->ntrace++;
  if (hash)
    for (p = line + n; *p; p++)
      sim_hash ((uint8_t) *p);
  if (sim->cfg.verbose)
    fprintf (stderr, "%s\n", line);
}

void
sim_trace (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  trace_line (true, fmt, ap);
  va_end (ap);
}

static void
trace_log (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  trace_line (false, fmt, ap);
  va_end (ap);
}

/* The engine's messages: traced, not hashed (they may carry errno
 * text that another fiber's error replaced, env-impl.h).
 */
static void
log_fn (enum rb_log_level level, const char *msg)
{
  (void) level;
  trace_log ("log: %s", msg);
}

/* ---- the child's hooks ---- */

static uint64_t crash_at = UINT64_MAX;
static int crash_kind;
static uint64_t last_progress_ns;
#define LIVENESS_NS (UINT64_C (3600) * 1000000000)

static void limit_track (void);

static void
point_hook (uint64_t point)
{
  if (point >= crash_at) {
    sim->end = crash_kind;
    sim->hash = sim_hash_value ();
    sim->points_total += point;
    _exit (3);
  }
  if (rb_now_ns () - last_progress_ns > LIVENESS_NS)
    sim_fail ("no progress for %" PRIu64 " simulated seconds%s",
              LIVENESS_NS / 1000000000,
              sim->stop_started_ns ? " during a clean stop" : "");
  limit_track ();
}

static void
fail_hook (const char *msg)
{
  snprintf (sim->fail_msg, sizeof sim->fail_msg, "%s", msg);
  sim->fail_ops = sim->ops_started;
  sim->hash = sim_hash_value ();
}

/* ---- configuration from the seed ---- */

#define PICK(n) (rb_splitmix64 (&s) % (n))

static void
choose_cfg (struct sim_cfg *c, uint64_t seed, uint64_t ops)
{
  static const uint32_t chunks[] = { 512, 1024, 4096, 8192, 16384, 65536 };
  static const unsigned switches[] = { 20, 100, 300, 700 };
  uint64_t s = seed * 7919 + 17, units;

  memset (c, 0, sizeof *c);
  c->seed = seed;
  c->ops = ops;
  c->chunk_size = chunks[PICK (6)];
  /* 4 to 40 chunks (at most 2 MiB), often with a partial last one. */
  units = (c->chunk_size / SIM_UNIT) * (4 + PICK (37));
  if (units > 4096)
    units = 4096;
  if (c->chunk_size > SIM_UNIT && PICK (2))
    units -= 1 + PICK (c->chunk_size / SIM_UNIT - 1);
  c->size = units * SIM_UNIT;
  c->clients = 1 + PICK (SIM_MAX_CLIENTS);
  c->fsync_wait = PICK (5) != 0;
  c->writethrough = PICK (5) == 0;
  c->journal = PICK (5) < 2;
  c->ram = PICK (2);
  c->populate = PICK (4) != 0;
  c->dirty_max = PICK (3) == 0 ? (uint64_t) c->chunk_size * (2 + PICK (16)) : 0;
  c->ups_window = c->dirty_max && PICK (2) ? 1 + PICK (30) : 0;
  c->flush_delay_ms = c->journal || PICK (2) ? 0 : 1 + PICK (500);
  c->commit_interval_ms = c->journal ? RB_MIN_COMMIT_INTERVAL_MS + PICK (2000) : 0;
  c->flush_rate = PICK (4) == 0 ? (1 + PICK (64)) << 20 : 0;
  c->populate_rate = PICK (4) == 0 ? (1 + PICK (64)) << 20 : 0;
  c->switch_permille = switches[PICK (4)];
  c->spurious_permille = PICK (3) == 0 ? 10 : 0;
  c->journal_size = (UINT64_C (1) << 20) + 4096 * PICK (256);
  c->can_fua = PICK (2);
  c->crash_permille = (unsigned[]) { 0, 15, 40, 80 }[PICK (4)];
  /* Picked last, so that the picks above stay what they were for the
   * seeds before it.  ram-size= needs 16 chunks, and dirty-max= below
   * it.  With journal= only even seeds pick it: the odd ones keep the
   * configuration they had before journal= worked with ram-size=
   * (1169 found a journal bug with the whole device in RAM).
   */
  {
    uint64_t nchunks = (c->size + c->chunk_size - 1) / c->chunk_size;

    if (nchunks > 17 && (!c->journal || seed % 2 == 0) && PICK (2)) {
      c->ram_size = (16 + PICK (nchunks - 17)) * (uint64_t) c->chunk_size;
      /* With journal= a request goes into RAM whole, beside the dirty
       * data: rb_open refuses a dirty-max= that leaves room for fewer
       * than two chunks (slots.c, journal_room).
       */
      if (c->dirty_max >= c->ram_size ||
          (c->journal && c->dirty_max > c->ram_size - 2 * c->chunk_size))
        c->dirty_max = c->ram_size / 2;
    }
  }
  /* After the ram-size= picks, for the same reason. */
  c->crash_open = c->crash_permille && PICK (2);
  /* dirty-expire= (cold first, flush.c): off, the default, or short
   * enough that the age bound comes into play within a run.  Last, for
   * the same reason.
   */
  c->dirty_expire_ms = (uint32_t[]) { 0, 30000, 0 }[PICK (3)];
  if (c->dirty_expire_ms == 0 && PICK (2))
    c->dirty_expire_ms = 1 + PICK (2000);
  /* journal=: a pass leaves the newest transactions queued only while
   * nobody waits for the store and the journal is under a quarter
   * full; the nemesis's syncs and mode switches (a few every 50 ms)
   * ask for haste nearly always.  Calm seeds start in writeback mode,
   * make an eighth of the syncs and UPS events, switch to writethrough
   * an eighth of the time, and have a journal of eight times the
   * device (up to 8 MiB).  Last, for the same reason.
   */
  c->calm = c->journal && PICK (2) == 0;
  if (c->calm) {
    c->writethrough = false;
    /* A pass also keeps nothing back over a quarter of the journal. */
    uint64_t j = 8 * c->size < (UINT64_C (8) << 20)
      ? 8 * c->size : UINT64_C (8) << 20;

    if (c->journal_size < j)
      c->journal_size = j;
  }
}

/* A crash in a restart's recovery (crash_open): the nemesis arms its
 * crashes only while the workload runs, so without this no lifetime
 * ends inside rb_open and rb_start, where the journal is replayed and
 * the RAM image resumed (and, with journal=, compared with the store):
 * a crash there must leave what the next start can recover, and it
 * must start.  Half of the lifetimes after a crash or power cut arm
 * one within their first 16 to 2048 scheduling points (an open takes
 * some tens to about a thousand), from a draw of their own: the
 * scheduler's PRNG, hence the rest of the run, is the same whether or
 * not it fires.  Disarmed once the engine is started.
 */
static void
arm_crash_in_open (void)
{
  uint64_t s = sim->cfg.seed * UINT64_C (0x100000001b3) + sim->lifetime;
  uint64_t h = rb_splitmix64 (&s), window;

  if (!sim->cfg.crash_open || sim->lifetime == 0 || h % 2)
    return;
  window = UINT64_C (8) << (1 + (h >> 1) % 8);
  crash_kind = (h >> 4) % 2 ? END_POWER_CUT : END_CRASH;
  crash_at = sim_points () + 1 + (h >> 8) % window;
  sim_trace ("%s armed in the open, at point %" PRIu64,
             crash_kind == END_CRASH ? "crash" : "power cut", crash_at);
}

/* ---- the engine ---- */

static struct rb *rb;
static struct rb *idle_rb;      /* the engine, while it runs (idle_check) */
/* The dirty limit (limit_track, limit_check) */
static bool limit_armed;        /* T is meaningful */
static uint64_t limit_failures; /* disk failures seen at the last point */
static bool limit_failed;       /* not armed again since a failure */
static uint64_t limit_owed;     /* chunks of the requests that may have
                                   passed the throttle since T */
static uint32_t limit_counted[SIM_MAX_CLIENTS]; /* in limit_owed */
static bool limit_fua[SIM_MAX_CLIENTS]; /* a FUA request, fsync=wait */
static uint64_t limit_rewrites; /* rb->rewrites_passed, last seen */
static bool stop_clients;
static rb_thread client_threads[SIM_MAX_CLIENTS];

static void
path_of (char *buf, size_t len, const char *name)
{
  snprintf (buf, len, "%s/%s", sim->dir, name);
}

static void
open_engine (void)
{
  static char ram[300], journal[300];
  struct rb_config c = { 0 };
  const struct sim_cfg *k = &sim->cfg;

  path_of (ram, sizeof ram, "ram");
  path_of (journal, sizeof journal, "journal");
  c.store.uri = "sim:back";
  c.store_override = sim_disk_store (&sim->back);
  c.chunk_size = k->chunk_size;
  c.mode = k->writethrough ? RB_MODE_WRITETHROUGH : RB_MODE_WRITEBACK;
  c.fsync_wait = k->fsync_wait;
  c.dirty_max = k->dirty_max;
  c.ups_window = k->ups_window;
  c.flush_delay_ms = k->flush_delay_ms;
  c.dirty_expire_ms = k->dirty_expire_ms;
  c.flush_rate = k->flush_rate;
  c.populate_rate = k->populate_rate;
  c.populate = k->populate;
  c.ram = k->ram ? ram : NULL;
  c.journal = k->journal ? journal : NULL;
  c.commit_interval_ms = k->commit_interval_ms;
  c.allow_overcommit = true;
  c.ram_size = k->ram_size;
  sim_trace ("open (lifetime %u): size %" PRIu64 " chunk %" PRIu32
             " %s fsync=%s%s%s dirty-max=%" PRIu64 " flush-delay=%" PRIu32
             " dirty-expire=%" PRIu32 " clients %d switch %u ram-size=%"
             PRIu64, sim->lifetime,
             k->size, k->chunk_size,
             k->writethrough ? "writethrough" : "writeback",
             k->fsync_wait ? "wait" : "ignore",
             k->calm ? " journal calm" : k->journal ? " journal" : "",
             k->ram ? " ram" : "", k->dirty_max, k->flush_delay_ms,
             k->dirty_expire_ms, k->clients, k->switch_permille, k->ram_size);
  rb = rb_open (&c);
  if (rb == NULL)
    sim_fail ("rb_open failed: %s", rb_get_error ());
  if (rb_start (rb) == -1)
    sim_fail ("rb_start failed: %s", rb_get_error ());
  idle_rb = rb;
  limit_armed = false;
  limit_failed = false;
}

/* Read the whole device and check it against what a restart may find. */
static void
check_recovered (const char *what, bool crash)
{
  uint8_t *buf = malloc (sim->cfg.size);

  if (buf == NULL)
    sim_fail ("out of memory");
  if (rb_pread (rb, buf, sim->cfg.size, 0) == -1)
    sim_fail ("%s: reading the device failed: %s", what, rb_get_error ());
  if (sim->cfg.journal && crash)
    model_check_point_in_time (buf, what);
  model_check_recovered (buf, what);
  free (buf);
}

/* Status counters: none has gone below zero (wrapped), and those the
 * chunk map bounds stay within it.  With journal= a chunk counts as in
 * flight once per transaction that holds it (a committed one waiting
 * for its in-place write, and the one capturing it again), so there
 * inflight_chunks may exceed the chunk count.
 */
static void
check_stats (void)
{
  struct rb_stats st;
  const uint64_t neg = UINT64_C (1) << 62;
  uint64_t whole;

  rb_get_stats (rb, &st);
  sim->jdeferred_life = st.journal_deferred_bytes;
  whole = st.chunks * st.chunk_size;
  if (st.dirty_chunks > st.chunks || st.loaded_chunks > st.chunks ||
      (!sim->cfg.journal && st.inflight_chunks > st.chunks) ||
      st.inflight_chunks > neg ||
      /* Whole chunks, the partial last one too (stats.c). */
      st.dirty_bytes > whole ||
      (!sim->cfg.journal && st.inflight_bytes > whole) ||
      st.unsynced_bytes > neg || st.journal_used_bytes > neg ||
      st.journal_data_bytes > neg)
    sim_fail ("status counters out of range: dirty_chunks %" PRIu64
              " loaded_chunks %" PRIu64 " inflight_chunks %" PRIu64
              " of %" PRIu64 "; dirty_bytes %" PRIu64 " inflight_bytes %"
              PRIu64 " unsynced_bytes %" PRIu64 " journal_used_bytes %"
              PRIu64, st.dirty_chunks, st.loaded_chunks, st.inflight_chunks,
              st.chunks, st.dirty_bytes, st.inflight_bytes,
              st.unsynced_bytes, st.journal_used_bytes);
}

/* The chunk map at rest (sim_idle_hook: every fiber blocked, so none
 * is between a map's compare-and-swap and the counter or hint that
 * follows it): its counters equal what its states and bits say, and
 * every word holding a DIRTY or ZERO chunk has its dirty hint at every
 * level (else the flusher or the committer never finds it).  Plain
 * reads: no scheduling point.
 */

static bool
hint_set (const struct sumbits *sb, uint64_t i)
{
  unsigned l;

  for (l = 0; l < sb->levels; l++, i /= 64)
    if (!((sb->bits[l][i / 64] >> (i % 64)) & 1))
      return false;
  return true;
}

/* The dirty limit (dirty-max=; docs/nbdkit-ramback-plugin.pod, "DIRTY
 * LIMIT"): the data held only in RAM or not yet durable, as io.c's
 * throttle counts it,
 *
 *   D = (dirty chunks + chunks in flight to the store) * chunk size
 *       + bytes written back but not yet synced,
 *
 * grows only by client requests, and a throttled request (a write,
 * zero or trim in writeback mode, not FUA with fsync=wait) waits while
 * D >= dirty-max before it changes anything.  The bound, checked at
 * rest (every fiber blocked: no counter is half updated), is
 *
 *   D < dirty-max + owed,
 *
 * where owed, reset whenever D is below the limit at rest (T), sums
 * over the requests that may have changed D since T: those in progress
 * at T, those in progress at any scheduling point since at which D was
 * below the limit (the flusher moves chunks out of DIRTY before it
 * counts them in flight, so D dips by a batch meanwhile, and the
 * throttle's own reads see the dip), and those not throttled
 * (writethrough mode at that point, or FUA with fsync=wait; their
 * bytes count as unsynced), each twice its chunks (limit_span).  This
 * is the engine's "exceeded by at most the writes in progress at once".
 *
 * With journal= the committer, not the flusher, drains the dirty
 * data, and counts the sectors a transaction takes in flight (before
 * they leave the dirty count: no dip) until it is in place, each
 * sector once however many transactions hold it (rbi_txn_check_held).
 * Not checked where D grows with no request:
 *   - with ups-window=, whose limit moves with the measured bandwidth
 *     (a limit that drops leaves D above it);
 *   - after a failed write or sync on either disk: a failed sync
 *     re-dirties everything written since the last good one, and
 *     unsynced bytes (sectors) come back as whole dirty chunks;
 *   - at the start of a lifetime: a resumed ram= image or a replayed
 *     journal brings back what the previous process held, and the
 *     requests that put it there died with it.
 * In those cases the check is armed again once D is below the limit at
 * rest.
 */

/* D as io.c counts it (rbi_dirty_bytes, rbi_inflight_bytes), from the
 * fields themselves: their atomic loads are scheduling points.
 */
static uint64_t
limit_dirty (void)
{
  const struct chunkmap *cm = &idle_rb->map;
  uint64_t whole = cm->dirty << idle_rb->chunk_shift, s;

  if (cm->sect == NULL)
    return whole;
  s = (cm->sect_set + cm->zero) << idle_rb->sector_shift;
  return s < whole ? s : whole;
}

static uint64_t
limit_inflight (void)
{
  return idle_rb->inflight_bytes;
}

static uint64_t
limit_d (void)
{
  return limit_dirty () + limit_inflight () + idle_rb->unsynced_bytes;
}

/* What one request may add to D: its chunks twice.  A request dirties
 * its chunks before RAM changes (premark_dirty: everything with ram=,
 * a zero's whole chunks) and again after (mark_dirty), and the flusher
 * may take them in flight in between.
 */
static uint64_t
limit_span (const struct sim_rec *r)
{
  uint64_t cs = idle_rb->chunk_size, cu = cs / SIM_UNIT;

  return 2 * ((r->u0 + r->nu - 1) / cu - r->u0 / cu + 1) * cs;
}

/* Count the requests in progress now (only the unthrottled ones if
 * unthrottled), each once: all of them after a reset (at rest, D below
 * the limit: T), else the ones not counted yet.
 */
static void
limit_owe (bool reset, bool unthrottled)
{
  int c;

  if (reset)
    limit_owed = 0;
  for (c = 0; c < SIM_MAX_CLIENTS; c++) {
    if (sim->inflight[c] == 0 || (unthrottled && !limit_fua[c]) ||
        (!reset && limit_counted[c] == sim->inflight[c]))
      continue;
    limit_owed += limit_span (&sim->recs[sim->inflight[c]]);
    limit_counted[c] = sim->inflight[c];
  }
}

static bool
limit_applies (void)
{
  return idle_rb != NULL && sim->cfg.dirty_max != 0 &&
    !sim->cfg.ups_window;
}

/* Every scheduling point: a request in progress while D is below the
 * limit may pass the throttle.
 */
static void
limit_track (void)
{
  uint64_t failures;

  if (!limit_applies ())
    return;
  failures = sim->back.failures + sim->jdev.failures;
  if (failures != limit_failures) {
    limit_failures = failures;
    limit_armed = false;
    limit_failed = true;
  }
  /* Writethrough (the mode is read once per request) and FUA writes
   * with fsync=wait do not wait for the throttle: they count whatever D
   * is.  They add their bytes as unsynced.  Nor does a rewrite of
   * sectors all dirty (io.c, all_dirty), which adds to D if write back
   * takes them before it marks them: seen by the engine's count of
   * them, which rises before the request goes on.
   */
  if (limit_armed && (limit_d () < sim->cfg.dirty_max ||
                      idle_rb->mode == RB_MODE_WRITETHROUGH ||
                      idle_rb->rewrites_passed != limit_rewrites))
    limit_owe (false, false);
  else if (limit_armed)
    limit_owe (false, true);
  limit_rewrites = idle_rb->rewrites_passed;
}

/* At rest. */
static void
limit_check (void)
{
  uint64_t d;

  limit_track ();
  if (!limit_applies ())
    return;
  d = limit_d ();
  /* After a failure, what it puts back to dirty may weigh more than it
   * did in flight or unsynced (a zero request counts a sector a chunk,
   * a request stretched over a gap the gap's sectors: put back, all
   * their sectors), and the flusher puts it back one request at a time:
   * armed again only once nothing is in flight or unsynced.
   */
  if (d < sim->cfg.dirty_max &&
      (!limit_failed || (limit_inflight () == 0 &&
                         idle_rb->unsynced_bytes == 0))) {
    limit_failed = false;
    limit_armed = true;
    limit_owe (true, false);
  }
  else if (limit_armed && d >= sim->cfg.dirty_max + limit_owed)
    sim_fail ("at rest: over the dirty limit: %" PRIu64 " dirty bytes (%"
              PRIu64 " chunks of %" PRIu32 "), %" PRIu64 " in flight and %"
              PRIu64 " unsynced make %" PRIu64 ", dirty-max=%" PRIu64
              " plus %" PRIu64 " for the requests that may have passed "
              "the throttle since it was last below",
              limit_dirty (), idle_rb->map.dirty,
              idle_rb->chunk_size, limit_inflight (),
              idle_rb->unsynced_bytes, d, sim->cfg.dirty_max, limit_owed);
}

/* At rest, the dirty limit's count of dirty data (io.c,
 * rbi_dirty_bytes) is what the states and the sector bits say:
 * min (dirty chunks whole, (sector bits set + ZERO chunks) sectors),
 * counted here from the bits and the states, not the counters.
 */
static void
dirty_sectors_check (const struct chunkmap *cm, uint64_t dirty,
                     uint64_t zero)
{
  uint64_t w, nw, bits = 0, whole, want, got;

  nw = ((cm->nchunks << cm->sect_per_chunk_shift) + 63) / 64;
  for (w = 0; w < nw; w++)
    bits += __builtin_popcountll (cm->sect[w]);
  whole = dirty << idle_rb->chunk_shift;
  want = (bits + zero) << idle_rb->sector_shift;
  if (want > whole)
    want = whole;
  got = limit_dirty ();
  if (got != want)
    sim_fail ("at rest: the dirty limit counts %" PRIu64 " dirty bytes, "
              "the sector bits (%" PRIu64 ") and states (%" PRIu64
              " dirty, %" PRIu64 " ZERO) say %" PRIu64, got, bits, dirty,
              zero, want);
}

/* At rest, the resident sectors (the ram-size= budget, chunkmap.h) are
 * the V bits, and the V bits what the states and P say RAM holds: every
 * sector of a whole chunk, none of an EMPTY one, the loaded ones of a
 * partial one.
 */
static void
resident_check (const struct chunkmap *cm)
{
  unsigned shift = cm->sect_per_chunk_shift;
  uint64_t c, s, v = 0;

  for (c = 0; c < cm->nchunks; c++) {
    unsigned st = (cm->words[c / 32] >> (c % 32 * 2)) & 3;
    bool p = (cm->part[c / 64] >> (c % 64)) & 1;
    uint64_t n = 0, end = (c + 1) << shift;

    for (s = c << shift; s < end && s < cm->nsect; s++)
      n += (cm->valid[s / 64] >> (s % 64)) & 1;
    if (!p && st != CS_EMPTY && 
        n != (end < cm->nsect ? end : cm->nsect) - (c << shift))
      sim_fail ("at rest: whole chunk %" PRIu64 " has %" PRIu64 " of its "
                "sectors valid: the budget does not count all of them", c, n);
    if (!p && st == CS_EMPTY && n != 0)
      sim_fail ("at rest: EMPTY chunk %" PRIu64 " has %" PRIu64 " sectors "
                "valid", c, n);
    v += n;
  }
  if (v != cm->resident)
    sim_fail ("at rest: %" PRIu64 " resident sectors counted, %" PRIu64
              " valid", cm->resident, v);
}

static void
idle_check (void)
{
  const struct chunkmap *cm;
  uint64_t c, w, dirty = 0, loaded = 0, sect = 0, part = 0, nw, zero = 0;

  if (idle_rb == NULL)
    return;
  cm = &idle_rb->map;
  for (c = 0; c < cm->nchunks; c++) {
    unsigned st = (cm->words[c / 32] >> (c % 32 * 2)) & 3;

    if (st == CS_ZERO)
      zero++;
    if (st == CS_DIRTY || st == CS_ZERO) {
      dirty++;
      if (!hint_set (&cm->dirty_hint, c / 32))
        sim_fail ("at rest: chunk %" PRIu64 " is %s but its word has no "
                  "dirty hint: nothing finds it", c,
                  st == CS_DIRTY ? "DIRTY" : "ZERO");
    }
    if (st != CS_EMPTY)
      loaded++;
  }
  if (cm->sect) {
    nw = ((cm->nchunks << cm->sect_per_chunk_shift) + 63) / 64;
    for (w = 0; w < nw; w++)
      sect += __builtin_popcountll (cm->sect[w]);
  }
  if (cm->part)
    for (w = 0; w < (cm->nchunks + 63) / 64; w++)
      part += __builtin_popcountll (cm->part[w]);
  if (dirty != cm->dirty || loaded != cm->loaded ||
      (cm->sect && sect != cm->sect_set) ||
      (cm->part && part != cm->npartial))
    sim_fail ("at rest: the chunk map's counters disagree with its states: "
              "dirty %" PRIu64 " (states say %" PRIu64 "), loaded %" PRIu64
              " (%" PRIu64 "), sector bits %" PRIu64 " (%" PRIu64 "), "
              "partial %" PRIu64 " (%" PRIu64 ")", cm->dirty, dirty,
              cm->loaded, loaded, cm->sect_set, sect, cm->npartial, part);
  if (zero != cm->zero)
    sim_fail ("at rest: the chunk map counts %" PRIu64 " ZERO chunks, its "
              "states say %" PRIu64, cm->zero, zero);
  if (cm->sect)
    dirty_sectors_check (cm, dirty, zero);
  if (cm->part)
    resident_check (cm);
  if (idle_rb->txns && rbi_txn_check_held (idle_rb) == -1)
    sim_fail ("at rest: %s", rb_get_error ());
  if (idle_rb->inflight_chunks > (UINT64_C (1) << 62) ||
      idle_rb->unsynced_bytes > (UINT64_C (1) << 62))
    sim_fail ("at rest: a counter wrapped below zero: inflight_chunks %"
              PRIu64 " unsynced_bytes %" PRIu64, idle_rb->inflight_chunks,
              idle_rb->unsynced_bytes);
  limit_check ();
}

/* ---- clients ---- */

static void
pick_range (uint32_t *u0, uint32_t *nu)
{
  uint32_t n = sim->nunits, cu = sim->cfg.chunk_size / SIM_UNIT;
  uint32_t nchunks = (n + cu - 1) / cu, a, len;

  switch (sim_rand_below (10)) {
  case 0: case 1: case 2:       /* whole chunks */
    a = sim_rand_below (nchunks) * cu;
    len = cu * (1 + sim_rand_below (3));
    break;
  case 3: case 4:               /* across a chunk edge */
    a = sim_rand_below (nchunks) * cu;
    a = a > 2 ? a - sim_rand_below (3) : a;
    len = 1 + sim_rand_below (4);
    break;
  case 5:                       /* the (partial) last chunk */
    a = (nchunks - 1) * cu + sim_rand_below (cu);
    len = n;
    break;
  default:
    a = sim_rand_below (n);
    len = 1 + sim_rand_below (sim_rand_below (4) ? 8 : 128);
  }
  if (a >= n)
    a = n - 1;
  if (len > n - a)
    len = n - a;
  *u0 = a;
  *nu = len;
}

static const char *
flags_str (unsigned f)
{
  return (f & RB_FUA) ? (f & RB_FAST_ZERO ? " fua fast" : " fua")
    : (f & RB_FAST_ZERO ? " fast" : "");
}

static void
do_op (int c)
{
  uint32_t u0, nu, id;
  uint64_t off, len, ts;
  unsigned flags = 0, op = sim_rand_below (100);
  uint8_t *buf;
  int r;

  pick_range (&u0, &nu);
  /* journal= with ram-size=: a write longer than the largest request
   * is refused (it would not fit in RAM whole); a longer zero or trim
   * goes in pieces.
   */
  if (op >= 35 && op < 65 && rb_get_max_request (rb) != 0 &&
      nu > rb_get_max_request (rb) / SIM_UNIT)
    nu = rb_get_max_request (rb) / SIM_UNIT;
  off = (uint64_t) u0 * SIM_UNIT;
  len = (uint64_t) nu * SIM_UNIT;
  buf = malloc (len);
  if (buf == NULL)
    sim_fail ("out of memory");
  if (op < 35) {
    ts = model_tick ();
    r = rb_pread (rb, buf, len, off);
    model_tick ();
    sim_trace ("read %" PRIu64 "+%" PRIu64 " = %d", off, len, r);
    if (r == 0)
      model_check_read (buf, u0, nu, ts, "read", true);
  }
  else if (op < 65) {
    if (sim_rand_below (4) == 0)
      flags |= RB_FUA;
    limit_fua[c] = (flags & RB_FUA) && sim->cfg.fsync_wait;
    id = model_begin (c, REC_DATA, u0, nu);
    model_fill (id, u0, nu, buf);
    sim_trace ("write #%u %" PRIu64 "+%" PRIu64 "%s", id, off, len,
               flags_str (flags));
    r = rb_pwrite (rb, buf, len, off, flags);
    model_end (c, id, r == 0, (flags & RB_FUA) && sim->cfg.fsync_wait);
    sim_trace ("write #%u = %d", id, r);
  }
  else if (op < 82) {
    bool trim = sim_rand_below (3) == 0;

    if (sim_rand_below (5) == 0)
      flags |= RB_FUA;
    if (!trim && sim_rand_below (5) == 0)
      flags |= RB_FAST_ZERO;
    limit_fua[c] = (flags & RB_FUA) && sim->cfg.fsync_wait;
    id = model_begin (c, REC_ZERO, u0, nu);
    sim_trace ("%s #%u %" PRIu64 "+%" PRIu64 "%s", trim ? "trim" : "zero",
               id, off, len, flags_str (flags));
    r = trim ? rb_trim (rb, len, off, flags) : rb_zero (rb, len, off, flags);
    model_end (c, id, r == 0, (flags & RB_FUA) && sim->cfg.fsync_wait);
    sim_trace ("zero #%u = %d", id, r);
  }
  else if (op < 95) {
    struct model_flush b = model_flush_begin ();

    ts = sim->clock;
    r = rb_flush (rb);
    sim_trace ("flush = %d", r);
    if (r != 0 && !sim->cfg.fsync_wait)
      sim_fail ("FLUSH failed with fsync=ignore (it only asks for write "
                "back and returns at once): %s", rb_get_error ());
    if (r == 0 && sim->cfg.fsync_wait) {
      model_flush_ok (b);
      /* Without a journal the store itself is what FLUSH made durable. */
      if (!sim->cfg.journal)
        model_check_read (sim->back.durable, 0, sim->nunits, ts,
                          "the store's durable image after FLUSH", false);
    }
  }
  else {
    r = rb_cache (rb, len, off);
    sim_trace ("cache %" PRIu64 "+%" PRIu64 " = %d", off, len, r);
  }
  free (buf);
}

static void *
client (void *arg)
{
  int c = (int) (intptr_t) arg;
  static const char *names[] = { "c0", "c1", "c2", "c3" };

  sim_set_name (names[c]);
  while (!stop_clients && sim->ops_started < sim->cfg.ops) {
    sim->ops_started++;
    do_op (c);
    sim->ops_done++;
    last_progress_ns = rb_now_ns ();
    if (sim_rand_below (3) == 0)
      sim_sleep_ns (sim_rand_below (2000000));
  }
  return NULL;
}

static void
start_clients (void)
{
  int c;

  stop_clients = false;
  for (c = 0; c < sim->cfg.clients; c++)
    if (rb_thread_create (&client_threads[c], client,
                          (void *) (intptr_t) c) == -1)
      sim_fail ("cannot create a client");
}

static void
join_clients (void)
{
  int c;

  stop_clients = true;
  for (c = 0; c < sim->cfg.clients; c++)
    rb_thread_join (client_threads[c]);
}

/* ---- the nemesis ---- */

static void
clear_faults (void)
{
  sim->back.write_fail = sim->back.sync_fail = 0;
  sim->jdev.write_fail = sim->jdev.sync_fail = 0;
  sim->back.fault_until_ns = sim->jdev.fault_until_ns = 0;
}

static bool
control (const char *req)
{
  char *reply = rb_control_request (rb, req, strlen (req));
  bool ok;

  if (reply == NULL)
    sim_fail ("control %s: out of memory", req);
  ok = strstr (reply, "OK\n") != NULL &&
    (strncmp (reply, "OK", 2) == 0 || strstr (reply, "\nOK\n") != NULL);
  sim_trace ("control %s = %s", req, ok ? "OK" : "ERR");
  free (reply);
  return ok;
}

/* Holes.  The store punches a hole for a zero request (sim-world.c,
 * as the file store does with FALLOC_FL_PUNCH_HOLE), and the engine
 * writes a chunk zeroed whole (ZERO in the chunk map) back with a zero
 * request (flush.c, take_zero), never as zeroes of data.  So a chunk
 * ZERO when a clean stop begins is a hole in the store after it: every
 * sector of it unallocated.
 *
 * Checked only where the engine has no other way to that chunk:
 *   - the flusher idle or in its flush-delay= wait when the stop
 *     begins: a sweep in progress may have collected the chunk in a
 *     run of DIRTY chunks before it turned ZERO, and such a run writes
 *     its chunks from RAM as data, whatever they are by then (flush.c,
 *     store_batch: the store must get what RAM holds);
 *   - without journal=: the committer writes back, not the flusher,
 *     and the flusher's flags say nothing of it.
 * Chunks that are not ZERO are not checked: a zero that covers a chunk
 * in part leaves it DIRTY with its sectors (io.c, move_dirty), a zero
 * whose store request or sync failed comes back DIRTY (rbi_redirty), a
 * resumed ram= image or a replayed journal gives data, and writethrough
 * sends the zero itself and leaves the chunk CLEAN: in all those the
 * zeroes go out as data or are not the stop's to write.  Returns the
 * chunks to check (one byte each), or NULL.
 */
static uint8_t *
holes_expected (void)
{
  const struct chunkmap *cm;
  uint8_t *z;
  uint64_t c;

  if (idle_rb == NULL || sim->cfg.journal ||
      !(idle_rb->flusher_idle || idle_rb->flusher_delaying))
    return NULL;
  cm = &idle_rb->map;
  z = calloc (cm->nchunks, 1);
  if (z == NULL)
    sim_fail ("out of memory");
  for (c = 0; c < cm->nchunks; c++)
    z[c] = ((cm->words[c / 32] >> (c % 32 * 2)) & 3) == CS_ZERO;
  return z;
}

static void
check_holes (const uint8_t *z)
{
  uint32_t cu = sim->cfg.chunk_size / SIM_UNIT, u;

  if (z == NULL)
    return;
  for (u = 0; u < sim->nunits; u++)
    if (z[u / cu] && sim->back.alloc[u])
      sim_fail ("the store after a clean stop: chunk %" PRIu32 " was "
                "ZERO when the stop began, but its sector %" PRIu32 " is "
                "allocated: the zero was written back as data, not as a "
                "zero request (no hole punched)", u / cu, u);
}

/* Stop the engine cleanly; the store must then hold the model. */
static void
clean_stop (const char *why)
{
  uint64_t ts;
  uint8_t *zero_chunks;
  int r;

  join_clients ();
  clear_faults ();
  sim_trace ("clean stop (%s)", why);
  sim->stop_started_ns = rb_now_ns ();
  last_progress_ns = rb_now_ns ();
  ts = model_tick ();
  zero_chunks = holes_expected ();
  idle_rb = NULL;
  sim->held_back += rb_atomic_load (&rb->held_back);
  {
    struct rb_stats st;

    rb_get_stats (rb, &st);
    sim->jdeferred_life = st.journal_deferred_bytes;
  }
  r = rb_close (rb);
  sim->jdeferred += sim->jdeferred_life;
  sim->jdeferred_life = 0;
  rb = NULL;
  sim->stop_started_ns = 0;
  if (r == -1)
    sim_fail ("clean stop (%s) failed with no fault pending: %s", why,
              rb_get_error ());
  model_flush_ok ((struct model_flush) { sim->ack_seq, ts });
  sim->clean_stops++;
  /* What the store holds for its next reader.  (Not its durable
   * image: a sync that failed in an earlier process, which then
   * crashed, may have left sectors in the cache that no later sync
   * writes, Linux's fsyncgate; nothing after the crash knows them.)
   */
  model_check_read (sim->back.pending, 0, sim->nunits, ts,
                    "the store after a clean stop", false);
  check_holes (zero_chunks);
  free (zero_chunks);
}

/* Control sync: OK means the backing store itself (its durable image)
 * holds every write acknowledged before the sync began, with journal=
 * too (not only the journal).
 */
static void
sync_store (void)
{
  struct model_flush b = model_flush_begin ();
  uint64_t ts = sim->clock;

  if (!control ("sync"))
    return;
  model_flush_ok (b);
  model_check_read (sim->back.durable, 0, sim->nunits, ts,
                    "the store's durable image after sync answered OK",
                    false);
}

static void
fault_window (struct sim_disk *d)
{
  static const unsigned rates[] = { 0, 5, 50, 300, 1000 };

  d->write_fail = rates[sim_rand_below (5)];
  d->sync_fail = rates[sim_rand_below (5)];
  d->fail_errno = sim_rand_below (3) ? EIO : ENOSPC;
  d->fault_until_ns = rb_now_ns () + sim_rand_below (UINT64_C (2000000000));
  sim_trace ("faults on %s: writes %u sync %u %s for %" PRIu64 "ms",
             d->name, d->write_fail, d->sync_fail,
             d->fail_errno == EIO ? "EIO" : "ENOSPC",
             (d->fault_until_ns - rb_now_ns ()) / 1000000);
}

static void
nemesis (void)
{
  while (sim->ops_started < sim->cfg.ops) {
    unsigned e = sim_rand_below (1000);

    sim_sleep_ns (UINT64_C (100000) + sim_rand_below (UINT64_C (10000000)));
    last_progress_ns = rb_now_ns ();
    if (e < 100 && sim->cfg.calm)       /* mostly writeback */
      control (sim_rand_below (8) ? "mode writeback" : "mode writethrough");
    else if (e < 280 && sim->cfg.calm && sim_rand_below (8))
      ;                         /* seldom: the passes may defer */
    else if (e < 100)
      control (sim_rand_below (2) ? "mode writethrough" : "mode writeback");
    else if (e < 250)
      sync_store ();
    else if (e < 280) {         /* a UPS on battery: writethrough, sync */
      control ("mode writethrough");
      sync_store ();
    }
    else if (e < 400)
      fault_window (sim->cfg.journal && sim_rand_below (2)
                    ? &sim->jdev : &sim->back);
    else if (e < 500)
      check_stats ();
    else if (e < 500 + sim->cfg.crash_permille && crash_at == UINT64_MAX) {
      crash_kind = sim_rand_below (2) ? END_POWER_CUT : END_CRASH;
      crash_at = sim_points () + 1 + sim_rand_below (20000);
      sim_trace ("%s armed", crash_kind == END_CRASH ? "crash"
                 : "power cut");
    }
    else if (e < 520) {
      clean_stop ("nemesis");
      open_engine ();
      check_recovered ("restart after a clean stop", false);
      start_clients ();
    }
  }
}

/* One process lifetime: returns only through _exit. */
static void __attribute__ ((noreturn))
lifetime (void)
{
  struct sim_sched_params sp = {
    .seed = sim->cfg.seed * UINT64_C (1000003) + sim->lifetime,
    .switch_permille = sim->cfg.switch_permille,
    .spurious_permille = sim->cfg.spurious_permille,
    .tick_ns = 200,
  };

  sim_sched_start (&sp);
  sim_hash_set (sim->hash);
  sim_fail_hook = fail_hook;
  sim_point_hook = point_hook;
  sim_idle_hook = idle_check;
  rb_set_log (log_fn);
  last_progress_ns = rb_now_ns ();
  sim->end = END_NONE;
  clear_faults ();
  sim->back.max_latency_ns = (uint64_t[]) { 0, 100000, 2000000 }
    [sim->cfg.seed % 3];
  sim->jdev.max_latency_ns = sim->back.max_latency_ns;
  arm_crash_in_open ();
  open_engine ();
  crash_at = UINT64_MAX;
  if (sim->lifetime > 0)
    check_recovered ("restart after a crash", true);
  start_clients ();
  nemesis ();
  clean_stop ("end of the workload");
  sim->hash = sim_hash_value ();
  sim->points_total += sim_points ();
  _exit (0);
}

/* ---- one seed ---- */

struct result {
  bool fail;
  uint64_t hash, ops_at_fail, seconds_ns, held_back, jdeferred;
  char msg[2048];
};

static void *
shared_alloc (size_t *used, size_t size)
{
  void *p = (char *) sim + *used;

  *used += (size + 63) & ~(size_t) 63;
  return p;
}

static void
print_trace (void)
{
  uint32_t n = sim->ntrace < SIM_TRACE_LINES ? sim->ntrace : SIM_TRACE_LINES;
  uint32_t i;

  fprintf (stderr, "last %u trace lines:\n", n);
  for (i = sim->ntrace - n; i < sim->ntrace; i++)
    fprintf (stderr, "  %s\n", sim->trace[i % SIM_TRACE_LINES]);
}

static void
rm_dir (void)
{
  char p[300];

  path_of (p, sizeof p, "ram");
  unlink (p);
  path_of (p, sizeof p, "journal");
  unlink (p);
  rmdir (sim->dir);
}

static void
run_seed (uint64_t seed, uint64_t ops, bool verbose, struct result *res)
{
  struct sim_cfg cfg;
  size_t total, used = 0;
  uint32_t nunits;

  choose_cfg (&cfg, seed, ops);
  cfg.verbose = verbose;
  nunits = cfg.size / SIM_UNIT;
  total = sizeof *sim + 64 * 8
    + 3 * cfg.size + 2 * cfg.size / SIM_UNIT
    + 3 * cfg.journal_size + cfg.journal_size / SIM_UNIT
    + (size_t) nunits * sizeof (struct sim_unit_hist)
    + (size_t) (8 * ops + 32 * nunits + 64) * sizeof (struct sim_rec);
  sim = mmap (NULL, total, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sim == MAP_FAILED) {
    perror ("mmap");
    exit (1);
  }
  used = sizeof *sim;
  sim->cfg = cfg;
  sim->nunits = nunits;
  sim->back.name = "back";
  sim->back.size = cfg.size;
  sim->back.pending = shared_alloc (&used, cfg.size);
  sim->back.durable = shared_alloc (&used, cfg.size);
  sim->back.dirty = shared_alloc (&used, cfg.size / SIM_UNIT);
  sim->back.alloc = shared_alloc (&used, cfg.size / SIM_UNIT);
  sim->back.can_fua = cfg.can_fua;
  sim->jdev.name = "journal";
  sim->jdev.size = cfg.journal_size;
  sim->jdev.pending = shared_alloc (&used, cfg.journal_size);
  sim->jdev.durable = shared_alloc (&used, cfg.journal_size);
  sim->jdev.dirty = shared_alloc (&used, cfg.journal_size / SIM_UNIT);
  sim->jdev.can_fua = cfg.can_fua;
  sim->hist = shared_alloc (&used, nunits * sizeof (struct sim_unit_hist));
  sim->maxrecs = 8 * ops + 32 * nunits + 64;
  sim->recs = shared_alloc (&used, sim->maxrecs * sizeof (struct sim_rec));
  if (used > total)
    abort ();
  sim->hash = UINT64_C (0xcbf29ce484222325);
  snprintf (sim->dir, sizeof sim->dir, "%s/ramback-sim.%d",
            getenv ("RAMBACK_SIM_DIR") ? getenv ("RAMBACK_SIM_DIR")
            : "/dev/shm", (int) getpid ());
  /* A killed run (SIGPIPE, timeout) leaves its directory, which a later
   * one with the same pid would otherwise resume from.
   */
  rm_dir ();
  mkdir (sim->dir, 0700);
  {
    char p[300];
    FILE *f;
    path_of (p, sizeof p, "journal");
    f = fopen (p, "w");         /* journal= must exist; its data is jdev */
    if (f)
      fclose (f);
  }
  model_init (seed % 5 == 0);

  memset (res, 0, sizeof *res);
  for (;;) {
    pid_t pid = fork ();
    int status;

    if (pid == -1) {
      perror ("fork");
      exit (1);
    }
    if (pid == 0)
      lifetime ();
    if (waitpid (pid, &status, 0) == -1) {
      perror ("waitpid");
      exit (1);
    }
    /* What the lifetime's passes deferred, as last seen (a crash). */
    sim->jdeferred += sim->jdeferred_life;
    sim->jdeferred_life = 0;
    if (WIFEXITED (status) && WEXITSTATUS (status) == 3) {
      /* A crash: the disks keep their caches; a power cut does not. */
      model_orphan_inflight ();
      if (sim->end == END_POWER_CUT) {
        char p[300];
        struct sim_sched_params sp = {
          .seed = seed * UINT64_C (1000003) + sim->lifetime + 500000,
        };

        sim_sched_start (&sp);  /* the parent's PRNG, for the cut */
        sim_disk_power_cut (&sim->back);
        sim_disk_power_cut (&sim->jdev);
        path_of (p, sizeof p, "ram");
        unlink (p);
        sim->power_cuts++;
      }
      else {
        sim_disk_process_crash (&sim->back);
        sim_disk_process_crash (&sim->jdev);
        sim->crashes++;
      }
      sim->lifetime++;
      continue;
    }
    if (WIFEXITED (status) && WEXITSTATUS (status) == 0)
      break;
    res->fail = true;
    if (WIFSIGNALED (status))
      snprintf (res->msg, sizeof res->msg, "the simulated process died of "
                "signal %d (%s)", WTERMSIG (status),
                strsignal (WTERMSIG (status)));
    else
      snprintf (res->msg, sizeof res->msg, "%s", sim->fail_msg);
    res->ops_at_fail = sim->fail_ops ? sim->fail_ops : sim->ops_started;
    if (!quiet)
      print_trace ();
    break;
  }
  res->hash = sim->hash;
  res->held_back = sim->held_back;
  res->jdeferred = sim->jdeferred;
  rm_dir ();
  munmap (sim, total);
  sim = NULL;
}

/* ---- main ---- */

static double
now_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
usage (FILE *f)
{
  fprintf (f,
           "usage: ramback-sim --seed=N [--ops=M] [--twice] [--verbose]\n"
           "       ramback-sim --seconds=S [--seed=FIRST] [--ops=M]\n"
           "       ramback-sim --seeds=N [--seed=FIRST] [--ops=M]\n");
}

static void
report_failure (uint64_t seed, uint64_t ops, const struct result *r)
{
  uint64_t lo = 1, hi = r->ops_at_fail ? r->ops_at_fail : ops;
  struct result t;
  bool q = quiet;

  printf ("FAIL seed=%" PRIu64 " hash=%016" PRIx64 ": %s\n", seed, r->hash,
          r->msg);
  printf ("replay: lib/sim/ramback-sim --seed=%" PRIu64 " --ops=%" PRIu64
          "\n", seed, ops);
  /* The shortest failing prefix of the workload: fewer operations
   * replay the same decisions up to where they stop.
   */
  quiet = true;
  run_seed (seed, hi, false, &t);
  if (!t.fail)
    hi = ops;
  else
    while (lo < hi) {
      uint64_t mid = lo + (hi - lo) / 2;
      run_seed (seed, mid, false, &t);
      if (t.fail)
        hi = mid;
      else
        lo = mid + 1;
    }
  quiet = q;
  printf ("shortest failing prefix: lib/sim/ramback-sim --seed=%" PRIu64
          " --ops=%" PRIu64 " --verbose\n", seed, hi);
  fflush (stdout);
}

int
main (int argc, char *argv[])
{
  static const struct option longopts[] = {
    { "seed", required_argument, NULL, 's' },
    { "ops", required_argument, NULL, 'o' },
    { "seconds", required_argument, NULL, 'S' },
    { "seeds", required_argument, NULL, 'N' },
    { "twice", no_argument, NULL, 't' },
    { "verbose", no_argument, NULL, 'v' },
    { "no-shrink", no_argument, NULL, 'n' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  uint64_t seed = 1, ops = 2000, nseeds = 0;
  double seconds = 0;
  bool twice = false, verbose = false, shrink = true, seed_set = false;
  int c;
  char *end;

  while ((c = getopt_long (argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 's':
      errno = 0;
      seed = strtoull (optarg, &end, 0);
      if (errno || *end || end == optarg) {
        fprintf (stderr, "ramback-sim: --seed=%s: not a number\n", optarg);
        return 1;
      }
      seed_set = true;
      break;
    case 'o':
      ops = strtoull (optarg, &end, 0);
      if (*end || ops == 0 || ops > 10000000) {
        fprintf (stderr, "ramback-sim: --ops=%s: give 1 to 10000000\n",
                 optarg);
        return 1;
      }
      break;
    case 'S':
      seconds = strtod (optarg, &end);
      if (*end || seconds <= 0) {
        fprintf (stderr, "ramback-sim: --seconds=%s: give a positive "
                 "number\n", optarg);
        return 1;
      }
      break;
    case 'N':
      nseeds = strtoull (optarg, &end, 0);
      if (*end || nseeds == 0) {
        fprintf (stderr, "ramback-sim: --seeds=%s: give a positive "
                 "number\n", optarg);
        return 1;
      }
      break;
    case 't': twice = true; break;
    case 'v': verbose = true; break;
    case 'n': shrink = false; break;
    case 'h': usage (stdout); return 0;
    default: usage (stderr); return 1;
    }
  }
  if (optind != argc || (!seed_set && seconds == 0 && nseeds == 0)) {
    usage (stderr);
    return 1;
  }
  setvbuf (stdout, NULL, _IOLBF, 0);

  if (seconds == 0 && nseeds == 0) {
    struct result r, r2;
    double t0 = now_s ();

    run_seed (seed, ops, verbose, &r);
    if (r.fail) {
      if (shrink)
        report_failure (seed, ops, &r);
      else
        printf ("FAIL seed=%" PRIu64 " hash=%016" PRIx64 ": %s\n", seed,
                r.hash, r.msg);
      return 2;
    }
    printf ("PASS seed=%" PRIu64 " ops=%" PRIu64 " hash=%016" PRIx64
            " (%.2fs)\n", seed, ops, r.hash, now_s () - t0);
    if (twice) {
      run_seed (seed, ops, false, &r2);
      if (r2.fail || r2.hash != r.hash) {
        printf ("NONDETERMINISTIC seed=%" PRIu64 ": hash %016" PRIx64
                " then %016" PRIx64 "%s\n", seed, r.hash, r2.hash,
                r2.fail ? " (and it failed)" : "");
        return 2;
      }
      printf ("deterministic: the same hash twice\n");
    }
    return 0;
  }
  else {
    double t0 = now_s (), t;
    uint64_t n = 0, s = seed_set ? seed : (uint64_t) time (NULL);
    uint64_t held = 0, held_seeds = 0, jdef = 0, jdef_seeds = 0;

    for (;;) {
      struct result r;

      run_seed (s, ops, verbose, &r);
      n++;
      if (r.fail) {
        printf ("after %" PRIu64 " seeds, %.1fs:\n", n, now_s () - t0);
        if (shrink)
          report_failure (s, ops, &r);
        else
          printf ("FAIL seed=%" PRIu64 ": %s\n", s, r.msg);
        return 2;
      }
      held += r.held_back;
      held_seeds += r.held_back > 0;
      jdef += r.jdeferred;
      jdef_seeds += r.jdeferred > 0;
      t = now_s () - t0;
      if (nseeds ? n >= nseeds : t >= seconds)
        break;
      s++;
    }
    printf ("PASS %" PRIu64 " seeds (%" PRIu64 "..%" PRIu64 ") in %.1fs: "
            "%.2f seeds/s, %.0f simulated ops/s\n", n, s - n + 1, s, t,
            n / t, n * (double) ops / t);
    printf ("cold first: %" PRIu64 " rewritten sectors held back, in %"
            PRIu64 " seeds (counted at clean stops)\n", held, held_seeds);
    printf ("journal: %" PRIu64 " bytes left to newer transactions by "
            "passes (deferred), in %" PRIu64 " seeds\n", jdef, jdef_seeds);
    return 0;
  }
}
