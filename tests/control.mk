# SPDX-License-Identifier: GPL-2.0-or-later
# Tests of the control socket (glue/control-server.c, lib/control.c)
# on the wire, against the real plugin.
control_tests = \
	test-control-protocol.sh \
	test-control-socket.sh \
	$(NULL)
TESTS += $(control_tests)
EXTRA_DIST += $(control_tests)

# Every status json field documented in docs/ramback-control.pod, and
# the other way round.
TESTS += test-status-fields.sh
# What the log (no -v) and systemd (sd_notify) hear of the lifecycle.
TESTS += test-lifecycle-log.sh
EXTRA_DIST += test-lifecycle-log.sh
EXTRA_DIST += test-status-fields.sh
