/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The filter's stop: write back before nbdkit begins to shut down.
 *
 * nbdkit 1.32 sets its quit flag in the handler of SIGINT, SIGQUIT,
 * SIGTERM and SIGHUP.  From then on nbdkit_nanosleep fails with
 * ESHUTDOWN, so a filter below ramback that sleeps (delay, rate, the
 * retry filter's back-off) refuses every request, and a write back left
 * for .cleanup could never finish.  So, once nbdkit has installed its
 * handlers (they are set after .get_ready, before .after_fork), the
 * filter installs its own for those signals:
 *
 *   - the first signal wakes a thread of ours, while nbdkit still
 *     serves: it switches to writethrough (so that clients' new writes
 *     reach the plugin too and the drain converges) and syncs until
 *     everything is written back and the plugin has synced it; then it
 *     asks nbdkit to shut down (nbdkit_shutdown), and .cleanup finds
 *     nothing left to write;
 *   - a signal during the drain means "stop now": the thread gives up
 *     and shuts nbdkit down at once.  .cleanup then tries what is left;
 *     where the plugin's filters refuse, the engine gives up at once
 *     and says so (flush.c), and a ram= image is kept for the next
 *     start to resume.
 *
 * The handler only writes the signal number to a pipe (async-signal
 * safe); everything else runs on the thread.  Other ways nbdkit shuts
 * down (--exit-with-parent, the last client of -s going away) reach
 * .cleanup directly, as before.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "ramback.h"
#include "notify.h"
#include "stop.h"

static const int stop_signals[] = { SIGINT, SIGQUIT, SIGTERM, SIGHUP };
#define NSIG_STOP (sizeof stop_signals / sizeof stop_signals[0])

static int sig_pipe[2] = { -1, -1 };
static pthread_t drainer;
static bool drainer_running;
static struct rb *stop_rb;

static void
on_stop_signal (int sig)
{
  int saved = errno;
  unsigned char c = (unsigned char) sig;

  if (write (sig_pipe[1], &c, 1) == -1) {
    /* The pipe is full: a stop is on its way already. */
  }
  errno = saved;
}

/* Wait for a byte (a signal) for up to timeout_ms (-1: for ever).
 * Returns the signal, 0 on time out, -1 when the pipe is closed.
 */
static int
next_signal (int timeout_ms)
{
  struct pollfd p = { .fd = sig_pipe[0], .events = POLLIN };
  unsigned char c;
  ssize_t r;

  if (poll (&p, 1, timeout_ms) <= 0)
    return 0;
  do
    r = read (sig_pipe[0], &c, 1);
  while (r == -1 && errno == EINTR);
  return r == 1 ? c : -1;
}

static void *
drainer_main (void *arg)
{
  int sig, again;
  bool warned = false;

  (void) arg;
  while ((sig = next_signal (-1)) == 0)
    ;
  if (sig < 0)
    return NULL;                /* stop_intercept_end: no signal came */
  ramback_info ("stop requested (signal %d): writing back before nbdkit "
                "shuts down; a second signal stops at once", sig);
  ramback_notify_draining ();
  rb_begin_stop_drain (stop_rb);
  if (rb_set_mode (stop_rb, RB_MODE_WRITETHROUGH) == -1)
    nbdkit_error ("stop: %s", rb_get_error ());
  for (;;) {
    if (rb_sync (stop_rb, 200) == 0) {
      ramback_info ("stop: everything is written back and synced");
      break;
    }
    if (rb_get_errno () != ETIMEDOUT && !warned) {
      nbdkit_error ("stop: write back is failing (%s); still trying: a "
                    "second signal stops at once", rb_get_error ());
      warned = true;
    }
    if ((again = next_signal (0)) != 0) {
      if (again > 0)
        nbdkit_error ("stop: second signal (%d): stopping without waiting "
                      "for the write back", again);
      break;
    }
  }
  nbdkit_shutdown ();
  return NULL;
}

int
stop_intercept_start (struct rb *rb)
{
  struct sigaction sa;
  size_t i;
  int err;

  if (pipe2 (sig_pipe, O_CLOEXEC | O_NONBLOCK) == -1) {
    nbdkit_error ("stop: pipe2: %m");
    return -1;
  }
  stop_rb = rb;
  err = pthread_create (&drainer, NULL, drainer_main, NULL);
  if (err) {
    errno = err;
    nbdkit_error ("stop: pthread_create: %m");
    close (sig_pipe[0]);
    close (sig_pipe[1]);
    sig_pipe[0] = sig_pipe[1] = -1;
    return -1;
  }
  drainer_running = true;
  /* The reading end blocks in poll, not in read. */
  memset (&sa, 0, sizeof sa);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_stop_signal;
  sigemptyset (&sa.sa_mask);
  for (i = 0; i < NSIG_STOP; i++)
    sigaction (stop_signals[i], &sa, NULL);
  return 0;
}

void
stop_intercept_end (void)
{
  struct sigaction sa;
  size_t i;

  if (!drainer_running)
    return;
  /* nbdkit is shutting down: signals go back to its handler's effect
   * (nothing more to do than what the quit flag does).
   */
  memset (&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  for (i = 0; i < NSIG_STOP; i++)
    sigaction (stop_signals[i], &sa, NULL);
  close (sig_pipe[1]);
  pthread_join (drainer, NULL);
  close (sig_pipe[0]);
  sig_pipe[0] = sig_pipe[1] = -1;
  drainer_running = false;
}
