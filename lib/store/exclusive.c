/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: exclusive use of a file or a block device (exclusive.h). */

#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "error.h"
#include "exclusive.h"

int
rb_lock_file (int fd, bool write)
{
  struct flock fl = {
    .l_type = write ? F_WRLCK : F_RDLCK,
    .l_whence = SEEK_SET,
    .l_start = 0,
    .l_len = 0,                 /* to the end, however large it grows */
  };

  if (fcntl (fd, F_OFD_SETLK, &fl) == 0)
    return 0;
  if (errno == EAGAIN || errno == EACCES)
    return 1;
  return -1;
}

/* Append to buf (always NUL-terminated). */
static void __attribute__ ((format (printf, 3, 4)))
append (char *buf, size_t len, const char *fmt, ...)
{
  size_t used = strnlen (buf, len);
  va_list ap;

  if (used + 1 >= len)
    return;
  va_start (ap, fmt);
  vsnprintf (buf + used, len - used, fmt, ap);
  va_end (ap);
}

/* The command name of pid, or "?". */
static void
comm_of (long pid, char *comm, size_t len)
{
  char path[64];
  FILE *f;

  snprintf (comm, len, "?");
  snprintf (path, sizeof path, "/proc/%ld/comm", pid);
  f = fopen (path, "re");
  if (f == NULL)
    return;
  if (fgets (comm, len, f) == NULL)
    snprintf (comm, len, "?");
  comm[strcspn (comm, "\n")] = '\0';
  fclose (f);
}

/* Does /proc/PID/fdinfo/FD list a lock on the file dev:ino?  Its lock
 * lines name the locked file as "MAJ:MIN:INO" (hex, hex, decimal), so
 * nothing of that file is stat'ed: a hung network file system cannot
 * make the scan hang.
 */
static bool
fd_locks (int fdinfo_dir, const char *fd, uint64_t dev, uint64_t ino)
{
  char line[256];
  bool found = false;
  FILE *f;
  int d;

  d = openat (fdinfo_dir, fd, O_RDONLY | O_CLOEXEC);
  if (d == -1)
    return false;
  f = fdopen (d, "re");
  if (f == NULL) {
    close (d);
    return false;
  }
  while (!found && fgets (line, sizeof line, f)) {
    char *tok, *save = NULL;

    if (strncmp (line, "lock:", 5) != 0)
      continue;
    for (tok = strtok_r (line + 5, " \t\n", &save); tok && !found;
         tok = strtok_r (NULL, " \t\n", &save)) {
      unsigned maj, min;
      uint64_t i;
      char extra;

      if (sscanf (tok, "%x:%x:%" SCNu64 "%c", &maj, &min, &i, &extra) == 3)
        found = maj == major (dev) && min == minor (dev) && i == ino;
    }
  }
  fclose (f);
  return found;
}

/* Does the descriptor /proc/PID/fd/FD refer to block device rdev?  Only
 * targets under /dev are stat'ed (device nodes: never a network file
 * system that could hang).
 */
static bool
fd_is_device (int fd_dir, const char *fd, uint64_t rdev)
{
  char target[256];
  ssize_t n = readlinkat (fd_dir, fd, target, sizeof target - 1);
  struct stat st;

  if (n <= 5)
    return false;
  target[n] = '\0';
  return strncmp (target, "/dev/", 5) == 0 && stat (target, &st) == 0 &&
    S_ISBLK (st.st_mode) && st.st_rdev == rdev;
}

struct match {
  bool block;                   /* a block device user, else a lock holder */
  uint64_t dev, ino, rdev;
};

#define MAX_PIDS 4

/* Processes other than this one with a descriptor matching m; returns
 * how many (at most MAX_PIDS).
 */
static size_t
scan_proc (const struct match *m, long *pids)
{
  DIR *proc = opendir ("/proc");
  struct dirent *d;
  long self = getpid ();
  size_t n = 0;

  if (proc == NULL)
    return 0;
  while (n < MAX_PIDS && (d = readdir (proc)) != NULL) {
    char path[64], *end;
    long pid = strtol (d->d_name, &end, 10);
    struct dirent *e;
    DIR *fds;

    if (*end != '\0' || pid <= 0 || pid == self)
      continue;
    snprintf (path, sizeof path, "/proc/%ld/%s", pid,
              m->block ? "fd" : "fdinfo");
    fds = opendir (path);
    if (fds == NULL)
      continue;
    while ((e = readdir (fds)) != NULL) {
      if (e->d_name[0] == '.')
        continue;
      if (m->block
          ? fd_is_device (dirfd (fds), e->d_name, m->rdev)
          : fd_locks (dirfd (fds), e->d_name, m->dev, m->ino)) {
        pids[n++] = pid;
        break;
      }
    }
    closedir (fds);
  }
  closedir (proc);
  return n;
}

static void
append_pids (char *buf, size_t len, const long *pids, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++) {
    char comm[32];

    comm_of (pids[i], comm, sizeof comm);
    append (buf, len, "%s%ld (%s)", i == 0 ? (n > 1 ? "pids " : "pid ") : ", ",
            pids[i], comm);
  }
}

void
rb_describe_lock_holders (int fd, char *buf, size_t len)
{
  struct match m = { .block = false };
  struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
  struct stat st;
  long pids[MAX_PIDS];
  size_t n = 0;

  buf[0] = '\0';
  if (fstat (fd, &st) == 0) {
    m.dev = st.st_dev;
    m.ino = st.st_ino;
    n = scan_proc (&m, pids);
  }
  /* A POSIX lock's owner is known to the kernel (an OFD lock's is not:
   * l_pid is then -1); /proc may not be readable.
   */
  if (n == 0 && fcntl (fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK &&
      fl.l_pid > 0)
    pids[n++] = fl.l_pid;
  if (n > 0)
    append_pids (buf, len, pids, n);
  else
    append (buf, len, "another process");
}

void
rb_describe_device_users (uint64_t rdev, char *buf, size_t len)
{
  struct match m = { .block = true, .rdev = rdev };
  unsigned maj = major (rdev), min = minor (rdev);
  char path[96], line[4096];
  const char *sep = "";
  long pids[MAX_PIDS];
  struct dirent *d;
  size_t n;
  FILE *f;
  DIR *dir;

  buf[0] = '\0';
  /* mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT ... */
  f = fopen ("/proc/self/mountinfo", "re");
  if (f) {
    while (fgets (line, sizeof line, f)) {
      unsigned a, b;
      char mp[2048];

      if (sscanf (line, "%*u %*u %u:%u %*s %2047s", &a, &b, mp) == 3 &&
          a == maj && b == min) {
        append (buf, len, "%smounted on %s", sep, mp);
        sep = "; ";
      }
    }
    fclose (f);
  }
  /* Stacked devices (device mapper, md RAID, bcache) hold it. */
  snprintf (path, sizeof path, "/sys/dev/block/%u:%u/holders", maj, min);
  dir = opendir (path);
  if (dir) {
    while ((d = readdir (dir)) != NULL) {
      if (d->d_name[0] == '.')
        continue;
      append (buf, len, "%sheld by %s", sep, d->d_name);
      sep = "; ";
    }
    closedir (dir);
  }
  n = scan_proc (&m, pids);
  if (n > 0) {
    append (buf, len, "%sopen in ", sep);
    append_pids (buf, len, pids, n);
  }
}

int
rb_open_block_excl (const char *key, const char *path, int flags,
                    uint64_t rdev)
{
  char who[512];
  int fd = open (path, flags | O_CLOEXEC | O_EXCL);

  if (fd == -1 && errno == EBUSY) {
    rb_describe_device_users (rdev, who, sizeof who);
    rb_set_error (EBUSY, "%s=%s is in use (%s): ramback must be the only "
                  "user of a backing device, or it would overwrite a "
                  "mounted file system or another writer's data; unmount "
                  "it or stop the other user first", key, path,
                  who[0] ? who : "mounted, part of a device mapper or "
                  "RAID device, or opened exclusively by another program");
    return -1;
  }
  if (fd == -1)
    rb_set_error (errno, "%s=%s: open with O_EXCL", key, path);
  return fd;
}
