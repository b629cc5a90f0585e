/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the control protocol (control.h): every request, every
 * malformed request, and that the JSON status parses with the fields
 * the documentation promises.
 */

#include <config.h>

#undef NDEBUG
#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "control.h"

static struct rb *rb;

static char *
req (const char *line)
{
  char *r = rb_control_request (rb, line);
  g_assert_nonnull (r);
  return r;
}

static void
expect (const char *line, const char *prefix_of_last_line)
{
  char *r = req (line), *last;
  size_t n = strlen (r);

  g_assert_cmpuint (n, >, 0);
  g_assert_cmpint (r[n - 1], ==, '\n');
  r[n - 1] = '\0';
  last = strrchr (r, '\n');
  last = last ? last + 1 : r;
  if (!g_str_has_prefix (last, prefix_of_last_line))
    g_error ("'%s': got '%s', expected '%s...'", line, last,
             prefix_of_last_line);
  g_free (r);
}

static void
test_requests (void)
{
  expect ("status", "OK");
  expect ("status json", "OK");
  expect ("mode writethrough", "OK");
  g_assert_cmpint (rb_get_mode (rb), ==, RB_MODE_WRITETHROUGH);
  expect ("mode   writeback", "OK");
  g_assert_cmpint (rb_get_mode (rb), ==, RB_MODE_WRITEBACK);
  expect ("sync", "OK");
  expect ("sync 5000", "OK");
  expect ("wait-populated 5000", "OK");
  expect ("trace on", "OK");
  expect ("trace off", "OK");
  expect ("help", "OK");
}

static void
test_malformed (void)
{
  static const char *bad[] = {
    "", "   ", "frobnicate", "status xml", "mode", "mode fast",
    "mode writeback extra", "sync -1", "sync 12abc", "sync 1 2",
    "trace maybe", "help me", "status\001", "a b c d e f",
    "wait-populated 99999999999999999999",
  };
  size_t i;

  for (i = 0; i < G_N_ELEMENTS (bad); i++)
    expect (bad[i], "ERR EINVAL ");
  /* Still serving after all that. */
  expect ("status", "OK");
  g_assert_cmpstr (rb_control_too_long (), ==, "ERR EINVAL line too long\n");
}

static void
test_json (void)
{
  static const char *fields[] = {
    "mode", "fsync", "trace", "populated", "progress", "size", "chunk_size",
    "chunks", "loaded_chunks", "loaded_bytes", "stored_bytes",
    "dirty_chunks", "dirty_bytes", "inflight_chunks", "inflight_bytes",
    "unsynced_bytes", "dirty_max", "dirty_max_config", "ups_window",
    "flush_bandwidth", "populate_bandwidth", "drain_seconds", "flush_rate",
    "populate_rate", "store", "store_state", "store_connections",
    "store_errors", "sync_errors", "syncs", "throttled", "last_errno",
    "last_error", "uptime",
  };
  char *r = req ("status json");
  char *nl = strchr (r, '\n');
  size_t i;

  g_assert_nonnull (nl);
  *nl = '\0';
  g_assert_cmpint (r[0], ==, '{');
  g_assert_cmpint (r[strlen (r) - 1], ==, '}');
  for (i = 0; i < G_N_ELEMENTS (fields); i++) {
    char *key = g_strdup_printf ("\"%s\":", fields[i]);
    if (strstr (r, key) == NULL)
      g_error ("status json lacks %s: %s", key, r);
    g_free (key);
  }
  g_assert_nonnull (strstr (r, "\"size\":1048576,"));
  g_assert_nonnull (strstr (r, "\"mode\":\"writeback\""));
  g_assert_cmpstr (nl + 1, ==, "OK\n");
  g_free (r);
}

int
main (int argc, char *argv[])
{
  char path[] = "/var/tmp/ramback-control-XXXXXX";
  struct rb_config c = { .store.uri = path, .populate = true,
                         .store.tls_verify_peer = -1 };
  int fd, r;

  fd = mkstemp (path);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (ftruncate (fd, 1048576), ==, 0);
  close (fd);
  rb = rb_open (&c);
  g_assert_nonnull (rb);
  g_assert_cmpint (rb_start (rb), ==, 0);

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/control/requests", test_requests);
  g_test_add_func ("/control/malformed", test_malformed);
  g_test_add_func ("/control/json", test_json);
  r = g_test_run ();
  g_assert_cmpint (rb_close (rb), ==, 0);
  unlink (path);
  return r;
}
