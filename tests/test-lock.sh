#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# One writer per backing store.
#
# A second ramback on a backing file that a running one uses (by the same
# path, a symlink or a hard link) is refused, naming the first one's pid,
# and the first keeps serving with its data intact.  The lock survives
# nbdkit's fork into the background (no -f): the message then names the
# background process.  Another program's lock (a POSIX lock, as lockf(3)
# takes; an open file description lock, as qemu takes) also refuses the
# start, naming that program's pid.  A block device (a loop device)
# used by a running ramback, or mounted, is refused too (O_EXCL), the
# message naming the pid or the mount point, and so is ram= naming the
# backing device itself.  Runs in a private mount
# namespace; the block device cases are skipped without losetup.

source "$top_srcdir/tests/harness.sh"
private_mount_ns --optional "$@"

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

back="$TMP/back.img"
random_file "$back" $((8 << 20)) 11
ln -s "$back" "$TMP/symlink.img"
ln "$back" "$TMP/hardlink.img"
inuse='in use'

# write_and_check URI BACK SEED MODEL: random writes through NBD,
# checked against a model that starts as BACK's contents; the model is
# saved in the file MODEL for the check after the clean stop.
write_and_check () {
    py - "$1" "$2" "$3" "$4" <<'EOF'
import random, sys
import model as M
uri, back, seed, modelf = sys.argv[1:]
seed = int (seed)
rng = random.Random (seed)
m = M.Model.from_file (back)
h = M.connect (uri)
for _ in range (50):
    off, n = M.rand_extent (rng, m.size, 65536, 1 << 20)
    data = rng.randbytes (n)
    h.pwrite (data, off)
    m.write (off, data)
m.check_nbd (h, "device with a second ramback refused")
h.shutdown ()
m.save (modelf)
EOF
}

start_rb a -- back="$back"
write_and_check "$a_uri" "$back" 1 "$TMP/model.img"
# Everything written back first: protect checks the file does not change.
ctl "$a_ctl" sync 120000 >/dev/null || fail "sync before the refused starts"
protect "$back"
expect_fail "same back= twice"       "$inuse.*pid $a_pid" back="$back"
expect_fail "same back= via symlink" "$inuse.*pid $a_pid" back="$TMP/symlink.img"
expect_fail "same back= via hard link" "$inuse.*pid $a_pid" back="$TMP/hardlink.img"
protect_clear
check_device "$a_uri" "$TMP/model.img" "first ramback after refused starts"
stop_rb_same a "$back" "$TMP/model.img"
echo "ok: the first ramback kept serving; backing == model"

# In the background (no -f): nbdkit forks after the plugin opened the
# store; the lock must stay with the child.
rm -f "$TMP/bg.sock" "$TMP/bg.pid"
run_nbdkit -v -U "$TMP/bg.sock" -P "$TMP/bg.pid" "$PLUGIN" back="$back" \
    control="$TMP/bg.ctl" \
    >"$TMP/bg.log" 2>&1 || fail "background nbdkit did not start"
for (( i=0; i<600; i++ )); do
    [ -S "$TMP/bg.sock" ] && [ -s "$TMP/bg.pid" ] && break
    sleep 0.1
done
bg_pid=$(cat "$TMP/bg.pid")
eval "_log_of_$bg_pid=\$TMP/bg.log"
cleanup_fn _kill_if_running "$bg_pid"
write_and_check "nbd+unix:///?socket=$TMP/bg.sock" "$back" 2 "$TMP/model.img"
ctl "$TMP/bg.ctl" sync 120000 >/dev/null || fail "sync before the refused start"
protect "$back"
expect_fail "back= of a background ramback" "$inuse.*pid $bg_pid" back="$back"
protect_clear
stop_nbdkit "$bg_pid" || fail "background nbdkit did not stop"
for (( i=0; i<1200; i++ )); do
    kill -0 "$bg_pid" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$bg_pid" 2>/dev/null && fail "background nbdkit still running"
grep -q "ramback: clean stop complete" "$TMP/bg.log" ||
    { tail -20 "$TMP/bg.log"; fail "background nbdkit: no clean stop"; }
assert_same "$back" "$TMP/model.img"
echo "ok: lock held across the fork into the background"

# Other programs' locks.  hold_lock KIND: a python process holding a
# lock of that kind on $back until its stdin closes; prints its pid.
protect "$back"
for kind in posix ofd; do
    coproc HOLDER { py -c '
import fcntl, os, struct, sys
fd = os.open (sys.argv[1], os.O_RDWR)
if sys.argv[2] == "posix":
    fcntl.lockf (fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 100)
else:
    # struct flock: short type, short whence, off_t start, len, int pid
    fl = struct.pack ("hhqqi4x", fcntl.F_WRLCK, 0, 100, 1, 0)
    fcntl.fcntl (fd, fcntl.F_OFD_SETLK, fl)
print (os.getpid (), flush=True)
sys.stdin.read ()' "$back" $kind; }
    read -r holder <&"${HOLDER[0]}" || fail "lock holder did not start"
    expect_fail "back= locked by another program ($kind lock)" \
        "$inuse.*pid $holder" back="$back"
    eval "exec ${HOLDER[1]}>&-"
    wait "$HOLDER_PID" || true
done
protect_clear

# Block devices: O_EXCL.
if ! command -v losetup >/dev/null ||
   ! truncate -s 16M "$TMP/disk.img" ||
   ! loop=$(losetup -f --show "$TMP/disk.img" 2>/dev/null); then
    echo "skip: no loop device (losetup failed): block device cases not run"
    echo "$ncases refusals"
    exit 0
fi
cleanup_fn losetup -d "$loop"
start_rb d -- back="$loop"
write_and_check "$d_uri" "$loop" 3 "$TMP/model.img"
expect_fail "same block device twice" "$inuse.*pid $d_pid" back="$loop"
stop_rb d
protect "$loop"
expect_fail "ram= is the backing device" "backing store itself" \
    back="$loop" ram="$loop"
protect_clear
assert_same "$loop" "$TMP/model.img"
if command -v mkfs.ext4 >/dev/null && [ -n "$RAMBACK_TEST_NS" ]; then
    mkfs.ext4 -q -F "$loop"
    mkdir "$TMP/mnt"
    mount "$loop" "$TMP/mnt"
    cleanup_fn umount -l "$TMP/mnt"
    expect_fail "mounted block device" "$inuse.*mounted on $TMP/mnt" back="$loop"
    umount "$TMP/mnt"
else
    echo "skip: no mkfs.ext4 or no private mount namespace: mounted case not run"
fi
echo "$ncases refusals"
