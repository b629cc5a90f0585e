/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the device's life as an operator sees it (notify.h).
 *
 * The engine reports its own events (a mode change, a journal replayed,
 * a RAM image resumed, a backing store error) through rb_set_log(), and
 * glue.c prints those of RB_LOG_INFO and RB_LOG_WARN on stderr at any
 * log level.  What no single engine call knows is said here, from
 * snapshots of rb_get_stats():
 *
 *   start        size, backing store, mode, journal, where the image
 *                comes from (populated, resumed after a clean stop or a
 *                crash, journal transactions replayed)
 *   populated    how long loading the image took, and at what rate
 *   recovered    the backing store answers again after errors
 *   clean stop   "wrote back N bytes in T s, store synced: safe to
 *                power off", or that it is not
 *
 * and, when systemd started nbdkit (NOTIFY_SOCKET, Type=notify):
 * READY=1 once serving, STOPPING=1 at the clean stop, and a STATUS=
 * line for "systemctl status" refreshed every second by the monitor
 * thread: populating 45 %, dirty bytes and the time to drain them,
 * draining N left.  Without NOTIFY_SOCKET sd_notify() does nothing, and
 * an idle monitor (populated, the store healthy) looks once a minute.
 *
 * The status line also counts the NBD clients connected: nbdkit 1.32
 * does not act on SIGTERM while a client that sent requests stays, so
 * a stop that waits for one says so ("1 client connected").
 *
 * Locking: lock protects quit, draining and the snapshots taken for the
 * clean stop; cond wakes the monitor thread when quit is set.  clients
 * is atomic.  The monitor thread owns the rest of its state
 * (populate_logged, errors_seen).
 */

#include <config.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "ramback.h"
#include "notify.h"

#define MIB (1024.0 * 1024.0)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static bool quit;               /* the monitor thread must return */
static bool draining;           /* the clean stop's drain is running */
static bool running;            /* the monitor thread was started */
static pthread_t monitor;
static struct rb *mon_rb;
static uint64_t stop_stored;    /* stored + zeroed bytes when the drain
                                   began */
static uint64_t stop_dirty;     /* dirty_bytes then */
static double stop_t0;          /* and when, monotonic seconds */
static int clients;             /* NBD clients connected (atomic) */
static bool notify_socket;      /* started by systemd (NOTIFY_SOCKET) */

void
ramback_info (const char *fmt, ...)
{
  char msg[1024];
  va_list args;

  va_start (args, fmt);
  vsnprintf (msg, sizeof msg, fmt, args);
  va_end (args);
  fprintf (stderr, "ramback: %s\n", msg);
}

static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *
mode_name (enum rb_mode m)
{
  return m == RB_MODE_WRITETHROUGH ? "writethrough" : "writeback";
}

/* "12.5 MiB", "0 bytes" */
static const char *
human (char *buf, size_t len, uint64_t bytes)
{
  if (bytes < 1024 * 1024)
    snprintf (buf, len, "%" PRIu64 " bytes", bytes);
  else
    snprintf (buf, len, "%.1f MiB", bytes / MIB);
  return buf;
}

void
ramback_notify_client (int delta)
{
  __atomic_add_fetch (&clients, delta, __ATOMIC_RELAXED);
}

/* The STATUS= line for a snapshot. */
static void
status_line (const struct rb_stats *st, bool drain, char *buf, size_t len)
{
  int nc = __atomic_load_n (&clients, __ATOMIC_RELAXED);
  char d[32], s[32], err[320] = "";
  size_t n;

  if (st->store_state != RB_STORE_OK)
    snprintf (err, sizeof err, "backing store %s (%" PRIu64 " errors%s%s), ",
              st->store_state == RB_STORE_OFFLINE ? "offline" : "failing",
              st->store_errors, st->last_error[0] ? ": " : "",
              st->last_error);
  if (drain) {
    snprintf (buf, len, "%sstopping: draining, %s left",
              err, human (d, sizeof d, st->dirty_bytes + st->inflight_bytes));
    return;
  }
  n = snprintf (buf, len, "%s%s", err, mode_name (st->mode));
  if (n < len && !st->populated)
    n += snprintf (buf + n, len - n, ", populating %" PRIu64 " %% (%s of %s)",
                   st->chunks ? st->loaded_chunks * 100 / st->chunks : 100,
                   human (s, sizeof s, st->loaded_chunks * st->chunk_size),
                   human (d, sizeof d, st->size));
  if (n < len)
    n += snprintf (buf + n, len - n, ", dirty %s",
                   human (d, sizeof d, st->dirty_bytes));
  if (n < len && st->dirty_bytes && st->flush_bandwidth)
    n += snprintf (buf + n, len - n, ", drains in %.1f s at %.1f MiB/s",
                   (double) st->dirty_bytes / st->flush_bandwidth,
                   st->flush_bandwidth / MIB);
  if (n < len)
    snprintf (buf + n, len - n, ", %d client%s connected",
              nc, nc == 1 ? "" : "s");
}

static void *
monitor_thread (void *arg)
{
  struct rb *rb = arg;
  struct rb_stats st;
  bool populate_logged, drain;
  uint64_t errors_seen;         /* store_errors at the last recovery */
  char line[512];

  rb_get_stats (rb, &st);
  populate_logged = st.populated;
  errors_seen = st.store_errors;
  for (;;) {
    struct timespec until;

    rb_get_stats (rb, &st);
    {
      pthread_mutex_lock (&lock);
      drain = draining;
      pthread_mutex_unlock (&lock);
    }
    if (!populate_logged && st.populated) {
      char b[32];

      populate_logged = true;
      ramback_info ("populated: the whole image is in RAM after %.1f s, "
                    "%s read from the backing store (%.1f MiB/s)",
                    st.uptime, human (b, sizeof b, st.loaded_bytes),
                    st.uptime > 0 ? st.loaded_bytes / MIB / st.uptime : 0.0);
    }
    /* Errors since the last look (or still failing then), and the
     * store answers again: however short the failure, it is reported.
     */
    if (st.store_state == RB_STORE_OK && st.store_errors > errors_seen) {
      ramback_info ("backing store recovered after %" PRIu64 " errors: "
                    "writing back again", st.store_errors - errors_seen);
      errors_seen = st.store_errors;
    }
    status_line (&st, drain, line, sizeof line);
    sd_notifyf (0, "STATUS=%s", line);

    pthread_mutex_lock (&lock);
    clock_gettime (CLOCK_REALTIME, &until);
    /* Every second while there is something to follow: systemd's
     * status line, populate, a failing store, a drain.  Otherwise a
     * minute: an idle server must not wake up for nothing.
     */
    until.tv_sec += notify_socket || !st.populated || drain ||
      st.store_state != RB_STORE_OK || st.store_errors > errors_seen
      ? 1 : 60;
    while (!quit &&
           pthread_cond_timedwait (&cond, &lock, &until) == 0)
      ;
    if (quit) {
      pthread_mutex_unlock (&lock);
      return NULL;
    }
    pthread_mutex_unlock (&lock);
  }
}

void
ramback_notify_start (struct rb *rb, const char *what)
{
  struct rb_stats st;
  char size[32], from[160], jn[320];

  rb_get_stats (rb, &st);
  if (st.image_source && strcmp (st.image_source, "resumed-clean") == 0)
    snprintf (from, sizeof from, "resumed from the RAM image of a clean "
              "stop (%" PRIu64 " chunks)", st.resumed_chunks);
  else if (st.image_source && strcmp (st.image_source, "resumed-crash") == 0)
    snprintf (from, sizeof from, "resumed from the RAM image after a crash "
              "(%" PRIu64 " chunks, %" PRIu64 " of them to write back)",
              st.resumed_chunks, st.resumed_chunks_to_write);
  else
    snprintf (from, sizeof from, "%s from the backing store",
              st.populated ? "loaded" : "populating");
  if (st.journal)
    snprintf (jn, sizeof jn, "journal=%s (%" PRIu64 " transactions "
              "replayed at start)", st.journal, st.journal_replayed);
  else
    snprintf (jn, sizeof jn, "no journal");
  ramback_info ("started: %s, backing store %s (%s), %s, fsync=%s, %s; "
                "image %s",
                human (size, sizeof size, st.size), what,
                st.store_type ? st.store_type : "?", mode_name (st.mode),
                st.fsync_wait ? "wait" : "ignore", jn, from);

  mon_rb = rb;
  notify_socket = getenv ("NOTIFY_SOCKET") != NULL;
  if (pthread_create (&monitor, NULL, monitor_thread, rb) == 0)
    running = true;
  else
    ramback_info ("no status monitor (pthread_create failed)");
  sd_notify (0, "READY=1");
}

void
ramback_notify_draining (void)
{
  struct rb_stats st;
  char d[32];

  if (mon_rb == NULL)
    return;
  rb_get_stats (mon_rb, &st);
  pthread_mutex_lock (&lock);
  if (draining) {               /* the filter's stop signal began it */
    pthread_mutex_unlock (&lock);
    return;
  }
  draining = true;
  stop_stored = st.stored_bytes + st.zeroed_bytes;
  stop_dirty = st.dirty_bytes + st.inflight_bytes;
  stop_t0 = now ();
  pthread_mutex_unlock (&lock);
  sd_notifyf (0, "STOPPING=1\nSTATUS=stopping: draining, %s left",
              human (d, sizeof d, stop_dirty));
  ramback_info ("clean stop: writing back %s", human (d, sizeof d, stop_dirty));
}

void
ramback_notify_stopped (bool ok)
{
  struct rb_stats st;
  double t;

  if (mon_rb == NULL)
    return;
  pthread_mutex_lock (&lock);
  quit = true;
  pthread_cond_broadcast (&cond);
  pthread_mutex_unlock (&lock);
  if (running)
    pthread_join (monitor, NULL);
  running = false;
  rb_get_stats (mon_rb, &st);
  t = now () - stop_t0;
  if (ok) {
    ramback_info ("clean stop: wrote back %" PRIu64 " bytes in %.1f s, "
                  "store synced: safe to power off",
                  st.stored_bytes + st.zeroed_bytes - stop_stored, t);
    sd_notify (0, "STATUS=stopped: everything written back, store synced");
  }
  else {
    sd_notifyf (0, "STATUS=stopped: NOT everything was written back: %s",
                st.last_error);
  }
  mon_rb = NULL;
}
