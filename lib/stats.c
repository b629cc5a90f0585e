/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: status snapshots and their text and JSON forms.
 *
 * The field names are an interface (docs/ramback-control.pod): the
 * ramback command, the tests and users' scripts parse them.  One table
 * drives both forms, through the status writer (json.h) that the
 * store's fields go through too, so they cannot drift apart.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "internal.h"
#include "json.h"

void
rb_get_stats (struct rb *rb, struct rb_stats *st)
{
  memset (st, 0, sizeof *st);
  st->mode = rb_atomic_load (&rb->mode);
  st->fsync_wait = rb->cfg.fsync_wait;
  st->trace = rb_atomic_load (&rb->trace);
  st->populated = rb_atomic_load (&rb->populated);
  st->size = rb->size;
  st->chunk_size = rb->chunk_size;
  st->chunks = rb->nchunks;
  st->loaded_chunks = chunkmap_loaded (&rb->map);
  st->loaded_bytes = rb_atomic_load (&rb->loaded_bytes);
  st->demand_loaded_bytes = rb_atomic_load (&rb->demand_loaded_bytes);
  st->partial_chunks = chunkmap_npartial (&rb->map);
  st->stored_bytes = rb_atomic_load (&rb->stored_bytes);
  st->written_bytes = rb_atomic_load (&rb->written_bytes);
  st->zeroed_bytes = rb_atomic_load (&rb->zeroed_bytes);
  st->dirty_chunks = chunkmap_dirty (&rb->map);
  st->dirty_bytes = rbi_dirty_bytes (rb);      /* what dirty-max= counts */
  st->inflight_chunks = rb_atomic_load (&rb->inflight_chunks);
  st->inflight_bytes = rbi_inflight_bytes (rb);
  st->dirty_max = rb_atomic_load (&rb->dirty_limit);
  st->dirty_max_config = rb->cfg.dirty_max;
  st->ups_window = rb->cfg.ups_window;
  st->flush_delay_ms = rb->cfg.flush_delay_ms;
  st->dirty_expire_ms = rb->cfg.dirty_expire_ms;
  st->held_back = rb_atomic_load (&rb->held_back);
  st->flush_bandwidth = rb_atomic_load (&rb->flush_bw.bps);
  st->populate_bandwidth = rb_atomic_load (&rb->populate_bw.bps);
  st->flush_rate = rb->cfg.flush_rate;
  st->populate_rate = rb->cfg.populate_rate;
  st->store_errors = rb_atomic_load (&rb->store_errors);
  st->sync_errors = rb_atomic_load (&rb->sync_errors);
  st->syncs = rb_atomic_load (&rb->syncs);
  st->throttled = rb_atomic_load (&rb->throttled);
  if (rb->slotted) {
    st->ram_size = rb->nslots << rb->slot_shift;
    st->resident_bytes = rbi_slots_resident (rb) << rb->slot_shift;
    st->hits = rb_atomic_load (&rb->hits);
    st->misses = rb_atomic_load (&rb->misses);
    st->evictions = rb_atomic_load (&rb->evictions);
    st->slot_waits = rb_atomic_load (&rb->slot_waits);
  }
  else {
    st->ram_size = rb->size;
    st->resident_bytes = rb->map.part
      ? RB_MIN (chunkmap_resident (&rb->map) << rb->sector_shift, rb->size)
      : RB_MIN (st->loaded_chunks << rb->chunk_shift, rb->size);
  }
  st->store_type = rb->store->ops->name;
  /* The store says whether it is reachable; the core knows whether the
   * data it must write back is getting there.
   */
  st->store_state = rb_atomic_load (&rb->store->state);
  if (st->store_state == RB_STORE_OK && rb_atomic_load (&rb->store_failing))
    st->store_state = RB_STORE_FAILING;
  st->store_connections = rb->store->connections;
  st->image_source = rb->ram.source == RAMIMAGE_RESUMED_CLEAN
    ? "resumed-clean" : rb->ram.source == RAMIMAGE_RESUMED_CRASH
    ? "resumed-crash" : "populated";
  st->resumed_chunks = rb->resumed_chunks;
  st->resumed_chunks_to_write = rb->resumed_to_write;
  rbi_txn_stats (rb, st);
  {
    ACQUIRE_LOCK_FOR_CURRENT_SCOPE (&rb->lock);
    st->unsynced_bytes = rb->unsynced.bytes;
    st->last_errno = rb->last_errno;
    snprintf (st->last_error, sizeof st->last_error, "%s", rb->last_error);
    if (rb->start_ns)
      st->uptime = (rb_now_ns () - rb->start_ns) / 1e9;
  }
}

static const char *
errno_name (int e)
{
  switch (e) {
  case 0: return "";
  case EIO: return "EIO";
  case ENOSPC: return "ENOSPC";
  case EROFS: return "EROFS";
  case EPERM: return "EPERM";
  case EACCES: return "EACCES";
  case ENOTCONN: return "ENOTCONN";
  case ECONNRESET: return "ECONNRESET";
  case ECONNREFUSED: return "ECONNREFUSED";
  case ESHUTDOWN: return "ESHUTDOWN";
  case ETIMEDOUT: return "ETIMEDOUT";
  case EDQUOT: return "EDQUOT";
  case EINVAL: return "EINVAL";
  case ENOMEM: return "ENOMEM";
  case EPIPE: return "EPIPE";
  case EAGAIN: return "EAGAIN";
  default: return "EOTHER";
  }
}

const char *
rbi_errno_name (int e)
{
  return errno_name (e);
}

static const char *
store_state_name (enum rb_store_state s)
{
  switch (s) {
  case RB_STORE_OK: return "ok";
  case RB_STORE_FAILING: return "failing";
  case RB_STORE_OFFLINE: return "offline";
  default: return "unknown";
  }
}

enum kind { K_U64, K_BOOL, K_STR, K_DBL };

struct field {
  const char *name;
  enum kind kind;
  uint64_t u;
  bool b;
  const char *s;
  double d;
};

void
rbi_stats_fields (const struct rb_stats *st, struct rb_status_out *o)
{
  double progress = st->chunks ? (double) st->loaded_chunks / st->chunks : 1;
  uint64_t pending = st->dirty_bytes + st->inflight_bytes +
    st->unsynced_bytes;
  double drain = st->flush_bandwidth
    ? (double) pending / st->flush_bandwidth : (pending ? -1 : 0);
  const struct field f[] = {
    { "mode", K_STR, .s = st->mode == RB_MODE_WRITEBACK
                                ? "writeback" : "writethrough" },
    { "fsync", K_STR, .s = st->fsync_wait ? "wait" : "ignore" },
    { "trace", K_BOOL, .b = st->trace },
    { "populated", K_BOOL, .b = st->populated },
    { "progress", K_DBL, .d = st->populated ? 1.0 : progress },
    { "size", K_U64, .u = st->size },
    { "chunk_size", K_U64, .u = st->chunk_size },
    { "chunks", K_U64, .u = st->chunks },
    { "loaded_chunks", K_U64, .u = st->loaded_chunks },
    { "loaded_bytes", K_U64, .u = st->loaded_bytes },
    { "demand_loaded_bytes", K_U64, .u = st->demand_loaded_bytes },
    { "partial_chunks", K_U64, .u = st->partial_chunks },
    { "stored_bytes", K_U64, .u = st->stored_bytes },
    { "written_bytes", K_U64, .u = st->written_bytes },
    { "zeroed_bytes", K_U64, .u = st->zeroed_bytes },
    { "dirty_chunks", K_U64, .u = st->dirty_chunks },
    { "dirty_bytes", K_U64, .u = st->dirty_bytes },
    { "inflight_chunks", K_U64, .u = st->inflight_chunks },
    { "inflight_bytes", K_U64, .u = st->inflight_bytes },
    { "unsynced_bytes", K_U64, .u = st->unsynced_bytes },
    { "dirty_max", K_U64, .u = st->dirty_max },
    { "dirty_max_config", K_U64, .u = st->dirty_max_config },
    { "ups_window", K_U64, .u = st->ups_window },
    { "flush_delay_ms", K_U64, .u = st->flush_delay_ms },
    { "dirty_expire_ms", K_U64, .u = st->dirty_expire_ms },
    { "flush_bandwidth", K_U64, .u = st->flush_bandwidth },
    { "populate_bandwidth", K_U64, .u = st->populate_bandwidth },
    { "drain_seconds", K_DBL, .d = drain },
    { "flush_rate", K_U64, .u = st->flush_rate },
    { "populate_rate", K_U64, .u = st->populate_rate },
    { "store", K_STR, .s = st->store_type ? st->store_type : "" },
    { "store_state", K_STR, .s = store_state_name (st->store_state) },
    { "store_connections", K_U64, .u = (uint64_t) st->store_connections },
    { "store_errors", K_U64, .u = st->store_errors },
    { "sync_errors", K_U64, .u = st->sync_errors },
    { "syncs", K_U64, .u = st->syncs },
    { "throttled", K_U64, .u = st->throttled },
    { "held_back", K_U64, .u = st->held_back },
    { "ram_size", K_U64, .u = st->ram_size },
    { "resident_bytes", K_U64, .u = st->resident_bytes },
    { "hits", K_U64, .u = st->hits },
    { "misses", K_U64, .u = st->misses },
    { "hit_ratio", K_DBL, .d = st->hits + st->misses
                     ? (double) st->hits / (st->hits + st->misses) : 0 },
    { "evictions", K_U64, .u = st->evictions },
    { "slot_waits", K_U64, .u = st->slot_waits },
    { "last_errno", K_STR, .s = errno_name (st->last_errno) },
    { "last_error", K_STR, .s = st->last_error },
    { "uptime", K_DBL, .d = st->uptime },
    { "image_source", K_STR, .s = st->image_source ? st->image_source
                                                   : "populated" },
    { "resumed_chunks", K_U64, .u = st->resumed_chunks },
    { "resumed_chunks_to_write", K_U64, .u = st->resumed_chunks_to_write },
    { "journal", K_STR, .s = st->journal ? st->journal : "" },
    { "journal_size", K_U64, .u = st->journal_size },
    { "journal_used_bytes", K_U64, .u = st->journal_used_bytes },
    { "journal_commits", K_U64, .u = st->journal_commits },
    { "journal_applied", K_U64, .u = st->journal_applied },
    { "journal_data_bytes", K_U64, .u = st->journal_data_bytes },
    { "journal_deferred_bytes", K_U64, .u = st->journal_deferred_bytes },
    { "journal_replayed", K_U64, .u = st->journal_replayed },
    { "commit_interval", K_DBL, .d = st->commit_interval },
    { "last_commit_age", K_DBL, .d = st->last_commit_age },
    { "last_commit_time", K_DBL, .d = st->last_commit_time },
    { "commit_lag", K_DBL, .d = st->commit_lag },
  };
  size_t i;

  for (i = 0; i < sizeof f / sizeof f[0]; i++) {
    switch (f[i].kind) {
    case K_U64: rb_status_u64 (o, f[i].name, f[i].u); break;
    case K_BOOL: rb_status_bool (o, f[i].name, f[i].b); break;
    case K_STR: rb_status_str (o, f[i].name, f[i].s); break;
    case K_DBL: rb_status_dbl (o, f[i].name, f[i].d); break;
    }
  }
}

int
rb_stats_format (const struct rb_stats *st, bool json, char *buf, size_t len)
{
  struct rb_status_out o;

  rb_status_begin (&o, json, buf, len);
  rbi_stats_fields (st, &o);
  rb_status_end (&o);
  return (int) o.pos;
}
