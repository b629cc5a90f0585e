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
	test-journal-amp.sh \
	$(NULL)
TESTS += $(journal_tests)
# The same against the filter form (filter.mk's .sh.filter stubs): the
# plugin below the filter as the backing store.  About 11 s together;
# the crash and replay-cut tests (20 s each) run in the plugin form
# only: the core and journal code they exercise is the same.
journal_filter_tests = \
	test-journal-writethrough.filter \
	test-journal-limits.filter \
	test-journal-recover.filter \
	test-journal-cow.filter \
	test-journal-resume.filter \
	$(NULL)
TESTS += $(journal_filter_tests)
CLEANFILES += $(journal_filter_tests)
EXTRA_DIST += $(journal_tests) \
	journal-crash.py \
	$(NULL)
