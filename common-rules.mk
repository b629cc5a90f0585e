# SPDX-License-Identifier: GPL-2.0-or-later
# Included by every Makefile.am.
NULL =
AM_CFLAGS = $(WARNINGS_CFLAGS) $(SANITIZER_CFLAGS) $(PTHREAD_CFLAGS)
AM_LDFLAGS = $(SANITIZER_CFLAGS)
