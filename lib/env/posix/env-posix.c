/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the OS shim for POSIX threads (see ../../env.h). */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "env.h"

/* A failing pthread mutex call means memory corruption or a locking
 * bug: nothing sensible can continue, so abort loudly.
 */
static void
check (int r, const char *what)
{
  if (r != 0) {
    fprintf (stderr, "ramback: %s failed: error %d\n", what, r);
    abort ();
  }
}

void
rb_mutex_init (rb_mutex *m)
{
  check (pthread_mutex_init (m, NULL), "pthread_mutex_init");
}

void
rb_rwlock_init (rb_rwlock *l)
{
  pthread_rwlockattr_t a;

  pthread_rwlockattr_init (&a);
  pthread_rwlockattr_setkind_np (&a,
                                 PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  check (pthread_rwlock_init (l, &a), "pthread_rwlock_init");
  pthread_rwlockattr_destroy (&a);
}

void
rb_rwlock_destroy (rb_rwlock *l)
{
  pthread_rwlock_destroy (l);
}

void
rb_rwlock_rdlock (rb_rwlock *l)
{
  check (pthread_rwlock_rdlock (l), "pthread_rwlock_rdlock");
}

void
rb_rwlock_wrlock (rb_rwlock *l)
{
  check (pthread_rwlock_wrlock (l), "pthread_rwlock_wrlock");
}

void
rb_rwlock_unlock (rb_rwlock *l)
{
  check (pthread_rwlock_unlock (l), "pthread_rwlock_unlock");
}

void
rb_mutex_destroy (rb_mutex *m)
{
  pthread_mutex_destroy (m);
}

void
rb_mutex_lock (rb_mutex *m)
{
  check (pthread_mutex_lock (m), "pthread_mutex_lock");
}

void
rb_mutex_unlock (rb_mutex *m)
{
  check (pthread_mutex_unlock (m), "pthread_mutex_unlock");
}

void
rb_cond_init (rb_cond *c)
{
  pthread_condattr_t attr;

  check (pthread_condattr_init (&attr), "pthread_condattr_init");
  check (pthread_condattr_setclock (&attr, CLOCK_MONOTONIC),
         "pthread_condattr_setclock");
  check (pthread_cond_init (c, &attr), "pthread_cond_init");
  pthread_condattr_destroy (&attr);
}

void
rb_cond_destroy (rb_cond *c)
{
  pthread_cond_destroy (c);
}

void
rb_cond_wait (rb_cond *c, rb_mutex *m)
{
  check (pthread_cond_wait (c, m), "pthread_cond_wait");
}

bool
rb_cond_wait_until (rb_cond *c, rb_mutex *m, uint64_t deadline_ns)
{
  struct timespec ts;
  int r;

  if (deadline_ns == UINT64_MAX) {
    rb_cond_wait (c, m);
    return true;
  }
  ts.tv_sec = deadline_ns / 1000000000;
  ts.tv_nsec = deadline_ns % 1000000000;
  r = pthread_cond_timedwait (c, m, &ts);
  if (r == ETIMEDOUT)
    return false;
  check (r, "pthread_cond_timedwait");
  return true;
}

void
rb_cond_signal (rb_cond *c)
{
  pthread_cond_signal (c);
}

void
rb_cond_broadcast (rb_cond *c)
{
  pthread_cond_broadcast (c);
}

int
rb_thread_create (rb_thread *t, void *(*fn) (void *), void *arg)
{
  int r = pthread_create (t, NULL, fn, arg);

  if (r != 0) {
    errno = r;
    return -1;
  }
  return 0;
}

void
rb_thread_join (rb_thread t)
{
  pthread_join (t, NULL);
}

/* I/O priority (linux/ioprio.h; not every libc has the header). */
#ifndef IOPRIO_WHO_PROCESS
#define IOPRIO_WHO_PROCESS 1
#endif
#ifndef IOPRIO_CLASS_BE
#define IOPRIO_CLASS_BE 2
#endif
#define RB_IOPRIO(class, level) (((class) << 13) | (level))

void
rb_thread_background (void)
{
  pid_t tid = (pid_t) syscall (SYS_gettid);

  int nice_now;

  /* Neither is fatal: they only change who goes first.  On Linux nice
   * values are per thread.  Five levels below the server's own, not an
   * absolute 5: a server started under nice(1) still gets a write back
   * that yields to its request path.
   */
  errno = 0;
  nice_now = getpriority (PRIO_PROCESS, (id_t) tid);
  if (nice_now != -1 || errno == 0) {
    if (setpriority (PRIO_PROCESS, (id_t) tid,
                     nice_now + 5 > 19 ? 19 : nice_now + 5) == -1) {
      /* ignored */
    }
  }
#ifdef SYS_ioprio_set
  /* The lowest best-effort I/O priority, not the idle class: write back
   * must still make progress on a disk that is never idle (the dirty
   * limit and the UPS window depend on it).  It applies to I/O this
   * thread submits itself (direct I/O, reads); buffered writes are
   * written out later by the kernel's own threads.
   */
  if (syscall (SYS_ioprio_set, IOPRIO_WHO_PROCESS, (int) tid,
               RB_IOPRIO (IOPRIO_CLASS_BE, 7)) == -1) {
    /* ignored */
  }
#endif
}

uint64_t
rb_now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t
rb_deadline_ms (int ms)
{
  if (ms < 0)
    return UINT64_MAX;
  return rb_now_ns () + (uint64_t) ms * 1000000;
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
