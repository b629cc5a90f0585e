/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: opening a backing store, and the request checks and piece
 * cutting of the stores that run pieces in parallel (store.h). */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "cleanup.h"
#include "error.h"
#include "store.h"

struct rb_store *
rb_store_open (const struct rb_store_params *params)
{
  if (params->uri == NULL || params->uri[0] == '\0') {
    rb_set_error (EINVAL, "no backing store given: add back=PATH or back=nbd://...");
    return NULL;
  }
  if (rb_store_is_nbd_uri (params->uri))
    return rb_store_nbd_open (params);
  if (rb_store_is_rbd_uri (params->uri)) {
#ifdef HAVE_LIBRBD
    return rb_store_rbd_open (params);
#else
    rb_set_error (ENOTSUP, "%s: this ramback was built without librbd "
                  "(configure --with-rbd, with librbd-dev installed)",
                  params->uri);
    return NULL;
#endif
  }
  return rb_store_file_open (params);
}

bool
rb_store_is_rbd_uri (const char *uri)
{
  return uri && strncmp (uri, "rbd:", 4) == 0;
}

void
rb_store_close (struct rb_store *s)
{
  if (s)
    s->ops->close (s);
}

/* Check one request: sets io->err, and for the batch's first failure
 * *first_err and the thread's error.  True if it is to be cut (valid,
 * not empty).
 */
static bool
check_io (const struct rb_store *s, struct rb_io *io,
                   int *first_err, const char *who, const char *ro_what)
{
  io->err = 0;
  if (io->count == 0)
    return false;
  if (io->offset > s->size || io->count > s->size - io->offset) {
    io->err = EINVAL;
    if (!*first_err) {
      *first_err = EINVAL;
      rb_set_error (EINVAL, "%s: request of %" PRIu64 " bytes at offset %"
                    PRIu64 " beyond the end of the export (%" PRIu64 ")",
                    who, io->count, io->offset, s->size);
    }
    return false;
  }
  if (io->op != RB_IO_READ && s->read_only) {
    io->err = EROFS;
    if (!*first_err) {
      *first_err = EROFS;
      rb_set_error (EROFS, "%s: %s", who, ro_what);
    }
    return false;
  }
  return true;
}

/* The step of io's pieces. */
static uint64_t
cut_step (const struct rb_store_cut *c, const struct rb_io *io)
{
  if (io->op == RB_IO_ZERO)
    return c->zero_step;
  if (io->op == RB_IO_READ && c->read_step)
    return c->read_step;
  return c->rw_step;
}

void *
rb_store_cut_plan (struct rb_store_cut *c, const struct rb_store *s,
                   struct rb_io *ios, size_t n, size_t size,
                   ssize_t *npieces, uint64_t *bytes, const char *who,
                   const char *ro_what)
{
  size_t i, count = 0;
  uint64_t total = 0;
  int first_err = 0;
  void *pieces;

  *npieces = -1;
  for (i = 0; i < n; i++) {
    struct rb_io *io = &ios[i];
    uint64_t step = cut_step (c, io);

    if (!check_io (s, io, &first_err, who, ro_what))
      continue;
    if (c->aligned)
      count += (io->offset + io->count - 1) / step - io->offset / step + 1;
    else
      count += (io->count + step - 1) / step;
    total += io->count;
  }
  if (first_err) {
    errno = first_err;
    return NULL;
  }
  if (bytes)
    *bytes = total;
  c->io = NULL;
  c->i = 0;
  c->offset = c->count = 0;
  if (count == 0) {
    *npieces = 0;
    return NULL;
  }
  pieces = calloc (count, size);
  if (pieces == NULL) {
    rb_set_error (errno, "%s: calloc", who);
    return NULL;
  }
  *npieces = count;
  return pieces;
}

bool
rb_store_cut_next (struct rb_store_cut *c, struct rb_io *ios, size_t n)
{
  uint64_t pos = c->offset + c->count, end, step, next;

  if (c->io == NULL || pos == c->io->offset + c->io->count) {
    if (c->io != NULL)
      c->i++;
    while (c->i < n && ios[c->i].count == 0)
      c->i++;
    if (c->i == n)
      return false;
    c->io = &ios[c->i];
    pos = c->io->offset;
  }
  end = c->io->offset + c->io->count;
  step = cut_step (c, c->io);
  next = c->aligned ? (pos / step + 1) * step : pos + step;
  next = RB_MIN (next, end);
  c->offset = pos;
  c->count = next - pos;
  c->buf = c->io->op == RB_IO_ZERO ? NULL
    : (char *) c->io->buf + (pos - c->io->offset);
  return true;
}
