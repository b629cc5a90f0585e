/* SPDX-License-Identifier: GPL-2.0-or-later */
/* "ramback status": the plugin's status json, shown three ways. */

#include <config.h>

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "format.h"
#include "status.h"

void
status_free (struct status *st)
{
  if (st == NULL)
    return;
  g_clear_object (&st->parser);
  g_free (st->line);
  g_free (st);
}

/* Parse one reply line: json-glib's parser, then the protocol's own
 * demands (one object, with a "mode").  NULL with *msg (to free) set.
 */
static struct status *
status_parse (const char *line, char **msg)
{
  struct status *st = g_new0 (struct status, 1);
  GError *perr = NULL;
  JsonNode *root;

  st->parser = json_parser_new_immutable ();
  st->line = g_strdup (line);
  if (!json_parser_load_from_data (st->parser, line, -1, &perr)) {
    *msg = g_strdup (perr->message);
    g_error_free (perr);
    goto err;
  }
  root = json_parser_get_root (st->parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root)) {
    *msg = g_strdup ("not a JSON object");
    goto err;
  }
  st->obj = json_node_get_object (root);
  if (status_has_str (st, "mode") == NULL) {
    *msg = g_strdup ("no \"mode\"");
    goto err;
  }
  return st;

 err:
  status_free (st);
  return NULL;
}

struct status *
status_fetch (struct ctl *c, GError **err)
{
  GPtrArray *lines = NULL;
  struct status *st;
  char *msg = NULL;

  if (!ctl_request (c, "status json", &lines, err))
    return NULL;
  if (lines->len != 1) {
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_PROTOCOL,
                 "%s: reply to 'status json' not understood: %u data "
                 "lines, expected 1", ctl_path (c), lines->len);
    g_ptr_array_unref (lines);
    return NULL;
  }
  st = status_parse (g_ptr_array_index (lines, 0), &msg);
  if (st == NULL)
    g_set_error (err, RAMBACK_CLI_ERROR, CLI_EXIT_PROTOCOL,
                 "%s: reply to 'status json' not understood: %s",
                 ctl_path (c), msg);
  g_free (msg);
  g_ptr_array_unref (lines);
  return st;
}

/* The member name if it holds a number, boolean or string of type t
 * (G_TYPE_INT64, G_TYPE_DOUBLE, ...), else NULL.
 */
static JsonNode *
scalar (const struct status *st, const char *name, GType t)
{
  JsonNode *n = json_object_get_member (st->obj, name);

  return n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == t
    ? n : NULL;
}

bool
status_has_u64 (const struct status *st, const char *name, uint64_t *ret)
{
  JsonNode *n;

  if ((n = scalar (st, name, G_TYPE_INT64)) != NULL) {
    /* json-glib reads integers as gint64: one above INT64_MAX comes
     * back negative, and is refused like a negative one.
     */
    if (json_node_get_int (n) < 0)
      return false;
    *ret = json_node_get_int (n);
    return true;
  }
  if ((n = scalar (st, name, G_TYPE_DOUBLE)) != NULL) {
    /* 1e3 or 2.0: accept whole numbers written that way. */
    double d = json_node_get_double (n);

    if (d < 0 || d != floor (d) || d >= 18446744073709551616.0)
      return false;
    *ret = (uint64_t) d;
    return true;
  }
  return false;
}

bool
status_has_double (const struct status *st, const char *name, double *ret)
{
  JsonNode *n = scalar (st, name, G_TYPE_DOUBLE);

  if (n == NULL)
    n = scalar (st, name, G_TYPE_INT64);
  if (n == NULL)
    return false;
  *ret = json_node_get_double (n);      /* converts an integer */
  return true;
}

const char *
status_has_str (const struct status *st, const char *name)
{
  JsonNode *n = scalar (st, name, G_TYPE_STRING);

  return n ? json_node_get_string (n) : NULL;
}

uint64_t
status_u64 (const struct status *st, const char *name)
{
  uint64_t v;

  return status_has_u64 (st, name, &v) ? v : 0;
}

double
status_double (const struct status *st, const char *name)
{
  double v;

  return status_has_double (st, name, &v) ? v : 0;
}

bool
status_bool (const struct status *st, const char *name)
{
  JsonNode *n = scalar (st, name, G_TYPE_BOOLEAN);

  return n ? json_node_get_boolean (n) : false;
}

const char *
status_str (const struct status *st, const char *name)
{
  const char *s = status_has_str (st, name);

  return s ? s : "";
}

uint64_t
status_written_back (const struct status *st)
{
  return status_u64 (st, "stored_bytes") + status_u64 (st, "zeroed_bytes");
}

uint64_t
status_pending_bytes (const struct status *st)
{
  return status_u64 (st, "dirty_bytes") + status_u64 (st, "inflight_bytes");
}

double
status_drain_seconds (const struct status *st)
{
  uint64_t pending = status_pending_bytes (st);
  uint64_t bw = status_u64 (st, "flush_bandwidth");
  double d;

  if (status_has_double (st, "drain_seconds", &d))
    return d < 0 ? -1 : d;
  if (pending == 0)
    return 0;
  if (bw == 0)
    return -1;
  return (double) pending / bw;
}

/* Populate: the fraction in RAM, from "progress" or the chunk counts. */
static double
populate_fraction (const struct status *st)
{
  double p;
  uint64_t chunks = status_u64 (st, "chunks");

  if (status_bool (st, "populated"))
    return 1;
  if (status_has_double (st, "progress", &p))
    return p;
  return chunks ? (double) status_u64 (st, "loaded_chunks") / chunks : 0;
}

static double
populate_seconds_left (const struct status *st)
{
  uint64_t chunks = status_u64 (st, "chunks");
  uint64_t loaded = status_u64 (st, "loaded_chunks");
  uint64_t bw = status_u64 (st, "populate_bandwidth");

  if (status_bool (st, "populated") || loaded >= chunks)
    return 0;
  if (bw == 0)
    return -1;
  return (double) (chunks - loaded) * status_u64 (st, "chunk_size") / bw;
}

/* "name:" padded to the value column; "" gives an empty key. */
static void
append_key (GString *out, const char *name)
{
  g_string_append_printf (out, "%s%c%*s", name, *name ? ':' : ' ',
                          (int) (15 - strlen (name)), "");
}
#define KEY(name) append_key (out, (name))

static void
populate_detail (GString *out, const struct status *st)
{
  uint64_t chunks = status_u64 (st, "chunks");
  uint64_t rate = status_u64 (st, "populate_rate");

  if (status_bool (st, "populated")) {
    g_string_append_printf (out, "done (%" PRIu64 " chunks in RAM)", chunks);
    return;
  }
  g_string_append_printf (out, "%.1f%%, %" PRIu64 " of %" PRIu64 " chunks",
                          100 * populate_fraction (st),
                          status_u64 (st, "loaded_chunks"), chunks);
  g_string_append (out, ", ");
  format_size (out, status_u64 (st, "loaded_bytes"));
  g_string_append (out, " read at ");
  format_rate (out, status_u64 (st, "populate_bandwidth"));
  if (rate) {
    g_string_append (out, " (cap ");
    format_rate (out, rate);
    g_string_append_c (out, ')');
  }
  g_string_append (out, ", ");
  format_duration (out, populate_seconds_left (st));
  g_string_append (out, " left");
}

static void
bar_line (GString *out, const char *key, double fraction,
          const struct status_view *view)
{
  KEY (key);
  /* Leave room for the key and " 100.0%" on a line of view->width. */
  format_bar (out, fraction, MAX (10, MIN (50, view->width - 28)));
  g_string_append_printf (out, " %5.1f%%\n",
                          100 * fmin (fmax (fraction, 0), 1));
}

void
status_format_human (GString *out, const struct status *st,
                     const char *socket, const struct status_view *view)
{
  uint64_t limit = status_u64 (st, "dirty_max");
  uint64_t limit_cfg = status_u64 (st, "dirty_max_config");
  uint64_t window = status_u64 (st, "ups_window");
  uint64_t bw = status_u64 (st, "flush_bandwidth");
  uint64_t cap = status_u64 (st, "flush_rate");
  uint64_t pending = status_pending_bytes (st);
  double drain = status_drain_seconds (st);
  const char *last = status_str (st, "last_errno");
  int conns = status_u64 (st, "store_connections");

  KEY ("socket"); g_string_append_printf (out, "%s\n", socket);
  KEY ("mode"); g_string_append_printf (out, "%s\n", status_str (st, "mode"));
  KEY ("fsync"); g_string_append_printf (out, "%s\n", status_str (st, "fsync"));
  KEY ("trace");
  g_string_append_printf (out, "%s\n", status_bool (st, "trace") ? "on" : "off");
  KEY ("store");
  g_string_append_printf (out, "%s, %s, %d connection%s\n",
                          status_str (st, "store"),
                          status_str (st, "store_state"),
                          conns, conns == 1 ? "" : "s");
  KEY ("size");
  format_size (out, status_u64 (st, "size"));
  g_string_append_printf (out, " (%" PRIu64 " chunks of ",
                          status_u64 (st, "chunks"));
  format_size (out, status_u64 (st, "chunk_size"));
  g_string_append (out, ")\n");

  /* Older plugins do not say: show nothing rather than a guess. */
  if (*status_str (st, "image_source")) {
    const char *src = status_str (st, "image_source");

    KEY ("image");
    if (strcmp (src, "resumed-crash") == 0)
      g_string_append (out, "resumed after a crash");
    else if (strcmp (src, "resumed-clean") == 0)
      g_string_append (out, "resumed after a clean stop");
    else if (strcmp (src, "populated") == 0)
      g_string_append (out, "loaded from the backing store");
    else
      g_string_append (out, src);
    if (strncmp (src, "resumed", 7) == 0)
      g_string_append_printf (out, " (%" PRIu64 " chunks kept, %" PRIu64
                              " written back at start)",
                              status_u64 (st, "resumed_chunks"),
                              status_u64 (st, "resumed_chunks_to_write"));
    g_string_append_c (out, '\n');
  }
  KEY ("populate"); populate_detail (out, st); g_string_append_c (out, '\n');
  if (view && view->bars)
    bar_line (out, "", populate_fraction (st), view);

  KEY ("dirty");
  format_size (out, status_u64 (st, "dirty_bytes"));
  g_string_append_printf (out, " (%" PRIu64 " chunks)\n",
                          status_u64 (st, "dirty_chunks"));
  KEY ("in flight");
  format_size (out, status_u64 (st, "inflight_bytes"));
  g_string_append_printf (out, " (%" PRIu64 " chunks)\n",
                          status_u64 (st, "inflight_chunks"));
  KEY ("unsynced");
  format_size (out, status_u64 (st, "unsynced_bytes"));
  g_string_append_c (out, '\n');

  KEY ("dirty limit");
  if (limit == 0)
    g_string_append (out, "none");
  else
    format_size (out, limit);
  if (limit_cfg || window) {
    g_string_append (out, " (");
    if (limit_cfg) {
      g_string_append (out, "dirty-max ");
      format_size (out, limit_cfg);
    }
    if (window)
      g_string_append_printf (out, "%sups-window %" PRIu64 " s",
                              limit_cfg ? ", " : "", window);
    g_string_append_c (out, ')');
  }
  g_string_append_c (out, '\n');

  KEY ("flush rate");
  if (bw) {
    format_rate (out, bw);
    g_string_append (out, " measured");
  }
  else
    g_string_append (out, "not measured yet");
  if (cap) {
    g_string_append (out, " (cap ");
    format_rate (out, cap);
    g_string_append_c (out, ')');
  }
  g_string_append_c (out, '\n');

  /* Older plugins do not say: show nothing rather than a guess. */
  if (json_object_has_member (st->obj, "flush_delay_ms")) {
    uint64_t ms = status_u64 (st, "flush_delay_ms");

    KEY ("flush delay");
    if (ms == 0)
      g_string_append (out, "none (written back at once)\n");
    else
      g_string_append_printf (out, "%g s\n", ms / 1000.0);
  }

  if (json_object_has_member (st->obj, "dirty_expire_ms")) {
    uint64_t ms = status_u64 (st, "dirty_expire_ms");

    KEY ("dirty expire");
    if (ms == 0)
      g_string_append (out, "none (nothing held back under pressure)\n");
    else
      g_string_append_printf (out, "%g s (%" PRIu64 " rewritten sectors "
                              "held back so far)\n", ms / 1000.0,
                              status_u64 (st, "held_back"));
  }

  KEY ("time to drain");
  if (pending == 0)
    g_string_append (out, "0 s (nothing dirty)");
  else if (drain < 0)
    g_string_append (out, "unknown (flush rate not measured yet)");
  else
    format_duration (out, drain);
  g_string_append_c (out, '\n');
  if (view && view->bars) {
    /* 0 % is the most that was pending while watching. */
    uint64_t peak = MAX (view->peak_pending, pending);
    bar_line (out, "", peak ? 1 - (double) pending / peak : 1, view);
  }

  /* Data, and apart from it what was zeroed or punched (zeroes and
   * trims): the amplification below is of data only.
   */
  KEY ("written back");
  format_size (out, status_u64 (st, "stored_bytes"));
  g_string_append (out, ", zeroed ");
  format_size (out, status_u64 (st, "zeroed_bytes"));
  g_string_append_printf (out, ", %" PRIu64 " sync%s\n",
                          status_u64 (st, "syncs"),
                          status_u64 (st, "syncs") == 1 ? "" : "s");
  {
    uint64_t written;

    /* An older plugin does not send it. */
    if (status_has_u64 (st, "written_bytes", &written)) {
      KEY ("client writes");
      format_size (out, written);
      if (written)
        g_string_append_printf (out, " (written back %.2fx of it)",
                                (double) status_u64 (st, "stored_bytes") /
                                written);
      g_string_append_c (out, '\n');
    }
  }
  KEY ("throttled");
  g_string_append_printf (out, "%" PRIu64 " writes\n",
                          status_u64 (st, "throttled"));
  {
    uint64_t ram, hits, misses;

    /* ram-size= smaller than the device (an older plugin sends none). */
    if (status_has_u64 (st, "ram_size", &ram) &&
        ram < status_u64 (st, "size")) {
      hits = status_u64 (st, "hits");
      misses = status_u64 (st, "misses");
      KEY ("ram-size");
      format_size (out, status_u64 (st, "resident_bytes"));
      g_string_append (out, " of ");
      format_size (out, ram);
      g_string_append_printf (out, " in RAM, %" PRIu64 " hits, %" PRIu64
                              " misses (%.1f%% hits), %" PRIu64
                              " evictions\n", hits, misses,
                              hits + misses
                              ? 100.0 * hits / (hits + misses) : 0.0,
                              status_u64 (st, "evictions"));
    }
  }
  KEY ("errors");
  g_string_append_printf (out, "%" PRIu64 " store, %" PRIu64 " sync\n",
                          status_u64 (st, "store_errors"),
                          status_u64 (st, "sync_errors"));
  if (*last) {
    KEY ("last error");
    g_string_append_printf (out, "%s: %s\n", last,
                            status_str (st, "last_error"));
  }
  if (*status_str (st, "journal")) {
    double age = status_double (st, "last_commit_age");

    KEY ("journal");
    g_string_append_printf (out, "%s\n", status_str (st, "journal"));
    KEY ("journal used");
    format_size (out, status_u64 (st, "journal_used_bytes"));
    g_string_append (out, " of ");
    format_size (out, status_u64 (st, "journal_size"));
    g_string_append_printf (out, ", %" PRIu64 " commits, %" PRIu64
                            " in place, %" PRIu64 " replayed at start\n",
                            status_u64 (st, "journal_commits"),
                            status_u64 (st, "journal_applied"),
                            status_u64 (st, "journal_replayed"));
    KEY ("deferred");
    format_size (out, status_u64 (st, "journal_deferred_bytes"));
    g_string_append (out, " left to newer transactions, not written in "
                     "place\n");
    KEY ("last commit");
    if (age < 0)
      g_string_append (out, "none yet");
    else {
      format_duration (out, age);
      g_string_append (out, " ago");
    }
    g_string_append (out, " (commit lag ");
    format_duration (out, status_double (st, "commit_lag"));
    g_string_append (out, ", interval ");
    format_duration (out, status_double (st, "commit_interval"));
    g_string_append (out, ")\n");
  }
  KEY ("uptime");
  format_duration (out, status_double (st, "uptime"));
  g_string_append_c (out, '\n');
}

void
status_format_line (GString *out, const struct status *st)
{
  char stamp[32];
  time_t t = time (NULL);
  struct tm tm;

  strftime (stamp, sizeof stamp, "%H:%M:%S", localtime_r (&t, &tm));
  g_string_append_printf (out, "%s %s populate %.1f%% dirty ",
                          stamp, status_str (st, "mode"),
                          100 * populate_fraction (st));
  format_size (out, status_u64 (st, "dirty_bytes"));
  g_string_append (out, " in-flight ");
  format_size (out, status_u64 (st, "inflight_bytes"));
  g_string_append (out, " flush ");
  format_rate (out, status_u64 (st, "flush_bandwidth"));
  g_string_append (out, " drain ");
  if (status_pending_bytes (st) == 0)
    g_string_append (out, "0 s");
  else
    format_duration (out, status_drain_seconds (st));
  if (*status_str (st, "journal")) {
    g_string_append (out, " commit-lag ");
    format_duration (out, status_double (st, "commit_lag"));
  }
  g_string_append_printf (out, " errors %" PRIu64 "\n",
                          status_u64 (st, "store_errors") +
                          status_u64 (st, "sync_errors"));
}

/* Prometheus. */

static const struct metric {
  const char *field;          /* status json name */
  const char *name;           /* metric name */
  const char *type;
  const char *help;
} metrics[] = {
  { "populated", "ramback_populated", "gauge",
    "1 once the whole image is in RAM." },
  { "progress", "ramback_populate_progress_ratio", "gauge",
    "Fraction of the image loaded into RAM (0 to 1)." },
  { "size", "ramback_size_bytes", "gauge", "Size of the device." },
  { "chunk_size", "ramback_chunk_size_bytes", "gauge",
    "Size of a chunk, the unit of populate and write back." },
  { "chunks", "ramback_chunks", "gauge", "Chunks in the image." },
  { "loaded_chunks", "ramback_loaded_chunks", "gauge",
    "Chunks present in RAM." },
  { "loaded_bytes", "ramback_loaded_bytes_total", "counter",
    "Bytes read from the backing store." },
  { "demand_loaded_bytes", "ramback_demand_loaded_bytes_total", "counter",
    "Bytes read from the backing store for misses (not by populate)." },
  { "partial_chunks", "ramback_partial_chunks", "gauge",
    "Loaded chunks of which only some sectors are in RAM yet." },
  { "stored_bytes", "ramback_stored_bytes_total", "counter",
    "Bytes of data written back to the backing store (zeroes apart)." },
  { "written_bytes", "ramback_written_bytes_total", "counter",
    "Bytes of client writes (write amplification: stored / written)." },
  { "zeroed_bytes", "ramback_zeroed_bytes_total", "counter",
    "Bytes zeroed or punched on the backing store (zeroes and trims)." },
  { "dirty_chunks", "ramback_dirty_chunks", "gauge",
    "Chunks waiting to be written back." },
  { "dirty_bytes", "ramback_dirty_bytes", "gauge",
    "Bytes waiting to be written back." },
  { "inflight_chunks", "ramback_inflight_chunks", "gauge",
    "Chunks being written back now." },
  { "inflight_bytes", "ramback_inflight_bytes", "gauge",
    "Bytes being written back now." },
  { "unsynced_bytes", "ramback_unsynced_bytes", "gauge",
    "Bytes written to the backing store and not yet synced." },
  { "dirty_max", "ramback_dirty_limit_bytes", "gauge",
    "Dirty limit in force, from dirty-max= and ups-window= (0: none)." },
  { "dirty_max_config", "ramback_dirty_max_bytes", "gauge",
    "dirty-max= as configured (0: none)." },
  { "ups_window", "ramback_ups_window_seconds", "gauge",
    "ups-window= as configured (0: off)." },
  { "flush_bandwidth", "ramback_flush_bandwidth_bytes_per_second", "gauge",
    "Measured write-back bandwidth (moving average)." },
  { "populate_bandwidth", "ramback_populate_bandwidth_bytes_per_second",
    "gauge", "Measured populate bandwidth (moving average)." },
  { "flush_rate", "ramback_flush_rate_limit_bytes_per_second", "gauge",
    "flush-rate= cap (0: none)." },
  { "populate_rate", "ramback_populate_rate_limit_bytes_per_second", "gauge",
    "populate-rate= cap (0: none)." },
  { "store_connections", "ramback_store_connections", "gauge",
    "Connections to the backing store." },
  { "store_errors", "ramback_store_errors_total", "counter",
    "Failed backing store requests." },
  { "sync_errors", "ramback_sync_errors_total", "counter",
    "Failed syncs of the backing store." },
  { "syncs", "ramback_syncs_total", "counter",
    "Successful syncs of the backing store." },
  { "throttled", "ramback_throttled_writes_total", "counter",
    "Writes that waited because of the dirty limit." },
  { "held_back", "ramback_held_back_sectors_total", "counter",
    "Rewritten dirty sectors write back under pressure left for later." },
  { "ram_size", "ramback_ram_size_bytes", "gauge",
    "RAM the image may use (ram-size=; the device size by default)." },
  { "resident_bytes", "ramback_resident_bytes", "gauge",
    "Bytes of chunks in RAM now." },
  { "hits", "ramback_hits_total", "counter",
    "Requests (or pieces) that needed no load (ram-size=)." },
  { "misses", "ramback_misses_total", "counter",
    "Requests (or pieces) that had to load (ram-size=)." },
  { "hit_ratio", "ramback_hit_ratio", "gauge",
    "hits / (hits + misses) (ram-size=; 0 before any)." },
  { "evictions", "ramback_evictions_total", "counter",
    "Chunks evicted to make room (ram-size=)." },
  { "slot_waits", "ramback_slot_waits_total", "counter",
    "Requests that waited for write back to free RAM (ram-size=)." },
  { "trace", "ramback_trace", "gauge", "1 if request tracing is on." },
  { "resumed_chunks", "ramback_resumed_chunks", "gauge",
    "Chunks taken from a resumed RAM image at start (0: populated)." },
  { "resumed_chunks_to_write", "ramback_resumed_chunks_to_write", "gauge",
    "Chunks of a resumed RAM image that had to be written back at start." },
  { "uptime", "ramback_uptime_seconds", "gauge",
    "Seconds since the plugin's threads started." },
  { "journal_size", "ramback_journal_size_bytes", "gauge",
    "Bytes of the journal for transactions (0: no journal=)." },
  { "journal_used_bytes", "ramback_journal_used_bytes", "gauge",
    "Journal bytes held by transactions not yet in place." },
  { "journal_commits", "ramback_journal_commits_total", "counter",
    "Transactions committed in the journal." },
  { "journal_applied", "ramback_journal_applied_total", "counter",
    "Committed transactions written in place and retired." },
  { "journal_deferred_bytes", "ramback_journal_deferred_bytes_total",
    "counter", "Bytes the applier did not write in place because a newer "
    "transaction it left in the journal holds them." },
  { "journal_replayed", "ramback_journal_replayed", "gauge",
    "Transactions replayed from the journal at start." },
  { "commit_lag", "ramback_commit_lag_seconds", "gauge",
    "Age of the oldest write not yet committed (0: none)." },
};

/* Label values escape \, " and newline (exposition format). */
static void
append_label_value (GString *out, const char *s)
{
  g_string_append_c (out, '"');
  for (; *s; s++) {
    if (*s == '\\' || *s == '"')
      g_string_append_c (out, '\\');
    if (*s == '\n')
      g_string_append (out, "\\n");
    else
      g_string_append_c (out, *s);
  }
  g_string_append_c (out, '"');
}

static void
header (GString *out, const char *name, const char *type, const char *help)
{
  g_string_append_printf (out, "# HELP %s %s\n# TYPE %s %s\n",
                          name, help, name, type);
}

static void
sample (GString *out, const char *name, const char *socket,
        const char *extra_label, const char *extra_value, const char *value)
{
  g_string_append_printf (out, "%s{socket=", name);
  append_label_value (out, socket);
  if (extra_label) {
    g_string_append_printf (out, ",%s=", extra_label);
    append_label_value (out, extra_value);
  }
  g_string_append_printf (out, "} %s\n", value);
}

void
status_format_prometheus (GString *out, const struct status *st,
                          const char *socket)
{
  static const char *states[] = { "ok", "failing", "offline" };
  /* ramback_info's labels: status fields of the same names. */
  static const char *info_labels[] = { "mode", "fsync", "store" };
  char num[G_ASCII_DTOSTR_BUF_SIZE];
  const char *state;
  bool known = false;
  size_t i;

  header (out, "ramback_up", "gauge",
          "1 if the control socket answered, 0 if it did not.");
  sample (out, "ramback_up", socket, NULL, NULL, st ? "1" : "0");
  if (st == NULL)
    return;

  header (out, "ramback_info", "gauge",
          "Always 1; the labels give the configuration.");
  g_string_append (out, "ramback_info{socket=");
  append_label_value (out, socket);
  for (i = 0; i < G_N_ELEMENTS (info_labels); i++) {
    g_string_append_printf (out, ",%s=", info_labels[i]);
    append_label_value (out, status_str (st, info_labels[i]));
  }
  g_string_append (out, "} 1\n");

  header (out, "ramback_writethrough", "gauge",
          "1 in writethrough mode, 0 in writeback mode.");
  sample (out, "ramback_writethrough", socket, NULL, NULL,
          strcmp (status_str (st, "mode"), "writethrough") == 0 ? "1" : "0");

  state = status_str (st, "store_state");
  header (out, "ramback_store_state", "gauge",
          "1 for the state the backing store is in.");
  for (i = 0; i < G_N_ELEMENTS (states); i++) {
    known |= strcmp (state, states[i]) == 0;
    sample (out, "ramback_store_state", socket, "state", states[i],
            strcmp (state, states[i]) == 0 ? "1" : "0");
  }
  if (!known && *state)
    sample (out, "ramback_store_state", socket, "state", state, "1");

  for (i = 0; i < G_N_ELEMENTS (metrics); i++) {
    JsonNode *n;
    char v[G_ASCII_DTOSTR_BUF_SIZE];

    /* Integers as they came, fractions with the three decimals the
     * plugin writes them with.  No metric here is ever negative: a
     * negative integer (or one above 2^63 - 1, which json-glib reads
     * as negative) is left out, as status_has_u64 reads it as absent.
     */
    if ((n = scalar (st, metrics[i].field, G_TYPE_INT64)) != NULL) {
      if (json_node_get_int (n) < 0)
        continue;
      g_snprintf (v, sizeof v, "%" G_GINT64_FORMAT, json_node_get_int (n));
    }
    else if ((n = scalar (st, metrics[i].field, G_TYPE_DOUBLE)) != NULL)
      g_ascii_formatd (v, sizeof v, "%.3f", json_node_get_double (n));
    else if ((n = scalar (st, metrics[i].field, G_TYPE_BOOLEAN)) != NULL)
      g_strlcpy (v, json_node_get_boolean (n) ? "1" : "0", sizeof v);
    else
      continue;
    header (out, metrics[i].name, metrics[i].type, metrics[i].help);
    sample (out, metrics[i].name, socket, NULL, NULL, v);
  }

  header (out, "ramback_drain_seconds", "gauge",
          "Seconds to write back the dirty data at the measured bandwidth "
          "(-1: not measured yet).");
  g_ascii_formatd (num, sizeof num, "%.3f", status_drain_seconds (st));
  sample (out, "ramback_drain_seconds", socket, NULL, NULL, num);
}
