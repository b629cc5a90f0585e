# SPDX-License-Identifier: GPL-2.0-or-later
# The filter form: nbdkit --filter=ramback PLUGIN ...
#
# 1. Core tests run again against the filter form: the same scripts and
#    assertions, with RAMBACK_FORM=filter (functions.sh.in's rb_cmdline
#    turns back=FILE into "file FILE" and back=NBD-URI into "nbd uri=").
#    Each test-X.filter is a generated one-line stub that runs
#    test-X.sh so; its log is test-X.log (test-X.sh.log is the plugin
#    form's).  The tests whose assertions are about the store: what
#    the filter changes is the store (the plugin below), the rest is
#    the same core and glue (but for test-lifecycle-log: the glue's log
#    lines and sd_notify, in both forms).  test-mode-toggle and test-fsync-wait run
#    their store half only in the filter form; test-ups-window,
#    test-fio and test-enospc run in the plugin form only (the core's
#    rate, a client's random I/O, and a store error that
#    test-error-backing covers with the error filter), and the nbd
#    plugin is tested over qemu-nbd (test-remote-nbd-server adds
#    nothing the filter form would do differently).
filter_form_tests = \
	test-model.filter \
	test-populate.filter \
	test-mode-toggle.filter \
	test-fsync-wait.filter \
	test-dirty-max.filter \
	test-bad-input.filter \
	test-error-backing.filter \
	test-sigterm-drain.filter \
	test-lifecycle-log.filter \
	test-remote-qemu-nbd.filter \
	test-extents.filter \
	$(NULL)
TESTS += $(filter_form_tests)
CLEANFILES += $(filter_form_tests)
TEST_EXTENSIONS = .test .filter
FILTER_LOG_COMPILER = /bin/sh
.PRECIOUS: $(filter_form_tests)

.sh.filter:
	$(AM_V_GEN)printf '%s\n' '#!/bin/sh' \
	  '# Generated from tests/filter.mk: $(<F) against the filter form.' \
	  'RAMBACK_FORM=filter RAMBACK_TEST_NAME=$(@F) exec /bin/bash "$(abs_srcdir)/$(<F)" "$$@"' \
	  >$@-t && mv $@-t $@

# 2. Tests of the filter form only: capabilities that follow the
#    plugin, and real plugins below the filter.
filter_tests = \
	test-filter-caps.sh \
	test-filter-memory.sh \
	test-filter-ssh.sh \
	test-filter-resume.sh \
	test-filter-claim.sh \
	test-filter-stop.sh \
	test-filter-stall.sh \
	$(NULL)
TESTS += $(filter_tests)
EXTRA_DIST += $(filter_tests) \
	perconn-disk.sh \
	$(NULL)
