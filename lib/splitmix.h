/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: SplitMix64, the one small seeded generator of the
 * deterministic simulator (its seed's configuration and the scheduler's
 * state) and of the eviction trace test.  Not for anything that must be
 * unpredictable.
 */

#ifndef RAMBACK_SPLITMIX_H
#define RAMBACK_SPLITMIX_H

#include <stdint.h>

/* The next value of the sequence whose state is *s. */
static inline uint64_t
rb_splitmix64 (uint64_t *s)
{
  uint64_t z = (*s += UINT64_C (0x9e3779b97f4a7c15));

  z = (z ^ (z >> 30)) * UINT64_C (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C (0x94d049bb133111eb);
  return z ^ (z >> 31);
}

#endif /* RAMBACK_SPLITMIX_H */
