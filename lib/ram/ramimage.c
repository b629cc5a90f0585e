/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the RAM image (ramimage.h: what is refused, the file layout).
 *
 * Why one file of over 1,000 lines: the header, the decision to resume
 * or refuse (decide) and the layout it checks are one format, and every
 * refusal ramimage.h lists sits beside the check that makes it; the
 * copy functions at the end are the only other job, kept here because
 * they are the image's access path.
 */

#include <config.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "error.h"
#include "iszero.h"
#include "exclusive.h"
#include "ramimage.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

_Static_assert (offsetof (struct ramimage_header, back_uri) == 144,
                "the RAM image header layout is part of the file format");
_Static_assert (offsetof (struct ramimage_header, header_crc) == 1240,
                "the RAM image header layout is part of the file format");
_Static_assert (offsetof (struct ramimage_header, sect_offset) == 1248,
                "the RAM image header layout is part of the file format");
_Static_assert (offsetof (struct ramimage_header, part_offset) == 1264,
                "the RAM image header layout is part of the file format");
_Static_assert (sizeof (struct ramimage_header) <= RAMIMAGE_HEADER_SIZE,
                "the RAM image header fits its block");
_Static_assert (sizeof RAMIMAGE_MAGIC == 17, "16 bytes of magic");

static uint64_t
page_size (void)
{
  long p = sysconf (_SC_PAGESIZE);
  return p > 0 ? (uint64_t) p : 4096;
}

static uint64_t
round_up (uint64_t x, uint64_t a)
{
  return (x + a - 1) / a * a;
}

static int
check_fits (uint64_t size, uint64_t avail, const char *what, bool overcommit,
            bool budget)
{
  if (avail == 0 || size <= avail || overcommit)
    return 0;
  rb_set_error (ENOMEM,
                "the %s (%" PRIu64 " bytes) is larger than %s "
                "(%" PRIu64 " bytes); use a smaller %s, or "
                "overcommit=true if it is sparse and will never be filled",
                budget ? "ram-size=" : "device", size, what, avail,
                budget ? "ram-size=" : "backing store");
  return -1;
}

/* ---- The ram= file: is it ours? ---- */

static const char *
file_type (mode_t m)
{
  if (S_ISDIR (m)) return "directory";
  if (S_ISCHR (m)) return "character device";
  if (S_ISBLK (m)) return "block device";
  if (S_ISFIFO (m)) return "FIFO";
  if (S_ISSOCK (m)) return "socket";
  return "special file";
}

static bool
same_as_back (const struct stat *st, const struct rb_store_id *id)
{
  switch (id->kind) {
  case RB_STORE_FILE:
    return st->st_dev == id->dev && st->st_ino == id->ino;
  case RB_STORE_BLOCK:
    return S_ISBLK (st->st_mode) && st->st_rdev == id->dev;
  default:
    return false;
  }
}

/* Read the header of a file that may be ours; refuse it if it is not
 * (no RAMBACK-IMAGE magic).  Its version is judged later (decide).
 */
static int
read_header (int fd, const char *path, uint64_t file_size,
             struct ramimage_header *h)
{
  ssize_t r = 0;

  memset (h, 0, sizeof *h);
  if (file_size >= 256) {
    r = pread (fd, h, sizeof *h, 0);
    if (r == -1) {
      rb_set_error (errno, "ram=%s: pread of its header", path);
      return -1;
    }
  }
  if (r < 256 || memcmp (h->magic, RAMIMAGE_MAGIC, 16) != 0) {
    char what[96];

    if (file_size == 0)
      snprintf (what, sizeof what, "it is empty");
    else
      snprintf (what, sizeof what, "%" PRIu64 " bytes without a "
                "RAMBACK-IMAGE header", file_size);
    rb_set_error (EEXIST, "ram=%s exists and is not a ramback RAM image "
                  "(%s): ramback never overwrites a file it did not "
                  "create; give ram= a path that does not exist yet "
                  "(ramback creates it), or remove this file if nothing "
                  "needs it", path, what);
    return -1;
  }
  h->back_uri[sizeof h->back_uri - 1] = '\0';
  return 0;
}

/* Create a new ram= file.  Returns the fd, -2 if the path exists, -1 on
 * error.
 */
/* Take the exclusive lock of the RAM image file fd.  Held by another
 * process: EBUSY naming the holders, then busy_why, and -1.  Locks not
 * supported: a warning, and 0 (nothing else stops a second user). */
static int
lock_image (int fd, const char *path, const char *busy_why)
{
  switch (rb_lock_file (fd, true)) {
  case 0:
    break;
  case 1: {
    char who[512];

    rb_describe_lock_holders (fd, who, sizeof who);
    rb_set_error (EBUSY, "ram=%s is in use by %s%s", path, who, busy_why);
    return -1;
  }
  default:
    rb_warn ("ram=%s: cannot lock it (%s): nothing stops a second ramback "
             "from using it", path, rb_strerror (errno));
  }
  return 0;
}

static int
create_file (struct ramimage *ri, const char *path)
{
  struct stat st;
  int fd;

  fd = open (path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd == -1) {
    if (errno == EEXIST)
      return -2;
    rb_set_error (errno, "ram=%s: cannot create it (does its directory "
                  "exist, and may this user write there?)", path);
    return -1;
  }
  if (fstat (fd, &st) == -1) {
    rb_set_error (errno, "ram=%s: fstat", path);
    close (fd);
    unlink (path);
    return -1;
  }
  ri->dev = st.st_dev;
  ri->ino = st.st_ino;
  ri->created = true;
  return fd;
}

/* Open an existing ram= file, if it is a RAM image of ours (ramimage.h
 * lists the conditions).  Returns the fd, -2 if the path disappeared
 * meanwhile, -1 (refused, untouched) otherwise.  *old is its header.
 */
static int
open_existing (struct ramimage *ri, const struct ramimage_params *p,
               struct ramimage_header *old)
{
  const char *path = p->path;
  struct stat st, st2;
  int fd;

  /* O_PATH opens nothing: no device is opened, no FIFO blocks, and a
   * symbolic link is seen as one.
   */
  fd = open (path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd == -1) {
    if (errno == ENOENT)
      return -2;
    rb_set_error (errno, "ram=%s: open", path);
    return -1;
  }
  if (fstat (fd, &st) == -1) {
    rb_set_error (errno, "ram=%s: fstat", path);
    close (fd);
    return -1;
  }
  close (fd);

  if (S_ISLNK (st.st_mode)) {
    char target[256];
    ssize_t n = readlink (path, target, sizeof target - 1);

    target[n > 0 ? n : 0] = '\0';
    rb_set_error (ELOOP, "ram=%s is a symbolic link (to %s): ramback does "
                  "not follow symbolic links for ram=, so that no link can "
                  "make it overwrite another file; give ram= the real path "
                  "of a file of its own (a path that does not exist yet: "
                  "ramback creates it)", path, n > 0 ? target : "?");
    return -1;
  }
  if (same_as_back (&st, &p->back_id)) {
    rb_set_error (EINVAL, "ram=%s is the backing store itself (the same "
                  "file as back=%s): the RAM image would overwrite the data "
                  "it caches; give ram= a file of its own on a memory file "
                  "system, e.g. ram=/dev/shm/NAME.ramimg (ramback creates "
                  "it)", path, p->back_uri);
    return -1;
  }
  if (!S_ISREG (st.st_mode)) {
    rb_set_error (EINVAL, "ram=%s is not a regular file but a %s: ram= "
                  "names a file that ramback creates on a memory file "
                  "system (a path that does not exist yet, e.g. "
                  "ram=/dev/shm/NAME.ramimg)", path, file_type (st.st_mode));
    return -1;
  }
  if (st.st_uid != geteuid ()) {
    rb_set_error (EPERM, "ram=%s is owned by uid %u, not by uid %u that "
                  "runs ramback: ramback takes over only a RAM image of its "
                  "own user; give ram= another path, or remove this file",
                  path, (unsigned) st.st_uid, (unsigned) geteuid ());
    return -1;
  }
  if (st.st_nlink != 1) {
    rb_set_error (EMLINK, "ram=%s has %ju hard links: a RAM image that "
                  "ramback created has one, so this file is not one, or it "
                  "is reachable under another name where it must not be "
                  "overwritten; give ram= a path that does not exist yet",
                  path, (uintmax_t) st.st_nlink);
    return -1;
  }

  fd = open (path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd == -1) {
    if (errno == ENOENT)
      return -2;
    rb_set_error (errno, "ram=%s: open", path);
    return -1;
  }
  if (fstat (fd, &st2) == -1 || st2.st_dev != st.st_dev ||
      st2.st_ino != st.st_ino) {
    close (fd);
    rb_set_error (EAGAIN, "ram=%s was replaced while it was being opened; "
                  "try again", path);
    return -1;
  }
  if (read_header (fd, path, st2.st_size, old) == -1)
    goto refuse;

  if (lock_image (fd, path, ": another ramback serves from this RAM "
                  "image; stop it first, or give this one another ram= "
                  "path") == -1)
    goto refuse;
  /* It may have changed before the lock was ours: look again. */
  if (fstat (fd, &st2) == -1 || st2.st_nlink != 1 ||
      read_header (fd, path, st2.st_size, old) == -1)
    goto refuse;

  ri->dev = st.st_dev;
  ri->ino = st.st_ino;
  return fd;

 refuse:
  {
    int e = errno;
    close (fd);
    errno = e;
  }
  return -1;
}

static void
log_takeover (const char *path, const struct ramimage_header *old,
              const char *why)
{
  uint32_t state = le32toh (old->state);
  uint64_t gen = le64toh (old->generation);

  if (state == RAMIMAGE_IN_USE)
    rb_warn ("ram=%s: taking over the RAM image of a ramback that did not "
             "stop cleanly (generation %" PRIu64 ", back=%s; %s): whatever "
             "it had not written back is lost; the image is loaded again "
             "from back=", path, gen, old->back_uri, why);
  else
    rb_log ("ram=%s: taking over the RAM image left by an earlier ramback "
            "(%s, generation %" PRIu64 ", back=%s; %s); it is loaded again "
            "from back=", path,
            state == RAMIMAGE_CLEAN_STOP ? "stopped cleanly" : "never used",
            gen, old->back_uri, why);
}

/* ---- The ram= file: layout, reservation, header. ---- */

struct layout {
  uint32_t version;             /* of the file it describes */
  uint64_t map_offset, map_size, nb_offset, nb_size, sect_offset, sect_size;
  uint64_t part_offset, part_size, valid_offset, valid_size;
  bool hugetlbfs, tmpfs;
  uint64_t free_bytes;
};

/* The layout of an image of format 'version' (2 to 4) for this start. */
static int
plan_layout (struct ramimage *ri, const struct ramimage_params *p,
             uint32_t version, struct layout *l)
{
  uint64_t ps = page_size (), nchunks, chunk = p->chunk_size;
  struct statfs fs;

  if (fstatfs (ri->fd, &fs) == -1) {
    rb_set_error (errno, "ram=%s: fstatfs", p->path);
    return -1;
  }
  /* hugetlbfs says its huge page size here, and takes nothing smaller. */
  ri->block = (uint64_t) fs.f_bsize > ps && fs.f_bsize % ps == 0
    ? (uint64_t) fs.f_bsize : ps;
  l->hugetlbfs = fs.f_type == HUGETLBFS_MAGIC;
  l->tmpfs = fs.f_type == TMPFS_MAGIC;
  l->free_bytes = (uint64_t) fs.f_bavail * fs.f_bsize;
  if (chunk == 0)
    chunk = 65536;
  nchunks = (p->size + chunk - 1) / chunk;
  l->map_offset = RAMIMAGE_HEADER_SIZE;
  l->map_size = round_up ((nchunks + 31) / 32 * 8, 4096);
  l->nb_offset = l->map_offset + l->map_size;
  l->nb_size = round_up ((nchunks + 63) / 64 * 8, 4096);
  l->version = version;
  l->sect_offset = l->nb_offset + l->nb_size;
  l->sect_size = version >= 3
    ? round_up (((nchunks << p->sect_shift) + 63) / 64 * 8, 4096) : 0;
  l->part_offset = l->sect_offset + l->sect_size;
  l->part_size = version >= 4 ? l->nb_size : 0;
  l->valid_offset = l->part_offset + l->part_size;
  l->valid_size = version >= 4 ? l->sect_size : 0;
  ri->image_offset = round_up (l->valid_offset + l->valid_size, ri->block);
  ri->mapped = round_up (p->size ? p->size : 1, ri->block);
  ri->file_size = ri->image_offset + ri->mapped;
  return 0;
}

static int
reserve (struct ramimage *ri, const struct ramimage_params *p,
         const struct layout *l)
{
  int e = posix_fallocate (ri->fd, 0, ri->file_size);
  char free_text[128];

  if (e == 0) {
    ri->reserved = true;
    return 0;
  }
  if (l->hugetlbfs)
    snprintf (free_text, sizeof free_text, "not enough free huge pages: "
              "raise /proc/sys/vm/nr_hugepages");
  else
    snprintf (free_text, sizeof free_text, "%" PRIu64 " bytes were free "
              "there", l->free_bytes);
  errno = e;
  rb_set_error (e, "ram=%s: cannot reserve %" PRIu64 " bytes for the RAM "
                "image (%s): make room on that file system (for a tmpfs, "
                "mount -o remount,size=...), use a smaller device, or give "
                "overcommit=true to not reserve it (if the file system then "
                "fills up, ramback dies of SIGBUS with the data not yet "
                "written back: see overcommit= in nbdkit-ramback-plugin(1))",
                p->path, ri->file_size, free_text);
  return -1;
}

static void
fill_uuid (uint8_t *u)
{
  size_t got = 0;

  while (got < 16) {
    ssize_t r = getrandom (u + got, 16 - got, 0);
    if (r <= 0)
      break;
    got += r;
  }
  if (got < 16) {                 /* no entropy source: still unique enough */
    uint64_t a = rb_now_ns (), b = (uint64_t) getpid () << 32 ^ time (NULL);
    memcpy (u, &a, 8);
    memcpy (u + 8, &b, 8);
  }
  u[6] = (u[6] & 0x0f) | 0x40;    /* RFC 4122 version 4, variant 1 */
  u[8] = (u[8] & 0x3f) | 0x80;
}

/* This boot's id (all zero if the kernel does not say): an image set up
 * in another boot cannot be resumed (the machine went down, and a file
 * that survived it on a disk file system was never synced).
 */
static void
get_boot_id (uint8_t id[16])
{
  char text[64];
  size_t i, n = 0;
  FILE *f = fopen ("/proc/sys/kernel/random/boot_id", "re");

  memset (id, 0, 16);
  if (f == NULL)
    return;
  if (fgets (text, sizeof text, f) != NULL)
    for (i = 0; text[i] && n < 32; i++) {
      int v;
      char c = text[i];
      if (c >= '0' && c <= '9') v = c - '0';
      else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
      else continue;
      id[n / 2] |= (n % 2 ? v : v << 4);
      n++;
    }
  fclose (f);
  if (n != 32)
    memset (id, 0, 16);
}

static uint32_t
crc_bytes (uint32_t crc, const uint8_t *b, size_t n)
{
  size_t i;
  int k;

  for (i = 0; i < n; i++) {
    crc ^= b[i];
    for (k = 0; k < 8; k++)
      crc = (crc >> 1) ^ (0xedb88320 & -(crc & 1));
  }
  return crc;
}

/* CRC-32 (IEEE) of the header up to back_mtime_sec, state taken as 0,
 * from format 3 on of sect_offset and sect_size, from format 4 on of
 * part_offset to valid_size.
 */
static uint32_t
header_crc (const struct ramimage_header *h)
{
  struct ramimage_header c = *h;
  const uint8_t *b = (const uint8_t *) &c;
  uint32_t crc;

  c.state = 0;
  crc = crc_bytes (0xffffffff, b,
                   offsetof (struct ramimage_header, back_mtime_sec));
  if (le32toh (c.version) >= 3)
    crc = crc_bytes (crc, b + offsetof (struct ramimage_header, sect_offset),
                     2 * sizeof (uint64_t));
  if (le32toh (c.version) >= 4)
    crc = crc_bytes (crc, b + offsetof (struct ramimage_header, part_offset),
                     4 * sizeof (uint64_t));
  return ~crc;
}

static void
write_header (struct ramimage *ri, const struct ramimage_params *p,
              const struct layout *l, uint64_t generation)
{
  struct ramimage_header h;
  uint64_t order = RAMIMAGE_MAP_ORDER;

  memset (&h, 0, sizeof h);
  memcpy (h.magic, RAMIMAGE_MAGIC, 16);
  h.version = htole32 (RAMIMAGE_VERSION);
  h.header_size = htole32 (RAMIMAGE_HEADER_SIZE);
  h.state = htole32 (RAMIMAGE_CREATING);
  h.chunk_size = htole32 (p->chunk_size);
  h.device_size = htole64 (p->size);
  h.image_offset = htole64 (ri->image_offset);
  h.image_size = htole64 (ri->mapped);
  h.map_offset = htole64 (l->map_offset);
  h.map_size = htole64 (l->map_size);
  h.nb_offset = htole64 (l->nb_offset);
  h.nb_size = htole64 (l->nb_size);
  h.sect_offset = htole64 (l->sect_offset);
  h.sect_size = htole64 (l->sect_size);
  h.part_offset = htole64 (l->part_offset);
  h.part_size = htole64 (l->part_size);
  h.valid_offset = htole64 (l->valid_offset);
  h.valid_size = htole64 (l->valid_size);
  h.block_size = htole64 (ri->block);
  fill_uuid (h.uuid);
  h.generation = htole64 (generation);
  h.back_dev = htole64 (p->back_id.dev);
  h.back_ino = htole64 (p->back_id.ino);
  h.back_size = htole64 (p->size);
  h.back_kind = htole32 (p->back_id.kind);
  h.created = htole64 ((uint64_t) time (NULL));
  snprintf (h.back_uri, sizeof h.back_uri, "%s",
            p->back_uri ? p->back_uri : "");
  get_boot_id (h.boot_id);
  memcpy (&h.map_order, &order, 8);
  h.header_crc = htole32 (header_crc (&h));
  /* A taken over file keeps its first block: clear the old header's
   * tail, the map, the NB bitmap, the sector bits, P and V (all chunks
   * EMPTY, nothing NB, no sector dirty, no chunk partial).
   */
  memset (ri->file_map, 0, l->valid_offset + l->valid_size);
  memcpy (ri->file_map, &h, sizeof h);
}

static struct ramimage_header *
header_of (struct ramimage *ri)
{
  return (struct ramimage_header *) ri->file_map;
}

static void
set_state (struct ramimage *ri, enum ramimage_state state)
{
  rb_atomic_store (&header_of (ri)->state, htole32 (state));
}

/* Remove our file if its path still names it.  false: not removed. */
static bool
remove_file (struct ramimage *ri)
{
  struct stat st;

  return lstat (ri->path, &st) == 0 && st.st_dev == ri->dev &&
    st.st_ino == ri->ino && unlink (ri->path) == 0;
}

/* Give back what an open that failed took: remove a file we created, or
 * shrink a taken over one to its header.  Never touches one that is not
 * ours, nor one that was to be resumed (resume: nothing was changed).
 */
static void
discard_file (struct ramimage *ri, bool keep)
{
  if (ri->file_map)
    munmap (ri->file_map, ri->file_size);
  ri->file_map = NULL;
  ri->base = NULL;
  ri->map_words = ri->nb_words = ri->sect_words = NULL;
  ri->part_words = ri->valid_words = NULL;
  if (ri->owned && !keep && !(ri->created && remove_file (ri)) &&
      ftruncate (ri->fd, ri->block ? ri->block : RAMIMAGE_HEADER_SIZE) == -1)
    rb_log ("ram=%s: ftruncate: %s (ignored)", ri->path,
            rb_strerror (errno));
  if (ri->fd >= 0)
    close (ri->fd);
  ri->fd = -1;
  ri->owned = false;
}

/* ---- Resume or not: what an existing image is, against this start. ---- */

/* The backing file's times now, if back= still names the file we have
 * open (identity by st_dev/st_ino).  false for anything else.
 */
static bool
back_times (const char *path, const struct rb_store_id *id,
            struct timespec *mtime, struct timespec *ctime_)
{
  struct stat st;

  if (id->kind != RB_STORE_FILE || path == NULL || stat (path, &st) == -1 ||
      st.st_dev != id->dev || st.st_ino != id->ino)
    return false;
  *mtime = st.st_mtim;
  *ctime_ = st.st_ctim;
  return true;
}

static const char *
kind_name (uint32_t k)
{
  switch (k) {
  case RB_STORE_REMOTE: return "NBD export";
  case RB_STORE_FILE: return "file";
  case RB_STORE_BLOCK: return "block device";
  default: return "unknown kind";
  }
}

enum decision { TAKE_OVER, RESUME, REFUSE };

/* A format 2 header that is whole and consistent with this file and
 * this layout.  Else says what is wrong in why.
 */
static bool
header_sane (const struct ramimage_header *h, char *why, size_t len)
{
  uint64_t order;
  uint32_t cs = le32toh (h->chunk_size);

  memcpy (&order, &h->map_order, 8);
  if (le32toh (h->header_crc) != header_crc (h))
    snprintf (why, len, "its header checksum is wrong");
  else if (order != RAMIMAGE_MAP_ORDER)
    snprintf (why, len, "it was made on a machine of another byte order");
  else if (le32toh (h->header_size) != RAMIMAGE_HEADER_SIZE ||
           cs < 512 || (cs & (cs - 1)) != 0 || h->device_size == 0)
    snprintf (why, len, "its header has impossible values");
  else if (le32toh (h->state) < RAMIMAGE_CREATING ||
           le32toh (h->state) > RAMIMAGE_CLEAN_STOP)
    snprintf (why, len, "its state (%" PRIu32 ") is unknown",
              le32toh (h->state));
  else
    return true;
  return false;
}

/* The layout part: only meaningful once the sizes match this start. */
static bool
layout_matches (const struct ramimage_header *h, const struct ramimage *ri,
                const struct layout *l, uint64_t file_size, char *why,
                size_t len)
{
  if (le64toh (h->map_offset) != l->map_offset ||
      le64toh (h->map_size) != l->map_size ||
      le64toh (h->nb_offset) != l->nb_offset ||
      le64toh (h->nb_size) != l->nb_size ||
      (l->version >= 3 && (le64toh (h->sect_offset) != l->sect_offset ||
                           le64toh (h->sect_size) != l->sect_size)) ||
      (l->version >= 4 && (le64toh (h->part_offset) != l->part_offset ||
                           le64toh (h->part_size) != l->part_size ||
                           le64toh (h->valid_offset) != l->valid_offset ||
                           le64toh (h->valid_size) != l->valid_size)) ||
      le64toh (h->image_offset) != ri->image_offset ||
      le64toh (h->image_size) != ri->mapped ||
      le64toh (h->block_size) != ri->block) {
    snprintf (why, len, "its layout (map at %" PRIu64 ", image at %" PRIu64
              " in %" PRIu64 "-byte blocks) is not the one this file "
              "system gives (map at %" PRIu64 ", image at %" PRIu64 " in %"
              PRIu64 "-byte blocks)", le64toh (h->map_offset),
              le64toh (h->image_offset), le64toh (h->block_size),
              l->map_offset, ri->image_offset, ri->block);
    return false;
  }
  if (file_size < ri->file_size) {
    snprintf (why, len, "it is %" PRIu64 " bytes long, not %" PRIu64
              " (truncated)", file_size, ri->file_size);
    return false;
  }
  return true;
}

#define DISCARD_HINT "resume=discard throws the RAM copy away and loads " \
  "back= again"

/* Decide what to do with an existing image (its header in *h, locked,
 * ours).  REFUSE has set the error.
 */
static enum decision
decide (struct ramimage *ri, const struct ramimage_params *p,
        struct layout *l, const struct ramimage_header *h,
        uint64_t file_size, char *why, size_t why_len)
{
  const char *path = p->path;
  uint32_t version = le32toh (h->version), state = le32toh (h->state);
  bool crash = state == RAMIMAGE_IN_USE;
  const char *lost = crash
    ? " (whatever that ramback had not written back is then lost)"
    : " (it stopped cleanly: nothing is lost)";
  uint8_t boot[16];
  char bad[2600];
  struct timespec mt, ct;

  if (p->resume == RAMIMAGE_RESUME_DISCARD) {
    snprintf (why, why_len, "resume=discard");
    return TAKE_OVER;
  }
  if (version == 1) {
    snprintf (why, why_len, "format 1 keeps no chunk state map: nothing "
              "can be resumed");
    return TAKE_OVER;
  }
  if (version != 2 && version != 3 && version != RAMIMAGE_VERSION) {
    rb_set_error (EPROTO, "ram=%s is a RAM image of format %" PRIu32
                  ", which this ramback (format %d) does not know: it "
                  "was made by another version of ramback, which may "
                  "have left data in it that is not on the backing store; "
                  "resume it with that version, or give resume=discard to "
                  "throw it away (or remove the file) if it holds nothing "
                  "that is needed", path, version, RAMIMAGE_VERSION);
    return REFUSE;
  }
  if (!header_sane (h, bad, sizeof bad)) {
    rb_set_error (EINVAL, "ram=%s: cannot resume this RAM image: %s (a "
                  "damaged or foreign file); ramback never guesses which "
                  "data in it is needed: %s, or remove the file",
                  path, bad, DISCARD_HINT);
    return REFUSE;
  }
  if (state == RAMIMAGE_CREATING) {
    snprintf (why, why_len, "its setup never finished, so it holds no "
              "data");
    return TAKE_OVER;
  }
  get_boot_id (boot);
  if (!rb_is_zero (boot, 16) && !rb_is_zero (h->boot_id, 16) &&
      memcmp (boot, h->boot_id, 16) != 0) {
    snprintf (why, why_len, "it was set up before the machine last "
              "booted, and a RAM image does not survive that: the backing "
              "store is the truth");
    return TAKE_OVER;
  }
  if (le64toh (h->device_size) != p->size) {
    rb_set_error (EINVAL, "ram=%s holds a device of %" PRIu64 " bytes, but "
                  "back=%s is %" PRIu64 " bytes now: it cannot be resumed "
                  "(was the backing store resized or replaced?); start "
                  "with the backing store it was made for to write its "
                  "data back, or %s%s", path, le64toh (h->device_size),
                  p->back_uri, p->size, DISCARD_HINT, lost);
    return REFUSE;
  }
  if (le32toh (h->chunk_size) != p->chunk_size) {
    rb_set_error (EINVAL, "ram=%s was made with chunk=%" PRIu32 ", not "
                  "chunk=%" PRIu32 ": give chunk=%" PRIu32 " to resume it, "
                  "or %s%s", path, le32toh (h->chunk_size), p->chunk_size,
                  le32toh (h->chunk_size), DISCARD_HINT, lost);
    return REFUSE;
  }
  /* An older image is resumed in its own layout (format 2: no sector
   * bits; format 3: no partial chunks).
   */
  if (version != l->version && plan_layout (ri, p, version, l) == -1)
    return REFUSE;
  if (!layout_matches (h, ri, l, file_size, bad, sizeof bad)) {
    rb_set_error (EINVAL, "ram=%s: cannot resume this RAM image: %s; %s%s",
                  path, bad, DISCARD_HINT, lost);
    return REFUSE;
  }

  /* The backing store's identity: the image must be of this store. */
  bad[0] = '\0';
  if (strcmp (h->back_uri, p->back_uri ? p->back_uri : "") != 0)
    snprintf (bad, sizeof bad, "it is the RAM image of back=%s, not of "
              "back=%s", h->back_uri, p->back_uri);
  else if (le32toh (h->back_kind) != (uint32_t) p->back_id.kind)
    snprintf (bad, sizeof bad, "back=%s was a %s and is now a %s",
              p->back_uri, kind_name (le32toh (h->back_kind)),
              kind_name (p->back_id.kind));
  else if (p->back_id.kind == RB_STORE_FILE &&
           (le64toh (h->back_dev) != p->back_id.dev ||
            le64toh (h->back_ino) != p->back_id.ino))
    snprintf (bad, sizeof bad, "back=%s is another file than the one this "
              "image was made for (device %" PRIu64 " inode %" PRIu64
              " then, device %" PRIu64 " inode %" PRIu64 " now: replaced "
              "or restored?)", p->back_uri, le64toh (h->back_dev),
              le64toh (h->back_ino), p->back_id.dev, p->back_id.ino);
  else if (p->back_id.kind == RB_STORE_BLOCK &&
           le64toh (h->back_dev) != p->back_id.dev)
    snprintf (bad, sizeof bad, "back=%s is another device than the one "
              "this image was made for (device number %u:%u then, %u:%u "
              "now)", p->back_uri, major (le64toh (h->back_dev)),
              minor (le64toh (h->back_dev)), major (p->back_id.dev),
              minor (p->back_id.dev));
  else if (!crash && p->back_id.kind == RB_STORE_FILE &&
           back_times (p->back_uri, &p->back_id, &mt, &ct) &&
           (mt.tv_sec != le64toh (h->back_mtime_sec) ||
            (uint64_t) mt.tv_nsec != le64toh (h->back_mtime_nsec) ||
            ct.tv_sec != le64toh (h->back_ctime_sec) ||
            (uint64_t) ct.tv_nsec != le64toh (h->back_ctime_nsec)))
    snprintf (bad, sizeof bad, "back=%s was changed after the clean stop "
              "that left this image (its mtime or ctime is not the one "
              "recorded after the final sync), so the image is older "
              "than the backing store", p->back_uri);
  if (bad[0] && p->resume != RAMIMAGE_RESUME_FORCE) {
    rb_set_error (EINVAL, "ram=%s: not resumed: %s.  ramback never mixes "
                  "two images.  To proceed: %s%s; or resume=force if you "
                  "know the RAM image is the one to keep (it is then "
                  "written back whole over back=); or give another ram= "
                  "path", path, bad, DISCARD_HINT, lost);
    return REFUSE;
  }
  if (bad[0]) {
    rb_warn ("ram=%s: resume=force: resuming although %s; every loaded "
             "chunk is written back over back=", path, bad);
    ri->rewrite_all = true;
  }
  ri->source = crash ? RAMIMAGE_RESUMED_CRASH : RAMIMAGE_RESUMED_CLEAN;
  return RESUME;
}

/* resume=force: from now on the image is the one of this backing
 * store (it is written back over it in full).
 */
static void
adopt_store (struct ramimage *ri, const struct ramimage_params *p)
{
  struct ramimage_header h = *header_of (ri);

  h.back_dev = htole64 (p->back_id.dev);
  h.back_ino = htole64 (p->back_id.ino);
  h.back_kind = htole32 (p->back_id.kind);
  memset (h.back_uri, 0, sizeof h.back_uri);
  snprintf (h.back_uri, sizeof h.back_uri, "%s",
            p->back_uri ? p->back_uri : "");
  h.header_crc = htole32 (header_crc (&h));
  memcpy (header_of (ri), &h, sizeof h);
}

static int
open_file (struct ramimage *ri, const struct ramimage_params *p)
{
  struct ramimage_header old;
  struct layout l;
  struct stat st;
  uint64_t generation = 1;
  int fd = -2, tries, flags;
  enum decision d = TAKE_OVER;
  char why[320] = "";

  /* Create it, or open our old one; retried if it vanishes in between
   * (another ramback stopping).
   */
  for (tries = 0; fd == -2 && tries < 3; tries++) {
    fd = create_file (ri, p->path);
    if (fd == -2) {
      fd = open_existing (ri, p, &old);
      if (fd >= 0)
        generation = le64toh (old.generation) + 1;
    }
  }
  if (fd == -2)
    rb_set_error (EAGAIN, "ram=%s keeps appearing and disappearing: is "
                  "another program creating and removing it?", p->path);
  if (fd < 0)
    return -1;
  ri->fd = fd;

  if (ri->created) {
    if (lock_image (fd, p->path, " (it opened the file this ramback had "
                    "just created): give ram= a path of its own") == -1) {
      close (fd);
      ri->fd = -1;
      return -1;
    }
  }
  ri->owned = true;

  if (plan_layout (ri, p, RAMIMAGE_VERSION, &l) == -1)
    goto fail;
  if (!ri->created) {
    if (fstat (fd, &st) == -1) {
      rb_set_error (errno, "ram=%s: fstat", p->path);
      goto fail;
    }
    d = decide (ri, p, &l, &old, st.st_size, why, sizeof why);
    if (d == REFUSE) {
      /* Refused: untouched. */
      int e = errno;
      discard_file (ri, true);
      errno = e;
      return -1;
    }
  }
  if (d == TAKE_OVER && !ri->created) {
    log_takeover (p->path, &old, why);
    /* Drop the old image; the first block keeps the header (the file
     * stays recognisably ours) until the new one is written.
     */
    if (ftruncate (fd, ri->block) == -1) {
      rb_set_error (errno, "ram=%s: ftruncate", p->path);
      goto fail;
    }
  }
  if (d == TAKE_OVER && ftruncate (fd, ri->file_size) == -1) {
    rb_set_error (errno, "ram=%s: ftruncate to %" PRIu64 " bytes%s",
                  p->path, ri->file_size,
                  l.hugetlbfs ? " on hugetlbfs" : "");
    goto fail;
  }
  /* A tmpfs may be mounted larger than the machine: reserving more than
   * RAM would call the out of memory killer rather than fail.
   */
  if (l.tmpfs && !p->overcommit && rb_phys_mem () > 0 &&
      (p->budget ? p->budget : p->size) > rb_phys_mem ()) {
    rb_set_error (ENOMEM, "ram=%s: the %s (%" PRIu64 " bytes) is larger "
                  "than the machine's RAM (%" PRIu64 " bytes), where a "
                  "tmpfs lives; use a smaller %s, or "
                  "overcommit=true if it is sparse and will never be filled",
                  p->path, p->budget ? "ram-size=" : "device",
                  p->budget ? p->budget : p->size, rb_phys_mem (),
                  p->budget ? "ram-size=" : "backing store");
    goto fail_resume;
  }
  /* ram-size=: evicted chunks are holes punched in the file, which
   * hugetlbfs only frees in whole huge pages.
   */
  if (p->budget && l.hugetlbfs && p->chunk_size % ri->block != 0) {
    rb_set_error (EINVAL, "ram=%s is on hugetlbfs, whose pages are %" PRIu64
                  " bytes: with ram-size= an evicted chunk must free whole "
                  "pages, so give chunk=%" PRIu64 " or larger, or put ram= "
                  "on a tmpfs", p->path, ri->block, ri->block);
    goto fail_resume;
  }
  if (p->budget && !p->overcommit && l.free_bytes < p->budget &&
      fstat (fd, &st) == 0 &&
      l.free_bytes + (uint64_t) st.st_blocks * 512 < p->budget) {
    rb_set_error (ENOSPC, "ram=%s: ram-size=%" PRIu64 " does not fit on "
                  "that file system (%" PRIu64 " bytes free): make room "
                  "(for a tmpfs, mount -o remount,size=...), give a smaller "
                  "ram-size=, or overcommit=true", p->path, p->budget,
                  l.free_bytes);
    goto fail_resume;
  }
  /* A resumed image that is allocated in full already (a reserved one
   * stays so) needs no second pass over its pages.  With ram-size= the
   * file stays sparse: its holes are the chunks not in RAM.
   */
  if (!p->overcommit && !p->budget) {
    if (d == RESUME && fstat (fd, &st) == 0 &&
        (uint64_t) st.st_blocks * 512 >= ri->file_size)
      ri->reserved = true;
    else if (reserve (ri, p, &l) == -1)
      goto fail_resume;
  }

  flags = MAP_SHARED | (p->overcommit || p->budget ? MAP_NORESERVE : 0);
  ri->file_map = mmap (NULL, ri->file_size, PROT_READ | PROT_WRITE, flags,
                       fd, 0);
  if (ri->file_map == MAP_FAILED) {
    ri->file_map = NULL;
    rb_set_error (errno, "ram=%s: mmap of %" PRIu64 " bytes%s", p->path,
                  ri->file_size, l.hugetlbfs && errno == ENOMEM
                  ? " (not enough free huge pages: raise "
                  "/proc/sys/vm/nr_hugepages)" : "");
    goto fail_resume;
  }
  ri->base = ri->file_map + ri->image_offset;
  ri->map_words = (uint64_t *) (ri->file_map + l.map_offset);
  ri->nb_words = (uint64_t *) (ri->file_map + l.nb_offset);
  ri->sect_words = l.sect_size
    ? (uint64_t *) (ri->file_map + l.sect_offset) : NULL;
  ri->part_words = l.part_size
    ? (uint64_t *) (ri->file_map + l.part_offset) : NULL;
  ri->valid_words = l.valid_size
    ? (uint64_t *) (ri->file_map + l.valid_offset) : NULL;
  if (d == TAKE_OVER) {
    ri->source = RAMIMAGE_POPULATED;
    write_header (ri, p, &l, generation);
  }
  else if (ri->rewrite_all)
    adopt_store (ri, p);
  rb_log ("ram=%s: %s, image of %" PRIu64 " bytes at offset %" PRIu64
          " in %" PRIu64 "-byte blocks, %s", p->path,
          ri->created ? "created" : d == RESUME
          ? (ri->source == RAMIMAGE_RESUMED_CLEAN
             ? "resumed after a clean stop" : "resumed after a crash")
          : "taken over", ri->mapped,
          ri->image_offset, ri->block,
          ri->reserved ? "reserved" : "not reserved (overcommit=true)");
  return 0;

 fail_resume:
  if (d == RESUME) {
    /* Nothing of the image was changed: keep it for a later try. */
    int e = errno;
    discard_file (ri, true);
    errno = e;
    return -1;
  }
 fail:
  {
    int e = errno;
    discard_file (ri, false);
    errno = e;
  }
  return -1;
}

/* ---- Public. ---- */

int
ramimage_open (struct ramimage *ri, const struct ramimage_params *p)
{
  uint64_t ps = page_size ();

  memset (ri, 0, sizeof *ri);
  ri->fd = -1;
  ri->size = p->size;

  if (p->path) {
    ri->path = strdup (p->path);
    if (ri->path == NULL) {
      rb_set_error (errno, "strdup");
      return -1;
    }
    ri->back_id = p->back_id;
    if (p->back_uri && (ri->back_path = strdup (p->back_uri)) == NULL) {
      rb_set_error (errno, "strdup");
      return -1;
    }
    return open_file (ri, p);
  }

  ri->block = ps;
  ri->mapped = round_up (p->size ? p->size : 1, ps);
  if (check_fits (p->budget ? p->budget : p->size, rb_phys_mem (),
                  "the machine's RAM", p->overcommit, p->budget != 0) == -1)
    return -1;
  /* NORESERVE: pages are only committed when written, so a sparse
   * overcommitted device costs what is actually used.
   */
  ri->base = mmap (NULL, ri->mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (ri->base == MAP_FAILED) {
    ri->base = NULL;
    if (errno == ENOMEM && ri->mapped > (UINT64_C (32) << 40))
      rb_set_error (ENOMEM, "mmap: %" PRIu64 " bytes of anonymous memory: "
                    "no free range of the process address space is that "
                    "large (x86-64 user space is 128 TiB in all); use a "
                    "smaller device", ri->mapped);
    else
      rb_set_error (errno, "mmap: %" PRIu64 " bytes of anonymous memory",
                    ri->mapped);
    return -1;
  }
  return 0;
}

void
ramimage_in_use (struct ramimage *ri)
{
  if (ri->file_map) {
    set_state (ri, RAMIMAGE_IN_USE);
    ri->in_use = true;
  }
}

void
ramimage_close (struct ramimage *ri, bool clean)
{
  if (ri->fd >= 0 && ri->file_map && !ri->in_use) {
    /* Never served from: a new image goes, a resumed one stays as it
     * was.
     */
    discard_file (ri, ri->source != RAMIMAGE_POPULATED);
  }
  else if (ri->fd >= 0 && ri->file_map && !clean) {
    /* The image holds data that is nowhere else: keep it. */
    munmap (ri->file_map, ri->file_size);
    rb_warn ("ram=%s: kept, with data that could not be written back to "
             "the backing store; the device is the %" PRIu64 " bytes at "
             "offset %" PRIu64 " of this file.  A new ramback with the "
             "same ram= and back= resumes it and writes them back (to "
             "save them elsewhere first: dd if=%s of=SAVED.img "
             "iflag=skip_bytes,count_bytes skip=%" PRIu64 " count=%" PRIu64
             ")", ri->path, ri->size, ri->image_offset,
             ri->path, ri->image_offset, ri->size);
    close (ri->fd);
  }
  else if (ri->fd >= 0 && ri->file_map) {
    /* Everything is on the backing store: keep the image for the next
     * start, stamped with the backing file's times after the final sync
     * (a change of the file after this is seen at the next start).
     */
    struct ramimage_header *h = header_of (ri);
    struct timespec mt = { 0, 0 }, ct = { 0, 0 };

    back_times (ri->back_path, &ri->back_id, &mt, &ct);
    h->back_mtime_sec = htole64 (mt.tv_sec);
    h->back_mtime_nsec = htole64 (mt.tv_nsec);
    h->back_ctime_sec = htole64 (ct.tv_sec);
    h->back_ctime_nsec = htole64 (ct.tv_nsec);
    set_state (ri, RAMIMAGE_CLEAN_STOP);
    munmap (ri->file_map, ri->file_size);
    rb_log ("ram=%s: kept after a clean stop: the next start with this "
            "ram= resumes it at once (remove it to give its memory back)",
            ri->path);
    close (ri->fd);
  }
  else if (ri->fd >= 0)
    discard_file (ri, false);
  else if (ri->base)
    munmap (ri->base, ri->mapped);
  free (ri->path);
  free (ri->back_path);
  memset (ri, 0, sizeof *ri);
  ri->fd = -1;
}

void __attribute__ ((noinline))
ramimage_zero (struct ramimage *ri, uint64_t offset, uint64_t count)
{
  uint64_t bs = ri->block ? ri->block : page_size ();
  uint64_t a = round_up (offset, bs);
  uint64_t b = (offset + count) / bs * bs;

  if (b > a) {
    int r;

    if (ri->fd >= 0) {
      /* Punch in whole blocks: hugetlbfs frees whole huge pages only,
       * and leaves a partial one as it was.
       */
      r = fallocate (ri->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     ri->image_offset + a, b - a);
      /* A reserved image stays reserved: allocate the hole again (zero
       * pages), or a later write there could meet a full file system.
       */
      if (r == 0 && ri->reserved &&
          fallocate (ri->fd, 0, ri->image_offset + a, b - a) == -1 &&
          !rb_atomic_xchg_relaxed (&ri->reserve_lost, true))
        rb_warn ("ram=%s: cannot reserve again %" PRIu64 " bytes at %"
                 PRIu64 " after zeroing them (%s): that part of the "
                 "image is no longer reserved, and a write there can "
                 "kill ramback with SIGBUS if the file system fills up",
                 ri->path, b - a, a, rb_strerror (errno));
    }
    else
      r = madvise (ri->base + a, b - a, MADV_DONTNEED);
    if (r == 0) {
      memset (ri->base + offset, 0, a - offset);
      memset (ri->base + b, 0, offset + count - b);
      return;
    }
  }
  memset (ri->base + offset, 0, count);
}

void __attribute__ ((noinline))
ramimage_copy_in (struct ramimage *ri, uint64_t offset, const void *buf,
                  uint64_t count)
{
  memcpy (ri->base + offset, buf, count);
}

void __attribute__ ((noinline))
ramimage_copy_out (struct ramimage *ri, uint64_t offset, void *buf,
                   uint64_t count)
{
  memcpy (buf, ri->base + offset, count);
}
