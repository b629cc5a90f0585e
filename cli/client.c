/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Control-socket client: connect, send a line, read a reply. */

#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "cli.h"
#include "client.h"

/* Longest reply line we accept.  "status json" is well under 4 KiB; a
 * longer line means we are not talking to ramback.
 */
#define MAX_LINE (64 * 1024)

struct ctl {
  int fd;
  char *path;
  char *request;              /* the last request, for messages */
  GString *in;                /* received, not yet consumed */
};

/* Whether the last failure was the plugin being busy or not listening
 * (ctl_failure_transient).  The command is single-threaded.
 */
static bool last_transient;

gboolean
ctl_failure_transient (void)
{
  return last_transient;
}

const char *
ctl_path (const struct ctl *c)
{
  return c->path;
}

int
ctl_fd (const struct ctl *c)
{
  return c->fd;
}

/* Turn connect(2)'s errno into a message that tells the user what to
 * do about it, and into the exit status for that kind of failure.
 */
static void
connect_error (const char *path, int e, GError **err)
{
  struct stat sb;

  switch (e) {
  case ENOENT:
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
                 "%s: no such socket (is nbdkit running with control=%s?)",
                 path, path);
    break;
  case EACCES:
  case EPERM:
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_PERMISSION,
                 "%s: permission denied (the control socket is only "
                 "for the user running nbdkit)", path);
    break;
  case ECONNREFUSED:
    if (stat (path, &sb) == 0 && !S_ISSOCK (sb.st_mode))
      g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
                   "%s: not a socket", path);
    else {
      g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
                   "%s: nobody is listening (stale socket: has nbdkit "
                   "exited?)", path);
      last_transient = true;
    }
    break;
  case EAGAIN:
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
                 "%s: the plugin accepts no more connections for now", path);
    last_transient = true;
    break;
  case ENOTDIR:
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
                 "%s: not a socket (a directory in the path is a file)",
                 path);
    break;
  default:
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
                 "%s: cannot connect: %s", path, g_strerror (e));
  }
}

/* The greeting of an NBD server (newstyle and oldstyle alike). */
#define NBD_MAGIC "NBDMAGIC"
#define NBD_GREETING_WAIT_MS 50

static void
nbd_greeting_error (const char *path, GError **err)
{
  g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
               "%s: this is an NBD socket (nbdkit -U); give the control= "
               "socket", path);
}

struct ctl *
ctl_connect (const char *path, GError **err)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  struct ctl *c;
  int fd;

  last_transient = false;
  if (strlen (path) >= sizeof addr.sun_path) {
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
                 "%s: socket path too long (at most %zu bytes)",
                 path, sizeof addr.sun_path - 1);
    return NULL;
  }
  strcpy (addr.sun_path, path);

  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1) {
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_CONNECT,
                 "socket: %s", g_strerror (errno));
    return NULL;
  }
  /* A Unix stream connect completes or fails at once unless the
   * listen backlog is full; then it blocks, which is acceptable: the
   * plugin serves its backlog quickly or is gone (ECONNREFUSED).
   */
  while (connect (fd, (struct sockaddr *) &addr, sizeof addr) == -1) {
    int e = errno;
    if (e == EINTR && !cli_interrupted)
      continue;
    close (fd);
    connect_error (path, e, err);
    return NULL;
  }

  /* An NBD server speaks first ("NBDMAGIC"), the control socket never
   * (but for a refusal, ERR EBUSY): wait a moment for a greeting, so
   * that an NBD socket is named before we send it a line it would
   * take for the handshake's flags.  A slower one is caught on the
   * reply (nbd_greeting_error).
   */
  {
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    char magic[8];

    if (poll (&pfd, 1, NBD_GREETING_WAIT_MS) == 1 &&
        recv (fd, magic, sizeof magic, MSG_PEEK | MSG_WAITALL) ==
        sizeof magic && memcmp (magic, NBD_MAGIC, sizeof magic) == 0) {
      close (fd);
      nbd_greeting_error (path, err);
      return NULL;
    }
  }

  c = g_new0 (struct ctl, 1);
  c->fd = fd;
  c->path = g_strdup (path);
  c->in = g_string_new (NULL);
  return c;
}

void
ctl_close (struct ctl *c)
{
  if (c == NULL)
    return;
  close (c->fd);
  g_free (c->path);
  g_free (c->request);
  g_string_free (c->in, TRUE);
  g_free (c);
}

static void
lost_error (struct ctl *c, const char *why, GError **err)
{
  g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_LOST,
               "%s: connection lost before the reply to '%s' (%s: "
               "did nbdkit exit?)", c->path, c->request, why);
}

static char *take_line (struct ctl *c);
static int parse_final (struct ctl *c, const char *line, char **errno_name,
                        GError **err);

/* The plugin may refuse a connection (ERR EBUSY) and close it before
 * reading our request, so that sending fails: its reply is still there
 * to read.  True (with *err set) if there is a final ERR line.
 */
static gboolean
salvage_reply (struct ctl *c, GError **err)
{
  char buf[4096], *line;
  ssize_t n;

  while (c->in->len < MAX_LINE &&
         (n = recv (c->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
    g_string_append_len (c->in, buf, n);
  while ((line = take_line (c)) != NULL) {
    int r = parse_final (c, line, NULL, err);
    g_free (line);
    if (r == 0 || r == -2)
      return TRUE;
    if (r == 1)
      return FALSE;
  }
  return FALSE;
}

gboolean
ctl_send (struct ctl *c, const char *request, GError **err)
{
  char *line = g_strconcat (request, "\n", NULL);
  size_t len = strlen (line), done = 0;

  g_free (c->request);
  c->request = g_strdup (request);
  while (done < len) {
    /* MSG_NOSIGNAL: a plugin that went away is an error to report,
     * not a SIGPIPE that kills us without a word.
     */
    ssize_t r = send (c->fd, line + done, len - done, MSG_NOSIGNAL);
    if (r == -1) {
      int e = errno;
      if (e == EINTR && !cli_interrupted)
        continue;
      if (!salvage_reply (c, err))
        lost_error (c, g_strerror (e), err);
      g_free (line);
      return FALSE;
    }
    done += r;
  }
  g_free (line);
  return TRUE;
}

/* Take one complete line out of c->in.  NULL if there is none yet. */
static char *
take_line (struct ctl *c)
{
  char *nl = memchr (c->in->str, '\n', c->in->len);
  size_t n;
  char *line;

  if (nl == NULL)
    return NULL;
  n = nl - c->in->str;
  line = g_strndup (c->in->str, n);
  g_string_erase (c->in, 0, n + 1);
  n = strlen (line);
  if (n > 0 && line[n-1] == '\r')
    line[n-1] = '\0';
  return line;
}

static gboolean
valid_errno_name (const char *s, size_t n)
{
  size_t i;

  if (n < 2 || s[0] != 'E')
    return FALSE;
  for (i = 0; i < n; i++)
    if (!g_ascii_isupper (s[i]) && !g_ascii_isdigit (s[i]) && s[i] != '_')
      return FALSE;
  return TRUE;
}

/* Parse a final line.  Returns 1 for OK, 0 for ERR (with *err set),
 * -1 if the line is not a final line but a data line, -2 if it is a
 * malformed final line (with *err set).
 */
static int
parse_final (struct ctl *c, const char *line, char **errno_name,
             GError **err)
{
  const char *name, *sp, *msg;

  if (strcmp (line, "OK") == 0)
    return 1;
  if (strncmp (line, "ERR ", 4) != 0) {
    /* The protocol promises data lines never begin with these. */
    if (strncmp (line, "OK", 2) == 0 || strncmp (line, "ERR", 3) == 0)
      goto bad;
    return -1;
  }
  name = line + 4;
  sp = strchr (name, ' ');
  if (sp == NULL)
    sp = name + strlen (name);
  if (!valid_errno_name (name, sp - name))
    goto bad;
  msg = *sp ? sp + 1 : "";
  if (errno_name)
    *errno_name = g_strndup (name, sp - name);
  if (sp - name == 5 && strncmp (name, "EBUSY", 5) == 0)
    last_transient = true;
  g_set_error (err, RAMBACK_CLI_ERROR,
               strncmp (name, "ETIMEDOUT", sp - name) == 0 &&
               sp - name == 9 ? CLI_EXIT_TIMEOUT : CLI_EXIT_REQUEST,
               "%s: '%s' failed: %s (%.*s)", c->path, c->request,
               *msg ? msg : "no message", (int) (sp - name), name);
  return 0;

 bad:
  g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_PROTOCOL,
               "%s: reply to '%s' not understood: \"%.60s\"",
               c->path, c->request, line);
  return -2;
}

gboolean
ctl_wait_reply (struct ctl *c, int timeout_ms,
                ctl_tick_fn tick, void *opaque, int interval_ms,
                GPtrArray **lines_ret, char **errno_name, GError **err)
{
  GPtrArray *lines = g_ptr_array_new_with_free_func (g_free);
  gint64 start = g_get_monotonic_time ();
  gint64 deadline = timeout_ms >= 0 ? start + timeout_ms * (gint64) 1000 : -1;
  gint64 next_tick = start + interval_ms * (gint64) 1000;
  char buf[4096];

  for (;;) {
    char *line;
    int r;

    while ((line = take_line (c)) != NULL) {
      r = parse_final (c, line, errno_name, err);
      if (r == -1) {
        if (!g_utf8_validate (line, -1, NULL)) {
          g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_PROTOCOL,
                       "%s: reply to '%s' not understood: not text",
                       c->path, c->request);
          g_free (line);
          goto fail;
        }
        g_ptr_array_add (lines, line);
        continue;
      }
      g_free (line);
      if (r != 1)
        goto fail;
      if (lines_ret)
        *lines_ret = lines;
      else
        g_ptr_array_unref (lines);
      return TRUE;
    }
    if (c->in->len > MAX_LINE) {
      g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_PROTOCOL,
                   "%s: reply to '%s' not understood: line too long",
                   c->path, c->request);
      goto fail;
    }

    /* Wait for more input, the next tick or the deadline. */
    {
      gint64 now = g_get_monotonic_time ();
      gint64 until = deadline;
      struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
      int wait_ms;

      if (tick && (until < 0 || next_tick < until))
        until = next_tick;
      if (until < 0)
        wait_ms = -1;
      else
        wait_ms = until > now ? (until - now + 999) / 1000 : 0;

      r = poll (&pfd, 1, wait_ms);
      if (cli_interrupted) {
        g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_INTERRUPTED,
                     "%s: interrupted while waiting for '%s'",
                     c->path, c->request);
        goto fail;
      }
      if (r == -1) {
        if (errno == EINTR)
          continue;
        lost_error (c, g_strerror (errno), err);
        goto fail;
      }
      now = g_get_monotonic_time ();
      if (r == 0) {
        if (deadline >= 0 && now >= deadline) {
          g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_TIMEOUT,
                       "%s: no reply to '%s' within %.1f s",
                       c->path, c->request, timeout_ms / 1000.0);
          goto fail;
        }
        if (tick && now >= next_tick) {
          tick (opaque);
          next_tick = g_get_monotonic_time () + interval_ms * (gint64) 1000;
        }
        continue;
      }
    }

    {
      ssize_t n = recv (c->fd, buf, sizeof buf, 0);
      if (n == -1) {
        if (errno == EINTR || errno == EAGAIN)
          continue;
        lost_error (c, g_strerror (errno), err);
        goto fail;
      }
      if (n == 0) {
        lost_error (c, c->in->len ? "closed in the middle of a line"
                                  : "closed", err);
        goto fail;
      }
      if (c->in->len == 0 && n >= 8 && memcmp (buf, NBD_MAGIC, 8) == 0) {
        nbd_greeting_error (c->path, err);
        goto fail;
      }
      /* Checked before lines are split: a NUL would cut a line short. */
      if (memchr (buf, '\0', n)) {
        g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_PROTOCOL,
                     "%s: reply to '%s' not understood: binary data",
                     c->path, c->request);
        goto fail;
      }
      g_string_append_len (c->in, buf, n);
    }
  }

 fail:
  g_ptr_array_unref (lines);
  return FALSE;
}

gboolean
ctl_request (struct ctl *c, const char *request, GPtrArray **lines,
             GError **err)
{
  return ctl_send (c, request, err) &&
    ctl_wait_reply (c, CTL_DEFAULT_REPLY_MS, NULL, NULL, 0,
                    lines, NULL, err);
}
