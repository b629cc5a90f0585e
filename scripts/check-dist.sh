#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# scripts/check-dist.sh [DIR]: check the source release.
#
#  1. make distcheck in DIR (default _build, configured by
#     scripts/build.sh): the tarball configures and builds out of tree
#     from a read-only source directory, passes make check (the unit
#     tests and the shell tests in RAMBACK_CHECK_ONLY below), installs under a scratch prefix (the plugin and the unit
#     too: AM_DISTCHECK_CONFIGURE_FLAGS), and make uninstall removes
#     every file it installed;
#  2. every file git tracks is in the tarball (a file missing from
#     EXTRA_DIST or _SOURCES would otherwise only show up when someone
#     builds the release).
set -euo pipefail
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-_build}
cd "$top"

scripts/build.sh "$dir"
cd "$dir"
version=$(sed -n 's/^PACKAGE_VERSION = //p' Makefile)
distdir=ramback-$version

# Show the logs of the tests that failed inside distcheck's build.
show_failures () {
    local f
    for f in $(grep -l ':test-result: \(FAIL\|ERROR\)' \
                 "$distdir"/_build/sub/*/*.trs 2>/dev/null); do
        echo "---- ${f%.trs}.log"
        tail -80 "${f%.trs}.log"
    done
}

# make check inside distcheck: every unit test and fuzz corpus replay,
# and the shell tests that read files from the (read-only) source tree
# or load what the tarball builds (test plugins, docs, the CLI, the
# filter).  The whole suite has already run on these sources in
# check.sh's check stage.  (test-model.sh runs the plugin form only: the
# filter form's run is test-model.filter.)
# The crash test (the file store) runs 20 s per chunk size here, not 40
# (at 10 s a loaded machine may not reach a resume of partial chunks,
# which the test requires).
export CRASH_SECONDS="${CRASH_SECONDS:-20}"
export RAMBACK_CHECK_ONLY="${RAMBACK_CHECK_ONLY-test-model.sh \
    test-bad-input.sh test-crash-resume.sh test-faultdisk.sh \
    test-remote-nbdkit.sh test-ram-file.sh test-ramback-docs.sh \
    test-ramback-commands.sh test-fio.sh test-filter-memory.sh}"

if ! make -j"${RAMBACK_CHECK_JOBS:-3}" distcheck DISTCHECK_CONFIGURE_FLAGS=--enable-werror \
        >distcheck.out 2>&1; then
    tail -60 distcheck.out
    show_failures
    echo "check-dist: make distcheck failed (whole log: $dir/distcheck.out)" >&2
    exit 1
fi
grep -E '^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):' distcheck.out |
    cut -d: -f1 | sort | uniq -c | sed 's/^/check-dist: distcheck tests: /'
grep 'archives ready' distcheck.out || true

if [ -e "$top/.git" ] && command -v git >/dev/null; then
    missing=$(comm -23 \
        <(git -C "$top" ls-files | grep -vxE '\.gitignore|m4/\.gitkeep' | sort) \
        <(tar tzf "$distdir.tar.gz" | sed "s|^$distdir/||" | sort))
    if [ -n "$missing" ]; then
        echo "check-dist: tracked by git but not in $distdir.tar.gz:" >&2
        printf '  %s\n' $missing >&2
        echo "check-dist: add them to EXTRA_DIST (or a _SOURCES list) in" \
             "their directory's Makefile.am" >&2
        exit 1
    fi
    echo "check-dist: every file git tracks is in $distdir.tar.gz"
fi
