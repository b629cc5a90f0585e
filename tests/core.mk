# SPDX-License-Identifier: GPL-2.0-or-later
# tests of the core plugin; the two longest first, so that make -j
# starts them first
core_tests = \
	test-crash-resume.sh \
	test-crash-resume-nbd.sh \
	test-model.sh \
	test-populate.sh \
	test-mode-toggle.sh \
	test-fsync-wait.sh \
	test-dirty-max.sh \
	test-bad-input.sh \
	test-enospc.sh \
	test-fio.sh \
	test-sigterm-drain.sh \
	test-error-backing.sh \
	test-acked-durable.sh \
	test-zero-punch.sh \
	test-extents.sh \
	test-ram-file.sh \
	test-ram-tmpfs-full.sh \
	test-ram-hugetlbfs.sh \
	test-lock.sh \
	test-resume-mismatch.sh \
	test-resume-format3.sh \
	test-ram-size-resume.sh \
	$(NULL)
TESTS += $(core_tests)
EXTRA_DIST += $(core_tests) \
	core-functions.sh \
	model.py \
	crash-resume.py \
	volatile-disk.sh \
	sh-disk.sh \
	mutate.sh \
	mutations.txt \
	$(NULL)
