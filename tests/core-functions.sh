# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers of the core plugin's tests (issue 2), sourced after functions.sh:
#
#   start_rb NAME ARGS...  start_ramback, and remember the background job
#                          in NAME_job so that its exit status can be read
#   stop_rb NAME           SIGTERM, wait, and fail unless nbdkit exited 0
#   py ARGS...             /usr/bin/python3 with tests/model.py importable
#   fail MSG               print FAIL: MSG and exit 1
#   sha FILE               SHA-256 of FILE
#   start_backing NAME ARGS  a plain nbdkit to be an NBD backing store

export PYTHONPATH="$top_srcdir/tests${PYTHONPATH:+:$PYTHONPATH}"

# Under ThreadSanitizer, the core's deliberate image-copy races are
# suppressed as in the unit tests (lib/tsan.supp); anything else fails.
case "${SANITIZER_PRELOAD:-}" in
    *tsan*)
        export TSAN_OPTIONS="suppressions=$top_srcdir/lib/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
        ;;
esac

fail () { echo "FAIL: $*" >&2; exit 1; }

py () { /usr/bin/python3 "$@"; }

sha () { sha256sum "$1" | cut -d' ' -f1; }

# start_ramback runs nbdkit in a background subshell and returns with $!
# still naming that subshell; its exit status is nbdkit's.
start_rb () {
    local name=$1
    start_ramback "$@"
    eval "${name}_job=\$!"
}

stop_rb () {
    local name=$1 pidv=${1}_pid jobv=${1}_job logv=${1}_log rc=0
    stop_nbdkit "${!pidv}"
    wait "${!jobv}" || rc=$?
    # Killed by stop_nbdkit after a completed clean stop (sanitizer
    # builds only, see functions.sh.in): that exit counts as clean.
    [ -e "$TMP/exit-hang-${!pidv}" ] && rc=0
    # A sanitizer report does not always change the exit status.
    if grep -qE 'Sanitizer|runtime error:' "${!logv}"; then
        echo "sanitizer reports of nbdkit $name:" >&2
        sed -n '/^WARNING: ThreadSanitizer\|^==[0-9]*==ERROR\|runtime error:/,/^SUMMARY\|^====*$/p' \
            "${!logv}" >&2
        fail "sanitizer report in the log of nbdkit $name (exit status $rc)"
    fi
    if [ "$rc" -ne 0 ]; then
        echo "nbdkit $name exited with status $rc; end of its log:" >&2
        tail -40 "${!logv}" >&2
        fail "nbdkit $name did not stop cleanly"
    fi
}

# start_backing NAME NBDKIT-ARGS...: a plain nbdkit (no ramback) on a
# Unix socket in $TMP, to serve as ramback's NBD backing store.  Sets
# NAME_uri, NAME_pid, NAME_log.  Stop it with stop_nbdkit "$NAME_pid".
start_backing () {
    local name=$1; shift
    local sock="$TMP/$name.bsock" pidf="$TMP/$name.bpid" log="$TMP/$name.blog" i
    rm -f "$sock" "$pidf"
    nbdkit -f -U "$sock" -P "$pidf" "$@" >"$log" 2>&1 &
    for (( i=0; i<300; i++ )); do
        [ -S "$sock" ] && [ -s "$pidf" ] && break
        if ! kill -0 $! 2>/dev/null; then
            tail -20 "$log" >&2
            fail "backing nbdkit $name did not start"
        fi
        sleep 0.1
    done
    [ -S "$sock" ] || fail "backing nbdkit $name did not create $sock"
    eval "${name}_pid=\$(cat \"\$pidf\") ${name}_log=\$log"
    eval "${name}_uri=nbd+unix:///?socket=\$sock"
    cleanup_fn _kill_if_running "$(cat "$pidf")"
}
