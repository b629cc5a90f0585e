/* SPDX-License-Identifier: GPL-2.0-or-later */
/* fuzz/: the control protocol parser (lib/control.c) against
 * docs/ramback-control.pod.
 *
 * An input is what a client sends on the control socket: request lines
 * ended by \n (a \r before it is dropped), framed as the plugin's
 * control server does (glue/control-server.c); a line longer than
 * RB_CONTROL_MAX_LINE ends the connection.  A final line without its
 * \n is handled as if the client had sent one.  Each request goes to
 * rb_control_request() on a real struct rb (a 1 MiB file store, started,
 * fully populated, nothing dirty), and its reply is checked:
 *
 *  - it is lines of printable ASCII, the last one "OK" or
 *    "ERR <ERRNO> <message>", no earlier line beginning with either;
 *  - a request in the documented grammar gets OK (sync with a timeout
 *    may also time out), with the data lines its request promises, and
 *    mode and trace take effect; anything else gets ERR EINVAL and
 *    nothing more.
 *
 * The grammar is written out here from the man page, independently of
 * control.c, so a parser that accepts or refuses the wrong thing is a
 * crash, not only a parser that overruns a buffer.
 */

#include <config.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "error.h"
#include "ramback.h"

#include "driver.h"

const char fuzz_target_name[] = "control";

static struct rb *rb;

static void
quiet (enum rb_log_level level, const char *msg)
{
  if (fuzz_verbose > 1)
    fprintf (stderr, "ramback: %s\n", msg);
}

void
fuzz_setup (void)
{
  const char *dirs[] = { "/dev/shm", NULL, "/var/tmp", "/tmp" };
  char path[4096];
  struct rb_config c = { .populate = true, .store.tls_verify_peer = -1 };
  size_t i;
  int fd = -1;

  /* tmpfs if there is one: every sync request syncs the store. */
  dirs[1] = getenv ("TMPDIR");
  for (i = 0; fd == -1 && i < sizeof dirs / sizeof dirs[0]; i++) {
    if (dirs[i] == NULL || access (dirs[i], W_OK) == -1)
      continue;
    snprintf (path, sizeof path, "%s/ramback-fuzz-control-XXXXXX", dirs[i]);
    fd = mkstemp (path);
  }
  fuzz_assert (fd >= 0, "mkstemp: %s", rb_strerror (errno));
  /* Nothing is left behind by a child that afl++ kills: the store opens
   * the file through its descriptor.
   */
  unlink (path);
  fuzz_assert (ftruncate (fd, 1048576) == 0, "ftruncate: %s",
               rb_strerror (errno));
  snprintf (path, sizeof path, "/proc/self/fd/%d", fd);

  rb_set_log (quiet);
  c.store.uri = path;
  rb = rb_open (&c);
  fuzz_assert (rb != NULL, "rb_open: %s", rb_get_error ());
  close (fd);
  fuzz_assert (rb_start (rb) == 0, "rb_start: %s", rb_get_error ());
  /* Every input starts from the same state. */
  fuzz_assert (rb_wait_populated (rb, -1) == 0, "%s", rb_get_error ());
}

void
fuzz_teardown (void)
{
  fuzz_assert (rb_close (rb) == 0, "rb_close: %s", rb_get_error ());
}

/* What the man page says a request is. */
enum req {
  R_INVALID,
  R_STATUS, R_STATUS_JSON, R_MODE_WB, R_MODE_WT, R_SYNC, R_SYNC_MS,
  R_WAIT, R_WAIT_MS, R_TRACE_ON, R_TRACE_OFF, R_HELP,
};

/* TIMEOUT-MS: decimal digits that fit an int, without sign or leading
 * zero ("0" itself is fine): "+5", "-0", "05", "0x5" are errors.
 */
static bool
is_timeout (const char *w)
{
  uint64_t v = 0;

  if (*w == '\0' || (w[0] == '0' && w[1] != '\0'))
    return false;
  for (; *w; w++) {
    if (*w < '0' || *w > '9')
      return false;
    v = v * 10 + (*w - '0');
    if (v > INT_MAX)
      return false;
  }
  return true;
}

static enum req
classify (const char *line, size_t linelen)
{
  char buf[RB_CONTROL_MAX_LINE + 2], *w[3], *p;
  int n = 0;

  if (memchr (line, '\0', linelen) != NULL)    /* a NUL anywhere */
    return R_INVALID;
  for (p = (char *) line; *p; p++)
    if ((*p < 0x20 || *p > 0x7e) && *p != '\t')
      return R_INVALID;
  snprintf (buf, sizeof buf, "%s", line);
  for (p = strtok (buf, " \t"); p; p = strtok (NULL, " \t")) {
    if (n == 3)
      return R_INVALID;
    w[n++] = p;
  }
  if (n == 0)
    return R_INVALID;
  if (strcmp (w[0], "status") == 0) {
    if (n == 1)
      return R_STATUS;
    if (n == 2 && strcmp (w[1], "json") == 0)
      return R_STATUS_JSON;
  }
  if (strcmp (w[0], "mode") == 0 && n == 2) {
    if (strcmp (w[1], "writeback") == 0)
      return R_MODE_WB;
    if (strcmp (w[1], "writethrough") == 0)
      return R_MODE_WT;
  }
  if (strcmp (w[0], "sync") == 0) {
    if (n == 1)
      return R_SYNC;
    if (n == 2 && is_timeout (w[1]))
      return R_SYNC_MS;
  }
  if (strcmp (w[0], "wait-populated") == 0) {
    if (n == 1)
      return R_WAIT;
    if (n == 2 && is_timeout (w[1]))
      return R_WAIT_MS;
  }
  if (strcmp (w[0], "trace") == 0 && n == 2) {
    if (strcmp (w[1], "on") == 0)
      return R_TRACE_ON;
    if (strcmp (w[1], "off") == 0)
      return R_TRACE_OFF;
  }
  if (strcmp (w[0], "help") == 0 && n == 1)
    return R_HELP;
  return R_INVALID;
}

static bool
starts (const char *s, const char *prefix)
{
  return strncmp (s, prefix, strlen (prefix)) == 0;
}

static void
check_reply (const char *line, size_t linelen, const char *reply)
{
  enum req want = classify (line, linelen);
  const char *p, *last = reply;
  size_t len, ndata = 0;
  struct rb_stats st;

  fuzz_assert (reply != NULL, "'%s': no reply", line);
  len = strlen (reply);
  fuzz_assert (len > 0 && reply[len - 1] == '\n',
               "'%s': reply does not end in a newline: '%s'", line, reply);
  for (p = reply; *p; p++)
    fuzz_assert ((*p >= 0x20 && *p <= 0x7e) || *p == '\n',
                 "'%s': reply byte 0x%02x at %zu", line,
                 (unsigned char) *p, (size_t) (p - reply));
  /* Find the final line; no line before it looks like one. */
  for (p = reply; p < reply + len; p = strchr (p, '\n') + 1) {
    last = p;
    if (p + strcspn (p, "\n") + 1 < reply + len) {
      fuzz_assert (!starts (p, "OK") && !starts (p, "ERR "),
                   "'%s': a data line looks final: '%s'", line, reply);
      ndata++;
    }
  }

  if (want == R_INVALID) {
    fuzz_assert (ndata == 0 && starts (last, "ERR EINVAL ") &&
                 strlen (last) > strlen ("ERR EINVAL \n"),
                 "'%s' is not a request: want ERR EINVAL <message>, "
                 "got '%s'", line, reply);
    return;
  }
  if (want == R_SYNC_MS && starts (last, "ERR ETIMEDOUT ")) {
    fuzz_assert (ndata == 0, "'%s': data before ERR: '%s'", line, reply);
    return;
  }
  fuzz_assert (strcmp (last, "OK\n") == 0,
               "'%s' is a request: want OK, got '%s'", line, reply);
  switch (want) {
  case R_STATUS:
    fuzz_assert (ndata >= 30 && starts (reply, "mode: "),
                 "'%s': want key: value lines, got '%s'", line, reply);
    break;
  case R_STATUS_JSON:
    fuzz_assert (ndata == 1 && reply[0] == '{' &&
                 strstr (reply, "}\nOK\n") == last - 2,
                 "'%s': want one JSON line, got '%s'", line, reply);
    break;
  case R_HELP:
    fuzz_assert (ndata > 0, "'%s': no help lines", line);
    break;
  default:
    fuzz_assert (ndata == 0, "'%s': unexpected data: '%s'", line, reply);
  }
  rb_get_stats (rb, &st);
  if (want == R_MODE_WB || want == R_MODE_WT)
    fuzz_assert (st.mode == (want == R_MODE_WT ? RB_MODE_WRITETHROUGH
                             : RB_MODE_WRITEBACK),
                 "'%s': the mode did not change", line);
  if (want == R_TRACE_ON || want == R_TRACE_OFF)
    fuzz_assert (st.trace == (want == R_TRACE_ON),
                 "'%s': trace did not change", line);
}

void
fuzz_one (const uint8_t *data, size_t size)
{
  char line[RB_CONTROL_MAX_LINE + 2];
  size_t start = 0;

  while (start < size) {
    const uint8_t *nl = memchr (data + start, '\n', size - start);
    size_t len = nl ? (size_t) (nl - (data + start)) : size - start, n;
    char *reply;

    if (len > RB_CONTROL_MAX_LINE) {
      fuzz_assert (strcmp (rb_control_too_long (),
                           "ERR EINVAL line too long\n") == 0,
                   "too long: %s", rb_control_too_long ());
      break;
    }
    memcpy (line, data + start, len);
    line[len] = '\0';
    n = len;
    if (n > 0 && line[n - 1] == '\r')
      line[--n] = '\0';
    reply = rb_control_request (rb, line, n);
    if (fuzz_verbose)
      fprintf (stderr, "> %s\n%s", line, reply ? reply : "(null)\n");
    check_reply (line, n, reply);
    free (reply);
    start += len + 1;
  }

  /* Leave the state as fuzz_setup made it. */
  rb_set_mode (rb, RB_MODE_WRITEBACK);
  rb_set_trace (rb, false);
}
