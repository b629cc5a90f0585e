/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: opening, starting and closing a RAM image; mode; errors.
 *
 * rb_open() does everything that can fail on bad input (so nbdkit can
 * refuse to start with a clear message) and starts no threads.
 * rb_start() starts them after nbdkit has forked.  rb_close() is the
 * clean stop: populate stops, every dirty chunk is written back, the
 * store is synced, then everything is freed.  With a ram= file that
 * holds an image left by an earlier ramback, rb_open() resumes it
 * (resume.c): nothing is loaded that the image holds, and what may
 * differ from the store is written back once the threads run.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "error.h"
#include "internal.h"

/* The write-back bandwidth estimate rises slowly and falls fast
 * (throttle.h): the UPS window must hold when the store slows down.
 */
#define FLUSH_BW_TAU_UP_S 10.0
#define FLUSH_BW_TAU_DOWN_S 1.0

static int
copy_config (struct rb *rb, const struct rb_config *c)
{
  rb->cfg = *c;
  rb->cfg.store.uri = NULL;
  rb->cfg.ram = NULL;
  rb->cfg.journal = NULL;
  if ((c->store.uri && (rb->cfg.store.uri = strdup (c->store.uri)) == NULL) ||
      (c->ram && (rb->cfg.ram = strdup (c->ram)) == NULL) ||
      (c->journal && (rb->cfg.journal = strdup (c->journal)) == NULL)) {
    rb_set_error (errno, "strdup");
    return -1;
  }
  if (rb->cfg.chunk_size == 0)
    rb->cfg.chunk_size = RB_DEFAULT_CHUNK_SIZE;
  return 0;
}

static void
init_sync (struct rb *rb)
{
  rb_mutex_init (&rb->lock);
  rb_mutex_init (&rb->sync_lock);
  rb->flush_bw.tau_up = FLUSH_BW_TAU_UP_S;
  rb->flush_bw.tau_down = FLUSH_BW_TAU_DOWN_S;
  rb_cond_init (&rb->flusher_cond);
  rb_cond_init (&rb->populator_cond);
  rb_cond_init (&rb->space_cond);
  rb_cond_init (&rb->sync_cond);
  rb_cond_init (&rb->populated_cond);
  rangelock_init (&rb->rl);
}

struct rb *
rb_open (const struct rb_config *config)
{
  struct rb *rb;
  struct rb_store_params sp;

  /* The rules the plugin and the filter apply (config.c), for every
   * embedder: the store's own rules are rb_store_open()'s.
   */
  if (rb_config_check (config, RB_CHECK_ALL) == -1)
    return NULL;
  rb = calloc (1, sizeof *rb);
  if (rb == NULL) {
    rb_set_error (errno, "calloc");
    return NULL;
  }
  rb->ram.fd = -1;
  init_sync (rb);
  if (copy_config (rb, config) == -1)
    goto fail;

  sp = rb->cfg.store;
  sp.create_size = rb->cfg.size;
  rb->store = rb->cfg.store_override ? rb->cfg.store_override
    : rb_store_open (&sp);
  if (rb->store == NULL)
    goto fail;
  rb->undo_create = rb->cfg.store_override == NULL &&
    rb->store->ops->undo_create != NULL;
  if (rb->store->read_only && !rb->cfg.store.read_only) {
    rb_set_error (EROFS, "back=%s is read-only", rb->cfg.store.uri);
    goto fail;
  }

  if (rb->store->min_block > 1 &&
      rb->cfg.chunk_size % rb->store->min_block != 0) {
    rb_set_error (EINVAL, "back=%s: its minimum block size is %" PRIu32
                  " bytes, and chunk=%" PRIu32 " is not a multiple of it "
                  "(a chunk is written back whole blocks at a time): give "
                  "chunk=%" PRIu32 " or larger", rb->cfg.store.uri,
                  rb->store->min_block, rb->cfg.chunk_size,
                  rb->store->min_block);
    goto fail;
  }
  rb->size = rb->store->size;
  rb->chunk_size = rb->cfg.chunk_size;
  rb->chunk_shift = __builtin_ctz (rb->chunk_size);
  rb->nchunks = (rb->size + rb->chunk_size - 1) >> rb->chunk_shift;

  /* ram-size= (slots.c), before anything is opened or replayed. */
  if (rbi_slots_check (rb) == -1)
    goto fail;

  /* Recovery comes first: the journal's committed transactions are
   * replayed onto the store before anything is taken from it, RAM
   * image included.
   */
  if (rb->cfg.journal && rbi_txn_open (rb) == -1)
    goto fail;
  if (rb->txns) {
    struct rb_stats st = { 0 };

    /* The journal's data is on the store now: keep it, whatever comes. */
    rbi_txn_stats (rb, &st);
    if (st.journal_replayed)
      rb->undo_create = false;
  }

  {
    /* The store is open (and locked): ram= is checked against it. */
    struct ramimage_params rp = {
      .size = rb->size,
      .chunk_size = rb->chunk_size,
      .sect_shift = rb->chunk_shift - RB_MIN (rb->chunk_shift,
                                              RB_SECTOR_SHIFT),
      .path = rb->cfg.ram,
      .overcommit = rb->cfg.allow_overcommit,
      .budget = rb->cfg.ram_size && rb->cfg.ram_size < rb->size
        ? rb->cfg.ram_size : 0,
      .back_uri = rb->cfg.store.uri,
      .back_id = rb->store->id,
      .resume = (enum ramimage_resume) rb->cfg.resume,
    };
    _Static_assert ((int) RB_RESUME_DISCARD == (int) RAMIMAGE_RESUME_DISCARD
                    && (int) RB_RESUME_FORCE == (int) RAMIMAGE_RESUME_FORCE,
                    "resume= values");
    if (ramimage_open (&rb->ram, &rp) == -1)
      goto fail;
  }
  /* With a ram= file the chunk states live in it (resume.c). */
  if ((rb->ram.map_words
       ? chunkmap_init_at (&rb->map, rb->nchunks, rb->ram.map_words,
                           rb->ram.source != RAMIMAGE_POPULATED)
       : chunkmap_init (&rb->map, rb->nchunks)) == -1) {
    rb_set_error (errno, "cannot allocate the chunk map for %" PRIu64
                  " chunks (use a larger chunk=)", rb->nchunks);
    goto fail;
  }
  rb->nb = rb->ram.nb_words;
  /* Sector bits: write-back (or a journal's transactions) of what was
   * written, not whole chunks; with a ram= file they live in it too.
   * Before the resume: what it makes dirty gets all its bits.
   */
  rb->sector_shift = RB_MIN (rb->chunk_shift, RB_SECTOR_SHIFT);
  if (chunkmap_init_sectors (&rb->map, rb->chunk_shift - rb->sector_shift,
                             rb->ram.sect_words,
                             rb->ram.source != RAMIMAGE_POPULATED,
                             (rb->size + (UINT64_C (1) << rb->sector_shift)
                              - 1) >> rb->sector_shift) == -1) {
    rb_set_error (errno, "cannot allocate the sector map for %" PRIu64
                  " chunks", rb->nchunks);
    goto fail;
  }
  /* Partial chunks (chunkmap.h): a miss loads the sectors it asks
   * for, not the chunk.  Not with a RAM image file of format 3 or
   * older, which has no room for their bits: that start loads whole
   * chunks, as the image's maker did.
   */
  if (rb->chunk_shift > rb->sector_shift &&
      (rb->ram.map_words == NULL || rb->ram.part_words != NULL) &&
      chunkmap_init_partial (&rb->map, rb->ram.part_words,
                             rb->ram.valid_words,
                             rb->ram.source != RAMIMAGE_POPULATED) == -1) {
    rb_set_error (errno, "cannot allocate the partial chunk map for %"
                  PRIu64 " chunks", rb->nchunks);
    goto fail;
  }
  if (rbi_slots_init (rb) == -1)
    goto fail;
  if (rb->ram.source != RAMIMAGE_POPULATED) {
    rbi_resume_map (rb);
    rbi_check_populated (rb);
  }
  ramimage_in_use (&rb->ram);
  if (rb->txns && rbi_txn_check_fit (rb) == -1)
    goto fail;
  if (rb->txns && rb->slotted && rbi_slots_journal_fit (rb) == -1)
    goto fail;
  /* A zero's middle chunks cost the journal an extent, but its
   * admission counts every chunk as data (txn.c): pieces of a quarter
   * of the journal let a few go in before a commit point.
   */
  if (rb->txns)
    rb->zero_piece_chunks = rb->slotted ? rb->write_max_chunks
      : RB_MAX (rbi_txn_max_chunks (rb) / 4, 1);

  rb->mode = rb->cfg.mode;
  rb->flush_rate.bps = rb->cfg.flush_rate;
  rb->populate_rate.bps = rb->cfg.populate_rate;
  rbi_recompute_limit (rb);
  return rb;

 fail:
  {
    /* The error that made us give up is the one to report, not what
     * the close of the half-built rb says about it.
     */
    int e = rb_get_errno () ? rb_get_errno () : errno;
    char *msg = strdup (rb_get_error () ? rb_get_error () : "");

    rb_abandon (rb);
    if (msg && *msg)
      rb_restore_error (e, msg);
    free (msg);
    errno = e;
  }
  return NULL;
}

int
rb_start (struct rb *rb)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    if (rb->started) {
      rb_set_error (EBUSY, "rb_start: already started");
      return -1;
    }
    rb->started = true;
    rb->start_ns = rb_now_ns ();
  }
  if (rbi_flusher_start (rb) == -1)
    return -1;
  if (rb->cfg.populate && rbi_populator_start (rb) == -1)
    return -1;
  return 0;
}

int
rb_shutdown (struct rb *rb)
{
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    if (rb->shut_down)
      return rb->shutdown_result;
    rb_atomic_store (&rb->stopping, true);
    rb_cond_broadcast (&rb->populator_cond);
    rb_cond_broadcast (&rb->space_cond);
    rb_cond_broadcast (&rb->populated_cond);
  }
  /* A stop waits for what it must write back, never for a read. */
  if (rb->store && rb->store->ops->abandon_reads)
    rb->store->ops->abandon_reads (rb->store);
  rbi_populator_stop (rb);
  {
    int r = rb->store ? rbi_flusher_stop (rb) : 0;
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->shut_down = true;
    rb->shutdown_result = r;
    return r;
  }
}

int
rb_close (struct rb *rb)
{
  int r;

  if (rb == NULL)
    return 0;
  r = rb_shutdown (rb);

  /* Everything reached the store and was synced: nothing is NB. */
  if (r == 0 && rb->map.words)
    rbi_nb_clear_all (rb);
  rbi_slots_free (rb);
  if (rb->map.words)
    chunkmap_free (&rb->map);
  /* A ram= file is kept either way; clean says what it holds.  The
   * journal is marked empty if it is (rbj_close: every transaction
   * applied and synced), started or not: a stop before rb_start drains
   * on this thread (txn.c, txn_stop), and a journal left as it was
   * would be replayed onto the store after the image's clean stop,
   * which then refuses the image as older than the store.
   */
  ramimage_close (&rb->ram, r == 0);
  rbi_txn_close (rb, r == 0);
  rb_store_close (rb->store);
  rangelock_destroy (&rb->rl);
  rb_cond_destroy (&rb->populated_cond);
  rb_cond_destroy (&rb->sync_cond);
  rb_cond_destroy (&rb->space_cond);
  rb_cond_destroy (&rb->populator_cond);
  rb_cond_destroy (&rb->flusher_cond);
  rb_mutex_destroy (&rb->lock);
  rb_mutex_destroy (&rb->sync_lock);
  free (rb->unsynced.v);
  free ((char *) rb->cfg.store.uri);
  free ((char *) rb->cfg.ram);
  free ((char *) rb->cfg.journal);
  free (rb);
  return r;
}

void
rb_abandon (struct rb *rb)
{
  if (rb == NULL)
    return;
  if (rb->undo_create && !rb->started)
    rb->store->ops->undo_create (rb->store);
  rb_close (rb);
}

uint64_t
rb_get_size (struct rb *rb)
{
  return rb->size;
}

uint32_t
rb_get_chunk_size (struct rb *rb)
{
  return rb->chunk_size;
}

uint32_t
rb_get_max_request (struct rb *rb)
{
  return rb->write_max;
}

int
rb_set_mode (struct rb *rb, enum rb_mode mode)
{
  if (mode != RB_MODE_WRITEBACK && mode != RB_MODE_WRITETHROUGH) {
    rb_set_error (EINVAL, "rb_set_mode: unknown mode %d", (int) mode);
    return -1;
  }
  if (rb_atomic_load (&rb->mode) == (int) mode)
    return 0;
  rb_atomic_store (&rb->mode, (int) mode);
  rb_info ("mode: %s", mode == RB_MODE_WRITEBACK ? "writeback" : "writethrough");
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    /* Populate pauses in writethrough mode and resumes after it; a
     * wait-populated in progress learns that it paused.
     */
    rb_cond_broadcast (&rb->populator_cond);
    rb_cond_broadcast (&rb->populated_cond);
  }
  rbi_flusher_hurry (rb);
  return 0;
}

enum rb_mode
rb_get_mode (struct rb *rb)
{
  return rb_atomic_load (&rb->mode);
}

void
rb_set_trace (struct rb *rb, bool on)
{
  rb_atomic_store (&rb->trace, on);
  rb_log ("trace: %s", on ? "on" : "off");
}

void
rbi_record_error (struct rb *rb, int err, const char *what)
{
  rb_atomic_add (&rb->store_errors, 1);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    rb->last_errno = err;
    snprintf (rb->last_error, sizeof rb->last_error, "%s",
              what ? what : rb_strerror (err));
  }
  rb_warn ("backing store error: %s", what ? what : rb_strerror (err));
}

/* The dirty limit in force: dirty-max=, and with ups-window= what the
 * measured write-back bandwidth (bytes made durable per second, writes
 * and syncs) can drain in that window, less a 20% safety margin.  Until
 * a bandwidth has been measured, flush-rate= (if set) stands in for it,
 * else a conservative 16 MiB.
 */
#define UPS_SAFETY 0.8
#define UPS_BOOTSTRAP (UINT64_C (16) * 1024 * 1024)

void
rbi_recompute_limit (struct rb *rb)
{
  uint64_t limit = rb->cfg.dirty_max;

  /* ram-size=: dirty chunks cannot be evicted, so half the budget
   * stays for reads unless dirty-max= says otherwise (slots.c).
   */
  if (limit == 0 && rb->slotted)
    limit = (rb->nslots << rb->slot_shift) / 2;

  if (rb->cfg.ups_window > 0) {
    uint64_t bw = rb_atomic_load (&rb->flush_bw.bps), ups;

    if (rb->cfg.flush_rate && (bw == 0 || bw > rb->cfg.flush_rate))
      bw = rb->cfg.flush_rate;
    ups = bw ? (uint64_t) (bw * (double) rb->cfg.ups_window * UPS_SAFETY)
      : UPS_BOOTSTRAP;
    /* Never below a few chunks, or writers could not make progress. */
    if (ups < 4 * (uint64_t) rb->chunk_size)
      ups = 4 * (uint64_t) rb->chunk_size;
    if (limit == 0 || ups < limit)
      limit = ups;
  }
  rb_atomic_store (&rb->dirty_limit, limit);
}
