#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# control=PATH never removes what is not ours to remove.  At start, only
# a stale control socket (a stream socket of our uid that nobody listens
# on: connect fails with ECONNREFUSED) is replaced; nbdkit refuses to
# start, with an error naming the path, when PATH is a regular file, a
# directory, a symbolic link (even to a stale socket of ours), a socket
# something listens on (also one whose backlog is full: no hang), a
# datagram socket, or another uid's socket (stale or live).  Whatever
# was there is left as it was.  At stop, the socket is removed only if
# it is still the one we created: one put there in its place survives.

source "$top_builddir/tests/functions.sh"
set -x

# mksock KIND PATH: make a Unix socket at PATH.  stale: bound, never
# listening; dgram: a datagram socket; live: listening and accepting;
# full: listening with its backlog filled, never accepting.  With bg_sock
# the socket stays bound (in the background) until the test ends;
# PATH.ready says when it is there.
cat > "$TMP/mksock.py" <<'EOP'
import os, signal, socket, sys, time
kind, path = sys.argv[1], sys.argv[2]
s = socket.socket (socket.AF_UNIX,
                   socket.SOCK_DGRAM if kind == "dgram" else socket.SOCK_STREAM)
s.bind (path)
if kind == "stale":
    os._exit (0)            # the socket file stays; nobody listens
if kind == "dgram":
    open (path + ".ready", "w").close ()
    signal.pause ()
if kind == "live":
    s.listen (8)
    open (path + ".ready", "w").close ()
    while True:
        c, _ = s.accept ()
        c.close ()
s.listen (0)
held = []
while True:                 # fill the backlog until a connect would block
    c = socket.socket (socket.AF_UNIX, socket.SOCK_STREAM)
    c.setblocking (False)
    try:
        c.connect (path)
    except BlockingIOError:
        break
    held.append (c)
open (path + ".ready", "w").close ()
signal.pause ()
EOP
mksock () { /usr/bin/python3 "$TMP/mksock.py" "$@"; }

# bg_sock KIND PATH: mksock in the background, until the test ends.
bg_sock () {
    /usr/bin/python3 "$TMP/mksock.py" "$@" &
    cleanup_fn _kill_if_running $!
    local i
    for (( i=0; i<100; i++ )); do [ -e "$2.ready" ] && return 0; sleep 0.1; done
    fail "mksock $*: not ready"
}

# ident PATH: what is at PATH (type, inode, owner), without following links.
ident () { stat -c '%F %i %u' -- "$1"; }

# refused DESCRIPTION ERE PATH [RUNNER...]: nbdkit with control=PATH must
# exit non-zero before serving, say something matching ERE that names
# PATH, and leave PATH as it was.  RUNNER (e.g. setpriv ...) runs nbdkit.
sockdir=$TMP
refused () {
    local desc=$1 re=$2 path=$3 before pid rc=0 i state=hung
    shift 3
    before=$(ident "$path")
    rm -f "$sockdir/x.sock"
    "$@" "${nbdkit_env[@]}" "$NBDKIT" -f -U "$sockdir/x.sock" \
        "$PLUGIN" back="$TMP/back.img" control="$path" \
        >"$TMP/x.out" 2>&1 &
    pid=$!
    for (( i=0; i<300; i++ )); do
        if ! kill -0 $pid 2>/dev/null; then state=exited; break; fi
        if [ -S "$sockdir/x.sock" ]; then state=serving; break; fi
        # Sanitizer builds: nbdkit can hang in exit(3) after printing its
        # error (functions.sh.in); a refusal that said so counts.
        if [ -n "$SANITIZER_PRELOAD" ] && (( i >= 50 )) &&
               grep -Eq -- "$re" "$TMP/x.out"; then
            state=refused-hung; break
        fi
        sleep 0.1
    done
    [ "$state" = exited ] || kill -9 $pid 2>/dev/null
    wait $pid || rc=$?
    cat "$TMP/x.out"
    case $state in
        serving) fail "$desc: nbdkit started (control=$path)" ;;
        hung) fail "$desc: nbdkit neither served nor exited in 30 s" ;;
        exited) [ "$rc" -ne 0 ] || fail "$desc: nbdkit exited 0" ;;
    esac
    grep -Eq -- "$re" "$TMP/x.out" || fail "$desc: no error matching /$re/"
    grep -Fq -- "control=$path" "$TMP/x.out" ||
        fail "$desc: the error does not name control=$path"
    [ "$(ident "$path" 2>/dev/null)" = "$before" ] ||
        fail "$desc: $path was changed or removed (was: $before)"
}

truncate -s 1M "$TMP/back.img"

t_file () {
    echo data > "$TMP/file.ctl"
    refused "a regular file" "not a socket" "$TMP/file.ctl"
    [ "$(cat "$TMP/file.ctl")" = data ] || fail "the file's content changed"
}
t_dir () {
    mkdir "$TMP/dir.ctl"
    refused "a directory" "is a directory" "$TMP/dir.ctl"
}
t_symlink () {
    mksock stale "$TMP/target.ctl"
    ln -s "$TMP/target.ctl" "$TMP/link.ctl"
    local target
    target=$(ident "$TMP/target.ctl")
    refused "a symlink to a stale socket" "symbolic link" "$TMP/link.ctl"
    [ "$(ident "$TMP/target.ctl")" = "$target" ] || fail "the link's target changed"
    ln -s "$TMP/nowhere" "$TMP/dangling.ctl"
    refused "a dangling symlink" "symbolic link" "$TMP/dangling.ctl"
}
t_live () {
    bg_sock live "$TMP/live.ctl"
    refused "a live socket" "in use" "$TMP/live.ctl"
}
t_full () {
    bg_sock full "$TMP/full.ctl"
    refused "a live socket with a full backlog" "in use" "$TMP/full.ctl"
}
t_dgram () {
    # (Bound by a live process: once that exits, nothing tells the file
    # of a datagram socket from a stale stream socket's.)
    bg_sock dgram "$TMP/dgram.ctl"
    refused "a datagram socket" "datagram" "$TMP/dgram.ctl"
}
t_other_uid () {
    if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null; then
        echo "not root or no setpriv: the other-uid cases are skipped"
        return 0
    fi
    # A directory everyone may write to (no sticky bit), so only our
    # check stands between nbdkit and removing the socket.
    local d
    d=$(mktemp -d /var/tmp/ramback-ctl-other.XXXXXX)
    cleanup_fn rm -rf "$d"
    chmod 777 "$d"
    # Another uid's stale socket, with nbdkit running as root.
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        /usr/bin/python3 -c '
import socket, sys
socket.socket (socket.AF_UNIX).bind (sys.argv[1])' "$d/nobody.ctl"
    [ "$(stat -c %u "$d/nobody.ctl")" = 65534 ] || fail "not nobody's socket"
    refused "another uid's stale socket" "uid 65534" "$d/nobody.ctl"
    # Our (root's) live socket, 0600, with nbdkit running as nobody:
    # connect fails with EACCES, which is not "stale".
    bg_sock live "$d/root.ctl"
    chmod 600 "$d/root.ctl"
    mkdir -m 755 "$d/bin"
    cp "$PLUGIN" "$d/bin/"
    local plugin_save=$PLUGIN
    PLUGIN="$d/bin/$(basename "$PLUGIN")"
    sockdir=$d
    chmod 711 "$TMP"
    chmod 666 "$TMP/back.img"
    refused "another uid's live socket (EACCES)" "uid 0" "$d/root.ctl" \
        setpriv --reuid=65534 --regid=65534 --clear-groups
    chmod 700 "$TMP"
    PLUGIN=$plugin_save
    sockdir=$TMP
    # It still answers.
    /usr/bin/python3 -c '
import socket, sys
socket.socket (socket.AF_UNIX).connect (sys.argv[1])' "$d/root.ctl" ||
        fail "the live socket no longer answers"
}
t_stale () {
    # A stale socket of ours is replaced, and removed at stop.  (Not
    # start_rb: that chooses the control path and clears it first.)
    local job pid i
    mksock stale "$TMP/stale.ctl"
    rm -f "$TMP/st.sock" "$TMP/st.pid"
    run_nbdkit -f -U "$TMP/st.sock" -P "$TMP/st.pid" "$PLUGIN" \
        back="$TMP/back.img" control="$TMP/stale.ctl" >"$TMP/st.log" 2>&1 &
    job=$!
    for (( i=0; i<300; i++ )); do
        [ -S "$TMP/st.sock" ] && [ -s "$TMP/st.pid" ] && break
        kill -0 $job 2>/dev/null || { cat "$TMP/st.log"; fail "nbdkit exited"; }
        sleep 0.1
    done
    pid=$(cat "$TMP/st.pid")
    cleanup_fn _kill_if_running "$pid"
    eval "_log_of_$pid=\$TMP/st.log"       # for stop_nbdkit
    ctl "$TMP/stale.ctl" status >/dev/null || fail "not serving on the replaced socket"
    stop_nbdkit "$pid" || fail "nbdkit did not stop"
    wait $job || true
    [ ! -e "$TMP/stale.ctl" ] || fail "our socket was not removed at stop"
}
t_stop () {
    # At stop, a socket put in place of ours is not removed.
    start_rb sp back="$TMP/back.img"
    ctl "$sp_ctl" status >/dev/null
    mv "$sp_ctl" "$TMP/moved.ctl"
    mksock stale "$sp_ctl"
    local other
    other=$(ident "$sp_ctl")
    stop_rb sp
    [ "$(ident "$sp_ctl" 2>/dev/null)" = "$other" ] ||
        fail "the socket put in place of ours was removed at stop"
}

# CASES=... runs only some.
for t in ${CASES:-t_file t_dir t_symlink t_live t_full t_dgram t_other_uid t_stale t_stop}; do
    echo "=== $t"
    $t
done
