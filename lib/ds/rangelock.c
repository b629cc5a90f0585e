/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: ordered range locks (rangelock.h). */

#include "env.h"
#include "cleanup.h"
#include "rangelock.h"

void
rangelock_init (struct rangelock *rl)
{
  memset (rl, 0, sizeof *rl);
  rb_mutex_init (&rl->lock);
  rb_cond_init (&rl->released);
  rl->rand = 2463534242u;
}

void
rangelock_destroy (struct rangelock *rl)
{
  rb_assert (rl->root == NULL);
  rb_cond_destroy (&rl->released);
  rb_mutex_destroy (&rl->lock);
}

/* xorshift32: treap priorities need only be well spread. */
static uint32_t
next_rand (struct rangelock *rl)
{
  uint32_t x = rl->rand;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return rl->rand = x;
}

static inline uint64_t
max_end_of (struct rl_node *n)
{
  return n ? n->max_end : 0;
}

static void
update (struct rl_node *n)
{
  n->max_end = RB_MAX (n->end, RB_MAX (max_end_of (n->left),
                                       max_end_of (n->right)));
}

/* Nodes are ordered by (start, seq); seq is unique. */
static inline bool
less (const struct rl_node *a, const struct rl_node *b)
{
  return a->start < b->start || (a->start == b->start && a->seq < b->seq);
}

static struct rl_node *
insert (struct rl_node *t, struct rl_node *n)
{
  if (t == NULL)
    return n;
  if (less (n, t)) {
    t->left = insert (t->left, n);
    if (t->left->prio > t->prio) {          /* rotate right */
      struct rl_node *l = t->left;
      t->left = l->right;
      update (t);
      l->right = t;
      t = l;
    }
  }
  else {
    t->right = insert (t->right, n);
    if (t->right->prio > t->prio) {         /* rotate left */
      struct rl_node *r = t->right;
      t->right = r->left;
      update (t);
      r->left = t;
      t = r;
    }
  }
  update (t);
  return t;
}

static struct rl_node *
merge (struct rl_node *a, struct rl_node *b)
{
  if (a == NULL)
    return b;
  if (b == NULL)
    return a;
  if (a->prio > b->prio) {
    a->right = merge (a->right, b);
    update (a);
    return a;
  }
  b->left = merge (a, b->left);
  update (b);
  return b;
}

static struct rl_node *
erase (struct rl_node *t, struct rl_node *n)
{
  rb_assert (t != NULL);
  if (t == n)
    return merge (t->left, t->right);
  if (less (n, t))
    t->left = erase (t->left, n);
  else
    t->right = erase (t->right, n);
  update (t);
  return t;
}

/* Does a range of kind 'later' wait for an earlier overlapping one of
 * kind 'earlier'?  Always, but a RAM range for a STORE (rangelock.h).
 */
static bool
waits_for (enum rl_kind later, enum rl_kind earlier)
{
  return !(later == RL_RAM && earlier == RL_STORE);
}

/* Is there a node overlapping [start, end) with seq < seq that a range
 * of this kind waits for?  Subtrees whose max_end <= start cannot
 * overlap; nodes right of one whose start >= end cannot either.
 */
static bool
earlier_overlap (const struct rl_node *t, uint64_t start, uint64_t end,
                 uint64_t seq, enum rl_kind kind)
{
  while (t != NULL) {
    if (t->max_end <= start)
      return false;
    if (t->left && earlier_overlap (t->left, start, end, seq, kind))
      return true;
    if (t->start >= end)
      return false;
    if (t->end > start && t->seq < seq && waits_for (kind, t->kind))
      return true;
    t = t->right;
  }
  return false;
}

/* Insert n, [start, end) of kind, as the next arrival.  rl->lock held. */
static void
insert_locked (struct rangelock *rl, struct rl_node *n, uint64_t start,
               uint64_t end, enum rl_kind kind)
{
  rb_assert (start < end);
  memset (n, 0, sizeof *n);
  n->start = start;
  n->end = end;
  n->max_end = end;
  n->kind = kind;
  n->seq = ++rl->seq;
  n->prio = next_rand (rl);
  rl->root = insert (rl->root, n);
  rl->held++;
  rl->held_bytes[kind] += end - start;
}

void
rangelock_acquire (struct rangelock *rl, struct rl_node *n,
                   uint64_t start, uint64_t end, enum rl_kind kind)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rl->lock);
  insert_locked (rl, n, start, end, kind);
  while (earlier_overlap (rl->root, start, end, n->seq, kind))
    rb_cond_wait (&rl->released, &rl->lock);
}

bool
rangelock_try_acquire (struct rangelock *rl, struct rl_node *n,
                       uint64_t start, uint64_t end, enum rl_kind kind)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rl->lock);
  /* Every node is earlier than a new one, and a WRITE waits for every
   * kind: any overlapping node at all.
   */
  if (earlier_overlap (rl->root, start, end, UINT64_MAX, RL_WRITE))
    return false;
  insert_locked (rl, n, start, end, kind);
  return true;
}

void
rangelock_acquire_batch (struct rangelock *rl, struct rl_node *nodes,
                         size_t k)
{
  uint64_t seq;
  size_t i;

  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rl->lock);
  seq = ++rl->seq;
  for (i = 0; i < k; i++) {
    struct rl_node *n = &nodes[i];
    rb_assert (n->start < n->end);
    n->seq = seq;
    n->max_end = n->end;
    n->left = n->right = NULL;
    n->prio = next_rand (rl);
    rl->root = insert (rl->root, n);
    rl->held++;
    rl->held_bytes[n->kind] += n->end - n->start;
  }
  for (i = 0; i < k; i++)
    while (earlier_overlap (rl->root, nodes[i].start, nodes[i].end, seq,
                            nodes[i].kind))
      rb_cond_wait (&rl->released, &rl->lock);
}

void
rangelock_release (struct rangelock *rl, struct rl_node *n)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rl->lock);
  rl->root = erase (rl->root, n);
  rl->held--;
  rl->held_bytes[n->kind] -= n->end - n->start;
  rb_cond_broadcast (&rl->released);
}

uint64_t
rangelock_bytes (struct rangelock *rl, enum rl_kind kind)
{
  ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rl->lock);
  return rl->held_bytes[kind];
}
