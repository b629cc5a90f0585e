# SPDX-License-Identifier: GPL-2.0-or-later
# Tests of NBD backing stores: lib/store/store-nbd.c on its own, and
# the plugin in front of real NBD servers (nbdkit, qemu-nbd, nbd-server)
# started by each test on a Unix socket or 127.0.0.1.

remote_tests = \
	test-remote-store.sh \
	test-remote-nbdkit.sh \
	test-remote-qemu-nbd.sh \
	test-remote-nbd-server.sh \
	test-remote-restart.sh \
	test-remote-offline.sh \
	test-remote-errors.sh \
	test-remote-multiconn.sh \
	test-remote-holes.sh \
	test-remote-tls.sh \
	test-fast-zero.sh \
	test-faultdisk.sh \
	test-sync-error.sh \
	test-ups-drain.sh \
	test-remote-stall.sh \
	test-remote-stop-read.sh \
	test-remote-flap.sh \
	test-remote-lost-cache.sh \
	test-remote-block-size.sh \
	test-remote-slow-dns.sh \
	$(NULL)
TESTS += $(remote_tests)

EXTRA_DIST += $(remote_tests) \
	remote-functions.sh \
	remote-io.py \
	slowdns-shim.c \
	$(NULL)

# The store driven directly through its ops table (run by
# test-remote-store.sh, which starts the servers).
check_PROGRAMS += test-store-nbd
test_store_nbd_SOURCES = test-store-nbd.c
test_store_nbd_CPPFLAGS = -I$(top_builddir) $(RB_LIB_CPPFLAGS) \
	$(LIBNBD_CFLAGS)
test_store_nbd_LDADD = $(top_builddir)/lib/libramback.la $(LIBNBD_LIBS) $(PTHREAD_LIBS)

# faultdisk: an nbdkit plugin for tests that injects faults on command
# (stalls, failures, a volatile write cache with power cuts); see the
# top of faultdisk-plugin.c.  Built for the tests only, never installed.
check_LTLIBRARIES = nbdkit-faultdisk-plugin.la
nbdkit_faultdisk_plugin_la_SOURCES = faultdisk-plugin.c
nbdkit_faultdisk_plugin_la_CPPFLAGS = -I$(top_builddir) $(NBDKIT_CFLAGS)
nbdkit_faultdisk_plugin_la_LDFLAGS = \
	$(AM_LDFLAGS) -module -avoid-version -shared -no-undefined \
	-rpath $(abs_builddir)
