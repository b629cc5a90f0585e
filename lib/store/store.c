/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: opening a backing store (store.h). */

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
