# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=bash
# The shell helpers shared by the tests (tests/functions.sh and the
# libraries sourced after it), the benchmarks (bench/lib.sh) and the
# guest scenarios (qemu-guest/guest-lib.sh).  Source it from bash; it
# defines functions only, and sets no traps and no options.
#
#   fail MSG...            print FAIL: MSG on stderr and exit 1
#   to_bytes SIZE          SIZE with an optional K/M/G/T suffix (powers of
#                          1024) in bytes; returns 2 on a bad SIZE
#   serve_bg SOCK PIDFILE LOG CMD...
#                          run CMD in the background (output appended to
#                          LOG) and wait until SOCK is a socket and, if
#                          PIDFILE is not empty, PIDFILE holds a pid.
#                          Sets SERVE_JOB (the background job) and
#                          SERVE_PID (PIDFILE's pid, else the job's).
#                          Fails with LOG's tail if CMD exits first or
#                          after $SERVE_TIMEOUT seconds (default 60);
#                          polls every $SERVE_POLL seconds (default 0.1)
#   ctl SOCK REQUEST...    one control request (docs/ramback-control.pod);
#                          prints the data lines; fails unless the reply
#                          is OK (tests/rbctl.py)
#   status_field SOCK NAME...  fields of "status json", one a line
#   kill_if_running PID    SIGKILL, ignoring a process already gone
#   private_mount_ns [--optional] ARGS...
#                          re-run the calling script (with ARGS) in a
#                          private mount namespace, once; if one cannot
#                          be made, skip (exit 77), or with --optional
#                          carry on without it.  Call it before sourcing
#                          functions.sh (the re-run makes its own $TMP)

harness_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RBCTL="$harness_dir/rbctl.py"

fail () { echo "FAIL: $*" >&2; exit 1; }

to_bytes () {
    local v=$1 n m=1
    case $v in
        *[kK]) m=1024 ;;
        *[mM]) m=$((1024 ** 2)) ;;
        *[gG]) m=$((1024 ** 3)) ;;
        *[tT]) m=$((1024 ** 4)) ;;
    esac
    n=${v%[kKmMgGtT]}
    [[ $n =~ ^[0-9]+$ ]] || { echo "bad size '$v'" >&2; return 2; }
    echo $((n * m))
}

serve_bg () {
    local sock=$1 pidf=$2 log=$3; shift 3
    local poll=${SERVE_POLL:-0.1} secs=${SERVE_TIMEOUT:-60} end
    rm -f "$sock"
    [ -z "$pidf" ] || rm -f "$pidf"
    "$@" >>"$log" 2>&1 &
    SERVE_JOB=$!
    end=$(( ${EPOCHREALTIME/./} + secs * 1000000 ))
    while :; do
        if [ -S "$sock" ] && { [ -z "$pidf" ] || [ -s "$pidf" ]; }; then
            SERVE_PID=$SERVE_JOB
            [ -z "$pidf" ] || SERVE_PID=$(cat "$pidf")
            return 0
        fi
        if ! kill -0 "$SERVE_JOB" 2>/dev/null; then
            echo "$1 failed to start (${sock##*/}):" >&2; tail -30 "$log" >&2
            return 1
        fi
        if (( ${EPOCHREALTIME/./} > end )); then
            echo "$1 did not create $sock in $secs s:" >&2; tail -30 "$log" >&2
            # Where its threads wait: state, kernel wait channel, syscall.
            local t
            for t in /proc/"$SERVE_JOB"/task/*; do
                echo "  thread ${t##*/}: $(awk '{print $3}' "$t/stat" 2>/dev/null)" \
                     "wchan=$(cat "$t/wchan" 2>/dev/null)" \
                     "syscall=$(cut -d' ' -f1 "$t/syscall" 2>/dev/null)" >&2
            done
            return 1
        fi
        sleep "$poll"
    done
}

ctl () {
    local sock=$1; shift
    /usr/bin/python3 "$RBCTL" "$sock" "$*"
}

status_field () {
    local sock=$1; shift
    /usr/bin/python3 "$RBCTL" --field "$sock" "$@"
}

kill_if_running () { kill -9 "$1" 2>/dev/null || true; }

private_mount_ns () {
    local optional=no
    if [ "${1:-}" = --optional ]; then optional=yes; shift; fi
    [ -z "${RAMBACK_TEST_NS:-}" ] || return 0
    if ! unshare -m --propagation private true 2>/dev/null; then
        [ "$optional" = no ] || return 0
        echo "$0: SKIP: cannot create a private mount namespace (not root?)"
        exit 77
    fi
    RAMBACK_TEST_NS=1 exec unshare -m --propagation private /bin/bash "$0" "$@"
}
