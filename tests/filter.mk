# SPDX-License-Identifier: GPL-2.0-or-later
# The filter form: nbdkit --filter=ramback PLUGIN ...
#
# 1. Core tests run again against the filter form: the same scripts and
#    assertions, with RAMBACK_FORM=filter (functions.sh.in's rb_cmdline
#    turns back=FILE into "file FILE" and back=NBD-URI into "nbd uri=").
#    Each test-X.filter is a generated one-line stub that runs
#    test-X.sh so; its log is test-X.log (test-X.sh.log is the plugin
#    form's).
filter_form_tests = \
	test-model.filter \
	test-populate.filter \
	test-mode-toggle.filter \
	test-fsync-wait.filter \
	test-dirty-max.filter \
	test-bad-input.filter \
	test-error-backing.filter \
	test-sigterm-drain.filter \
	test-ups-window.filter \
	test-fio.filter \
	test-enospc.filter \
	test-remote-qemu-nbd.filter \
	test-remote-nbd-server.filter \
	$(NULL)
TESTS += $(filter_form_tests)
CLEANFILES += $(filter_form_tests)
TEST_EXTENSIONS = .test .filter
FILTER_LOG_COMPILER = /bin/sh
.PRECIOUS: $(filter_form_tests)

.sh.filter:
	$(AM_V_GEN)printf '%s\n' '#!/bin/sh' \
	  '# Generated from tests/filter.mk: $(<F) against the filter form.' \
	  'RAMBACK_FORM=filter exec /bin/bash "$(abs_srcdir)/$(<F)" "$$@"' \
	  >$@-t && mv $@-t $@

# 2. Tests of the filter form only: capabilities that follow the
#    plugin, and real plugins below the filter.
filter_tests = \
	test-filter-caps.sh \
	test-filter-memory.sh \
	test-filter-ssh.sh \
	test-filter-resume.sh \
	$(NULL)
TESTS += $(filter_tests)
EXTRA_DIST += $(filter_tests) \
	perconn-disk.sh \
	$(NULL)
