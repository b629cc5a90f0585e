# SPDX-License-Identifier: GPL-2.0-or-later
# The write-back journal (journal=): crash consistency, recovery.
journal_tests = \
	test-journal-crash.sh \
	test-journal-recover.sh \
	test-journal-replay-cut.sh \
	test-journal-limits.sh \
	test-journal-cow.sh \
	test-journal-resume.sh \
	test-journal-writethrough.sh \
	$(NULL)
TESTS += $(journal_tests)
EXTRA_DIST += $(journal_tests) \
	journal-crash.py \
	$(NULL)
