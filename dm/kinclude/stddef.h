/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: <stddef.h> for the kernel build (size_t, NULL, offsetof). */
#ifndef RAMBACK_KINCLUDE_STDDEF_H
#define RAMBACK_KINCLUDE_STDDEF_H
#include <linux/types.h>
#include <linux/stddef.h>
#endif
