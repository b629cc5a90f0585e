#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ram= on hugetlbfs.
#
# A hugetlbfs is mounted in a private mount namespace and the huge page
# pool is raised by what the test needs (and put back afterwards; tests
# on this machine that change the pool take a lock so as not to undo
# each other's changes).  The device is 5 MiB + 12345 bytes: not a
# multiple of the huge page size, nor of 4 KiB.  ramback must size and
# align its file in huge pages, reserve them at start (HugePages_Free
# drops), serve random writes, zeroes and trims (zeroes of parts of a
# huge page must read back as zeroes) that match a model, and give every
# huge page back after a clean stop.  Skipped, saying why, when the pool
# cannot be raised (not root) or hugetlbfs cannot be mounted.

source "$top_srcdir/tests/harness.sh"
private_mount_ns "$@"

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

nr=/proc/sys/vm/nr_hugepages
hp_kib=$(awk '/^Hugepagesize:/ { print $2 }' /proc/meminfo)
if [ -z "$hp_kib" ] || [ ! -w "$nr" ]; then
    echo "$0: SKIP: no huge pages here, or $nr is not writable (not root?)"
    exit 77
fi
free_pages () { awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo; }
set_pool () { echo "$1" > "$nr"; }
hp=$((hp_kib * 1024))

# Serialise with other tests changing the pool.
exec 9>/tmp/ramback-test-hugepages.lock
flock -w 600 9 || fail "could not take the huge page pool lock"

size=$((5 * 1024 * 1024 + 12345))
need=$(( (size + hp - 1) / hp + 1 ))      # the image, and the header page
orig=$(cat "$nr")
free0=$(free_pages)
if [ "$free0" -lt "$need" ]; then
    cleanup_fn set_pool "$orig"
    set_pool $((orig + need - free0)) || true
fi
free0=$(free_pages)
if [ "$free0" -lt "$need" ]; then
    echo "$0: SKIP: only $free0 free huge pages of $((hp_kib / 1024)) MiB, $need needed"
    exit 77
fi

mnt="$TMP/huge"
mkdir "$mnt"
if ! mount -t hugetlbfs -o pagesize=${hp_kib}K none "$mnt"; then
    echo "$0: SKIP: cannot mount hugetlbfs"
    exit 77
fi
cleanup_fn umount -l "$mnt"

back="$TMP/back.img"
py -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (9).randbytes (int (sys.argv[2])))
' "$back" "$size"

start_rb rb -- back="$back" ram="$mnt/ram.img" chunk=64K
ctl "$rb_ctl" wait-populated 60000 >/dev/null
free1=$(free_pages)
echo "huge pages: $free0 free before, $free1 while running ($need needed)"
[ $((free0 - free1)) -eq "$need" ] ||
    fail "ramback holds $((free0 - free1)) huge pages, expected $need"

py - "$rb_uri" "$rb_ctl" "$back" "$TMP/model.img" <<'EOF'
import random, sys
import model as M

uri, ctlpath, back, modelf = sys.argv[1:]

def body ():
    rng = random.Random (M.seed_from_env (10))
    m = M.Model.from_file (back)
    h = M.connect (uri)
    ctl = M.Control (ctlpath)
    m.check_nbd (h, "device after populate")
    # Zeroes inside one huge page, and across a page boundary.
    for off, n in ((65536, 131072), (2 * M.MiB - 65536, 196608)):
        h.zero (n, off)
        m.zero (off, n)
        m.check_nbd (h, "device after zeroing [%d, +%d)" % (off, n))
    counts = M.random_ops (h, m, rng, 400, 65536, maxlen=M.MiB,
                           check_every=100)
    M.log ("ops: %r" % counts)
    ctl.sync (60000)
    m.check_file (back, "backing file after sync")
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF
stop_rb_same rb "$back" "$TMP/model.img"
ram_file_kept "$mnt/ram.img"
[ "$(free_pages)" -eq "$free0" ] ||
    fail "huge pages not given back: $(free_pages) free, $free0 before"
echo "backing == model; every huge page given back"
