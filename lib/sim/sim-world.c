/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback-sim: the simulated disks (sim.h) as backing stores, the
 * journal device behind journal=, and the scheduling points inside the
 * RAM image's copies.
 *
 * Store requests: each batch waits a random virtual latency (other
 * fibers run meanwhile), and each write lands either when it arrives or
 * when it completes (both happen on real disks), so a sync can start
 * and end inside a write's flight.  Injected failures (sim_disk's
 * write_fail, sync_fail) fail a request with fail_errno without
 * performing it.
 *
 * The journal: the engine opens journal= through rb_store_open; the
 * simulator's link wraps that call (--wrap=rb_store_open) and hands out
 * the journal disk for the run's journal path, the only hook the
 * journal needs (the engine is unchanged).
 *
 * RAM copies: the engine copies application data into and out of the
 * image without locks (ramimage.h); those are the windows where past
 * zero-versus-write races lived.  The link wraps ramimage_copy_in,
 * ramimage_copy_out and ramimage_zero to cut them into pieces of one
 * unit with a scheduling point between, so those windows exist here.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "error.h"
#include "ramimage.h"
#include "sim.h"

/* ---- disks ---- */

static void
latency (struct sim_disk *d)
{
  if (d->max_latency_ns)
    sim_sleep_ns (sim_rand_below (d->max_latency_ns));
  else
    sim_point ();
}

static bool
fails (struct sim_disk *d, unsigned permille)
{
  if (permille == 0 || rb_now_ns () >= d->fault_until_ns ||
      sim_rand_below (1000) >= permille)
    return false;
  d->failures++;
  return true;
}

static void
apply (struct sim_disk *d, const struct rb_io *io, const uint8_t *data)
{
  uint64_t s;

  if (io->op == RB_IO_ZERO)
    memset (d->pending + io->offset, 0, io->count);
  else
    memcpy (d->pending + io->offset, data, io->count);
  /* A write allocates every sector it touches; a zero request punches
   * the sectors it covers whole (a hole is whole blocks; the sectors it
   * covers in part are zeroed in place and stay as they were).
   */
  if (d->alloc) {
    uint64_t a = io->offset / SIM_UNIT, b = (io->offset + io->count) / SIM_UNIT;

    if (io->op == RB_IO_ZERO) {
      a = (io->offset + SIM_UNIT - 1) / SIM_UNIT;
      if (b > a)
        memset (d->alloc + a, 0, b - a);
    }
    else
      memset (d->alloc + a, 1,
              (io->offset + io->count + SIM_UNIT - 1) / SIM_UNIT - a);
  }
  for (s = io->offset / SIM_UNIT; s <= (io->offset + io->count - 1) / SIM_UNIT;
       s++) {
    d->dirty[s] = 1;
    /* A power cut now may keep this sector: without journal= it must
     * not take back a write made durable.
     */
    if (d == &sim->back && !sim->cfg.journal)
      model_check_durable (d->pending, s, "the store's cache as a write "
                           "lands (a power cut may keep it)");
  }
  if (sim->cfg.verbose)
    fprintf (stderr, "    %s: %s %" PRIu64 "+%" PRIu64 "%s\n", d->name,
             io->op == RB_IO_ZERO ? "ZERO" : "WRITE", io->offset, io->count,
             io->fua ? " fua" : "");
  if (io->fua && d->can_fua) {
    memcpy (d->durable + io->offset, d->pending + io->offset, io->count);
    /* Whole sectors only: the dirty bit covers a sector. */
    for (s = io->offset / SIM_UNIT;
         s <= (io->offset + io->count - 1) / SIM_UNIT; s++)
    {
      if (memcmp (d->durable + s * SIM_UNIT, d->pending + s * SIM_UNIT,
                  SIM_UNIT) == 0)
        d->dirty[s] = 0;
      if (d == &sim->back && !sim->cfg.journal)
        model_check_durable (d->durable, s, "the store's durable image "
                             "after a FUA write");
    }
  }
  d->writes++;
}

static int
disk_submit (struct rb_store *s, struct rb_io *ios, size_t n)
{
  struct sim_disk *d = s->handle;
  int first = 0;
  size_t i;
  /* Data captured at arrival, applied now or at completion. */
  uint8_t **copies = calloc (n, sizeof *copies);
  bool *late = calloc (n, sizeof *late);

  if (copies == NULL || late == NULL)
    sim_fail ("out of memory");
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];

    io->err = 0;
    if (io->count == 0)
      continue;
    if (io->offset > d->size || io->count > d->size - io->offset)
      sim_fail ("%s: request of %" PRIu64 " bytes at %" PRIu64
                " beyond the end (%" PRIu64 ")", d->name, io->count,
                io->offset, d->size);
    if (io->op == RB_IO_READ)
      continue;
    if (fails (d, d->write_fail)) {
      io->err = d->fail_errno;
      continue;
    }
    if (io->op == RB_IO_WRITE) {
      copies[i] = malloc (io->count);
      if (copies[i] == NULL)
        sim_fail ("out of memory");
      memcpy (copies[i], io->buf, io->count);
    }
    late[i] = sim_rand_below (2);
    if (!late[i])
      apply (d, io, copies[i]);
  }
  latency (d);
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];

    if (io->count == 0)
      continue;
    if (io->op == RB_IO_READ) {
      if (fails (d, d->write_fail / 4))
        io->err = d->fail_errno;
      else
        memcpy (io->buf, d->pending + io->offset, io->count);
    }
    else if (io->err == 0 && late[i])
      apply (d, io, copies[i]);
    free (copies[i]);
    if (io->err && !first)
      first = io->err;
  }
  free (copies);
  free (late);
  if (first) {
    rb_set_error (first, "%s: injected failure", d->name);
    return -1;
  }
  return 0;
}

static int
disk_flush (struct rb_store *s)
{
  struct sim_disk *d = s->handle;
  uint64_t sec, nsec = d->size / SIM_UNIT;
  bool fail;

  latency (d);
  fail = fails (d, d->sync_fail);
  d->flushes++;
  for (sec = 0; sec < nsec; sec++) {
    if (!d->dirty[sec])
      continue;
    /* A failed flush writes some sectors and forgets the others. */
    if (!fail || sim_rand_below (2)) {
      memcpy (d->durable + sec * SIM_UNIT, d->pending + sec * SIM_UNIT,
              SIM_UNIT);
      if (d == &sim->back && !sim->cfg.journal)
        model_check_durable (d->durable, sec, "the store's durable image "
                             "after a flush");
    }
    d->dirty[sec] = 0;
  }
  if (sim->cfg.verbose)
    fprintf (stderr, "    %s: FLUSH%s\n", d->name, fail ? " failed" : "");
  if (fail) {
    rb_set_error (d->fail_errno, "%s: injected sync failure", d->name);
    return -1;
  }
  return 0;
}

static int
disk_next_data (struct rb_store *s, uint64_t offset, uint64_t *data,
                uint64_t *hole)
{
  struct sim_disk *d = s->handle;
  static const uint8_t zero[SIM_UNIT];
  uint64_t u = offset / SIM_UNIT, n = d->size / SIM_UNIT;

  sim_point ();
  /* Holes of whole sectors that read as zeroes. */
  while (u < n && memcmp (d->pending + u * SIM_UNIT, zero, SIM_UNIT) == 0)
    u++;
  *data = u < n ? RB_MAX (u * SIM_UNIT, offset) : d->size;
  while (u < n && memcmp (d->pending + u * SIM_UNIT, zero, SIM_UNIT) != 0)
    u++;
  *hole = u < n ? u * SIM_UNIT : d->size;
  return 0;
}

static void
disk_close (struct rb_store *s)
{
  free (s);
}

static const struct rb_store_ops disk_ops = {
  .name = "sim",
  .submit = disk_submit,
  .flush = disk_flush,
  .next_data = disk_next_data,
  .close = disk_close,
};

struct rb_store *
sim_disk_store (struct sim_disk *d)
{
  struct rb_store *s = calloc (1, sizeof *s);

  if (s == NULL)
    sim_fail ("out of memory");
  s->ops = &disk_ops;
  s->handle = d;
  s->size = d->size;
  s->can_zero = true;
  s->can_fua = d->can_fua;
  s->connections = 1;
  return s;
}

void
sim_disk_power_cut (struct sim_disk *d)
{
  uint64_t sec, nsec = d->size / SIM_UNIT;

  for (sec = 0; sec < nsec; sec++) {
    if (!d->dirty[sec])
      continue;
    if (sim_rand_below (2))
      memcpy (d->durable + sec * SIM_UNIT, d->pending + sec * SIM_UNIT,
              SIM_UNIT);
    else
      memcpy (d->pending + sec * SIM_UNIT, d->durable + sec * SIM_UNIT,
              SIM_UNIT);
    d->dirty[sec] = 0;
  }
  /* What the page cache held and the disk did not is gone too. */
  memcpy (d->pending, d->durable, d->size);
}

void
sim_disk_process_crash (struct sim_disk *d)
{
  uint64_t sec, nsec = d->size / SIM_UNIT;

  /* Sectors a failed flush forgot (clean in the cache, never written)
   * are evicted: the next process reads what the disk holds.  Had they
   * stayed, a later good sync would not write them, and nothing after
   * the crash could know (fsyncgate); the writes in them were not
   * durable, so losing them here is within the contract.
   */
  for (sec = 0; sec < nsec; sec++)
    if (!d->dirty[sec] &&
        memcmp (d->durable + sec * SIM_UNIT, d->pending + sec * SIM_UNIT,
                SIM_UNIT) != 0)
      memcpy (d->pending + sec * SIM_UNIT, d->durable + sec * SIM_UNIT,
              SIM_UNIT);
}

/* ---- link wraps ---- */

extern struct rb_store *__real_rb_store_open (const struct rb_store_params *);
extern struct rb_store *__wrap_rb_store_open (const struct rb_store_params *);

struct rb_store *
__wrap_rb_store_open (const struct rb_store_params *p)
{
  char path[300];

  snprintf (path, sizeof path, "%s/journal", sim->dir);
  if (p->uri && strcmp (p->uri, path) == 0)
    return sim_disk_store (&sim->jdev);
  return __real_rb_store_open (p);
}

extern void __real_ramimage_copy_in (struct ramimage *, uint64_t,
                                     const void *, uint64_t);
extern void __real_ramimage_copy_out (struct ramimage *, uint64_t,
                                      void *, uint64_t);
extern void __real_ramimage_zero (struct ramimage *, uint64_t, uint64_t);
extern void __wrap_ramimage_copy_in (struct ramimage *, uint64_t,
                                     const void *, uint64_t);
extern void __wrap_ramimage_copy_out (struct ramimage *, uint64_t,
                                      void *, uint64_t);
extern void __wrap_ramimage_zero (struct ramimage *, uint64_t, uint64_t);

/* The next piece of [off, end): up to the next unit boundary, or the
 * whole rest (a copy is not always cut: half of them run in one go).
 */
static uint64_t
piece (uint64_t off, uint64_t end)
{
  uint64_t next = (off / SIM_UNIT + 1) * SIM_UNIT;

  return (next < end ? next : end) - off;
}

void
__wrap_ramimage_copy_in (struct ramimage *ri, uint64_t offset,
                         const void *buf, uint64_t count)
{
  uint64_t done = 0;

  while (done < count) {
    uint64_t n = piece (offset + done, offset + count);

    sim_point ();
    __real_ramimage_copy_in (ri, offset + done, (const char *) buf + done, n);
    done += n;
  }
}

void
__wrap_ramimage_copy_out (struct ramimage *ri, uint64_t offset, void *buf,
                          uint64_t count)
{
  uint64_t done = 0;

  while (done < count) {
    uint64_t n = piece (offset + done, offset + count);

    sim_point ();
    __real_ramimage_copy_out (ri, offset + done, (char *) buf + done, n);
    done += n;
  }
}

void
__wrap_ramimage_zero (struct ramimage *ri, uint64_t offset, uint64_t count)
{
  sim_point ();
  __real_ramimage_zero (ri, offset, count);
  sim_point ();
}
