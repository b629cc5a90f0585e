/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the OS shim for the deterministic simulator (see
 * env-impl.h): fibers on one OS thread, a seeded scheduler, virtual
 * time.
 *
 * Tasks: each rb_thread_create makes a fiber (ucontext) with its own
 * stack; the process's own thread is task 0.  A task is RUN (may be
 * picked), BLOCKED (on wait_obj: a lock, a condition variable, a task
 * it joins, or a sleep; with a deadline or none) or DONE.  Blocking
 * primitives are "block, then re-check": an unlock wakes every fiber
 * blocked on the lock and each tries again when picked, so no queue
 * order is assumed beyond what POSIX promises (none).
 *
 * Picking: at each scheduling point (sim_point) the PRNG decides with
 * probability switch_permille to switch, and then which runnable task
 * (uniformly, the current one included).  A task that blocks always
 * gives the CPU away.  When nothing is runnable the clock jumps to the
 * earliest deadline and the tasks waiting for it time out; with no
 * deadline either, every task waits for another: a deadlock, reported
 * through sim_fail.
 *
 * Determinism: the task table is indexed by creation order, never by
 * address; every choice is the PRNG's; the trace hash folds in the task
 * picked at each switch.
 *
 * Not thread-safe and not meant to be: there is one OS thread.
 */

#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ucontext.h>

#include "env.h"
#include "sim-sched.h"
#include "splitmix.h"

#define MAX_TASKS 64
#define STACK_SIZE (256 * 1024)

enum task_state { T_RUN, T_BLOCKED, T_DONE };

struct sim_task {
  int id;
  const char *name;
  ucontext_t ctx;
  void *stack;
  enum task_state state;
  const void *wait_obj;
  uint64_t deadline;            /* UINT64_MAX: none */
  bool timed_out;
  int err;                      /* errno while switched out */
  void *(*fn) (void *);
  void *arg;
};

static struct sim_task *tasks[MAX_TASKS];
static int ntasks;
static struct sim_task *cur;
static struct sim_task main_task;
static struct sim_sched_params params;
static uint64_t clock_ns = UINT64_C (1000000000);
static uint64_t npoints;
static uint64_t rng[4];
static uint64_t trace_hash = UINT64_C (0xcbf29ce484222325);
static const char sleep_obj = 0;

void (*sim_point_hook) (uint64_t point);
void (*sim_idle_hook) (void);
void (*sim_fail_hook) (const char *msg);

/* ---- PRNG: xoshiro256** seeded through splitmix64 ---- */

static uint64_t
rotl (uint64_t x, int k)
{
  return (x << k) | (x >> (64 - k));
}

uint64_t
sim_rand (void)
{
  uint64_t r = rotl (rng[1] * 5, 7) * 9, t = rng[1] << 17;

  rng[2] ^= rng[0];
  rng[3] ^= rng[1];
  rng[1] ^= rng[2];
  rng[0] ^= rng[3];
  rng[2] ^= t;
  rng[3] = rotl (rng[3], 45);
  return r;
}

uint64_t
sim_rand_below (uint64_t n)
{
  return n <= 1 ? 0 : sim_rand () % n;
}

void
sim_rand_get (uint64_t s[4])
{
  memcpy (s, rng, sizeof rng);
}

void
sim_rand_set (const uint64_t s[4])
{
  memcpy (rng, s, sizeof rng);
}

static void
seed_rng (uint64_t seed)
{
  int i;

  for (i = 0; i < 4; i++)
    rng[i] = rb_splitmix64 (&seed);
}

/* ---- trace hash ---- */

void
sim_hash (uint64_t v)
{
  int i;

  for (i = 0; i < 8; i++) {
    trace_hash ^= (v >> (8 * i)) & 0xff;
    trace_hash *= UINT64_C (0x100000001b3);
  }
}

uint64_t
sim_hash_value (void)
{
  return trace_hash;
}

void
sim_hash_set (uint64_t h)
{
  trace_hash = h;
}

/* ---- failures ---- */

void
sim_fail (const char *fmt, ...)
{
  char msg[1024];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  if (sim_fail_hook)
    sim_fail_hook (msg);
  else
    fprintf (stderr, "ramback-sim: %s\n", msg);
  fflush (NULL);
  _exit (2);
}

void
sim_assert_failed (const char *expr, const char *file, int line)
{
  sim_fail ("engine assertion failed: %s (%s:%d) in task %s",
            expr, file, line, cur ? cur->name : "?");
}

/* ---- the scheduler ---- */

void
sim_sched_start (const struct sim_sched_params *p)
{
  params = *p;
  seed_rng (p->seed);
  memset (&main_task, 0, sizeof main_task);
  main_task.name = "main";
  main_task.state = T_RUN;
  main_task.deadline = UINT64_MAX;
  tasks[0] = &main_task;
  ntasks = 1;
  cur = &main_task;
}

static void
switch_to (struct sim_task *next)
{
  struct sim_task *prev = cur;

  if (next == prev)
    return;
  sim_hash ((uint64_t) next->id);
  prev->err = errno;
  cur = next;
  swapcontext (&prev->ctx, &next->ctx);
  /* Running again (cur is prev once more). */
  errno = cur->err;
}

static void
wake (struct sim_task *t, bool timed_out)
{
  t->state = T_RUN;
  t->wait_obj = NULL;
  t->deadline = UINT64_MAX;
  t->timed_out = timed_out;
}

static void
wake_all (const void *obj)
{
  int i;

  for (i = 0; i < ntasks; i++)
    if (tasks[i] && tasks[i]->state == T_BLOCKED && tasks[i]->wait_obj == obj)
      wake (tasks[i], false);
}

static void deadlock (void) __attribute__ ((noreturn));

static void
deadlock (void)
{
  char what[512];
  size_t len = 0;
  int i;

  for (i = 0; i < ntasks && len < sizeof what - 64; i++)
    if (tasks[i] && tasks[i]->state == T_BLOCKED)
      len += snprintf (what + len, sizeof what - len, " %s",
                       tasks[i]->name);
  sim_fail ("deadlock: no task can run and none waits with a deadline "
            "(blocked:%s)", what);
}

/* Pick the next task to run among the runnable ones, advancing the
 * clock if there are none.  The current task may be among them.
 */
static struct sim_task *
pick (void)
{
  struct sim_task *run[MAX_TASKS];
  int n, i;

  for (;;) {
    uint64_t min = UINT64_MAX;

    n = 0;
    for (i = 0; i < ntasks; i++)
      if (tasks[i] && tasks[i]->state == T_RUN)
        run[n++] = tasks[i];
    if (n)
      return run[sim_rand_below (n)];
    if (sim_idle_hook)
      sim_idle_hook ();
    for (i = 0; i < ntasks; i++)
      if (tasks[i] && tasks[i]->state == T_BLOCKED &&
          tasks[i]->deadline < min)
        min = tasks[i]->deadline;
    if (min == UINT64_MAX)
      deadlock ();
    if (min > clock_ns)
      clock_ns = min;
    for (i = 0; i < ntasks; i++)
      if (tasks[i] && tasks[i]->state == T_BLOCKED &&
          tasks[i]->deadline <= clock_ns)
        wake (tasks[i], true);
  }
}

static void
point_common (void)
{
  npoints++;
  clock_ns += params.tick_ns;
  if (sim_point_hook)
    sim_point_hook (npoints);
}

void
sim_point (void)
{
  if (cur == NULL)
    return;
  point_common ();
  if (sim_rand_below (1000) < params.switch_permille)
    switch_to (pick ());
}

/* Block the current task on obj (until deadline): gives the CPU away
 * and returns when woken.  True if it was woken before the deadline.
 */
static bool
block (const void *obj, uint64_t deadline)
{
  point_common ();
  cur->state = T_BLOCKED;
  cur->wait_obj = obj;
  cur->deadline = deadline;
  cur->timed_out = false;
  switch_to (pick ());
  return !cur->timed_out;
}

uint64_t
sim_points (void)
{
  return npoints;
}

void
sim_sleep_ns (uint64_t ns)
{
  block (&sleep_obj, clock_ns + ns);
}

void
sim_set_name (const char *name)
{
  cur->name = name;
}

const char *
sim_task_name (void)
{
  return cur ? cur->name : "main";
}

int
sim_task_id (void)
{
  return cur ? cur->id : 0;
}

/* ---- locks ---- */

void
rb_mutex_init (rb_mutex *m)
{
  m->owner = NULL;
}

void
rb_mutex_destroy (rb_mutex *m)
{
  if (m->owner)
    sim_fail ("a mutex destroyed while held by %s", m->owner->name);
}

void
rb_mutex_lock (rb_mutex *m)
{
  sim_point ();
  if (m->owner == cur)
    sim_fail ("task %s locks a mutex it holds", cur->name);
  while (m->owner)
    block (m, UINT64_MAX);
  m->owner = cur;
}

static void
unlock (rb_mutex *m)
{
  if (m->owner != cur)
    sim_fail ("task %s unlocks a mutex held by %s", cur->name,
              m->owner ? m->owner->name : "nobody");
  m->owner = NULL;
  wake_all (m);
}

void
rb_mutex_unlock (rb_mutex *m)
{
  unlock (m);
  sim_point ();
}

void
rb_rwlock_init (rb_rwlock *l)
{
  memset (l, 0, sizeof *l);
}

void
rb_rwlock_destroy (rb_rwlock *l)
{
  if (l->writer || l->readers)
    sim_fail ("a rwlock destroyed while held");
}

void
rb_rwlock_rdlock (rb_rwlock *l)
{
  sim_point ();
  /* A waiting writer goes before new readers (env-posix's kind). */
  while (l->writer || l->writers_waiting)
    block (l, UINT64_MAX);
  l->readers++;
}

void
rb_rwlock_wrlock (rb_rwlock *l)
{
  sim_point ();
  l->writers_waiting++;
  while (l->writer || l->readers)
    block (l, UINT64_MAX);
  l->writers_waiting--;
  l->writer = cur;
}

void
rb_rwlock_unlock (rb_rwlock *l)
{
  if (l->writer == cur)
    l->writer = NULL;
  else if (l->readers)
    l->readers--;
  else
    sim_fail ("task %s unlocks a rwlock it does not hold", cur->name);
  wake_all (l);
  sim_point ();
}

/* ---- condition variables ---- */

void
rb_cond_init (rb_cond *c)
{
  c->unused = 0;
}

void
rb_cond_destroy (rb_cond *c)
{
  (void) c;
}

bool
rb_cond_wait_until (rb_cond *c, rb_mutex *m, uint64_t deadline_ns)
{
  bool woken;

  unlock (m);
  /* A spurious wakeup (POSIX allows them) is a short deadline. */
  if (params.spurious_permille &&
      sim_rand_below (1000) < params.spurious_permille) {
    uint64_t d = clock_ns + 1000 + sim_rand_below (1000000);
    woken = block (c, d < deadline_ns ? d : deadline_ns);
    if (!woken && clock_ns < deadline_ns)
      woken = true;
  }
  else
    woken = block (c, deadline_ns);
  while (m->owner)
    block (m, UINT64_MAX);
  m->owner = cur;
  return woken;
}

void
rb_cond_wait (rb_cond *c, rb_mutex *m)
{
  rb_cond_wait_until (c, m, UINT64_MAX);
}

void
rb_cond_signal (rb_cond *c)
{
  struct sim_task *w[MAX_TASKS];
  int n = 0, i;

  for (i = 0; i < ntasks; i++)
    if (tasks[i] && tasks[i]->state == T_BLOCKED && tasks[i]->wait_obj == c)
      w[n++] = tasks[i];
  if (n)
    wake (w[sim_rand_below (n)], false);
  sim_point ();
}

void
rb_cond_broadcast (rb_cond *c)
{
  wake_all (c);
  sim_point ();
}

/* ---- threads ---- */

static void
task_entry (void)
{
  struct sim_task *t = cur;

  errno = 0;
  t->fn (t->arg);
  t->state = T_DONE;
  wake_all (t);
  switch_to (pick ());
  sim_fail ("a finished task was run again");
}

/* getcontext returns twice in the compiler's eyes: kept out of
 * rb_thread_create so that none of its locals live across it.
 */
static void __attribute__ ((noinline))
task_context (struct sim_task *t)
{
  getcontext (&t->ctx);
  t->ctx.uc_stack.ss_sp = t->stack;
  t->ctx.uc_stack.ss_size = STACK_SIZE;
  t->ctx.uc_link = NULL;
  makecontext (&t->ctx, task_entry, 0);
}

int
rb_thread_create (rb_thread *tp, void *(*fn) (void *), void *arg)
{
  struct sim_task *t;
  int slot;

  for (slot = 0; slot < MAX_TASKS; slot++)
    if (slot >= ntasks || tasks[slot] == NULL)
      break;
  if (slot == MAX_TASKS) {
    errno = EAGAIN;
    return -1;
  }
  t = calloc (1, sizeof *t);
  if (t == NULL || (t->stack = malloc (STACK_SIZE)) == NULL) {
    free (t);
    errno = ENOMEM;
    return -1;
  }
  t->id = slot;
  t->name = "thread";
  t->fn = fn;
  t->arg = arg;
  t->state = T_RUN;
  t->deadline = UINT64_MAX;
  task_context (t);
  tasks[slot] = t;
  if (slot >= ntasks)
    ntasks = slot + 1;
  *tp = t;
  sim_point ();
  return 0;
}

void
rb_thread_join (rb_thread t)
{
  sim_point ();
  while (t->state != T_DONE)
    block (t, UINT64_MAX);
  tasks[t->id] = NULL;
  while (ntasks > 0 && tasks[ntasks - 1] == NULL)
    ntasks--;
  free (t->stack);
  free (t);
}

void
rb_thread_background (void)
{
}

/* ---- time and memory ---- */

uint64_t
rb_now_ns (void)
{
  return clock_ns;
}

uint64_t
rb_deadline_ms (int ms)
{
  if (ms < 0)
    return UINT64_MAX;
  return clock_ns + (uint64_t) ms * 1000000;
}

uint64_t
rb_phys_mem (void)
{
  long pages = sysconf (_SC_PHYS_PAGES);
  long pagesize = sysconf (_SC_PAGESIZE);

  if (pages <= 0 || pagesize <= 0)
    return 0;
  return (uint64_t) pages * pagesize;
}
