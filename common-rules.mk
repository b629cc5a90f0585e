# SPDX-License-Identifier: GPL-2.0-or-later
# Included by every Makefile.am.
NULL =
AM_CFLAGS = $(WARNINGS_CFLAGS) $(SANITIZER_CFLAGS) $(PTHREAD_CFLAGS)
AM_LDFLAGS = $(SANITIZER_CFLAGS)
# The OS shim of lib/ (lib/env/env.h) is chosen by the include path: this
# is the POSIX one.  Everything that includes a lib/ header needs it.
RB_ENV_CPPFLAGS = -I$(top_srcdir)/lib/env/posix
# lib/'s layers (lib/Makefile.am lists them), all on the include path so
# a file includes "chunkmap.h" wherever it lives.
RB_LIB_CPPFLAGS = $(RB_LAYERS_CPPFLAGS) $(RB_ENV_CPPFLAGS)
RB_LAYERS_CPPFLAGS = -I$(top_srcdir)/lib -I$(top_srcdir)/lib/env \
	-I$(top_srcdir)/lib/ds -I$(top_srcdir)/lib/engine \
	-I$(top_srcdir)/lib/ram -I$(top_srcdir)/lib/store \
	-I$(top_srcdir)/lib/journal
