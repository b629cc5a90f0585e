/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the simulator's side of the sim env (env-sim.c): starting
 * the scheduler, its PRNG, virtual sleeps, the trace hash and the hooks
 * the simulated world (lib/sim/) sets.  The engine never includes this.
 */

#ifndef RAMBACK_SIM_SCHED_H
#define RAMBACK_SIM_SCHED_H

#include "env.h"

/* The scheduler's knobs, chosen per seed. */
struct sim_sched_params {
  uint64_t seed;
  unsigned switch_permille;     /* chance of a switch at each point */
  unsigned spurious_permille;   /* chance a cond wait wakes spuriously */
  uint64_t tick_ns;             /* virtual time each point costs */
};

/* Make the caller task 0 ("main") of a fresh scheduler.  Call once per
 * process (each simulated lifetime is a process of its own).
 */
extern void sim_sched_start (const struct sim_sched_params *p);

/* The PRNG every decision of the run draws from (xoshiro256**). */
extern uint64_t sim_rand (void);
/* Uniform in [0, n), n > 0. */
extern uint64_t sim_rand_below (uint64_t n);
/* The PRNG's state, so a run that spans processes continues one stream. */
extern void sim_rand_get (uint64_t s[4]);
extern void sim_rand_set (const uint64_t s[4]);

/* Block the calling fiber for ns of virtual time (other fibers run). */
extern void sim_sleep_ns (uint64_t ns);
/* Name the calling fiber in traces (a static string). */
extern void sim_set_name (const char *name);
extern const char *sim_task_name (void);
extern int sim_task_id (void);

/* Scheduling points passed so far, and the virtual clock. */
extern uint64_t sim_points (void);

/* Hooks of the world: called at every scheduling point with its number
 * (the world crashes the process there), and by sim_fail to print the
 * trace before the process ends.
 */
extern void (*sim_point_hook) (uint64_t point);
/* Called when no task can run (every one is blocked, none half way
 * through a step between two scheduling points), before the clock
 * jumps: the world checks what must hold at rest.  It must not reach a
 * scheduling point.
 */
extern void (*sim_idle_hook) (void);
extern void (*sim_fail_hook) (const char *msg);

/* Fold 8 bytes into the trace hash (FNV-1a).  The scheduler folds in
 * every switch; the world folds in every operation and its result.
 */
extern void sim_hash (uint64_t v);
extern uint64_t sim_hash_value (void);
extern void sim_hash_set (uint64_t h);

/* A failure of the run: print msg, call sim_fail_hook, exit with 2. */
extern void sim_fail (const char *fmt, ...)
  __attribute__ ((noreturn, format (printf, 1, 2)));

#endif /* RAMBACK_SIM_SCHED_H */
