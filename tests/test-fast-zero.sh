#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A fast zero fails with ENOTSUP when it would be slow: in writethrough
# mode (and FUA with fsync=wait) the zero must reach the backing store
# before it completes, and a store without zero support would get
# written zeroes.  In writeback mode, or over a store that zeroes
# cheaply, it succeeds and reads back as zeroes.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

size=$(( 8 * 1024 * 1024 ))
start_remote r --filter=nozero memory "$size" zeromode=none

fast_zero () {      # fast_zero URI OFFSET FUA -> prints ok or the errno name
    /usr/bin/python3 - "$@" <<'EOP'
import errno, sys, nbd
uri, off, fua = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "fua"
h = nbd.NBD(); h.connect_uri(uri)
assert h.can_fast_zero(), "fast zero not advertised"
h.pwrite(b"\xaa" * 65536, off)
flags = nbd.CMD_FLAG_FAST_ZERO | (nbd.CMD_FLAG_FUA if fua else 0)
try:
    h.zero(65536, off, flags)
except nbd.Error as e:
    print(errno.errorcode.get(e.errno, e.errno))
    assert h.pread(65536, off) == b"\xaa" * 65536, "a refused zero changed data"
    sys.exit(0)
assert h.pread(65536, off) == bytes(65536), "zeroed range does not read zeroes"
print("ok")
EOP
}

start_rb rb back="$r_uri" fsync=wait
ctl "$rb_ctl" wait-populated 60000
[ "$(fast_zero "$rb_uri" 0 nofua)" = ok ] ||
    fail "a fast zero in writeback mode was refused"
[ "$(fast_zero "$rb_uri" 131072 fua)" = ENOTSUP ] ||
    fail "a FUA fast zero with fsync=wait over a store without zero was not refused"
ctl "$rb_ctl" mode writethrough
[ "$(fast_zero "$rb_uri" 262144 nofua)" = ENOTSUP ] ||
    fail "a fast zero in writethrough mode over a store without zero was not refused"
stop_rb rb

# A file store zeroes cheaply (punches a hole): fast zero works in
# writethrough mode too.
start_rb rb2 back="$TMP/back.img" size="$size" mode=writethrough
[ "$(fast_zero "$rb2_uri" 0 nofua)" = ok ] ||
    fail "a fast zero over a file store was refused"
stop_rb rb2

# The filter form over a plugin that zeroes natively but says it cannot
# zero fast (nozero zeromode=plugin fastzeromode=none): the filter
# follows the plugin's own fast-zero answer, so a fast zero that must
# reach it is refused.
RAMBACK_FORM=filter
RB_PLUGIN=(--filter=nozero memory "$size" zeromode=plugin fastzeromode=none)
start_rb rb3 mode=writethrough
[ "$(fast_zero "$rb3_uri" 0 nofua)" = ENOTSUP ] ||
    fail "filter form: a fast zero in writethrough mode over a plugin that cannot zero fast was not refused"
stop_rb rb3
RB_PLUGIN=()
RAMBACK_FORM=plugin
echo "ok: fast zero follows the backing store"
