/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: <string.h> for the kernel build (memset, memcpy). */
#ifndef RAMBACK_KINCLUDE_STRING_H
#define RAMBACK_KINCLUDE_STRING_H
#include <linux/string.h>
#endif
