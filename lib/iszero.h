/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: is a buffer all zeroes?  One test for the journal's empty
 * super block and area, the RAM image header's boot ids, and a resumed
 * chunk that a lost zero left (resume.c).
 */

#ifndef RAMBACK_ISZERO_H
#define RAMBACK_ISZERO_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The first byte is zero and every byte equals the one before it
 * (memcmp of the buffer with itself shifted by one: no loop of our own).
 */
static inline bool
rb_is_zero (const void *buf, size_t n)
{
  const unsigned char *p = buf;

  return n == 0 || (p[0] == 0 && memcmp (p, p + 1, n - 1) == 0);
}

#endif /* RAMBACK_ISZERO_H */
