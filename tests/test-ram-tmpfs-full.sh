#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ram= on a tmpfs that another process fills up.
#
# A 48 MiB tmpfs, mounted by the test in a private mount namespace,
# holds ram= for a 32 MiB device whose backing file (on disk) is sparse
# but for a little data, so populate touches few pages.  Once ramback
# runs, the rest of the tmpfs is filled from outside until ENOSPC.  Then
# the whole device is written through NBD, part of it zeroed and
# trimmed and written again: the image was reserved at start, so no page
# fault can fail (with a sparse image it raised SIGBUS and the server
# died with every dirty byte).  The data reads back, is synced, the stop
# is clean and the backing file equals the model.
# Also: a device too large for the tmpfs is refused at start with a
# message naming the space, and overcommit=true lets it start; a device
# larger than RAM on a tmpfs mounted larger than RAM is refused.

source "$top_srcdir/tests/harness.sh"
private_mount_ns "$@"

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

mnt="$TMP/mnt"
mount_tmpfs "$mnt" 48M

back="$TMP/back.img"
truncate -s 32M "$back"
py -c '
import random, sys
rng = random.Random (3)
with open (sys.argv[1], "r+b") as f:
    for off in (0, 5 << 20, 17 << 20, (32 << 20) - 4096):
        f.seek (off)
        f.write (rng.randbytes (4096))' "$back"

# Too large for the tmpfs: refused unless overcommit=true.
truncate -s 64M "$TMP/big.img"
protect "$TMP/big.img"
expect_fail "device larger than the ram= tmpfs" \
    "(cannot reserve|larger than).*overcommit=true" back="$TMP/big.img" ram="$mnt/big.ram"
[ ! -e "$mnt/big.ram" ] || fail "a refused start left $mnt/big.ram behind"
protect_clear
# A tmpfs may be mounted larger than the machine: a device larger than
# RAM is refused there as it is in anonymous memory.
ram_kib=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
mkdir "$TMP/vast"
mount -t tmpfs -o size=$((ram_kib * 4))k tmpfs "$TMP/vast"
cleanup_fn umount -l "$TMP/vast"
truncate -s $((ram_kib * 2))k "$TMP/vast.img"
expect_fail "device larger than RAM on a larger tmpfs" \
    "larger than the machine's RAM.*overcommit=true" \
    back="$TMP/vast.img" ram="$TMP/vast/vast.ram"
[ ! -e "$TMP/vast/vast.ram" ] || fail "a refused start left vast.ram behind"
[ "$(stat -c %s.%b "$TMP/vast.img")" = "$((ram_kib * 2048)).0" ] ||
    fail "the refused start changed vast.img: $(stat -c %s.%b "$TMP/vast.img")"
umount "$TMP/vast"
rm -f "$TMP/vast.img"
start_rb oc -- back="$TMP/big.img" ram="$mnt/big.ram" overcommit=true
stop_rb oc
ram_file_kept "$mnt/big.ram" overcommit
echo "ok: overcommit=true started and stopped"

start_rb rb -- back="$back" ram="$mnt/ram.img" chunk=64K
ctl "$rb_ctl" wait-populated 60000 >/dev/null
df -k "$mnt"
# Fill the rest of the tmpfs from outside.
dd if=/dev/zero of="$mnt/filler" bs=64K 2>/dev/null && fail "the tmpfs never filled up"
df -k "$mnt"
avail=$(df -k --output=avail "$mnt" | tail -1)
[ "$avail" -lt 64 ] || fail "tmpfs not full: $avail KiB available"

py - "$rb_uri" "$rb_ctl" "$back" "$TMP/model.img" <<'EOF'
import random, sys
import model as M

uri, ctlpath, back, modelf = sys.argv[1:]
MiB = M.MiB

def body ():
    rng = random.Random (4)
    m = M.Model.from_file (back)
    h = M.connect (uri)
    ctl = M.Control (ctlpath)
    for off in range (0, m.size, MiB):
        data = rng.randbytes (MiB)
        h.pwrite (data, off)
        m.write (off, data)
    M.log ("whole device written with the tmpfs full")
    m.check_nbd (h, "device after writing it all")
    # Zero and trim (holes punched in the image) then write again.
    for off, n in ((3 * MiB, 2 * MiB), (9 * MiB + 4096, 3 * MiB + 512)):
        h.zero (n, off)
        m.zero (off, n)
    h.trim (4 * MiB, 20 * MiB)
    m.zero (20 * MiB, 4 * MiB)
    m.check_nbd (h, "device after zero and trim")
    for off in range (0, m.size, MiB):
        data = rng.randbytes (MiB)
        h.pwrite (data, off)
        m.write (off, data)
    m.check_nbd (h, "device after writing it all again")
    ctl.sync (60000)
    m.check_file (back, "backing file after sync")
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF
stop_rb_same rb "$back" "$TMP/model.img"
ram_file_kept "$mnt/ram.img"
echo "backing == model; the full tmpfs cost nothing"
