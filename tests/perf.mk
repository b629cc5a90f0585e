# SPDX-License-Identifier: GPL-2.0-or-later
# Write-back cost: what the status counts, the direct I/O path of the
# file store, and that an idle server uses no CPU.
perf_tests = \
	test-direct-io.sh \
	test-flush-delay.sh \
	test-idle-cpu.sh \
	test-write-amp.sh \
	test-written-bytes.sh \
	$(NULL)
TESTS += $(perf_tests)
EXTRA_DIST += $(perf_tests)
