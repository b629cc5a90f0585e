/* SPDX-License-Identifier: GPL-2.0-or-later */
/* nbdkit-ramback-filter: one writer per backing file (claim.h).
 *
 * The plugin form claims back= when it opens it (lib/store/store-file.c): an
 * open file description lock on a regular file, O_EXCL on a block
 * device, so that a second ramback, qemu, or a mounted file system
 * cannot write under it.  The filter does not open what the plugin below
 * it serves, but it sees the parameters that go down to it: every file=
 * (the file plugin's, and split's and partitioning's) that names an
 * existing regular file or block device is claimed the same way, before
 * nbdkit forks, and held until the filter is unloaded.  The claim is a
 * descriptor of our own: the plugin's own opens are not affected (O_EXCL
 * only excludes other O_EXCL opens and mounts, and a lock is advisory).
 *
 * A file that cannot be opened for writing (a read-only plugin over an
 * immutable file) gets a read lock: it still keeps a writer away.  The
 * descriptors are only touched from nbdkit's configuration and unload,
 * which run in one thread.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "exclusive.h"
#include "ramback.h"
#include "claim.h"

struct claim {
  char *path;                   /* as given, for messages */
  int fd;                       /* -1 until claimed */
  dev_t dev;                    /* what it is: st_dev/st_ino of a file, */
  ino_t ino;                    /* st_rdev of a block device (ino 0) */
};

static struct claim *claims;
static size_t nclaims;

int
claim_add (const char *path)
{
  struct claim *c;

  c = realloc (claims, (nclaims + 1) * sizeof *claims);
  if (c == NULL) {
    nbdkit_error ("realloc: %m");
    return -1;
  }
  claims = c;
  c = &claims[nclaims];
  /* Absolute now: nbdkit changes directory when it forks. */
  c->path = realpath (path, NULL);
  if (c->path == NULL)
    c->path = strdup (path);
  if (c->path == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  c->fd = -1;
  nclaims++;
  return 0;
}

static int
claim_block (struct claim *c, const struct stat *st)
{
  int fd = rb_open_block_excl ("file", c->path, O_RDWR, st->st_rdev);

  if (fd == -1 && (errno == EROFS || errno == EACCES || errno == EPERM))
    fd = rb_open_block_excl ("file", c->path, O_RDONLY, st->st_rdev);
  if (fd == -1) {
    nbdkit_error ("%s", rb_get_error ());
    return -1;
  }
  c->fd = fd;
  c->dev = st->st_rdev;
  c->ino = 0;
  return 0;
}

static int
claim_file (struct claim *c, const struct stat *st)
{
  char who[512];
  bool write = true;
  int fd = open (c->path, O_RDWR | O_CLOEXEC | O_NOCTTY);

  if (fd == -1 && (errno == EROFS || errno == EACCES || errno == EPERM)) {
    write = false;
    fd = open (c->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  }
  if (fd == -1) {
    nbdkit_error ("file=%s: open: %m", c->path);
    return -1;
  }
  switch (rb_lock_file (fd, write)) {
  case 0:
    break;
  case 1:
    rb_describe_lock_holders (fd, who, sizeof who);
    nbdkit_error ("file=%s is in use by %s, which holds a lock on it: "
                  "another ramback, or another program such as qemu, is "
                  "using this backing store, and two writers would corrupt "
                  "it; stop the other one first", c->path, who);
    close (fd);
    return -1;
  default:
    /* Some network file systems have no locks: serve, but say so. */
    nbdkit_error ("file=%s: cannot lock it (%m): nothing stops a second "
                  "writer", c->path);
    break;
  }
  c->fd = fd;
  c->dev = st->st_dev;
  c->ino = st->st_ino;
  return 0;
}

int
claim_all (void)
{
  size_t i;

  for (i = 0; i < nclaims; i++) {
    struct claim *c = &claims[i];
    struct stat st;

    /* What is not there is not ours to claim (the plugin says what it
     * thinks of it), nor a directory, a fifo and the like.
     */
    if (c->fd >= 0 || stat (c->path, &st) == -1)
      continue;
    if (S_ISBLK (st.st_mode)) {
      if (claim_block (c, &st) == -1)
        return -1;
    }
    else if (S_ISREG (st.st_mode)) {
      if (claim_file (c, &st) == -1)
        return -1;
    }
  }
  return 0;
}

const char *
claim_find (const char *path)
{
  struct stat st;
  size_t i;

  if (stat (path, &st) == -1)
    return NULL;
  for (i = 0; i < nclaims; i++) {
    const struct claim *c = &claims[i];

    if (c->fd < 0)
      continue;
    if (c->ino ? (S_ISREG (st.st_mode) && st.st_dev == c->dev &&
                  st.st_ino == c->ino)
        : (S_ISBLK (st.st_mode) && st.st_rdev == c->dev))
      return c->path;
  }
  return NULL;
}

void
claim_release (void)
{
  size_t i;

  for (i = 0; i < nclaims; i++) {
    if (claims[i].fd >= 0)
      close (claims[i].fd);
    free (claims[i].path);
  }
  free (claims);
  claims = NULL;
  nclaims = 0;
}
