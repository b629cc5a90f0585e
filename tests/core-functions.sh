# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers of the core plugin's tests, sourced after functions.sh:
#
# (start_rb, stop_rb are in functions.sh; fail, ctl, serve_bg in harness.sh)
#   py ARGS...             /usr/bin/python3 with tests/model.py importable
#   sha FILE               SHA-256 of FILE
#   start_backing NAME ARGS  a plain nbdkit to be an NBD backing store
#   check_device URI FILE WHAT  the NBD device at URI must read as FILE
#                          (WHAT names the check in a failure)
#   random_file FILE BYTES [SEED]  FILE of BYTES seeded random bytes (SEED
#                          a number, or by default FILE's name)
#   mount_tmpfs DIR SIZE   a tmpfs of SIZE on the new directory DIR,
#                          unmounted at exit; skip (77) if refused (call
#                          private_mount_ns first)

export PYTHONPATH="$top_srcdir/tests${PYTHONPATH:+:$PYTHONPATH}"

py () { /usr/bin/python3 "$@"; }

sha () { sha256sum "$1" | cut -d' ' -f1; }

check_device () {
    py - "$@" <<'EOF'
import sys
import model as M
uri, path, what = sys.argv[1:]
m = M.Model.from_file (path)
h = M.connect (uri)
m.check_nbd (h, what)
h.shutdown ()
EOF
}

random_file () {
    py -c '
import random, sys
s = sys.argv[3]
open (sys.argv[1], "wb").write (
    random.Random (int (s) if s.isdigit () else s).randbytes (int (sys.argv[2])))' \
        "$1" "$2" "${3:-$1}"
}

mount_tmpfs () {
    mkdir "$1"
    if ! mount -t tmpfs -o size="$2" tmpfs "$1"; then
        echo "$0: SKIP: cannot mount a tmpfs"
        exit 77
    fi
    cleanup_fn umount -l "$1"
}

# ram_file_kept FILE [WHAT]: a stopped ramback left its ram= FILE for a
# resume; then FILE is removed (it fills the small tmpfs it is on).
ram_file_kept () {
    [ -e "$1" ] || fail "${2:+$2: }ram= file not kept for a resume"
    rm -f "$1"
}

# start_backing NAME NBDKIT-ARGS...: a plain nbdkit (no ramback) on a
# Unix socket in $TMP, to serve as ramback's NBD backing store.  Sets
# NAME_uri, NAME_pid, NAME_log.  Stop it with stop_nbdkit "$NAME_pid".
start_backing () {
    local name=$1; shift
    local sock="$TMP/$name.bsock" pidf="$TMP/$name.bpid" log="$TMP/$name.blog"
    : >"$log"
    serve_bg "$sock" "$pidf" "$log" nbdkit -f -U "$sock" -P "$pidf" "$@" ||
        fail "backing nbdkit $name did not start"
    eval "${name}_pid=\$SERVE_PID ${name}_log=\$log"
    eval "${name}_uri=nbd+unix:///?socket=\$sock"
    cleanup_fn kill_if_running "$SERVE_PID"
}

# crash_ramdir: where the crash tests keep ram= (a tmpfs, so that its
# pages survive the kill -9 of nbdkit as a file): /dev/shm, else a small
# tmpfs of our own.  Sets ramdir; exits 77 (skip) if there is neither.
crash_ramdir () {
    ramdir=/dev/shm
    [ "$(stat -f -c %T "$ramdir" 2>/dev/null)" = tmpfs ] && return 0
    ramdir="$TMP/shm"
    mkdir "$ramdir"
    mount -t tmpfs -o size=64m tmpfs "$ramdir" 2>/dev/null ||
        { echo "$0: SKIP: no tmpfs for ram= (/dev/shm is not one, and mount failed)"; exit 77; }
    cleanup_fn umount "$ramdir"
}

# crash_resume CHUNK [VAR=VALUE...]: one run of crash-resume.py (kill -9
# cycles, restarts on the same ram=) with chunk size CHUNK, for
# CRASH_SECONDS (default 40); VAR=VALUE add to its environment.
crash_resume () {
    local chunk=$1; shift
    env PLUGIN="$PLUGIN" NBDKIT="$NBDKIT" NBDKIT_PRELOAD="$SANITIZER_PRELOAD" \
        TMP="$TMP" RAMDIR="$ramdir" CHUNK="$chunk" \
        SECONDS_BUDGET="${CRASH_SECONDS:-40}" "$@" \
        /usr/bin/python3 "$top_srcdir/tests/crash-resume.py"
}
