# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers of the NBD backing store tests, sourced after
# functions.sh.  The "remote" is a real NBD server started by the test,
# on a Unix socket in $TMP or on 127.0.0.1.
#
#   start_remote NAME NBDKIT-ARGS...  nbdkit in the foreground (background
#                                 job); sets NAME_uri NAME_sock NAME_pid
#                                 NAME_log.  Called again with the same
#                                 NAME it reuses the socket (same URI).
#   start_qemu_nbd NAME FILE [ARGS]   qemu-nbd on a Unix socket, 8 clients
#   start_nbd_server NAME FILE        Debian's nbd-server on 127.0.0.1
#   kill_remote NAME [SIGNAL]     kill (default -9) and wait until it is
#                                 gone; fails on a sanitizer report in
#                                 its log (remote_log_clean NAME)
#   (start_rb, stop_rb are in functions.sh; fail, ctl, status_field in
#   harness.sh)
#   rio ARGS...                   remote-io.py (data generator/checker)
#   wait_status SOCK FIELD VALUE [SECONDS]
#                                 poll "status json" until FIELD == VALUE
#   wait_status_ge SOCK FIELD MIN [SECONDS]   ... until FIELD >= MIN
#
# The fault injecting test server (tests/faultdisk-plugin.c, commands
# documented at its top):
#   start_faultdisk NAME IMG [PARAMS...]
#                                 nbdkit serving IMG with the faultdisk
#                                 plugin, controlled through the
#                                 directory $TMP/NAME.fd; sets what
#                                 start_remote sets, plus NAME_fd
#   fd_cmd NAME COMMAND...        run one command, print its data lines;
#                                 fails on an error reply
#   fd_field NAME KEY             one counter of "status"
#   fd_wait NAME KEY VALUE [SECONDS]  poll "status" until KEY == VALUE

rio () { /usr/bin/python3 "$top_srcdir/tests/remote-io.py" "$@"; }

# Extra environment of the remote nbdkit (start_faultdisk sets it).
_remote_env=(env)


# Gone means gone or a zombie (the container's init may not reap).
_gone () {
    local s
    [ -r "/proc/$1/stat" ] || return 0
    s=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
    [ -z "$s" ] || [ "$s" = Z ] || [ "$s" = X ]
}

_wait_gone () {
    local i
    for (( i=0; i<300; i++ )); do
        _gone "$1" && return 0
        sleep 0.1
    done
    echo "process $1 did not go away" >&2
    return 1
}

start_remote () {
    local name=$1; shift
    local sock="$TMP/$name.rsock" pidf="$TMP/$name.rpid" log="$TMP/$name.rlog"
    serve_bg "$sock" "$pidf" "$log" \
        "${_remote_env[@]}" nbdkit -f -v -U "$sock" -P "$pidf" "$@" || {
        echo "remote nbdkit $name did not start" >&2; return 1; }
    eval "${name}_sock=\$sock ${name}_log=\$log ${name}_pid=\$SERVE_PID"
    eval "${name}_uri=nbd+unix:///?socket=\$sock"
    cleanup_fn kill_if_running "$SERVE_PID"
}

start_qemu_nbd () {
    local name=$1 file=$2; shift 2
    local sock="$TMP/$name.rsock" log="$TMP/$name.rlog"
    # -e 8: several clients at once (qemu-nbd then advertises multi-conn);
    # -t: stay up when ramback disconnects and comes back.
    serve_bg "$sock" "" "$log" \
        qemu-nbd -f raw -t -e 8 -k "$sock" --cache=writeback --discard=unmap \
        "$@" "$file" || { kill_if_running "$SERVE_JOB"; return 1; }
    cleanup_fn kill_if_running "$SERVE_PID"
    eval "${name}_sock=\$sock ${name}_log=\$log ${name}_pid=\$SERVE_PID"
    eval "${name}_uri=nbd+unix:///?socket=\$sock"
}

# nbd-server daemonizes (it has no foreground mode): its pid comes from
# its pid file.  A free port is found by binding port 0; the race with
# other processes is tolerated by retrying.
start_nbd_server () {
    local name=$1 file=$2
    local conf="$TMP/$name.conf" pidf="$TMP/$name.rpid" log="$TMP/$name.rlog"
    local port i
    for (( i=0; i<5; i++ )); do
        port=$(/usr/bin/python3 -c '
import socket
s = socket.socket ()
s.bind (("127.0.0.1", 0))
print (s.getsockname ()[1])')
        cat >"$conf" <<EOF
[generic]
    listenaddr = 127.0.0.1
    port = $port
    allowlist = false
[export]
    exportname = $file
    flush = true
    fua = true
    trim = true
EOF
        rm -f "$pidf"
        nbd-server -C "$conf" -p "$pidf" >>"$log" 2>&1 || true
        local j
        for (( j=0; j<50; j++ )); do
            [ -s "$pidf" ] && nbdinfo --size "nbd://127.0.0.1:$port/export" \
                >/dev/null 2>&1 && break
            sleep 0.1
        done
        if [ -s "$pidf" ] &&
           nbdinfo --size "nbd://127.0.0.1:$port/export" >/dev/null 2>&1; then
            eval "${name}_pid=\$(cat \$pidf) ${name}_log=\$log"
            eval "${name}_uri=nbd://127.0.0.1:\$port/export"
            cleanup_fn _kill_if_running "$(cat "$pidf")"
            return 0
        fi
        [ -s "$pidf" ] && kill "$(cat "$pidf")" 2>/dev/null
    done
    echo "nbd-server did not start:" >&2; cat "$log" >&2
    return 1
}

kill_remote () {
    local name=$1 sig=${2:-KILL} pidv=${1}_pid sockv=${1}_sock
    kill -"$sig" "${!pidv}" 2>/dev/null || true
    _wait_gone "${!pidv}"
    # So that a restart does not race with the old socket file.
    [ -n "${!sockv:-}" ] && rm -f "${!sockv}"
    remote_log_clean "$name"
}

# A faultdisk server runs with the build's sanitizers: fail on a report.
remote_log_clean () {
    local logv=${1}_log
    if [ -n "${!logv:-}" ] &&
       grep -E 'ERROR: (Address|Thread|Leak|Undefined)Sanitizer|runtime error:' \
            "${!logv}" >&2; then
        echo "sanitizer report in the log of the remote $1" >&2
        return 1
    fi
    return 0
}


# _wait_value WHAT SECS eq|ge EXPECTED GET...: run GET every 0.1 s until
# what it prints equals (eq) or is at least (ge) EXPECTED; after SECS
# seconds say what WHAT was and fail.
_wait_value () {
    local what=$1 secs=$2 op=$3 want=$4 i v=
    shift 4
    for (( i=0; i<secs*10; i++ )); do
        v=$("$@" 2>/dev/null) || v=
        if [ "$op" = eq ]; then
            [ "$v" = "$want" ] && return 0
        else
            [ -n "$v" ] && [ "$v" -ge "$want" ] && return 0
        fi
        sleep 0.1
    done
    if [ "$op" = eq ]; then
        echo "$what is '$v' after ${secs}s, expected '$want'" >&2
    else
        echo "$what is '$v' after ${secs}s, expected >= $want" >&2
    fi
    return 1
}

wait_status () {
    _wait_value "status $2" "${4:-60}" eq "$3" status_field "$1" "$2" ||
        { ctl "$1" status >&2 || true; return 1; }
}

# roundtrip NAME URI BACKFILE [PLUGIN-ARGS...]
# The remote serves BACKFILE (already holding some data).  Through
# ramback: populate, check against a copy of BACKFILE, random writes and
# zeroes; SIGTERM; BACKFILE must equal the model.  A second ramback on
# the same remote populates from it and reads back the model.
roundtrip () {
    local name=$1 uri=$2 back=$3; shift 3
    local model="$TMP/$name.model" size
    size=$(stat -c %s "$back")
    cp --sparse=always "$back" "$model"

    start_rb "${name}a" back="$uri" "$@"
    local ctla="${name}a_ctl" uria="${name}a_uri"
    ctl "${!ctla}" wait-populated 60000
    # (In the filter form the store is the nbd plugin below ramback.)
    if [ "$RAMBACK_FORM" = filter ]; then
        [ "$(status_field "${!ctla}" store)" = plugin ] || fail "store is not the plugin"
    else
        [ "$(status_field "${!ctla}" store)" = nbd ] || fail "store is not nbd"
    fi
    [ "$(status_field "${!ctla}" size)" = "$size" ] ||
        fail "size is not the export's ($size)"
    [ "$(status_field "${!ctla}" store_state)" = ok ] || fail "store not ok"
    rio check "${!uria}" "$model"
    rio write "${!uria}" "$model" "${SEED:-4}" 300
    rio check "${!uria}" "$model"
    stop_rb_same "${name}a" "$back" "$model"

    start_rb "${name}b" back="$uri" "$@"
    local ctlb="${name}b_ctl" urib="${name}b_uri"
    ctl "${!ctlb}" wait-populated 60000
    [ "$(status_field "${!ctlb}" loaded_bytes)" -gt 0 ] ||
        fail "nothing was loaded from the remote"
    rio check "${!urib}" "$model"
    stop_rb_same "${name}b" "$back" "$model"
}

wait_status_ge () {
    _wait_value "status $2" "${4:-60}" ge "$3" status_field "$1" "$2" ||
        { ctl "$1" status >&2 || true; return 1; }
}

FAULTDISK="$top_builddir/tests/.libs/nbdkit-faultdisk-plugin.so"

# start_faultdisk NAME IMG [PARAMS...]: the plugin is built with the
# sanitizers of the build, so it is loaded like ramback's (nbdkit_env).
start_faultdisk () {
    local name=$1 img=$2; shift 2
    local dir="$TMP/$name.fd"
    [ -f "$FAULTDISK" ] || { echo "$FAULTDISK not built" >&2; return 1; }
    mkdir -p "$dir"
    _remote_env=("${nbdkit_env[@]}")
    [ ${#_remote_env[@]} -gt 0 ] || _remote_env=(env)
    start_remote "$name" "$FAULTDISK" file="$img" dir="$dir" "$@" ||
        { _remote_env=(env); return 1; }
    _remote_env=(env)
    eval "${name}_fd=\$dir"
}

_fd_seq=0
fd_cmd () {
    local name=$1; shift
    local dirv=${name}_fd dir cmd i
    dir=${!dirv}
    _fd_seq=$(( _fd_seq + 1 ))
    cmd=$(printf 'c%06d-%d' "$_fd_seq" $$)
    printf '%s\n' "$*" >"$dir/$cmd.tmp"
    mv "$dir/$cmd.tmp" "$dir/$cmd.cmd"
    for (( i=0; i<600; i++ )); do
        [ -f "$dir/$cmd.reply" ] && break
        sleep 0.05
    done
    if [ ! -f "$dir/$cmd.reply" ]; then
        echo "faultdisk $name: no reply to '$*' in 30 s" >&2
        return 1
    fi
    if [ "$(head -1 "$dir/$cmd.reply")" != ok ]; then
        echo "faultdisk $name: '$*': $(head -1 "$dir/$cmd.reply")" >&2
        rm -f "$dir/$cmd.reply"
        return 1
    fi
    tail -n +2 "$dir/$cmd.reply"
    rm -f "$dir/$cmd.reply"
}

fd_field () {
    fd_cmd "$1" status | sed -n "s/^$2=//p"
}

fd_wait () {
    _wait_value "faultdisk $1: $2" "${4:-60}" eq "$3" fd_field "$1" "$2" ||
        { fd_cmd "$1" status >&2 || true; return 1; }
}
