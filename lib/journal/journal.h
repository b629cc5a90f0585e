/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the write-back journal's on-disk format, append and replay.
 *
 * The format is documented in nbdkit-ramback-plugin(1), "THE JOURNAL";
 * journal.c has the details beside the structures.  This module knows
 * nothing of chunks, RAM or threads: txn.c (commit points, capture, the
 * in-place writes) calls it from one thread at a time for appends
 * (the committer) and from another for retiring (the applier).
 */

#ifndef RAMBACK_JOURNAL_H
#define RAMBACK_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "env.h"
#include "store.h"

#define RBJ_BLOCK 512
#define RBJ_AREA_START 4096
/* The alignment of buffers for direct I/O (at least this; a page if
 * larger).
 */
#define RBJ_ALIGN 4096
/* Smallest journal store accepted. */
#define RBJ_MIN_SIZE (UINT64_C (1) << 20)
/* How to make a journal file (with its path as the format's argument):
 * written in full, as the plugin's manual says, since appends into the
 * holes of a sparse file make every journal sync commit metadata too.
 */
#define RBJ_CREATE_ADVICE "dd if=/dev/zero of=%s bs=1M count=256"
/* The alignment of a transaction's data in the journal (and of the
 * area's size), so the append can go with O_DIRECT.
 */
#define RBJ_DATA_ALIGN 4096
/* A transaction's fixed cost in the journal: the descriptor header,
 * its padding up to the data's alignment, the commit block and
 * rounding of the descriptor and of the data.
 */
#define RBJ_TXN_FIXED (RBJ_DATA_ALIGN + 4 * RBJ_BLOCK)
/* The descriptor's cost per extent. */
#define RBJ_EXTENT_BYTES 24

enum rbj_kind {
  RBJ_DATA = 1,
  RBJ_ZERO = 2,
};

/* One extent of a transaction, as append takes it. */
struct rbj_extent {
  uint64_t offset, length;      /* on the backing store */
  enum rbj_kind kind;
  const void *data;             /* RBJ_DATA: length bytes */
};

struct rb_journal;

/* What recovery did (open or rbj_recover). */
struct rbj_replay {
  uint64_t txns, bytes;         /* transactions and data bytes replayed */
  uint64_t first_seq, last_seq; /* of those replayed */
  bool torn;                    /* the scan stopped at a damaged or
                                   incomplete transaction */
  bool formatted;               /* the journal was empty and is new */
};

/* Open the journal on store 'js' for the backing store 'back': format
 * an all-zero journal, refuse anything else that is not a ramback
 * journal for a store of this size, replay every committed transaction
 * onto 'back' (and sync it), then start a new, empty journal.  'name'
 * is what error messages call the journal.  NULL on error.  The
 * journal does not own either store.
 */
extern struct rb_journal *rbj_open (struct rb_store *js, const char *name,
                                    struct rb_store *back,
                                    struct rbj_replay *replay);
/* A clean stop: everything was applied; mark the journal empty. */
extern int rbj_close (struct rb_journal *j, bool clean);

/* Bytes of the circular area, and the space a transaction needs at
 * most (its descriptor's padding depends on where it starts).
 */
extern uint64_t rbj_capacity (const struct rb_journal *j);
extern uint64_t rbj_txn_bytes (size_t nextents, uint64_t data_bytes);

/* Append one transaction (the next sequence number, rbj_next_seq),
 * in three steps, from one thread: rbj_begin makes room for n extents
 * holding data_bytes of data and says where the data goes; rbj_write
 * writes it, in pieces, at consecutive positions from there (the data
 * of the DATA extents in order); rbj_commit writes the descriptor,
 * with the CRC of each x[i].data, and the commit block, and syncs the
 * journal: when it returns 0 the transaction is committed, and
 * *start, *len say where it is, for rbj_retire.  On failure nothing is
 * committed and the next append reuses the same place and sequence.
 * rbj_commit_whole is rbj_commit for data not written yet: the
 * descriptor, the data and the commit block go in one write (a copy:
 * for transactions of up to RBJ_WHOLE_MAX bytes of data), then the
 * sync.
 */
extern int rbj_begin (struct rb_journal *j, size_t n, uint64_t data_bytes,
                      uint64_t *data_pos);
extern int rbj_write (struct rb_journal *j, uint64_t pos, const void *buf,
                      uint64_t len);
extern int rbj_commit (struct rb_journal *j, const struct rbj_extent *x,
                       size_t n, uint64_t *start, uint64_t *len);
extern int rbj_commit_whole (struct rb_journal *j,
                             const struct rbj_extent *x, size_t n,
                             uint64_t *start, uint64_t *len);
#define RBJ_WHOLE_MAX (128 * 1024)
extern uint64_t rbj_next_seq (const struct rb_journal *j);

/* The transactions up to 'seq', the one at [start, start+len), are on
 * the backing store and synced: their space is free.  Thread-safe
 * against appends.
 */
extern void rbj_retire (struct rb_journal *j, uint64_t seq, uint64_t start,
                        uint64_t len);

/* Bytes between tail and head (live transactions). */
extern uint64_t rbj_used (struct rb_journal *j);

/* -1 with an error if the journal 'uri' is the backing store itself
 * (the same URI, file or block device).  Call before opening it (the
 * backing store's lock would refuse it with a less useful message).
 */
extern int rbj_check_not_back (const char *uri, const char *back_uri,
                               const struct rb_store_id *id);

/* Offline recovery: open both stores by URI, replay, sync. */
extern int rbj_recover (const struct rb_store_params *back,
                        const struct rb_store_params *journal,
                        struct rbj_replay *replay);

/* Wait until no write that failed with an unknown outcome can still
 * land on store s (store.h, take_suspects), discarding the ranges: the
 * caller writes everything they could hold again.  Returns true if
 * there were any.
 */
extern bool rbj_settle (struct rb_store *s);

/* A buffer aligned for direct I/O (at least a page, RBJ_ALIGN), freed
 * with free(): NULL with errno on failure.
 */
extern void *rbj_alloc (size_t len);

/* CRC-32C (Castagnoli), as iSCSI and ext4 use it. */
extern uint32_t rbj_crc32c (uint32_t crc, const void *buf, size_t len);

#endif /* RAMBACK_JOURNAL_H */
