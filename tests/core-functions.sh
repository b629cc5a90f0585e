# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers of the core plugin's tests (issue 2), sourced after functions.sh:
#
#   start_rb NAME ARGS...  start_ramback, and remember the background job
#                          in NAME_job so that its exit status can be read
#   stop_rb NAME           SIGTERM, wait, and fail unless nbdkit exited 0
#   py ARGS...             /usr/bin/python3 with tests/model.py importable
#   fail MSG               print FAIL: MSG and exit 1
#   sha FILE               SHA-256 of FILE

export PYTHONPATH="$top_srcdir/tests${PYTHONPATH:+:$PYTHONPATH}"

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
    if [ "$rc" -ne 0 ]; then
        echo "nbdkit $name exited with status $rc; end of its log:" >&2
        tail -40 "${!logv}" >&2
        fail "nbdkit $name did not stop cleanly"
    fi
    # A sanitizer report does not always change the exit status.
    if grep -E 'ERROR: (Address|Thread|Leak|Undefined)Sanitizer|runtime error:' \
            "${!logv}" >&2; then
        fail "sanitizer report in the log of nbdkit $name"
    fi
}
