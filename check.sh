#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Set up and run every test, as CI does:
#
#   ./check.sh
#
# 1. installs the dependencies (Debian 12 packages),
# 2. builds and runs `make check` (unit tests of lib/, the plugin under
#    real nbdkit, the ramback command, the NUT end-to-end test),
# 3. the same suite built with AddressSanitizer + UBSan,
# 4. the core's concurrency tests built with ThreadSanitizer,
# 5. the Ceph RBD backing store against a real single-node cluster
#    (tests/rbd/: the model and crash-resume tests on an image, an OSD
#    killed during write back, one writer per image, the journal's point
#    in time with a local journal),
# 6. the QEMU guest scenarios: Debian's kernel, its nbd-client and ext4
#    on ramback (untar, restart during populate, mode toggling, power cut),
# 7. the device-mapper target built against Debian's kernel headers and
#    tested inside the QEMU guest (never on this machine's kernel),
# 8. make distcheck: the release tarball builds and passes make check
#    (unit tests and a subset of the shell tests: scripts/check-dist.sh)
#    from a read-only source tree, installs and uninstalls cleanly,
# 9. the Debian packages: built, linted, installed, their installed
#    files smoke-tested (dkms builds the dm target, never loads it),
#    purged (scripts/check-packages.sh),
# 10. those packages in a booted Debian 12 guest, systemd as PID 1: the
#    README's Install commands, a disk mounted from /etc/fstab at boot,
#    reboot, poweroff during writes and a stop of the ramback unit, each
#    unmounting, disconnecting and draining in that order
#    (qemu-guest/boot-scenario.sh),
# 11. the README's quick start as printed (./run.sh size=2G, ./run.sh) in
#    a fresh Debian 12 chroot (scripts/check-quickstart.sh).
# Stage 2 runs beside 5, 4 beside 6 and 7, and 8 beside 11.
# Set RAMBACK_CHECK_SKIP="asan tsan rbd guest dm distcheck packages boot
# quickstart" to leave stages out, RAMBACK_CHECK_JOBS (default 4) for
# the number of tests run at a time.
set -uo pipefail
cd "$(dirname "$0")"
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
skip=" ${RAMBACK_CHECK_SKIP:-} "
failed=()

scripts/deps.sh || exit 1

stage () {
    local name=$1; shift
    case "$skip" in *" $name "*) echo "== $name: skipped"; return 0;; esac
    echo "== $name: $*"
    local t0=$SECONDS
    if "$@"; then
        echo "== $name: ok ($((SECONDS - t0)) s)"
    else
        echo "== $name: FAILED ($((SECONDS - t0)) s)"
        failed+=("$name")
    fi
}

# Show the logs of failed tests, so a CI log is enough to debug.
show_failures () {
    local f
    for f in $(grep -l ':test-result: \(FAIL\|ERROR\)' "$1"/*/*.trs "$1"/*.trs 2>/dev/null); do
        echo "---- ${f%.trs}.log"
        tail -80 "${f%.trs}.log"
    done
}

# together CMD1... -- CMD2...: run both at once, each one's output kept
# apart and shown after both ended, first CMD1's; a failed stage counts.
together () {
    local a=() out
    while [ "$1" != -- ]; do a+=("$1"); shift; done
    shift
    out=$(mktemp -d "${TMPDIR:-/tmp}/ramback-check.XXXXXX")
    ( failed=(); "${a[@]}"; printf '%s\n' "${failed[@]}" > "$out/1.failed" ) \
        > "$out/1.out" 2>&1 &
    ( failed=(); "$@"; printf '%s\n' "${failed[@]}" > "$out/2.failed" ) \
        > "$out/2.out" 2>&1
    wait
    cat "$out/1.out" "$out/2.out"
    failed+=($(cat "$out/1.failed" "$out/2.failed" 2>/dev/null))
    rm -rf "$out"
}

check_in () {
    local dir=$1; shift
    make -k -C "$dir" "$@" || { show_failures "$dir"; return 1; }
}

stage build scripts/build.sh _build --with-rbd
# The suites run four tests at a time: most of a test's time is spent
# waiting on servers it started (kill -9 cycles, write back under a rate
# cap, remote reconnects), not on the CPU (three at a time kept the two
# cores of a CI machine 45% busy), and every test waits for states,
# never for a time.  RAMBACK_CHECK_JOBS changes it.  check-parallel
# runs every directory's tests in that one pool (make check would run
# the directories one after the other).
jobs=${RAMBACK_CHECK_JOBS:-4}
# The plain suite beside the Ceph RBD stage, whose time goes mostly to
# waiting on the cluster (lock expiry, an OSD killed and restarted): one
# Ceph cluster (monitor, manager, one OSD) for the RBD store's tests,
# run one at a time, since one of them kills the OSD.
together stage check check_in _build -j"$jobs" check-parallel -- \
    stage rbd check_in _build/tests/rbd check-rbd
stage build-asan scripts/build.sh _build-asan --enable-sanitizers=address,undefined
# The ASan suite alone: beside the plain suite it took longer than one
# after the other (993 s and 1381 s side by side against 553 s and 783
# s), so it is not only waiting; beside the TSan unit tests the two
# took 945 s and 942 s.
stage asan check_in _build-asan -j"$jobs" check-parallel
# The QEMU guests one after the other (side by side they took longer),
# beside the TSan build and unit tests: TCG runs a guest mostly on one
# thread, so the two share the cores better than ASan and TSan did.
run_guests () {
    stage guest check_in _build check-guest
    stage dm check_in _build check-dm
}
run_tsan () {
    stage build-tsan scripts/build.sh _build-tsan --enable-sanitizers=thread
    stage tsan check_in _build-tsan/lib -j"$jobs" check
}
together run_guests -- run_tsan
# Then the release tarball beside the quick start's chroot.
together stage distcheck scripts/check-dist.sh -- \
    stage quickstart scripts/check-quickstart.sh
stage packages scripts/check-packages.sh
stage boot env top_builddir="$PWD/_build" qemu-guest/boot-scenario.sh \
    "${RAMBACK_DEB_DIR:-_build-deb}"

# One closing line for the whole run, counted from every test result.
pass=$(cat _build*/*.trs _build*/*/*.trs 2>/dev/null | grep -c '^:test-result: PASS')
fail=$(cat _build*/*.trs _build*/*/*.trs 2>/dev/null | grep -c '^:test-result: \(FAIL\|ERROR\)')
skipn=$(cat _build*/*.trs _build*/*/*.trs 2>/dev/null | grep -c '^:test-result: SKIP')
[ ${#failed[@]} -eq 0 ] || echo "failed stages: ${failed[*]}"
echo "$pass passed, $fail failed, $skipn skipped"
[ ${#failed[@]} -eq 0 ] && [ "$fail" -eq 0 ]
