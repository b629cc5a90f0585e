/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: <stdbool.h> for the kernel build (bool, true, false). */
#ifndef RAMBACK_KINCLUDE_STDBOOL_H
#define RAMBACK_KINCLUDE_STDBOOL_H
#include <linux/types.h>
#include <linux/stddef.h>
#endif
