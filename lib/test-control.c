/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the control protocol (control.h): every request, every
 * malformed request (NUL bytes included), that the JSON status parses
 * with the fields the documentation promises, and that the text status
 * stays one "key: value" line per field whatever its strings hold.
 */

#include <config.h>

#undef NDEBUG
#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "internal.h"

static struct rb *rb;

static char *
req_len (const char *line, size_t len)
{
  char *r = rb_control_request (rb, line, len);
  g_assert_nonnull (r);
  return r;
}

static char *
req (const char *line)
{
  return req_len (line, strlen (line));
}

static void
expect_len (const char *line, size_t len, const char *prefix_of_last_line)
{
  char *r = req_len (line, len), *last;
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
expect (const char *line, const char *prefix_of_last_line)
{
  expect_len (line, strlen (line), prefix_of_last_line);
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
  /* 0: check now, without waiting.  Nothing is dirty or unsynced. */
  expect ("sync 0", "OK");
  expect ("wait-populated 0", "OK");
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
    /* Sloppy numbers: one form only, plain decimal digits. */
    "sync -0", "sync +5", "sync 0x5", "sync 5s", "sync 05", "sync 5.0",
    "sync 1e3", "sync 00", "sync -", "sync 2147483648",
    "wait-populated -0", "wait-populated +5", "wait-populated 0x5",
  };
  size_t i;

  for (i = 0; i < G_N_ELEMENTS (bad); i++)
    expect (bad[i], "ERR EINVAL ");
  /* The message says which form is accepted. */
  expect ("sync +5", "ERR EINVAL sync: '+5' is not a number of "
          "milliseconds (digits only");
  /* A NUL byte anywhere: the line is not cut short there. */
  expect_len ("mode writethrough\0 junk \xff", 25, "ERR EINVAL ");
  expect_len ("mode writethrough\0", 18, "ERR EINVAL ");
  expect_len ("\0mode writethrough", 18, "ERR EINVAL ");
  expect_len ("status\0", 7, "ERR EINVAL ");
  expect_len ("\0", 1, "ERR EINVAL ");
  g_assert_cmpint (rb_get_mode (rb), ==, RB_MODE_WRITEBACK);
  /* The length is the line: what follows is not part of it. */
  expect_len ("status json\nmode writethrough", 11, "OK");
  g_assert_cmpint (rb_get_mode (rb), ==, RB_MODE_WRITEBACK);
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
    "written_bytes", "zeroed_bytes", "dirty_chunks", "dirty_bytes", "inflight_chunks",
    "inflight_bytes", "unsynced_bytes", "dirty_max", "dirty_max_config",
    "ups_window",
    "flush_bandwidth", "populate_bandwidth", "drain_seconds", "flush_rate",
    "populate_rate", "store", "store_state", "store_connections",
    "store_errors", "sync_errors", "syncs", "throttled", "held_back", "last_errno",
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

/* Strings in the text status are escaped: a newline in an error (or a
 * path) must not end the line, and an "OK" after it must not end the
 * reply.
 */
static void
test_text_escaping (void)
{
  char *r, **lines;
  size_t i, n;
  bool seen = false;

  rbi_record_error (rb, EIO, "x\nOK\nERR EIO y\\z\x1b\t\r");
  r = req ("status");
  lines = g_strsplit (r, "\n", -1);
  n = g_strv_length (lines);
  g_assert_cmpuint (n, >=, 3);
  g_assert_cmpstr (lines[n - 1], ==, "");
  g_assert_cmpstr (lines[n - 2], ==, "OK");
  for (i = 0; i + 2 < n; i++) {
    const char *p = strstr (lines[i], ": "), *q;
    if (p == NULL || p == lines[i])
      g_error ("text status line '%s' is not 'key: value'", lines[i]);
    for (q = lines[i]; q < p; q++)
      if (!g_ascii_islower (*q) && *q != '_')
        g_error ("text status line '%s': bad key", lines[i]);
    for (q = lines[i]; *q; q++)
      if (!g_ascii_isprint (*q))
        g_error ("text status line '%s': byte 0x%02x", lines[i],
                 (unsigned char) *q);
    if (g_str_has_prefix (lines[i], "last_error: ")) {
      g_assert_cmpstr (lines[i], ==,
                       "last_error: x\\nOK\\nERR EIO y\\\\z\\x1b\\t\\r");
      seen = true;
    }
  }
  g_assert_true (seen);
  g_strfreev (lines);
  g_free (r);
  /* JSON has its own escaping, of the same text. */
  r = req ("status json");
  g_assert_nonnull (strstr (r, "\"last_error\":\"x\\u000aOK\\u000aERR EIO "
                            "y\\\\z\\u001b\\u0009\\u000d\","));
  g_free (r);
}

/* What a reserved slot serves (control.h): the requests of "ramback
 * mode" and "ramback ups", nothing that would settle there.
 */
static bool
reserved_allows (const char *const *lines)
{
  struct rb_control_reserved r = { 0 };
  size_t i;

  for (i = 0; lines[i]; i++)
    if (rb_control_reserved_refusal (&r, lines[i], strlen (lines[i])))
      return false;
  return true;
}

static void
test_reserved (void)
{
  static const char *const mode[] = {
    "status json", "mode writethrough", "status json", NULL };
  static const char *const lowbatt[] = {
    "status json", "mode writethrough", "status json", "sync 120000",
    "status json", "status json", NULL };
  static const char *const bare_mode[] = { " mode\twriteback", "sync", NULL };
  static const char *const status_once[] = { "status", NULL };
  static const char *const watch[] = { "status json", "status json", NULL };
  static const char *const sync[] = { "status json", "sync", NULL };
  static const char *const sync_first[] = { "sync", NULL };
  static const char *const trace[] = { "trace on", NULL };
  static const char *const help[] = { "help", "mode writeback", NULL };
  static const char *const modeish[] = { "modes writeback", NULL };
  struct rb_control_reserved r = { 0 };
  const char *refusal;

  g_assert_true (reserved_allows (mode));
  g_assert_true (reserved_allows (lowbatt));
  g_assert_true (reserved_allows (bare_mode));
  g_assert_true (reserved_allows (status_once));
  g_assert_false (reserved_allows (watch));
  g_assert_false (reserved_allows (sync));
  g_assert_false (reserved_allows (sync_first));
  g_assert_false (reserved_allows (trace));
  g_assert_false (reserved_allows (help));
  g_assert_false (reserved_allows (modeish));
  refusal = rb_control_reserved_refusal (&r, "wait-populated", 14);
  g_assert_nonnull (refusal);
  g_assert_true (g_str_has_prefix (refusal, "ERR EBUSY "));
  /* One line. */
  g_assert_true (strchr (refusal, '\n') == refusal + strlen (refusal) - 1);
}

int
main (int argc, char *argv[])
{
  /* A backing file whose name holds a newline and an "OK" line. */
  char path[] = "/var/tmp/ramback-control-\nOK\n-XXXXXX";
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
  g_test_add_func ("/control/text-escaping", test_text_escaping);
  g_test_add_func ("/control/reserved", test_reserved);
  r = g_test_run ();
  g_assert_cmpint (rb_close (rb), ==, 0);
  unlink (path);
  return r;
}
