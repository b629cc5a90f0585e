/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: ordered range locks over byte ranges in flight.
 *
 * Owns the index of every range that is being loaded, stored, or written
 * through right now, as an interval tree (a treap keyed by start offset,
 * each node augmented with the largest end in its subtree), so checking
 * for overlaps costs O(log n + overlaps), never a linear search.
 *
 * The rule that closes the seed's races: a range is granted only when no
 * *earlier* overlapping range is still held.  Earlier means lower
 * sequence number, assigned on arrival.  So
 *   - a writethrough write waits for any store already in flight over the
 *     same chunks (the flush race: a stale flush can never land on top
 *     of a newer application write), and a store started after it waits
 *     for it;
 *   - overlapping writethrough writes land in arrival order;
 *   - a background load and an application write to the same chunk never
 *     run at once (the populate race);
 *   - ranges that do not overlap never wait for each other.
 * One exception (waits_for): a RAM range does not wait for an earlier
 * STORE.  It is an application request on the slow path in writeback
 * mode (a read, or a write that changes RAM only, as one on the
 * lock-free fast path does) and its loads of sectors not in RAM.  Write
 * back is built for writes beside it: it marks a chunk clean before it
 * takes the data, so a sector written under it is dirty again and
 * stored once more, and it never stores a sector that is not loaded
 * (flush.c, take_sectors), which is all a load reads from the store.
 * Waiting, every such request into a chunk in write back (a write into
 * a chunk loaded in part, any read with ram-size=) took as long as the
 * whole write back of its chunk: seconds over a slow link.  A STORE
 * still waits for an earlier RAM range, and the background LOADs and
 * block status (extents.c asks the store, which must have the data by
 * then) for an earlier STORE.
 * Holders do their I/O without any lock held.
 */

#ifndef RAMBACK_RANGELOCK_H
#define RAMBACK_RANGELOCK_H

#include "env.h"

enum rl_kind {
  RL_LOAD,            /* populate, block status */
  RL_STORE,           /* write back of dirty chunks */
  RL_WRITE,           /* writethrough, eviction: RAM and store together */
  RL_RAM,             /* a read or writeback-mode write on the slow path */
};
#define RL_KINDS 4

struct rl_node {
  uint64_t start, end;          /* [start, end) */
  uint64_t seq;
  uint64_t max_end;             /* max end in this subtree */
  uint32_t prio;                /* treap priority */
  enum rl_kind kind;
  struct rl_node *left, *right;
};

struct rangelock {
  rb_mutex lock;
  rb_cond released;             /* broadcast on every release */
  struct rl_node *root;
  uint64_t seq;
  uint64_t held;                /* number of nodes in the tree */
  uint64_t held_bytes[RL_KINDS]; /* bytes held, per kind */
  uint32_t rand;
};

extern void rangelock_init (struct rangelock *rl);
extern void rangelock_destroy (struct rangelock *rl);

/* Insert [start, end) and wait until no earlier overlapping range is
 * held.  The node is owned by the caller (usually on its stack) until
 * rangelock_release().
 */
extern void rangelock_acquire (struct rangelock *rl, struct rl_node *n,
                               uint64_t start, uint64_t end,
                               enum rl_kind kind);
extern void rangelock_release (struct rangelock *rl, struct rl_node *n);

/* Take [start, end) only if no range overlapping it is held (granted or
 * waiting), without waiting; true if taken (release it as above).  For
 * the evictor, which holds locks that others wait for: a busy victim
 * is passed over, not waited for.
 */
extern bool rangelock_try_acquire (struct rangelock *rl, struct rl_node *n,
                                   uint64_t start, uint64_t end,
                                   enum rl_kind kind);

/* Acquire k disjoint ranges as one arrival (one sequence number), for a
 * background batch.  Taking them one after another would deadlock: an
 * application write arriving between two of them could wait for the
 * first while the second waits for it.  The caller fills in start, end
 * and kind of each node; release each with rangelock_release().
 */
extern void rangelock_acquire_batch (struct rangelock *rl,
                                     struct rl_node *nodes, size_t k);

/* Bytes currently held (granted or waiting) of one kind. */
extern uint64_t rangelock_bytes (struct rangelock *rl, enum rl_kind kind);

#endif /* RAMBACK_RANGELOCK_H */
