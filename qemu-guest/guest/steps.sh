# SPDX-License-Identifier: GPL-2.0-or-later
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

# powercut: part a untarred and synced (it must survive), then part b
# untarred until the host pulls the plug, with a sync every 0.3 s so
# flushes and journal commits are in flight when it does.  Progress goes
# out every 100 files (untar-b-files-N) for the host to time the cut.  If
# part b completes first the guest says so and waits: the host reports
# that the cut came too late.
step_powercut () {
    attach
    make_fs
    mount_fs
    mark untar-start
    untar_part a
    sync
    mark synced-a
    ( while :; do sync; sleep 0.3; done ) &
    mark untar-b-start
    { tar -xvf "$(disk_of b)" -C "$MNT" || echo "TAR-FAILED"; } |
        awk '/^TAR-FAILED$/ { print "RAMBACK-RESULT: FAIL untar of part b"; exit }
             ++n % 100 == 0 { print "RAMBACK-MARK: untar-b-files-" n " 0"; fflush() }'
    mark untar-b-done
    sleep 600
    fail "the host never cut the power"
}

# recover: after a power cut, replaying the journal must be all that is
# needed (e2fsck -E journal_only, then -fn finds nothing), and the part
# synced before the cut must be intact.
step_recover () {
    local rc=0
    attach
    e2fsck -y -E journal_only "$DEV" >/tmp/replay.log 2>&1 || rc=$?
    cat /tmp/replay.log
    # 0: nothing to do, 1: the journal was replayed.  More is damage.
    [ $rc -le 1 ] || fail "journal replay: e2fsck exit $rc"
    mark journal-replayed
    fsck_clean
    mount_fs ro
    verify_subset a
    echo "files present after the cut: $(find "$MNT" -type f | wc -l)"
    umount_fs
    detach
}

# bench: untar + sync of every part on a fresh filesystem, timed; then
# checked like fresh, outside the timed window.
step_bench () { step_fresh; }
