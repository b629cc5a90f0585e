/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback sync and wait-populated: a long request on one connection,
 * with a progress bar on a terminal.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>

#include "cli.h"
#include "client.h"
#include "format.h"
#include "result.h"
#include "status.h"

/* How often progress bars are redrawn while a request waits. */
#define PROGRESS_INTERVAL_MS 200

/* A sync/wait-populated reply may take this much longer than the
 * --timeout given to the plugin before we stop waiting for it: the
 * plugin enforces the timeout, this only bounds a hung plugin.
 */
#define REPLY_GRACE_MS 10000

/* sync, wait-populated: a long request on one connection while a
 * second connection polls status for the progress bar.
 */

enum wait_kind { WAIT_SYNC, WAIT_POPULATED };

struct wait_state {
  enum wait_kind kind;
  struct ctl *poll;           /* second connection, NULL: no progress */
  uint64_t pending0;          /* sync: bytes to write back at the start */
  uint64_t stored0;           /* sync: status_written_back at the start */
  bool drawn;
};

static double
sync_fraction (const struct wait_state *w, const struct status *st)
{
  uint64_t stored = status_written_back (st);
  uint64_t done = stored > w->stored0 ? stored - w->stored0 : 0;

  return w->pending0 ? MIN (1.0, (double) done / w->pending0) : 1.0;
}

static void
wait_draw (struct wait_state *w, const struct status *st, bool final)
{
  GString *d = g_string_new (NULL);
  double frac;

  if (w->kind == WAIT_SYNC) {
    uint64_t stored = status_written_back (st);
    uint64_t done = stored > w->stored0 ? stored - w->stored0 : 0;
    uint64_t bw = status_u64 (st, "flush_bandwidth");

    frac = final ? 1 : sync_fraction (w, st);
    format_size (d, final ? w->pending0 : MIN (done, w->pending0));
    g_string_append (d, " of ");
    format_size (d, w->pending0);
    if (!final) {
      g_string_append (d, ", ");
      format_rate (d, bw);
      g_string_append (d, ", ");
      format_duration (d, bw ? (double) (w->pending0 - MIN (done, w->pending0))
                              / bw : -1);
      g_string_append (d, " left");
    }
  }
  else {
    uint64_t chunks = status_u64 (st, "chunks");
    uint64_t loaded = status_u64 (st, "loaded_chunks");
    uint64_t bw = status_u64 (st, "populate_bandwidth");

    frac = final ? 1 : (chunks ? (double) loaded / chunks : 1);
    format_size (d, final ? status_u64 (st, "size")
                          : loaded * status_u64 (st, "chunk_size"));
    g_string_append (d, " of ");
    format_size (d, status_u64 (st, "size"));
    if (!final) {
      g_string_append (d, ", ");
      format_rate (d, bw);
      g_string_append (d, ", ");
      format_duration (d, bw ? (double) (chunks - MIN (loaded, chunks))
                       * status_u64 (st, "chunk_size") / bw : -1);
      g_string_append (d, " left");
    }
  }
  progress_draw (stderr, w->kind == WAIT_SYNC ? "sync    " : "populate",
                 frac, d->str);
  w->drawn = true;
  g_string_free (d, TRUE);
}

static void
wait_tick (void *opaque)
{
  struct wait_state *w = opaque;
  GError *err = NULL;
  struct status *st;

  if (w->poll == NULL)
    return;
  st = status_fetch (w->poll, &err);
  if (st == NULL) {
    /* The main connection will report what went wrong. */
    g_clear_error (&err);
    ctl_close (w->poll);
    w->poll = NULL;
    return;
  }
  wait_draw (w, st, false);
  status_free (st);
}

/* Send REQUEST [timeout-ms] on c and wait for its reply, with a
 * progress bar on a terminal.  Returns the status after success.
 */
static struct status *
wait_request (struct ctl *c, enum wait_kind kind,
              const struct status *st0, double *seconds, GError **err)
{
  struct wait_state w = { .kind = kind };
  int ms = cli_timeout_ms ();
  const char *verb = kind == WAIT_SYNC ? "sync" : "wait-populated";
  char *req = ms >= 0 ? g_strdup_printf ("%s %d", verb, ms) : g_strdup (verb);
  struct status *st = NULL;
  double t0 = cli_now ();
  GError *perr = NULL;
  char *errno_name = NULL;
  gboolean ok;

  w.pending0 = status_pending_bytes (st0);
  w.stored0 = status_written_back (st0);
  if (cli_show_progress ()) {
    w.poll = ctl_connect (ctl_path (c), &perr);
    g_clear_error (&perr);
    if (w.poll)
      wait_draw (&w, st0, false);
  }

  ok = ctl_send (c, req, err) &&
    ctl_wait_reply (c, ms >= 0 ? ms + REPLY_GRACE_MS : -1,
                    w.poll ? wait_tick : NULL, &w, PROGRESS_INTERVAL_MS,
                    NULL, &errno_name, err);
  *seconds = cli_now () - t0;
  if (ok)
    st = status_fetch (c, err);
  if (w.drawn) {
    if (st)
      wait_draw (&w, st, true);
    progress_done (stderr);
  }

  /* The plugin kept the timeout (ETIMEDOUT; if it did not answer at
   * all the connection is no use any more): say how far it got, as the
   * drain or populate goes on.
   */
  if (!ok && errno_name && strcmp (errno_name, "ETIMEDOUT") == 0) {
    struct status *now = status_fetch (c, &perr);
    GString *m = g_string_new (NULL);

    g_string_append_printf (m, "%s: %s did not finish within %.1f s",
                            ctl_path (c), verb, opt_timeout);
    if (now && kind == WAIT_SYNC) {
      g_string_append (m, " (");
      format_size (m, status_pending_bytes (now));
      g_string_append (m, " still dirty; write back goes on)");
    }
    else if (now)
      g_string_append_printf (m, " (%.1f%% in RAM; populate goes on)",
                              100 * status_double (now, "progress"));
    g_clear_error (&perr);
    status_free (now);
    g_clear_error (err);
    g_set_error_literal (err, RAMBACK_CLI_ERROR, CLI_EXIT_TIMEOUT, m->str);
    g_string_free (m, TRUE);
  }
  ctl_close (w.poll);
  g_free (errno_name);
  g_free (req);
  return st;
}

gboolean
do_sync (struct ctl *c, struct sync_result *r, GError **err)
{
  struct status *st0 = status_fetch (c, err), *st1;

  if (st0 == NULL)
    return FALSE;
  st1 = wait_request (c, WAIT_SYNC, st0, &r->seconds, err);
  if (st1) {
    uint64_t s0 = status_u64 (st0, "stored_bytes");
    uint64_t s1 = status_u64 (st1, "stored_bytes");
    r->pending_bytes = status_pending_bytes (st0);
    r->stored_bytes = s1 > s0 ? s1 - s0 : 0;
    r->dirty_after = status_pending_bytes (st1);
  }
  status_free (st0);
  status_free (st1);
  return st1 != NULL;
}

void
sync_human (GString *o, const struct sync_result *r)
{
  format_size (o, r->stored_bytes);
  g_string_append (o, " written back in ");
  format_duration (o, r->seconds);
}

gboolean
cmd_sync (char **args, GError **err)
{
  const char *socket = args[0];
  struct ctl *c = ctl_connect (socket, err);
  struct sync_result r;

  if (c == NULL)
    return FALSE;
  if (!do_sync (c, &r, err)) {
    ctl_close (c);
    return FALSE;
  }
  ctl_close (c);
  if (opt_json) {
    GString *o = result_new ("sync", socket);
    result_seconds (o, "seconds", r.seconds);
    result_u64 (o, "pending_bytes", r.pending_bytes);
    result_u64 (o, "stored_bytes", r.stored_bytes);
    result_u64 (o, "dirty_bytes", r.dirty_after);
    result_print (o);
  }
  else {
    GString *o = g_string_new ("synced: ");
    sync_human (o, &r);
    g_string_append_c (o, '\n');
    fputs (o->str, stdout);
    g_string_free (o, TRUE);
  }
  return TRUE;
}

gboolean
cmd_wait_populated (char **args, GError **err)
{
  const char *socket = args[0];
  struct ctl *c = ctl_connect (socket, err);
  struct status *st0, *st1 = NULL;
  double seconds;

  if (c == NULL)
    return FALSE;
  st0 = status_fetch (c, err);
  if (st0)
    st1 = wait_request (c, WAIT_POPULATED, st0, &seconds, err);
  ctl_close (c);
  status_free (st0);
  if (st1 == NULL)
    return FALSE;
  if (opt_json) {
    GString *o = result_new ("wait-populated", socket);
    result_seconds (o, "seconds", seconds);
    result_bool (o, "populated", status_bool (st1, "populated"));
    result_u64 (o, "size", status_u64 (st1, "size"));
    result_u64 (o, "loaded_chunks", status_u64 (st1, "loaded_chunks"));
    result_u64 (o, "loaded_bytes", status_u64 (st1, "loaded_bytes"));
    result_print (o);
  }
  else {
    GString *o = g_string_new ("populated: ");
    format_size (o, status_u64 (st1, "size"));
    g_string_append (o, " in RAM (waited ");
    format_duration (o, seconds);
    g_string_append (o, ")\n");
    fputs (o->str, stdout);
    g_string_free (o, TRUE);
  }
  status_free (st1);
  return TRUE;
}
