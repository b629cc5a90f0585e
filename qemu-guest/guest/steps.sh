# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=dash disable=SC2046
# What the guest does in one boot, selected by ramback.step=NAME.  The
# host chains boots into scenarios (see ../scenarios.sh).

# probe: the boot itself is the test (KVM detection, smoke test).
step_probe () { :; }

# fresh: a new filesystem, the whole source untarred and synced, then
# checked from the device: e2fsck after unmount, checksums after remount.
step_fresh () {
    local t0 p
    attach
    make_fs
    mount_fs
    mark untar-start
    t0=$(now)
    for p in $(parts); do untar_part "$p"; done
    sync
    timing untar+sync "$(elapsed "$t0")"
    mark synced
    umount_fs
    fsck_clean
    mount_fs ro
    verify_sums $(parts)
    umount_fs
    detach
}

# verify: an existing filesystem must be clean and hold every file of
# every part with the right contents.
step_verify () {
    attach
    fsck_clean
    mount_fs ro
    verify_sums $(parts)
    umount_fs
    detach
}

# powercut: part a untarred and synced, then part b untarred until the
# host pulls the plug.  During part b a loop syncs every 0.3 s and says
# how far the untar had got when each sync began: "bsync-I N" means the
# first N entries of part b's tar had been extracted before sync I, which
# has completed, so the recover step can demand them.  (tar -v names an
# entry before extracting it and its stdout is block buffered, so all
# but the last name awk has seen are complete: recover uses N - 1.)
# If part b completes first the guest says so and waits: the host
# reports that the cut came too late.
step_powercut () {
    attach
    make_fs
    mount_fs
    mark untar-start
    untar_part a
    sync
    mark synced-a
    : >/tmp/blist
    (
        i=0
        while :; do
            n=$(wc -l </tmp/blist)
            sync
            i=$((i + 1))
            echo "RAMBACK-MARK: bsync-$i $(now) $n"
            sleep 0.3
        done
    ) &
    mark untar-b-start
    { tar -xvf "$(disk_of b)" -C "$MNT" || echo "TAR-FAILED"; } |
        awk '/^TAR-FAILED$/ { print "RAMBACK-RESULT: FAIL untar of part b"; exit }
             { print > "/tmp/blist"; fflush("/tmp/blist") }'
    mark untar-b-done
    sleep 600
    fail "the host never cut the power"
}

# recover: after a power cut, replaying the journal must be all that is
# needed (e2fsck -E journal_only, then -fn finds nothing), part a must
# be intact, and so must the first ramback.bsynced - 1 entries of part b
# (see powercut).
step_recover () {
    local rc=0 n=$(( ${RB_BSYNCED:-1} - 1 ))
    attach
    e2fsck -y -E journal_only "$DEV" >/tmp/replay.log 2>&1 || rc=$?
    cat /tmp/replay.log
    # 0: nothing to do, 1: the journal was replayed.  More is damage.
    [ $rc -le 1 ] || fail "journal replay: e2fsck exit $rc"
    mark journal-replayed
    fsck_clean
    mount_fs ro
    verify_subset a
    if [ $n -gt 0 ]; then
        # The manifest lines of the regular files among those entries.
        tar -tf "$(disk_of b)" | head -n "$n" >/tmp/bnames
        awk 'NR == FNR { want["./" $0] = 1; next } ($2 in want)' \
            /tmp/bnames /src/b.sha256 >/src/bsynced.sha256
        echo "part b: $n entries synced before the cut, $(wc -l </src/bsynced.sha256) files"
        [ -s /src/bsynced.sha256 ] && verify_subset bsynced
    fi
    echo "files present after the cut: $(find "$MNT" -type f | wc -l)"
    umount_fs
    detach
}

# bench: untar + sync of every part on a fresh filesystem, timed, and
# nothing else (the benchmark checks the backing store on the host).
step_bench () {
    local t0 t1 p
    attach
    make_fs
    mount_fs
    mark untar-start
    t0=$(now)
    for p in $(parts); do untar_part "$p"; done
    t1=$(now)
    sync
    timing untar+sync "$(elapsed "$t0")"
    timing sync "$(elapsed "$t1")"
    mark synced
    umount_fs
    detach
}
