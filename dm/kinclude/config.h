/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramback: <config.h> for the kernel build.  The userspace config.h
 * (autoconf) describes the C library and build options; the three
 * shared lib files use none of its macros, so this is empty on purpose.
 */
#ifndef RAMBACK_KINCLUDE_CONFIG_H
#define RAMBACK_KINCLUDE_CONFIG_H
#endif
