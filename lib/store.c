/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: opening a backing store and batch-of-one helpers (store.h). */

#include <config.h>

#include <errno.h>
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

static int
one (struct rb_store *s, enum rb_io_op op, void *buf, uint64_t count,
     uint64_t offset)
{
  struct rb_io io = { .op = op, .buf = buf, .count = count, .offset = offset };

  return s->ops->submit (s, &io, 1);
}

int
rb_store_pread (struct rb_store *s, void *buf, uint64_t count, uint64_t offset)
{
  return one (s, RB_IO_READ, buf, count, offset);
}

int
rb_store_pwrite (struct rb_store *s, const void *buf, uint64_t count,
                 uint64_t offset)
{
  return one (s, RB_IO_WRITE, (void *) buf, count, offset);
}

int
rb_store_zero (struct rb_store *s, uint64_t count, uint64_t offset)
{
  return one (s, RB_IO_ZERO, NULL, count, offset);
}
