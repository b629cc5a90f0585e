/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: opening a backing store (store.h). */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

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
  return rb_store_file_open (params);
}

void
rb_store_close (struct rb_store *s)
{
  if (s)
    s->ops->close (s);
}

bool
rb_store_check_io (const struct rb_store *s, struct rb_io *io,
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
