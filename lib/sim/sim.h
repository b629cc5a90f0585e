/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback-sim: the simulated world, the model of acknowledged
 * operations and the run's shared state.
 *
 * A run of one seed is a sequence of process lifetimes of the engine:
 * each is a forked child (so a crash is an _exit at a scheduling point,
 * exactly a kill -9 there), and everything that outlives a process
 * lives in one MAP_SHARED region the parent owns (struct sim_shared):
 * the disks with their volatile caches, the model, the trace.  The
 * ram= image is a real file on tmpfs: it survives a process crash by
 * itself, and a power cut removes it.
 */

#ifndef RAMBACK_SIM_H
#define RAMBACK_SIM_H

#include "env.h"
#include "sim-sched.h"
#include "store.h"

#define SIM_UNIT 512            /* sector: the model's and the cache's grain */
#define SIM_HIST 16             /* acknowledged writes kept per unit */
#define SIM_MAX_CLIENTS 4
#define SIM_TRACE_LINES 48
#define SIM_TRACE_LEN 120

/* ---- disks (sim-world.c) ---- */

/* A disk with a volatile write cache: 'pending' is what reads see,
 * 'durable' what survives a power cut; a sector written since the last
 * flush is dirty.  A FLUSH makes every dirty sector durable; a failed
 * FLUSH writes some and forgets the rest (they stay in pending, clean:
 * the page cache's behaviour after a writeback error).  At a power cut
 * each dirty sector is kept or lost on its own (a multi-sector write
 * is torn at sector edges).
 */
struct sim_disk {
  const char *name;             /* "back", "journal" */
  uint64_t size;
  uint8_t *pending, *durable, *dirty;   /* dirty: one byte per sector */
  /* Allocation, one byte per sector (the backing store only, else
   * NULL), as reads see it: a write allocates, a zero request
   * deallocates, as the file store punches a hole
   * (FALLOC_FL_PUNCH_HOLE) for every RB_IO_ZERO it can.
   */
  uint8_t *alloc;
  bool can_fua;
  /* Faults, set by the nemesis: per request, in permille. */
  unsigned write_fail, sync_fail;
  int fail_errno;               /* EIO or ENOSPC */
  uint64_t max_latency_ns;
  uint64_t fault_until_ns;       /* faults apply until this virtual time */
  uint64_t writes, flushes, failures;
};

extern struct rb_store *sim_disk_store (struct sim_disk *d);
/* The parent, between lifetimes. */
extern void sim_disk_power_cut (struct sim_disk *d);
extern void sim_disk_process_crash (struct sim_disk *d);

/* ---- the model (sim-model.c) ---- */

enum sim_rec_kind { REC_DATA, REC_ZERO, REC_ALIAS };

/* One write (or zero, trim), or an alias: the value a unit was found
 * to hold after a restart.  Times are the run's logical clock.
 */
struct sim_rec {
  uint64_t start, end;          /* end 0: not answered yet */
  uint64_t ack;                 /* ack sequence number, 0: not acked */
  uint32_t u0, nu;              /* units [u0, u0+nu) */
  uint32_t value;               /* what the units hold: 0 zeroes, else
                                   the data record's id */
  uint8_t kind;
  uint8_t fua_durable;          /* durable by its own contract */
  uint8_t failed;               /* answered with an error: may or may
                                   not have happened */
  uint8_t orphan;               /* never answered: its process died */
  uint8_t rebase;               /* REC_ALIAS: what a restart found (not
                                   what a read settled) */
};

struct sim_unit_hist {
  uint32_t total;               /* entries ever appended */
  uint32_t ids[SIM_HIST];       /* ring: ids[(total-1) % SIM_HIST] newest */
};

/* ---- the run's configuration, chosen from the seed ---- */

struct sim_cfg {
  uint64_t seed, ops;
  uint64_t size;
  uint32_t chunk_size;
  int clients;
  bool fsync_wait, writethrough, journal, ram, populate;
  uint64_t dirty_max;
  uint32_t flush_delay_ms, commit_interval_ms, dirty_expire_ms;
  unsigned ups_window;
  uint64_t flush_rate, populate_rate;
  unsigned switch_permille, spurious_permille;
  uint64_t journal_size;
  bool can_fua;
  unsigned crash_permille;      /* chance per nemesis step of a crash */
  uint64_t ram_size;            /* ram-size=, 0: the whole device */
  bool crash_open;              /* crashes in a restart's recovery too */
  bool calm;                    /* journal=: the nemesis seldom syncs or
                                   switches modes, so that the applier's
                                   passes may defer (txn.c) */
  bool verbose;
};

/* Everything that outlives a process. */
struct sim_shared {
  struct sim_cfg cfg;
  struct sim_disk back, jdev;
  char dir[256];                /* tmpfs directory: ram=, journal= name */
  /* model */
  uint32_t nunits;
  uint64_t clock;               /* logical time: ticks at op start/end */
  uint64_t ack_seq;             /* last ack number given */
  uint64_t durable_seq;         /* acks <= this are durable */
  uint64_t durable_clock;       /* a FLUSH, sync or FUA write made
                                   durable by contract began at this
                                   logical time: a journal's recovered
                                   point in time is no older */
  uint32_t nrecs, maxrecs;
  struct sim_rec *recs;
  struct sim_unit_hist *hist;
  uint32_t inflight[SIM_MAX_CLIENTS];   /* write in flight per client, 0 none */
  /* progress */
  uint64_t ops_started, ops_done;
  unsigned lifetime;
  uint64_t hash;
  enum { END_NONE, END_CRASH, END_POWER_CUT } end;
  uint64_t points_total;
  uint64_t stop_started_ns;     /* a clean stop in progress (liveness) */
  /* trace: the last lines, a ring */
  uint32_t ntrace;
  char trace[SIM_TRACE_LINES][SIM_TRACE_LEN];
  char fail_msg[2048];
  uint64_t fail_ops;             /* ops started when it failed */
  uint64_t crashes, power_cuts, clean_stops, syncs_ok, reads_checked;
  uint64_t held_back;           /* rewritten sectors held back (clean
                                   stops' lifetimes only) */
  uint64_t jdeferred;           /* journal=: bytes passes left to newer
                                   transactions, every lifetime's */
  uint64_t jdeferred_life;      /* the current lifetime's, as last seen */
};

extern struct sim_shared *sim;

/* Log one trace line (and hash it). */
extern void sim_trace (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));

/* sim-model.c */
extern void model_init (bool initial_zero);
/* Fill buf with what record id writes to units [u0, u0+n). */
extern void model_fill (uint32_t id, uint32_t u0, uint32_t n, uint8_t *buf);
extern uint32_t model_begin (int client, enum sim_rec_kind kind,
                             uint32_t u0, uint32_t nu);
/* The request was answered: ok, and durable by contract (FUA). */
extern void model_end (int client, uint32_t id, bool ok, bool fua_durable);
/* A FLUSH or sync: note where it began, and mark what it covers. */
struct model_flush { uint64_t seq, clock; };
extern struct model_flush model_flush_begin (void);
extern void model_flush_ok (struct model_flush begin);
/* Check a read of units [u0, u0+n) that began at logical time ts.
 * Fails the run (sim_fail) on a value the model does not allow.  A
 * client's read (not a look at a disk) also settles the order of the
 * unordered writes it saw: what it found is what later reads build on.
 */
extern void model_check_read (const uint8_t *buf, uint32_t u0, uint32_t n,
                              uint64_t ts, const char *what, bool client);
/* After a restart: every unit must hold a value that survives the end
 * of the last lifetime; aliases what it found.
 */
extern void model_check_recovered (const uint8_t *buf, const char *what);
/* With journal=, after a crash or power cut: the device read back is
 * its content at one point in time (every unit as of one moment T),
 * T no older than the last FLUSH, sync or FUA write made durable.
 * Before model_check_recovered, which notes what was found.
 */
extern void model_check_point_in_time (const uint8_t *buf, const char *what);
/* Without journal=, the backing store's durable image is what a power
 * cut leaves: each unit that changes there must keep every write made
 * durable (or something newer, or a write in flight).
 */
extern void model_check_durable (const uint8_t *img, uint32_t u,
                                  const char *what);
/* Orphan the writes still in flight (their process died). */
extern void model_orphan_inflight (void);
extern uint64_t model_tick (void);

/* sim-world.c: the process's hooks (journal store, RAM copies). */
extern void world_install (void);

#endif /* RAMBACK_SIM_H */
