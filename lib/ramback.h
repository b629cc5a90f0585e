/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: public API of the caching core (lib/).
 *
 * A struct rb is one RAM image of a backing store.  Every read and write
 * is served from RAM; background threads populate the image from the
 * backing store and write dirty chunks back.  This library knows nothing
 * of nbdkit: glue/ is the glue, tests/ drive it directly.
 *
 * Errors: functions return -1 (or NULL) with errno set and a message for
 * this thread, read with rb_get_error() / rb_get_errno(), as libnbd does.
 *
 * Names: rb_* is the public API: this header, and the headers the hosts
 * (glue/, plugin/, filter/, cli/) include for what they implement or share:
 * env.h (the OS shim), error.h, cleanup.h, json.h (the status writer),
 * control.h, store.h and exclusive.h (the store interface).  Functions
 * private to lib/ are rbi_* (internal.h and the layer headers), or carry
 * their module's own prefix (chunkmap_, sumbits_, rangelock_, ramimage_,
 * nbdstore_, rbj_); file-local helpers are static and unprefixed.
 *
 * Threads: rb_open() starts no threads (nbdkit forks after loading the
 * plugin and threads do not survive fork); rb_start() does.  All I/O
 * functions may be called from any number of threads at once.
 */

#ifndef RAMBACK_H
#define RAMBACK_H

#include "env.h"

/* The backing store.  Embedders name it with rb_store_params and may
 * hand in one already open (store_override); its ops table, for those
 * who implement a store, is in store.h.
 */
struct rb_store;

/* Parameters a store may need when it is opened. */
struct rb_store_params {
  const char *uri;            /* path, nbd[s][+unix]:// URI or
                                 rbd:POOL/IMAGE */
  const char *param;          /* how messages name it: NULL "back=URI",
                                 "journal" "journal=URI", "" the bare
                                 URI (a command's argument) */
  uint64_t create_size;       /* create a missing file of this size; 0: don't */
  bool read_only;
  /* File and block device only (store-file.c): O_DIRECT I/O. */
  enum rb_direct_io {
    RB_DIRECT_AUTO = 0,       /* where the file system says it can */
    RB_DIRECT_OFF,            /* always through the page cache */
    RB_DIRECT_ON,             /* required: fail to open if refused */
  } direct_io;
  /* NBD only (store-nbd.c): TLS passthrough and parallelism. */
  const char *tls_certificates;
  const char *tls_psk_file;
  const char *tls_username;
  int tls_verify_peer;        /* -1: libnbd default */
  int connections;            /* 0: auto (multi-conn if the server offers it) */
  int max_inflight;           /* per connection, 0: default */
  int request_timeout;        /* seconds without a reply (and without
                                 socket activity) before a connection
                                 is given up, 0: never */
  /* RBD only (store-rbd.c): how to reach the cluster, NULL: librados'
   * defaults.  max_inflight applies too (whole store).
   */
  const char *rbd_conf;       /* ceph.conf */
  const char *rbd_id;         /* client name without "client." */
  const char *rbd_keyring;
};

/* The store's health, shown in status.  Remote stores can go OFFLINE. */
enum rb_store_state {
  RB_STORE_OK = 0,
  RB_STORE_FAILING,           /* the last request failed */
  RB_STORE_OFFLINE,           /* connection lost, reconnecting */
};

/* Whether uri names an NBD export (nbd://, nbds+unix://, ...) rather than
 * a file or block device.
 */
extern bool rb_store_is_nbd_uri (const char *uri);

/* Whether uri names a Ceph RBD image (rbd:POOL/IMAGE...). */
extern bool rb_store_is_rbd_uri (const char *uri);

/* Either: a store that is not a local file or device. */
static inline bool
rb_store_is_remote_uri (const char *uri)
{
  return rb_store_is_nbd_uri (uri) || rb_store_is_rbd_uri (uri);
}

enum rb_mode {
  RB_MODE_WRITEBACK = 0,      /* writes complete in RAM; flushed later */
  RB_MODE_WRITETHROUGH = 1,   /* writes reach the backing store first */
};

/* resume=: what to do with a RAM image file (ram=) left by an earlier
 * ramback (ramimage.h).
 */
enum rb_resume {
  RB_RESUME_AUTO = 0,         /* resume if it matches, else refuse */
  RB_RESUME_DISCARD = 1,      /* throw it away, populate from the store */
  RB_RESUME_FORCE = 2,        /* resume even if the store's identity
                                 check fails (the image is written back
                                 over the store in full) */
};

struct rb_config {
  struct rb_store_params store;
  const char *ram;            /* file on tmpfs/hugetlbfs, NULL: anonymous */
  uint64_t size;              /* create missing backing file this big */
  uint32_t chunk_size;        /* power of two, 512 .. 64M; 0: default */
  enum rb_mode mode;
  bool fsync_wait;            /* FLUSH/FUA wait for the backing store */
  uint64_t dirty_max;         /* bytes, 0: unlimited */
  uint64_t populate_rate;     /* bytes/s, 0: unlimited */
  uint64_t flush_rate;        /* bytes/s, 0: unlimited */
  unsigned ups_window;        /* seconds, 0: off */
  uint32_t flush_delay_ms;    /* how long dirty data may wait, 0: none
                                 (at most RB_MAX_FLUSH_DELAY_MS) */
  uint32_t dirty_expire_ms;   /* under write pressure, rewritten sectors
                                 may stay dirty about this long; 0: none
                                 held back (at most
                                 RB_MAX_DIRTY_EXPIRE_MS) */
  bool allow_overcommit;      /* allow a device larger than RAM */
  uint64_t ram_size;          /* ram-size=: RAM the image may use, a
                                 multiple of the chunk size; 0 (or the
                                 device size or more): the whole device */
  bool populate;              /* false: do not populate in background */
  enum rb_resume resume;
  bool resume_set;            /* resume= was given (it needs ram=) */
  const char *journal;        /* journal=: file, device or NBD URI, NULL:
                                 none (plain write back) */
  uint32_t commit_interval_ms; /* 0: RB_DEFAULT_COMMIT_INTERVAL_MS */
  /* Embedders and tests: use this already open store instead of opening
   * store.uri (rb_close() closes it).
   */
  struct rb_store *store_override;
};

#define RB_DEFAULT_CHUNK_SIZE 65536
#define RB_DEFAULT_COMMIT_INTERVAL_MS 5000
#define RB_MIN_CHUNK_SIZE 512
#define RB_MAX_FLUSH_DELAY_MS 60000
/* The plugin's and the filter's flush-delay= when none is given (and
 * no journal=); the library's own default, for embedders, is none.
 */
#define RB_DEFAULT_FLUSH_DELAY_MS 1000
#define RB_MAX_DIRTY_EXPIRE_MS 600000
/* The plugin's and the filter's dirty-expire= when none is given (the
 * page cache's dirty_expire_centisecs); the library's own: none.
 */
#define RB_DEFAULT_DIRTY_EXPIRE_MS 30000
#define RB_MAX_CHUNK_SIZE (64 * 1024 * 1024)
#define RB_MIN_COMMIT_INTERVAL_MS 10
#define RB_MAX_COMMIT_INTERVAL_MS 3600000
#define RB_MAX_UPS_WINDOW 86400
#define RB_MAX_CONNECTIONS 64
#define RB_MAX_INFLIGHT 1024
#define RB_MAX_FILTER_INFLIGHT 64     /* the filter's workers (store-next.c) */
#define RB_MAX_REQUEST_TIMEOUT 86400

/* The one place a configuration is judged (config.c): the plugin and the
 * filter parse their parameters into a struct rb_config and call this;
 * rb_open() calls it too.  -1 with EINVAL and a message that names the
 * parameter (as key=value) on the first problem.  flags:
 *   RB_CHECK_VALUES      each value on its own (ranges, powers of two),
 *                        fit to check after every key
 *   RB_CHECK_ALL         also the parameters that go together
 *   RB_CHECK_URI_STORE   with ALL: the store is opened from store.uri
 *                        (back=), which is then required, with its
 *                        file-or-NBD rules (the plugin form)
 *   RB_CHECK_FILTER      with ALL: the store is the plugin below the
 *                        nbdkit filter (at most RB_MAX_FILTER_INFLIGHT)
 */
#define RB_CHECK_VALUES 0
#define RB_CHECK_ALL 1
#define RB_CHECK_URI_STORE 2
#define RB_CHECK_FILTER 4
extern int rb_config_check (const struct rb_config *config, unsigned flags);

/* Largest single I/O the core issues to the backing store. */
#define RB_MAX_STORE_IO (8 * 1024 * 1024)

struct rb;

/* Validate the configuration, open the backing store, allocate the RAM
 * image.  Starts no threads.  NULL on error.
 */
extern struct rb *rb_open (const struct rb_config *config);

/* Start the populate and flush threads.  Call once, after any fork. */
extern int rb_start (struct rb *rb);

/* Clean stop: stop populating, write back every dirty chunk, sync the
 * backing store, stop the threads and free everything.  Returns -1 if
 * some data could not be written back (it is then lost: say so loudly).
 * Safe on a half-built rb and on one that was never started.
 */
extern int rb_close (struct rb *rb);

/* A start that failed after rb_open (the host's own setup, before
 * rb_start): rb_close, and remove the backing file rb_open created for
 * size= (or empty again the empty one it grew), unless a journal's
 * transactions were replayed onto it.  Nothing else is removed.
 */
extern void rb_abandon (struct rb *rb);

/* rb_close() in two steps, for a host that must keep serving status
 * while the final drain runs: rb_shutdown() does everything but free
 * (idempotent; later I/O and rb_sync() fail with ESHUTDOWN), then
 * rb_close() frees.
 */
extern int rb_shutdown (struct rb *rb);

/* For a host that drains before rb_shutdown (the filter writes back
 * while nbdkit still serves): the final drain of a clean stop has
 * begun, so flush-rate= no longer applies, as in rb_shutdown's own
 * drain.  For the rest of the instance's life; idempotent.
 */
extern void rb_begin_stop_drain (struct rb *rb);

extern uint64_t rb_get_size (struct rb *rb);
extern uint32_t rb_get_chunk_size (struct rb *rb);
/* The largest write, zero or trim accepted at any offset, in bytes (the
 * NBD maximum block size to advertise); 0 if there is no such limit.
 * Only with journal= and ram-size= smaller than the device: a request
 * goes into RAM whole there, so it must fit in the budget.
 */
extern uint32_t rb_get_max_request (struct rb *rb);

/* Flags for the I/O calls. */
#define RB_FUA 1              /* this request must be durable on return */
#define RB_FAST_ZERO 2        /* rb_zero: fail with ENOTSUP rather than
                                 write zeroes to the store */

extern int rb_pread (struct rb *rb, void *buf, uint32_t count,
                     uint64_t offset);
extern int rb_pwrite (struct rb *rb, const void *buf, uint32_t count,
                      uint64_t offset, unsigned flags);
extern int rb_zero (struct rb *rb, uint32_t count, uint64_t offset,
                    unsigned flags);
extern int rb_trim (struct rb *rb, uint32_t count, uint64_t offset,
                    unsigned flags);
/* NBD_CMD_CACHE: load the range into RAM now. */
extern int rb_cache (struct rb *rb, uint32_t count, uint64_t offset);
/* NBD_CMD_BLOCK_STATUS: describe [offset, offset+count) as extents,
 * in order and without gaps, through fn (extents.c): RB_EXTENT_HOLE |
 * RB_EXTENT_ZERO where the device reads as zeroes (zeroed or trimmed
 * chunks, the backing store's holes), 0 (data) elsewhere.  What a
 * chunk not yet loaded holds, the store says (its next_data op:
 * SEEK_DATA, NBD block status, the plugin below the filter).  Adjacent
 * extents of one type are merged; with RB_EXTENTS_REQ_ONE only the
 * first is given.  fn returns 0, or -1 with errno set to stop; it must
 * not call back into rb.  The values are NBD's (and nbdkit's).
 */
#define RB_EXTENT_HOLE 1
#define RB_EXTENT_ZERO 2
#define RB_EXTENTS_REQ_ONE 1
typedef int (*rb_extent_fn) (void *opaque, uint64_t offset,
                             uint64_t length, uint32_t type);
extern int rb_extents (struct rb *rb, uint32_t count, uint64_t offset,
                       unsigned flags, rb_extent_fn fn, void *opaque);
/* NBD_CMD_FLUSH: returns at once with fsync=ignore, else rb_sync(). */
extern int rb_flush (struct rb *rb);

/* Return when everything dirty or written at the moment of the call is
 * on the backing store and the store is synced.  timeout_ms < 0: wait
 * forever; on timeout fails with ETIMEDOUT.
 */
extern int rb_sync (struct rb *rb, int timeout_ms);

/* Wait until the whole image is loaded (ETIMEDOUT as above). */
extern int rb_wait_populated (struct rb *rb, int timeout_ms);

extern int rb_set_mode (struct rb *rb, enum rb_mode mode);
extern enum rb_mode rb_get_mode (struct rb *rb);
extern void rb_set_trace (struct rb *rb, bool on);

/* A snapshot of the counters (stats.c).  Field names are the JSON names
 * of the control protocol's "status json" (docs/ramback-control.pod).
 */
struct rb_stats {
  enum rb_mode mode;
  bool fsync_wait;
  bool trace;
  bool populated;
  uint64_t size;
  uint32_t chunk_size;
  uint64_t chunks;
  uint64_t loaded_chunks;     /* chunks present in RAM */
  uint64_t loaded_bytes;      /* bytes read from the backing store */
  uint64_t demand_loaded_bytes;  /* of them, for misses (reads, and the
                                    edges of writes) */
  uint64_t partial_chunks;    /* of loaded_chunks, those loaded only in
                                 part (some sectors) */
  uint64_t stored_bytes;      /* bytes of data written to the backing
                                 store (WRITE requests) */
  uint64_t zeroed_bytes;      /* bytes zeroed or punched there (zero
                                 requests, for client zeroes and trims) */
  uint64_t written_bytes;     /* bytes of client writes (WRITE requests
                                 that succeeded; not zero or trim) */
  uint64_t dirty_chunks;      /* includes dirty-zero chunks */
  uint64_t dirty_bytes;
  uint64_t inflight_chunks;   /* being written back right now */
  uint64_t inflight_bytes;
  uint64_t unsynced_bytes;    /* written, not yet confirmed by a sync */
  uint64_t dirty_max;         /* limit in force now (0: none) */
  uint64_t dirty_max_config;  /* dirty-max= */
  unsigned ups_window;        /* ups-window=, seconds */
  uint32_t flush_delay_ms;    /* flush-delay=, milliseconds */
  uint32_t dirty_expire_ms;   /* dirty-expire=, milliseconds */
  uint64_t held_back;         /* rewritten dirty sectors a sweep under
                                 pressure left for later */
  uint64_t flush_bandwidth;   /* measured moving average, bytes/s */
  uint64_t populate_bandwidth;
  uint64_t flush_rate;        /* configured caps, 0: none */
  uint64_t populate_rate;
  uint64_t store_errors;      /* failed backing store requests */
  uint64_t sync_errors;       /* failed syncs */
  uint64_t syncs;             /* successful syncs */
  uint64_t throttled;         /* writes that waited for dirty-max */
  /* ram-size= (0 when the whole device is in RAM) */
  uint64_t ram_size;          /* the budget in force, bytes */
  uint64_t resident_bytes;    /* chunks in RAM now, bytes */
  uint64_t hits;              /* requests that needed no load */
  uint64_t misses;            /* requests that had to load */
  uint64_t evictions;         /* chunks evicted */
  uint64_t slot_waits;        /* reservations that waited for write back */
  int last_errno;             /* 0 if none */
  char last_error[256];
  const char *store_type;     /* "file", "nbd" */
  enum rb_store_state store_state;
  int store_connections;
  double uptime;              /* seconds since rb_start */
  const char *image_source;   /* "populated", "resumed-clean",
                                 "resumed-crash" */
  uint64_t resumed_chunks;    /* chunks taken from a resumed image */
  uint64_t resumed_chunks_to_write;  /* of them, written back at start */
  /* journal= (all zero, journal NULL, without one) */
  const char *journal;
  uint64_t journal_size;      /* bytes for transactions */
  uint64_t journal_used_bytes;  /* live transactions (not yet in place) */
  uint64_t journal_commits;   /* transactions committed */
  uint64_t journal_applied;   /* of them, written in place and retired */
  uint64_t journal_data_bytes;  /* data bytes they hold */
  uint64_t journal_deferred_bytes;  /* bytes a pass did not write in place
                                       because a newer transaction it left
                                       in the journal holds them */
  uint64_t journal_replayed;  /* transactions replayed at start */
  double commit_interval;     /* seconds */
  double last_commit_age;     /* seconds since the last commit, -1: none */
  double last_commit_time;    /* of the last commit, seconds since the
                                 epoch, 0: none */
  double commit_lag;          /* age of the oldest uncommitted write */
};

extern void rb_get_stats (struct rb *rb, struct rb_stats *st);

/* Format a snapshot as "key: value" lines or one JSON object line.
 * Returns the length written (like snprintf, truncated to len).
 */
extern int rb_stats_format (const struct rb_stats *st, bool json,
                            char *buf, size_t len);

/* Per-thread error of the last failed call. */
extern const char *rb_get_error (void);
extern int rb_get_errno (void);

/* Where messages go (default: stderr).  RB_LOG_DEBUG is progress and
 * trace, RB_LOG_INFO an event of the device's life an operator reads in
 * the system log (a mode change, a journal replayed at start),
 * RB_LOG_WARN is something an operator must see (a backing store
 * error, data that cannot be written back).
 */
enum rb_log_level { RB_LOG_DEBUG, RB_LOG_INFO, RB_LOG_WARN };
typedef void (*rb_log_fn) (enum rb_log_level level, const char *msg);
extern void rb_set_log (rb_log_fn fn);

#endif /* RAMBACK_H */
