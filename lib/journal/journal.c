/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the write-back journal's on-disk format, append and replay.
 *
 * A journal store (a file, a block device or an NBD export, opened
 * through store.h) holds:
 *
 *   [0, 512)      super block, copy A   } the valid copy with the
 *   [512, 1024)   super block, copy B   } higher generation wins
 *   [4096, 4096 + area_size)  the circular area of transactions
 *
 * Super block (struct rbj_super, little endian, CRC-32C in its last 4
 * bytes): magic "RAMBACKJ", version 2, the sizes of the journal, of its
 * area and of the backing store it belongs to, a generation (each write
 * of the super block goes to copy gen % 2, so a torn write of one copy
 * leaves the other), a nonce, and the tail: the logical position and
 * sequence number of the oldest transaction that may not be on the
 * backing store yet.
 *
 * Positions in the area are logical byte counts that only grow; the
 * physical place is area_start + position % area_size, and anything may
 * wrap around the end of the area.  Each run of ramback (each open)
 * starts a new nonce at logical position 0 with a durable super block,
 * and every block it writes carries the nonce: blocks left over from
 * earlier runs, or from another journal, are never mistaken for ours.
 *
 * A transaction, starting on a 512-byte boundary:
 *
 *   descriptor  struct rbj_desc_hdr (magic "RJXD", nextents, nonce, seq,
 *               desc_len, data_len), then nextents x struct
 *               rbj_disk_extent (backing offset, length, kind DATA or
 *               ZERO, CRC-32C of the extent's data), then the CRC-32C of
 *               everything before it; padded to desc_len, which ends on
 *               a 4096-byte boundary of the area (desc_len_at; the
 *               padding is not written, or written as zeroes)
 *   data        the DATA extents' bytes, in order, padded to data_len
 *               (512 multiple): it starts 4 KiB aligned in the store
 *               (the area's start and size are 4 KiB multiples) and
 *               is written from a page-aligned buffer, so a file store
 *               takes it with O_DIRECT (store-file.c)
 *   commit      one block: struct rbj_commit (magic "RJXC", the
 *               descriptor's CRC, nonce, seq, total length, CRC-32C)
 *
 * The data is written first (as it is captured), then the descriptor
 * (with the data's CRCs) and the commit block, then the journal is
 * synced once; a small transaction (RBJ_WHOLE_MAX) goes in one write
 * instead, descriptor to commit block, padding included, then the
 * sync: the same bytes, one request.  Either way:
 * it is committed when its commit block is durable, and it counts only
 * if every CRC checks (a power cut may keep any subset of the blocks,
 * torn ones included).  Sequence numbers are consecutive.
 *
 * Version 1 had no padding (the data right after the descriptor, at a
 * 512-byte boundary).  A version 1 journal that holds a transaction is
 * refused (the release that wrote it replays it); an empty one (after
 * a clean stop) is formatted anew.
 *
 * Replay (at open, and rbj_recover offline) starts at the super block's
 * tail and takes transactions while they have the expected sequence
 * number and nonce and every check passes; the first one that does not
 * is the end (an incomplete, torn or stale transaction: nothing after
 * it was acknowledged, because transactions are committed in order).
 * Each one's extents are written in place on the backing store, which
 * is synced at the end.  Replaying again writes the same bytes to the
 * same places: a crash during replay is repaired by replaying again.
 * That needs every transaction replay reads to be durable in the
 * journal, so the journal is synced before it is read: a process that
 * died between an append and its sync leaves the transaction in the
 * store's cache, where replay finds it, and a power cut during that
 * replay would otherwise keep some of its in-place writes (a disk
 * writes its cache back in any order) and lose the transaction that
 * completes them.
 *
 * Wrap-around: the committer appends at the head only into space that
 * the tail has left, and before it overwrites space that the *durable*
 * super block still counts as live it writes and syncs a super block
 * with the current tail (rbj_begin), so recovery never starts at a
 * transaction that has been overwritten.
 *
 * Locking: 'lock' protects tail, tail_seq (the applier retires, the
 * committer reads).  head, next_seq, gen, durable_tail and the super
 * block writes belong to the committer (one thread at a time calls
 * rbj_begin/rbj_write/rbj_commit; open and close run alone).
 *
 * Why one file of over 900 lines: the format, the append and the replay
 * are one format read and written in one place, so that what replay
 * accepts is exactly what the append writes.  Transactions are txn.c.
 */

#include <config.h>

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "error.h"
#include "iszero.h"
#include "journal.h"
#include "ramback.h"

#define SUPER_MAGIC "RAMBACKJ"
#define RBJ_VERSION 2
#define DESC_MAGIC 0x44584a52u          /* "RJXD" */
#define COMMIT_MAGIC 0x43584a52u        /* "RJXC" */

struct rbj_super {
  char magic[8];
  uint32_t version;
  uint32_t block;
  uint64_t journal_size;
  uint64_t area_start;
  uint64_t area_size;
  uint64_t back_size;
  uint64_t gen;
  uint64_t nonce;
  uint64_t tail;
  uint64_t tail_seq;
  uint8_t reserved[RBJ_BLOCK - 80 - 4];
  uint32_t crc;
};
_Static_assert (sizeof (struct rbj_super) == RBJ_BLOCK, "super block size");

struct rbj_desc_hdr {
  uint32_t magic;
  uint32_t nextents;
  uint64_t nonce;
  uint64_t seq;
  uint64_t desc_len;
  uint64_t data_len;
};
_Static_assert (sizeof (struct rbj_desc_hdr) == 40, "descriptor header");

struct rbj_disk_extent {
  uint64_t offset;
  uint64_t length;
  uint32_t kind;
  uint32_t crc;
};
_Static_assert (sizeof (struct rbj_disk_extent) == RBJ_EXTENT_BYTES,
                "extent size");

struct rbj_commit {
  uint32_t magic;
  uint32_t desc_crc;
  uint64_t nonce;
  uint64_t seq;
  uint64_t total_len;
  uint32_t pad;
  uint32_t crc;
};
_Static_assert (sizeof (struct rbj_commit) == 40, "commit size");

struct rb_journal {
  struct rb_store *store;
  char *name;
  uint64_t area_start, area_size, back_size, journal_size;
  uint64_t nonce;
  /* [committer] */
  uint64_t gen;
  uint64_t head, next_seq;
  uint64_t durable_tail;        /* tail in the last durable super block */
  rb_mutex lock;
  uint64_t tail, tail_seq;      /* [lock] */
};

/* ---- CRC-32C ---- */

static uint32_t crc_table[8][256];
static bool crc_ready;

static void
crc_init (void)
{
  uint32_t i, j, c;

  for (i = 0; i < 256; i++) {
    c = i;
    for (j = 0; j < 8; j++)
      c = (c >> 1) ^ (0x82f63b78u & -(c & 1));
    crc_table[0][i] = c;
  }
  for (i = 0; i < 256; i++)
    for (j = 1; j < 8; j++)
      crc_table[j][i] = (crc_table[j - 1][i] >> 8) ^
        crc_table[0][crc_table[j - 1][i] & 0xff];
  rb_atomic_store_release (&crc_ready, true);
}

#if defined (__x86_64__)
__attribute__ ((target ("sse4.2")))
static uint32_t
crc_hw (uint32_t crc, const uint8_t *p, size_t len)
{
  uint64_t c = crc;

  while (len >= 8) {
    uint64_t v;
    memcpy (&v, p, 8);
    c = __builtin_ia32_crc32di (c, v);
    p += 8;
    len -= 8;
  }
  crc = c;
  while (len--)
    crc = __builtin_ia32_crc32qi (crc, *p++);
  return crc;
}
#endif

static uint32_t
crc_sw (uint32_t crc, const uint8_t *p, size_t len)
{
  if (!rb_atomic_load_acquire (&crc_ready))
    crc_init ();                /* idempotent: a race only recomputes */
  while (len >= 8) {
    uint32_t lo, hi;
    memcpy (&lo, p, 4);
    memcpy (&hi, p + 4, 4);
    lo = le32toh (lo) ^ crc;
    hi = le32toh (hi);
    crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
      crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
      crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
      crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--)
    crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
  return crc;
}

uint32_t
rbj_crc32c (uint32_t crc, const void *buf, size_t len)
{
  crc = ~crc;
#if defined (__x86_64__)
  if (__builtin_cpu_supports ("sse4.2"))
    return ~crc_hw (crc, buf, len);
#endif
  return ~crc_sw (crc, buf, len);
}

/* ---- helpers ---- */

void *
rbj_alloc (size_t len)
{
  long page = sysconf (_SC_PAGESIZE);
  size_t a = page > RBJ_ALIGN ? (size_t) page : RBJ_ALIGN;
  void *p;
  int r = posix_memalign (&p, a, len ? len : 1);

  if (r != 0) {
    errno = r;
    return NULL;
  }
  return p;
}

static uint64_t
align_up (uint64_t n)
{
  return (n + RBJ_BLOCK - 1) & ~(uint64_t) (RBJ_BLOCK - 1);
}

/* The descriptor's bytes that matter (header, extents, CRC), rounded
 * to a block: what is written.
 */
static uint64_t
desc_used_len (size_t n)
{
  return align_up (sizeof (struct rbj_desc_hdr) + n * RBJ_EXTENT_BYTES + 4);
}

/* The descriptor's length for a transaction at logical position pos:
 * up to the first 4 KiB boundary after its used part, so the data
 * starts aligned.
 */
static uint64_t
desc_len_at (uint64_t pos, size_t n)
{
  uint64_t end = pos + desc_used_len (n);

  end = (end + RBJ_DATA_ALIGN - 1) & ~(uint64_t) (RBJ_DATA_ALIGN - 1);
  return end - pos;
}

uint64_t
rbj_txn_bytes (size_t nextents, uint64_t data_bytes)
{
  return desc_used_len (nextents) + (RBJ_DATA_ALIGN - RBJ_BLOCK) +
    align_up (data_bytes) + RBJ_BLOCK;
}

uint64_t
rbj_capacity (const struct rb_journal *j)
{
  return j->area_size;
}

uint64_t
rbj_next_seq (const struct rb_journal *j)
{
  return j->next_seq;
}

uint64_t
rbj_used (struct rb_journal *j)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&j->lock);
  return j->head - j->tail;
}

static uint64_t
new_nonce (void)
{
  uint64_t n = 0;

  if (getrandom (&n, sizeof n, 0) != sizeof n || n == 0)
    n = rb_now_ns () ^ ((uint64_t) getpid () << 32) ^ (uintptr_t) &n;
  return n;
}

/* Requests for [pos, pos+len) of the area, split where it wraps.
 * Returns how many (1 or 2) were put in io[].
 */
static size_t
area_io (struct rb_journal *j, enum rb_io_op op, uint64_t pos, void *buf,
         uint64_t len, struct rb_io *io)
{
  uint64_t phys = pos % j->area_size, first = j->area_size - phys;

  if (first >= len) {
    io[0] = (struct rb_io) { .op = op, .buf = buf, .count = len,
                             .offset = j->area_start + phys };
    return 1;
  }
  io[0] = (struct rb_io) { .op = op, .buf = buf, .count = first,
                           .offset = j->area_start + phys };
  io[1] = (struct rb_io) { .op = op, .buf = (uint8_t *) buf + first,
                           .count = len - first, .offset = j->area_start };
  return 2;
}

static int
area_read (struct rb_journal *j, uint64_t pos, void *buf, uint64_t len)
{
  struct rb_io io[2];
  size_t n = area_io (j, RB_IO_READ, pos, buf, len, io);

  return j->store->ops->submit (j->store, io, n);
}

bool
rbj_settle (struct rb_store *s)
{
  struct rb_store_range r[16];
  bool any = false, pending;

  if (s->ops->take_suspects == NULL)
    return false;
  for (;;) {
    size_t n = s->ops->take_suspects (s, r, 16, &pending);
    if (n)
      any = true;
    if (n == 16)
      continue;
    if (!pending)
      return any;
    any = true;
    nanosleep (&(struct timespec) { 0, 50 * 1000000 }, NULL);
  }
}

/* ---- super block ---- */

static uint32_t
super_crc (const struct rbj_super *s)
{
  return rbj_crc32c (0, s, offsetof (struct rbj_super, crc));
}

/* A super block of any version (the version is checked by open). */
static bool
super_valid (const struct rbj_super *s)
{
  return memcmp (s->magic, SUPER_MAGIC, 8) == 0 &&
    le32toh (s->crc) == super_crc (s);
}

/* A version 1 journal: does its tail hold a transaction of its run
 * (the descriptor's magic, nonce and sequence number)?  Version 1 had
 * the same super block and descriptor header, and the area at 4096.
 * -1 on a read error.
 */
static int
v1_holds_txn (struct rb_store *js, const struct rbj_super *s)
{
  uint64_t area = le64toh (s->area_size), tail = le64toh (s->tail);
  uint8_t b[RBJ_BLOCK];
  struct rbj_desc_hdr h;

  if (le64toh (s->area_start) != RBJ_AREA_START || area < RBJ_BLOCK ||
      area % RBJ_BLOCK || RBJ_AREA_START + area > js->size)
    return 1;                   /* damaged: do not guess */
  tail = tail % area & ~(uint64_t) (RBJ_BLOCK - 1);
  if (rb_store_pread (js, b, sizeof b, RBJ_AREA_START + tail) == -1)
    return -1;
  memcpy (&h, b, sizeof h);
  return le32toh (h.magic) == DESC_MAGIC &&
    le64toh (h.nonce) == le64toh (s->nonce) &&
    le64toh (h.seq) == le64toh (s->tail_seq);
}

/* Write the super block with the current tail (the next copy) and sync. */
static int
write_super (struct rb_journal *j)
{
  struct rbj_super s;
  uint64_t tail, tail_seq;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&j->lock);
    tail = j->tail;
    tail_seq = j->tail_seq;
  }
  memset (&s, 0, sizeof s);
  memcpy (s.magic, SUPER_MAGIC, 8);
  s.version = htole32 (RBJ_VERSION);
  s.block = htole32 (RBJ_BLOCK);
  s.journal_size = htole64 (j->journal_size);
  s.area_start = htole64 (j->area_start);
  s.area_size = htole64 (j->area_size);
  s.back_size = htole64 (j->back_size);
  s.gen = htole64 (j->gen + 1);
  s.nonce = htole64 (j->nonce);
  s.tail = htole64 (tail);
  s.tail_seq = htole64 (tail_seq);
  s.crc = htole32 (super_crc (&s));
  if (rb_store_pwrite (j->store, &s, sizeof s,
                       ((j->gen + 1) % 2) * RBJ_BLOCK) == -1 ||
      j->store->ops->flush (j->store) == -1) {
    rb_set_error (errno, "journal %s: cannot write its super block: %s",
                  j->name, rb_get_error ());
    return -1;
  }
  j->gen++;
  j->durable_tail = tail;
  return 0;
}

/* ---- append ---- */

static int
submit_all (struct rb_journal *j, struct rb_io *io, size_t k)
{
  if (j->store->ops->submit (j->store, io, k) == -1) {
    rb_set_error (errno, "journal %s: append of transaction %" PRIu64
                  " failed: %s", j->name, j->next_seq, rb_get_error ());
    return -1;
  }
  return 0;
}

int
rbj_begin (struct rb_journal *j, size_t n, uint64_t data_bytes,
           uint64_t *data_pos)
{
  uint64_t total = rbj_txn_bytes (n, data_bytes), tail;

  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&j->lock);
    tail = j->tail;
  }
  /* A failed append's writes (an NBD journal that lost its
   * connection) must not land over this one.
   */
  rbj_settle (j->store);
  if (total > j->area_size - (j->head - tail)) {
    rb_set_error (ENOSPC, "journal %s: a transaction of %" PRIu64 " bytes "
                  "does not fit in the %" PRIu64 " bytes free",
                  j->name, total, j->area_size - (j->head - tail));
    return -1;
  }
  /* Space the durable super block still counts as live is about to be
   * overwritten: record the tail first.
   */
  if (j->head + total > j->durable_tail + j->area_size &&
      write_super (j) == -1)
    return -1;
  *data_pos = j->head + desc_len_at (j->head, n);
  return 0;
}

int
rbj_write (struct rb_journal *j, uint64_t pos, const void *buf, uint64_t len)
{
  while (len > 0) {
    struct rb_io io[2];
    uint64_t l = RB_MIN (len, (uint64_t) RB_MAX_STORE_IO);
    size_t k = area_io (j, RB_IO_WRITE, pos, (void *) buf, l, io);

    if (submit_all (j, io, k) == -1)
      return -1;
    pos += l;
    buf = (const uint8_t *) buf + l;
    len -= l;
  }
  return 0;
}

/* The descriptor (and, with 'whole', the data and the commit block in
 * one buffer), written in one request for a small transaction.
 */
static int
commit (struct rb_journal *j, const struct rbj_extent *x, size_t n,
        bool whole, uint64_t *start, uint64_t *len)
{
  static const uint8_t zeroes[RBJ_BLOCK];
  uint64_t desc_len = desc_len_at (j->head, n), data = 0, data_len, total;
  uint64_t desc_used = desc_used_len (n);
  CLEANUP_FREE uint8_t *desc = NULL;
  struct rbj_desc_hdr *h;
  struct rbj_disk_extent *e;
  struct rbj_commit c;
  struct rb_io io[6];
  uint8_t block[RBJ_BLOCK];
  uint32_t dcrc;
  size_t i, k = 0;

  for (i = 0; i < n; i++)
    if (x[i].kind == RBJ_DATA)
      data += x[i].length;
  data_len = align_up (data);
  total = desc_len + data_len + RBJ_BLOCK;

  desc = rbj_alloc (whole ? total : desc_used);
  if (desc == NULL) {
    rb_set_error (errno, "journal %s: out of memory", j->name);
    return -1;
  }
  memset (desc, 0, whole ? total : desc_used);
  h = (struct rbj_desc_hdr *) desc;
  h->magic = htole32 (DESC_MAGIC);
  h->nextents = htole32 (n);
  h->nonce = htole64 (j->nonce);
  h->seq = htole64 (j->next_seq);
  h->desc_len = htole64 (desc_len);
  h->data_len = htole64 (data_len);
  e = (struct rbj_disk_extent *) (desc + sizeof *h);
  for (i = 0; i < n; i++) {
    e[i].offset = htole64 (x[i].offset);
    e[i].length = htole64 (x[i].length);
    e[i].kind = htole32 (x[i].kind);
    e[i].crc = htole32 (x[i].kind == RBJ_DATA
                        ? rbj_crc32c (0, x[i].data, x[i].length) : 0);
  }
  dcrc = rbj_crc32c (0, desc, sizeof *h + n * RBJ_EXTENT_BYTES);
  {
    uint32_t le = htole32 (dcrc);
    memcpy (desc + sizeof *h + n * RBJ_EXTENT_BYTES, &le, 4);
  }
  memset (&c, 0, sizeof c);
  c.magic = htole32 (COMMIT_MAGIC);
  c.desc_crc = htole32 (dcrc);
  c.nonce = htole64 (j->nonce);
  c.seq = htole64 (j->next_seq);
  c.total_len = htole64 (total);
  c.crc = htole32 (rbj_crc32c (0, &c, offsetof (struct rbj_commit, crc)));
  memset (block, 0, sizeof block);
  memcpy (block, &c, sizeof c);

  /* The descriptor, the data's padding and the commit block; then one
   * sync makes the whole transaction durable.  Whole: everything from
   * the descriptor to the commit block (the padding as zeroes) in one
   * write, one request to the store (two where the area wraps).
   */
  if (whole) {
    uint8_t *p = desc + desc_len;
    for (i = 0; i < n; i++)
      if (x[i].kind == RBJ_DATA) {
        memcpy (p, x[i].data, x[i].length);
        p += x[i].length;
      }
    memcpy (desc + total - RBJ_BLOCK, block, RBJ_BLOCK);
    k += area_io (j, RB_IO_WRITE, j->head, desc, total, io + k);
  }
  else {
    k += area_io (j, RB_IO_WRITE, j->head, desc, desc_used, io + k);
    if (data_len > data)
      k += area_io (j, RB_IO_WRITE, j->head + desc_len + data,
                    (void *) zeroes, data_len - data, io + k);
    k += area_io (j, RB_IO_WRITE, j->head + desc_len + data_len, block,
                  RBJ_BLOCK, io + k);
  }
  if (submit_all (j, io, k) == -1)
    return -1;
  if (j->store->ops->flush (j->store) == -1) {
    rb_set_error (errno, "journal %s: sync after transaction %" PRIu64
                  " failed: %s", j->name, j->next_seq, rb_get_error ());
    return -1;
  }
  *start = j->head;
  *len = total;
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&j->lock);
    j->head += total;
  }
  j->next_seq++;
  return 0;
}

int
rbj_commit (struct rb_journal *j, const struct rbj_extent *x, size_t n,
            uint64_t *start, uint64_t *len)
{
  return commit (j, x, n, false, start, len);
}

int
rbj_commit_whole (struct rb_journal *j, const struct rbj_extent *x, size_t n,
                  uint64_t *start, uint64_t *len)
{
  return commit (j, x, n, true, start, len);
}

void
rbj_retire (struct rb_journal *j, uint64_t seq, uint64_t start, uint64_t len)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&j->lock);
  if (start + len > j->tail) {
    j->tail = start + len;
    j->tail_seq = seq + 1;
  }
}

/* ---- replay ---- */

#define REPLAY_BATCH 64

/* Read, check and apply the transaction at *pos with sequence seq.
 * Returns 1 if it was applied, 0 if it is not there (the end), -1 on an
 * I/O error.  *torn: it was there in part.
 */
static int
replay_one (struct rb_journal *j, struct rb_store *back, uint64_t pos,
            uint64_t seq, uint64_t room, uint64_t *total, uint64_t *bytes,
            bool *torn)
{
  uint8_t first[RBJ_BLOCK], cblock[RBJ_BLOCK];
  CLEANUP_FREE uint8_t *desc = NULL, *data = NULL;
  struct rbj_desc_hdr h;
  struct rbj_commit c;
  struct rbj_disk_extent *e;
  uint64_t desc_len, data_len, off, n, i;
  uint32_t dcrc, stored;

  if (area_read (j, pos, first, RBJ_BLOCK) == -1)
    return -1;
  memcpy (&h, first, sizeof h);
  if (le32toh (h.magic) != DESC_MAGIC || le64toh (h.nonce) != j->nonce ||
      le64toh (h.seq) != seq)
    return 0;                   /* not ours: the end */
  *torn = true;                 /* ours from here on: complete or torn */
  n = le32toh (h.nextents);
  desc_len = le64toh (h.desc_len);
  data_len = le64toh (h.data_len);
  if (n == 0 || desc_len != desc_len_at (pos, n) || data_len % RBJ_BLOCK ||
      data_len > room || desc_len + data_len + RBJ_BLOCK > room)
    return 0;
  if ((desc = malloc (desc_len)) == NULL ||
      (data = rbj_alloc (data_len)) == NULL) {
    rb_set_error (errno, "journal %s: out of memory for a transaction of "
                  "%" PRIu64 " bytes", j->name, desc_len + data_len);
    return -1;
  }
  if (area_read (j, pos, desc, desc_len) == -1)
    return -1;
  dcrc = rbj_crc32c (0, desc, sizeof h + n * RBJ_EXTENT_BYTES);
  memcpy (&stored, desc + sizeof h + n * RBJ_EXTENT_BYTES, 4);
  if (le32toh (stored) != dcrc)
    return 0;
  if (area_read (j, pos + desc_len + data_len, cblock, RBJ_BLOCK) == -1)
    return -1;
  memcpy (&c, cblock, sizeof c);
  if (le32toh (c.magic) != COMMIT_MAGIC || le64toh (c.nonce) != j->nonce ||
      le64toh (c.seq) != seq || le32toh (c.desc_crc) != dcrc ||
      le64toh (c.total_len) != desc_len + data_len + RBJ_BLOCK ||
      le32toh (c.crc) != rbj_crc32c (0, &c, offsetof (struct rbj_commit, crc)))
    return 0;
  if (data_len && area_read (j, pos + desc_len, data, data_len) == -1)
    return -1;
  e = (struct rbj_disk_extent *) (desc + sizeof h);
  for (i = 0, off = 0; i < n; i++) {
    uint64_t eo = le64toh (e[i].offset), el = le64toh (e[i].length);
    uint32_t kind = le32toh (e[i].kind);

    if (el == 0 || eo + el > back->size || eo + el < eo ||
        (kind != RBJ_DATA && kind != RBJ_ZERO))
      return 0;
    if (kind == RBJ_DATA) {
      if (off + el > data_len ||
          rbj_crc32c (0, data + off, el) != le32toh (e[i].crc))
        return 0;
      off += el;
    }
  }
  /* Complete and intact: apply it. */
  *torn = false;
  {
    struct rb_io io[REPLAY_BATCH];
    size_t k = 0;

    for (i = 0, off = 0; i < n; i++) {
      uint64_t eo = le64toh (e[i].offset), el = le64toh (e[i].length);
      bool is_data = le32toh (e[i].kind) == RBJ_DATA;

      io[k++] = (struct rb_io) {
        .op = is_data ? RB_IO_WRITE : RB_IO_ZERO,
        .buf = is_data ? data + off : NULL, .count = el, .offset = eo,
      };
      if (is_data)
        off += el;
      *bytes += el;
      if (k == REPLAY_BATCH || i == n - 1) {
        if (back->ops->submit (back, io, k) == -1) {
          rb_set_error (errno, "journal %s: replay of transaction %" PRIu64
                        " onto the backing store failed: %s", j->name, seq,
                        rb_get_error ());
          return -1;
        }
        k = 0;
      }
    }
  }
  *total = desc_len + data_len + RBJ_BLOCK;
  return 1;
}

static int
replay (struct rb_journal *j, struct rb_store *back, uint64_t tail,
        uint64_t tail_seq, struct rbj_replay *rp)
{
  uint64_t pos = tail, seq = tail_seq;

  for (;;) {
    uint64_t total = 0;
    bool torn = false;
    int r = replay_one (j, back, pos, seq, j->area_size - (pos - tail),
                        &total, &rp->bytes, &torn);
    if (r == -1)
      return -1;
    if (r == 0) {
      rp->torn = torn;
      break;
    }
    if (rp->txns == 0)
      rp->first_seq = seq;
    rp->last_seq = seq;
    rp->txns++;
    pos += total;
    seq++;
  }
  if (rp->txns > 0 && back->ops->flush (back) == -1) {
    rb_set_error (errno, "journal %s: sync of the backing store after "
                  "replay failed: %s", j->name, rb_get_error ());
    return -1;
  }
  j->next_seq = seq;
  return 0;
}

/* ---- open, close ---- */

struct rb_journal *
rbj_open (struct rb_store *js, const char *name, struct rb_store *back,
          struct rbj_replay *rp)
{
  struct rb_journal *j;
  uint8_t head[RBJ_AREA_START];
  struct rbj_super s[2], *best = NULL;
  int i;

  memset (rp, 0, sizeof *rp);
  if (js->size < RBJ_MIN_SIZE) {
    rb_set_error (EINVAL, "journal=%s is %" PRIu64 " bytes: a journal must "
                  "be at least %" PRIu64 " bytes (1 MiB), and larger than "
                  "what is written between two commits", name, js->size,
                  RBJ_MIN_SIZE);
    return NULL;
  }
  if (js->read_only) {
    rb_set_error (EROFS, "journal=%s is read-only", name);
    return NULL;
  }
  j = calloc (1, sizeof *j);
  if (j == NULL || (j->name = strdup (name)) == NULL) {
    rb_set_error (errno, "calloc");
    free (j);
    return NULL;
  }
  rb_mutex_init (&j->lock);
  j->store = js;
  j->back_size = back->size;
  /* What replay reads must be durable first (see the top). */
  if (js->ops->flush (js) == -1) {
    rb_set_error (errno, "journal=%s: cannot sync it before replaying it: "
                  "%s", name, rb_get_error ());
    goto fail;
  }
  if (rb_store_pread (js, head, sizeof head, 0) == -1) {
    rb_set_error (errno, "journal=%s: cannot read its super block: %s",
                  name, rb_get_error ());
    goto fail;
  }
  memcpy (s, head, sizeof s);
  for (i = 0; i < 2; i++)
    if (super_valid (&s[i]) &&
        (best == NULL || le64toh (s[i].gen) > le64toh (best->gen)))
      best = &s[i];

  if (best && le32toh (best->version) != RBJ_VERSION) {
    int r;

    if (le32toh (best->version) != 1) {
      rb_set_error (EINVAL, "journal=%s is a ramback journal of format "
                    "version %" PRIu32 ", which this release (version %d) "
                    "does not know: replay it with the release that wrote "
                    "it (ramback recover BACK JOURNAL)", name,
                    le32toh (best->version), RBJ_VERSION);
      goto fail;
    }
    r = v1_holds_txn (js, best);
    if (r == -1) {
      rb_set_error (errno, "journal=%s: cannot read it: %s", name,
                    rb_get_error ());
      goto fail;
    }
    if (r) {
      rb_set_error (EINVAL, "journal=%s is a ramback journal of format "
                    "version 1 (an earlier ramback) and may hold "
                    "transactions not yet on the backing store: replay "
                    "them with that release first (ramback recover BACK "
                    "JOURNAL, or a start and clean stop of its plugin), "
                    "then start this one, which formats the empty journal "
                    "as version %d", name, RBJ_VERSION);
      goto fail;
    }
    rb_log ("journal=%s: an empty journal of format version 1, formatted "
            "as version %d", name, RBJ_VERSION);
    best = NULL;                /* empty: format it anew */
    memset (head, 0, sizeof head);
  }
  if (best == NULL) {
    if (!rb_is_zero (head, sizeof head)) {
      rb_set_error (EINVAL, "journal=%s holds data that is not a ramback "
                    "journal (or its super block is damaged): refusing to "
                    "overwrite it; to make it a new journal, zero its first "
                    "4 KiB (dd if=/dev/zero of=JOURNAL bs=4096 count=1 "
                    "conv=notrunc)", name);
      goto fail;
    }
    j->journal_size = js->size;
    j->area_start = RBJ_AREA_START;
    j->area_size = (js->size - RBJ_AREA_START) &
      ~(uint64_t) (RBJ_DATA_ALIGN - 1);
    j->next_seq = 1;
    rp->formatted = true;
  }
  else {
    j->journal_size = le64toh (best->journal_size);
    j->area_start = le64toh (best->area_start);
    j->area_size = le64toh (best->area_size);
    j->gen = le64toh (best->gen);
    j->nonce = le64toh (best->nonce);
    if (le64toh (best->back_size) != back->size) {
      rb_set_error (EINVAL, "journal=%s belongs to a backing store of %"
                    PRIu64 " bytes, and this one has %" PRIu64 ": it is "
                    "another device's journal (zero its first 4 KiB to "
                    "reuse it, losing what it holds)", name,
                    le64toh (best->back_size), back->size);
      goto fail;
    }
    if (j->area_start != RBJ_AREA_START || j->area_size < RBJ_BLOCK * 8 ||
        j->area_size % RBJ_DATA_ALIGN ||
        j->area_start + j->area_size > js->size) {
      rb_set_error (EINVAL, "journal=%s: its super block describes an area "
                    "of %" PRIu64 " bytes at %" PRIu64 ", which does not fit "
                    "in its %" PRIu64 " bytes (was it shrunk?)", name,
                    j->area_size, j->area_start, js->size);
      goto fail;
    }
    if (replay (j, back, le64toh (best->tail), le64toh (best->tail_seq),
                rp) == -1)
      goto fail;
  }
  /* A new run: new nonce, empty journal, durable before any append. */
  j->nonce = new_nonce ();
  j->head = j->tail = 0;
  j->tail_seq = j->next_seq;
  if (write_super (j) == -1)
    goto fail;
  return j;

 fail:
  rb_mutex_destroy (&j->lock);
  free (j->name);
  free (j);
  return NULL;
}

int
rbj_close (struct rb_journal *j, bool clean)
{
  int r = 0;

  if (j == NULL)
    return 0;
  if (clean) {
    bool empty;
    {
      ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&j->lock);
      empty = j->tail == j->head;
    }
    if (empty && j->durable_tail != j->head)
      r = write_super (j);
  }
  rb_mutex_destroy (&j->lock);
  free (j->name);
  free (j);
  return r;
}

int
rbj_check_not_back (const char *uri, const char *back_uri,
                    const struct rb_store_id *id)
{
  struct stat st;

  if (rb_store_is_remote_uri (uri)) {
    if (back_uri && strcmp (uri, back_uri) == 0)
      goto same;
    return 0;
  }
  if (stat (uri, &st) == -1)
    return 0;                   /* opening it will say what is wrong */
  if ((id->kind == RB_STORE_FILE && S_ISREG (st.st_mode) &&
       st.st_dev == id->dev && st.st_ino == id->ino) ||
      (id->kind == RB_STORE_BLOCK && S_ISBLK (st.st_mode) &&
       st.st_rdev == id->dev))
    goto same;
  return 0;
 same:
  rb_set_error (EINVAL, "journal %s is the backing store itself: the "
                "journal needs a store of its own (another file, device "
                "or export, ideally on another disk)", uri);
  return -1;
}

/* What a store that is not a journal looks like, for recover's
 * refusal: a few well-known signatures, else its first bytes.
 */
static void
describe_start (const uint8_t *h, char *out, size_t n)
{
  static const struct { size_t off; const char *magic; size_t len;
                        const char *what; } sig[] = {
    { 0, SUPER_MAGIC, 8, "a damaged ramback journal super block (its "
      "checksum does not match)" },
    { 1080, "\x53\xef", 2, "an ext2/3/4 file system" },
    { 0, "XFSB", 4, "an XFS file system" },
    { 0, "LUKS\xba\xbe", 6, "a LUKS volume" },
    { 512, "EFI PART", 8, "a GPT partition table" },
    { 4086, "SWAPSPACE2", 10, "a swap area" },
    { 0, "QFI\xfb", 4, "a qcow2 image" },
    { 0, "RAMBACK-IMAGE", 13, "a ramback RAM image (ram=)" },
    { 510, "\x55\xaa", 2, "a boot sector or MBR partition table" },
  };
  size_t i;

  for (i = 0; i < sizeof sig / sizeof sig[0]; i++)
    if (memcmp (h + sig[i].off, sig[i].magic, sig[i].len) == 0) {
      snprintf (out, n, "it holds %s", sig[i].what);
      return;
    }
  snprintf (out, n, "it starts with the bytes %02x %02x %02x %02x %02x %02x "
            "%02x %02x", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
}

/* Recover writes only to a journal: refuse (touching nothing) a store
 * without a valid super block, saying what it looks like.  Formatting
 * is for the plugin's journal= alone.
 */
static int
check_is_journal (struct rb_store *js, const char *name)
{
  uint8_t head[RBJ_AREA_START];
  struct rbj_super s[2];
  char what[160];
  uint64_t off;
  CLEANUP_FREE uint8_t *buf = NULL;
  const size_t step = 1024 * 1024;

  if (js->size < sizeof head) {
    rb_set_error (EINVAL, "%s is not a ramback journal: it is %" PRIu64
                  " bytes, smaller than a journal's super blocks", name,
                  js->size);
    return -1;
  }
  if (rb_store_pread (js, head, sizeof head, 0) == -1) {
    rb_set_error (errno, "%s: cannot read it: %s", name, rb_get_error ());
    return -1;
  }
  memcpy (s, head, sizeof s);
  if (super_valid (&s[0]) || super_valid (&s[1]))
    return 0;
  if (!rb_is_zero (head, sizeof head)) {
    describe_start (head, what, sizeof what);
    rb_set_error (EINVAL, "%s is not a ramback journal: %s; nothing "
                  "replayed, nothing written", name, what);
    return -1;
  }
  if ((buf = malloc (step)) == NULL) {
    rb_set_error (errno, "malloc");
    return -1;
  }
  for (off = sizeof head; off < js->size; off += step) {
    size_t n = RB_MIN ((uint64_t) step, js->size - off);
    if (rb_store_pread (js, buf, n, off) == -1) {
      rb_set_error (errno, "%s: cannot read it: %s", name, rb_get_error ());
      return -1;
    }
    if (!rb_is_zero (buf, n)) {
      rb_set_error (EINVAL, "%s is not a ramback journal: its first 4 KiB "
                    "are zero, and it holds data after them (from about "
                    "byte %" PRIu64 "); nothing replayed, nothing written",
                    name, off);
      return -1;
    }
  }
  rb_set_error (EINVAL, "%s is not a ramback journal: it is all zero "
                "(never used as one): nothing to replay, the backing store "
                "is as it is", name);
  return -1;
}

int
rbj_recover (const struct rb_store_params *backp,
             const struct rb_store_params *journalp, struct rbj_replay *rp)
{
  struct rb_store *back, *js;
  struct rb_journal *j;
  int r = -1;

  back = rb_store_open (backp);
  if (back == NULL)
    return -1;
  if (back->read_only) {
    rb_set_error (EROFS, "%s is read-only", backp->uri);
    rb_store_close (back);
    return -1;
  }
  if (rbj_check_not_back (journalp->uri, backp->uri, &back->id) == -1 ||
      (js = rb_store_open (journalp)) == NULL) {
    rb_store_close (back);
    return -1;
  }
  if (check_is_journal (js, journalp->uri) == -1) {
    rb_store_close (js);
    rb_store_close (back);
    return -1;
  }
  j = rbj_open (js, journalp->uri, back, rp);
  if (j)
    r = rbj_close (j, true);
  rb_store_close (js);
  rb_store_close (back);
  return r;
}
