# SPDX-License-Identifier: GPL-2.0-or-later
# Included by every Makefile.am.
NULL =
AM_CFLAGS = $(WARNINGS_CFLAGS) $(SANITIZER_CFLAGS) $(PTHREAD_CFLAGS)
AM_LDFLAGS = $(SANITIZER_CFLAGS)
# The OS shim of lib/ (lib/env.h) is chosen by the include path: this
# is the POSIX one.  Everything that includes a lib/ header needs it.
RB_ENV_CPPFLAGS = -I$(top_srcdir)/lib/env/posix
