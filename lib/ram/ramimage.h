/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the RAM image.
 *
 * Owns the memory that holds the device: anonymous memory by default,
 * or a file on a memory filesystem (ram=, tmpfs or hugetlbfs) mapped
 * shared.  base + off addresses device offset off in both cases.  The
 * image starts all zero (its old contents are never trusted, the
 * backing store is the truth), so holes of the backing store need no
 * copying.  No locking here: who may touch which bytes when is decided
 * by chunkmap.h and rangelock.h.
 *
 * The ram= file.  ramback writes only to a file it created itself:
 *   - a path that does not exist is created (O_CREAT|O_EXCL|O_NOFOLLOW,
 *     mode 0600) with the header below;
 *   - an existing file is used only if it is a regular file, not a
 *     symbolic link, with one link, owned by our uid, not the backing
 *     store itself, starts with RAMIMAGE_MAGIC, and no other ramback
 *     holds its lock; then it is resumed or taken over (below);
 *   - anything else is refused, untouched, with a message saying why.
 * The file is locked (exclusive.h) for as long as it is open.  On
 * hugetlbfs and elsewhere every size and offset is a multiple of the
 * file system's block size (the huge page size there).  Unless
 * overcommit is set, the whole file is allocated at start
 * (posix_fallocate), so that a page fault can never find the file
 * system full (that raises SIGBUS).
 *
 * Resume (formats 2 and 3).  The chunk state map (chunkmap.h: its 2-bit
 * words, not its hints or counters, which are rebuilt), the NB bitmap
 * ("not durable": 1 bit per chunk, set while the chunk may differ from
 * what the backing store durably holds although its state is CLEAN)
 * and, from format 3 on, the sector bits (chunkmap.h: which sectors of
 * a DIRTY chunk differ from the store) live in the file, so they
 * survive the process: a resumed image writes back (or puts in the
 * journal) what was written, not whole chunks.  A start on an existing
 * image of format 2 or 3 resumes it when it matches (resume=auto): the same boot
 * (boot_id), device size, chunk size, backing store path or URI and
 * identity (kind, st_dev/st_ino or st_rdev), and after a clean stop, a
 * backing file whose mtime and ctime are still what they were after the
 * final sync.  Anything else is refused with what differs, unless
 * resume=discard (take it over: today's populate) or resume=force (the
 * identity checks may fail: the image is resumed and every loaded chunk
 * written back over the store).  What core.c does with a resumed map:
 * EMPTY chunks are loaded from the store (NB ignored), ZERO chunks are
 * zeroed in RAM again (a zero may have been cut short), and DIRTY,
 * ZERO and NB chunks are written back.  The file is kept at a clean stop
 * (state CLEAN_STOP, so the next start resumes at once) and after a
 * stop that could not write everything back (state IN_USE: the next
 * start resumes and writes it back).  A different boot (the image
 * survived a reboot on a disk file system, never synced) is taken over,
 * like a format 1 image (no state map) and one stopped in CREATING.
 * A format 2 image is resumed in its own layout, with every sector of
 * its dirty chunks taken as written; a format 3 one in its own, with
 * every loaded chunk whole (format 3 had no partial chunks), and that
 * start loads whole chunks on a miss (it has nowhere to keep P and V);
 * a new or taken over image is format 4, which adds the partial
 * chunks' bits (chunkmap.h: P, which chunks are loaded only in part,
 * and V, which of their sectors are).
 *
 * File layout (format 4; integers little-endian, the map, NB, sector,
 * P and V words in the host's byte order, checked with map_order):
 *
 *   0              struct ramimage_header, zero-padded to
 *                  RAMIMAGE_HEADER_SIZE
 *   map_offset     map_size bytes: the chunk state map, 32 chunks per
 *                  64-bit word, rounded up to 4 KiB
 *   nb_offset      nb_size bytes: the NB bitmap, 64 chunks per 64-bit
 *                  word, rounded up to 4 KiB
 *   sect_offset    sect_size bytes: the sector bits, 64 sectors per
 *                  64-bit word, rounded up to 4 KiB (format 3; format 2
 *                  has none and the image follows the NB bitmap)
 *   part_offset    part_size bytes: P, 64 chunks per 64-bit word,
 *                  rounded up to 4 KiB (format 4)
 *   valid_offset   valid_size bytes: V, as the sector bits (format 4)
 *   image_offset   the image, image_size bytes (the device size rounded
 *                  up to block_size); image_offset is a multiple of
 *                  block_size
 *
 * block_size is the larger of the page size and the file system's
 * block size (fstatfs f_bsize).  state says what the file holds:
 * CREATING while it is being set up (nothing valid), IN_USE from then on
 * while a ramback serves from it, and also what a crash leaves (then
 * dirty data may be in the image, and the map says which), CLEAN_STOP
 * after a clean stop (everything was on the backing store and synced,
 * whose mtime and ctime are recorded).  header_crc covers the header up
 * to back_mtime_sec with state taken as 0, in format 3 also
 * sect_offset and sect_size, and in format 4 also part_offset to
 * valid_size: state and the times change with a single
 * aligned store each, the rest only before serving.
 */

#ifndef RAMBACK_RAMIMAGE_H
#define RAMBACK_RAMIMAGE_H

#include "env.h"
#include "store.h"

#define RAMIMAGE_MAGIC "RAMBACK-IMAGE\0\0\0"      /* 16 bytes */
#define RAMIMAGE_VERSION 4
#define RAMIMAGE_MAP_ORDER UINT64_C (0x0102030405060708)
#define RAMIMAGE_HEADER_SIZE 4096

enum ramimage_state {
  RAMIMAGE_CREATING = 1,
  RAMIMAGE_IN_USE = 2,
  RAMIMAGE_CLEAN_STOP = 3,
};

struct ramimage_header {        /* offsets are part of the format */
  char magic[16];               /*   0 RAMIMAGE_MAGIC */
  uint32_t version;             /*  16 RAMIMAGE_VERSION */
  uint32_t header_size;         /*  20 RAMIMAGE_HEADER_SIZE */
  uint32_t state;               /*  24 enum ramimage_state */
  uint32_t chunk_size;          /*  28 */
  uint64_t device_size;         /*  32 */
  uint64_t image_offset;        /*  40 */
  uint64_t image_size;          /*  48 */
  uint64_t map_offset;          /*  56 */
  uint64_t map_size;            /*  64 */
  uint64_t block_size;          /*  72 */
  uint8_t uuid[16];             /*  80 random, new each (re)initialisation */
  uint64_t generation;          /*  96 1 when created, +1 per takeover */
  uint64_t back_dev;            /* 104 struct rb_store_id of back= */
  uint64_t back_ino;            /* 112 */
  uint64_t back_size;           /* 120 */
  uint32_t back_kind;           /* 128 enum rb_store_kind */
  uint32_t reserved0;           /* 132 zero */
  uint64_t created;             /* 136 seconds since the epoch */
  char back_uri[1024];          /* 144 back= (path or URI), NUL-terminated,
                                   truncated if longer */
  /* Format 2. */
  uint64_t nb_offset;           /* 1168 */
  uint64_t nb_size;             /* 1176 */
  uint8_t boot_id[16];          /* 1184 the boot that set it up */
  uint64_t map_order;           /* 1200 RAMIMAGE_MAP_ORDER, native order */
  int64_t back_mtime_sec;       /* 1208 at CLEAN_STOP, a backing file's */
  uint64_t back_mtime_nsec;     /* 1216   times after the final sync */
  int64_t back_ctime_sec;       /* 1224 */
  uint64_t back_ctime_nsec;     /* 1232 */
  uint32_t header_crc;          /* 1240 CRC-32 of [0, 1208), state as 0 */
  uint32_t reserved1;           /* 1244 zero */
  /* Format 3. */
  uint64_t sect_offset;         /* 1248 */
  uint64_t sect_size;           /* 1256 */
  /* Format 4. */
  uint64_t part_offset;         /* 1264 */
  uint64_t part_size;           /* 1272 */
  uint64_t valid_offset;        /* 1280 */
  uint64_t valid_size;          /* 1288 */
};                              /* 1296 bytes */

/* resume= */
enum ramimage_resume {
  RAMIMAGE_RESUME_AUTO = 0,     /* resume a matching image, refuse others */
  RAMIMAGE_RESUME_DISCARD,      /* never resume: take over and populate */
  RAMIMAGE_RESUME_FORCE,        /* resume although the identity check of
                                   the backing store failed */
};

/* Where the image came from (status "image_source"). */
enum ramimage_source {
  RAMIMAGE_POPULATED = 0,       /* new, or taken over: loaded from back= */
  RAMIMAGE_RESUMED_CLEAN,       /* resumed after a clean stop */
  RAMIMAGE_RESUMED_CRASH,       /* resumed after a crash (state IN_USE) */
};

struct ramimage {
  uint8_t *base;          /* the image: device offset off is base[off] */
  uint64_t size;          /* device size */
  uint64_t mapped;        /* bytes of image mapped (size rounded up) */
  uint64_t block;         /* unit in which memory is given back */
  int fd;                 /* ram= file, or -1 */
  char *path;
  /* ram= only. */
  uint8_t *file_map;      /* the whole file: the header, then the image */
  uint64_t file_size;
  uint64_t image_offset;
  uint64_t dev, ino;      /* of the file, to recognise it at removal */
  bool owned;             /* ours (created or taken over) and locked */
  bool created;           /* created by us, not taken over */
  bool reserved;          /* allocated at start (no overcommit) */
  bool reserve_lost;      /* warned: a zeroed range lost its reservation */
  /* Resume (format 2 file). */
  uint64_t *map_words;    /* the chunk state map in the file, or NULL */
  uint64_t *nb_words;     /* the NB bitmap in the file, or NULL */
  uint64_t *sect_words;   /* the sector bits in the file, or NULL
                             (anonymous memory, a format 2 image) */
  uint64_t *part_words;   /* the partial chunks' P bits in the file */
  uint64_t *valid_words;  /* and their V bits; both NULL: anonymous
                             memory, or an image of format 2 or 3 */
  enum ramimage_source source;
  bool rewrite_all;       /* resume=force overrode a failed identity
                             check: write back every loaded chunk */
  bool in_use;            /* ramimage_in_use() was called */
  char *back_path;        /* back=, to record its times at a clean stop */
  struct rb_store_id back_id;
};

struct ramimage_params {
  uint64_t size;              /* device size */
  uint32_t chunk_size;
  unsigned sect_shift;        /* log2 (sectors per chunk), for the
                                 sector bits' room in the file */
  const char *path;           /* ram=, or NULL for anonymous memory */
  bool overcommit;            /* allow more than RAM / free space, do
                                 not reserve the ram= file */
  uint64_t budget;            /* ram-size= when smaller than size, else
                                 0: at most this much of the image is
                                 ever in memory at once (the rest is
                                 given back with ramimage_zero), so the
                                 checks of RAM and free space are made
                                 against it and a ram= file is sparse,
                                 not reserved */
  /* The backing store: compared with ram=, recorded in the header. */
  const char *back_uri;
  struct rb_store_id back_id;
  enum ramimage_resume resume;
};

/* Allocate.  Refuses a device larger than physical memory unless
 * overcommit is set; with ram=, refuses a file that is not ours (see
 * above), an image that does not match (unless resume= says otherwise)
 * and, unless overcommit is set, a device that the file system cannot
 * hold.  ri->source says whether the image was resumed; if it was,
 * map_words, nb_words and sect_words hold the map, NB bitmap and sector
 * bits from before (sect_words NULL for a format 2 image), else they
 * are zero (ram= file) or NULL (anonymous memory).
 */
extern int ramimage_open (struct ramimage *ri,
                          const struct ramimage_params *p);

/* The image is set up (the caller has its map): state IN_USE.  Until
 * then ramimage_close() leaves a resumed image as it found it.
 */
extern void ramimage_in_use (struct ramimage *ri);

/* Free.  clean: everything in the image is on the backing store and
 * synced: a ram= file is kept in state CLEAN_STOP with the backing
 * file's times, for the next start to resume.  Otherwise it is kept in
 * state IN_USE and a warning says that the next start resumes it.
 */
extern void ramimage_close (struct ramimage *ri, bool clean);

/* Make [offset, offset+count) read as zeroes, returning whole pages to
 * the system where possible (a reserved ram= file keeps them allocated).
 */
extern void ramimage_zero (struct ramimage *ri, uint64_t offset,
                           uint64_t count);

/* Copy application data into or out of the image.  These are the only
 * places that touch image bytes on behalf of the application, on
 * purpose without any lock: a write may change bytes that the flusher
 * is writing to the store at that moment.  That race is benign by
 * design (the chunk is re-dirtied after the copy, so it is stored again)
 * and lib/tsan.supp names these functions for ThreadSanitizer.
 */
extern void ramimage_copy_in (struct ramimage *ri, uint64_t offset,
                              const void *buf, uint64_t count);
extern void ramimage_copy_out (struct ramimage *ri, uint64_t offset,
                               void *buf, uint64_t count);

#endif /* RAMBACK_RAMIMAGE_H */
