/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ramback: <stdint.h> for the kernel build.  <linux/types.h> already
 * has the uintN_t types; the limits and constant macros are added here.
 */
#ifndef RAMBACK_KINCLUDE_STDINT_H
#define RAMBACK_KINCLUDE_STDINT_H
#include <linux/types.h>
#include <linux/limits.h>
#define UINT8_MAX U8_MAX
#define UINT16_MAX U16_MAX
#define UINT32_MAX U32_MAX
#define UINT64_MAX U64_MAX
#define INT32_MAX S32_MAX
#define INT64_MAX S64_MAX
#define UINT32_C(c) c##U
#define UINT64_C(c) c##ULL
#define INT64_C(c) c##LL
#endif
