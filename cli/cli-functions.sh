# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers of the ramback(1) tests, sourced after tests/functions.sh:
#
#   RAMBACK                   the command under test (the build tree's)
#   (fail, ctl and status_field are in tests/harness.sh)
#   run_rb STATUS ARGS...     run "ramback ARGS", fail unless it exits
#                             STATUS; stdout in $TMP/out, stderr in
#                             $TMP/err; a failure must be exactly one
#                             line on stderr
#   jfield FILE KEY           a field of the JSON object in FILE
#                             (booleans as true/false, 1.0 as 1)
#   expect_field FILE KEY VALUE
#   wait_field SOCK KEY VALUE wait (at most 30 s) until status json has it
#   nbd_write URI OFFSET LEN BYTE   write LEN bytes of BYTE (0-255)
#   fake BEHAVIOUR [FILE]     fake-control-server.py on $TMP/BEHAVIOUR.ctl;
#                             with a FILE (replay), on $TMP/NAME.ctl
#                             for FILE's NAME.json

RAMBACK="$top_builddir/cli/ramback"
[ -x "$RAMBACK" ] || { echo "$0: $RAMBACK is not built" >&2; exit 1; }

run_rb () {
    local want=$1 rc=0
    shift
    "$RAMBACK" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "ramback $*: stdout:" >&2; cat "$TMP/out" >&2
        echo "ramback $*: stderr:" >&2; cat "$TMP/err" >&2
        fail "ramback $* exited with $rc, expected $want"
    fi
    if [ "$want" -ne 0 ] && [ "$(wc -l < "$TMP/err")" -ne 1 ]; then
        cat "$TMP/err" >&2
        fail "ramback $*: the error is not exactly one line"
    fi
    if [ "$want" -eq 0 ] && [ -s "$TMP/err" ]; then
        cat "$TMP/err" >&2
        fail "ramback $*: succeeded but wrote to stderr"
    fi
}

jfield () {
    /usr/bin/python3 -c '
import json, sys
o = json.load (open (sys.argv[1]))
if sys.argv[2] not in o:
    sys.exit ("no field %r in %s" % (sys.argv[2], o))
v = o[sys.argv[2]]
if isinstance (v, float) and v.is_integer ():
    v = int (v)         # 1.000 and 1 are the same number
print (json.dumps (v) if isinstance (v, bool) or v is None else v)' "$1" "$2"
}

expect_field () {
    local v
    v=$(jfield "$1" "$2")
    [ "$v" = "$3" ] || { cat "$1" >&2; fail "$2 is '$v', expected '$3'"; }
}

wait_field () {
    local sock=$1 key=$2 want=$3 i v=
    for (( i=0; i<300; i++ )); do
        "$RAMBACK" status --json "$sock" >"$TMP/wait.json" 2>/dev/null &&
            v=$(jfield "$TMP/wait.json" "$key") &&
            [ "$v" = "$want" ] && return 0
        sleep 0.1
    done
    fail "$sock: $key is '$v' after 30 s, expected '$want'"
}

nbd_write () {
    nbdsh -u "$1" -c "h.pwrite (bytes ([$4]) * $3, $2)"
}

fake () {
    local name=$1 i
    [ $# -lt 2 ] || name=$(basename "$2" .json)
    rm -f "$TMP/$name.ctl.pid"
    /usr/bin/python3 "$top_srcdir/cli/fake-control-server.py" \
        "$TMP/$name.ctl" "$@" &
    cleanup_fn _kill_if_running $!
    for (( i=0; i<100; i++ )); do
        [ -s "$TMP/$name.ctl.pid" ] && return 0
        sleep 0.1
    done
    fail "fake server $name did not start"
}
