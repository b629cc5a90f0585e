#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# nbds+unix:// with TLS-PSK passed through (tls-psk=, tls-username=):
# round trip to a remote that requires TLS.  A wrong key, and tls-*
# parameters on a plain nbd:// URI, are refused at startup.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires nbdcopy
set -x

size=$(( 16 * 1024 * 1024 ))
truncate -s "$size" "$TMP/model"
psk="$TMP/keys.psk"
/usr/bin/python3 -c 'import os; print ("alice:" + os.urandom (32).hex ())' >"$psk"
/usr/bin/python3 -c 'import os; print ("alice:" + os.urandom (32).hex ())' >"$TMP/bad.psk"
chmod 600 "$psk" "$TMP/bad.psk"

start_remote r --tls=require --tls-psk="$psk" memory "$size"
turi="nbds+unix:///?socket=$r_sock"

# refused LOG PATTERN PLUGIN-ARGS...: ramback must fail to start, saying
# PATTERN.  Bounded with timeout: under a preloaded sanitizer runtime
# nbdkit can hang in exit(3) after the error (see stop_nbdkit in
# functions.sh), and the message is what matters.
refused () {
    local log=$1 pattern=$2 rc=0 t=60; shift 2
    # The refusal itself takes well under a second even under ASan.
    [ -z "$SANITIZER_PRELOAD" ] || t=10
    timeout "$t" "${nbdkit_env[@]}" "$NBDKIT" -U - "$PLUGIN" "$@" \
        --run 'exit 0' >"$log" 2>&1 || rc=$?
    tail -n 3 "$log"
    [ "$rc" -ne 0 ] || fail "ramback started with $*"
    grep -qE "$pattern" "$log" || fail "no '$pattern' in $log"
}

# Without TLS the remote refuses us; with the wrong key too; tls-*
# parameters without an nbds URI are a configuration error.
refused "$TMP/notls.log" 'requires TLS' back="$r_uri"
refused "$TMP/badkey.log" 'gnutls' back="$turi" \
    tls-psk="$TMP/bad.psk" tls-username=alice
refused "$TMP/mixed.log" 'tls-\* parameters need an nbds' \
    back="$r_uri" tls-psk="$psk"

start_rb rb back="$turi" tls-psk="$psk" tls-username=alice
[ "$(status_field "$rb_ctl" store_state)" = ok ]
rio write "$rb_uri" "$TMP/model" 61 100 1048576
stop_rb rb
RIO_TLS_PSK="$psk" RIO_TLS_USERNAME=alice rio check "$turi" "$TMP/model"

# Populate over TLS.
start_rb rb2 back="$turi" tls-psk="$psk" tls-username=alice
ctl "$rb2_ctl" wait-populated 60000
rio check "$rb2_uri" "$TMP/model"
stop_rb rb2
kill_remote r TERM
echo PASS
