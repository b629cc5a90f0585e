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

# Without TLS the remote refuses us; with the wrong key too.
if run_nbdkit -U - "$PLUGIN" back="$r_uri" --run 'exit 0' \
        >"$TMP/notls.log" 2>&1; then
    fail "a TLS-only remote accepted a plain connection"
fi
if run_nbdkit -U - "$PLUGIN" back="$turi" tls-psk="$TMP/bad.psk" \
        tls-username=alice --run 'exit 0' >"$TMP/badkey.log" 2>&1; then
    fail "the remote accepted a wrong PSK"
fi
if run_nbdkit -U - "$PLUGIN" back="$r_uri" tls-psk="$psk" \
        --run 'exit 0' >"$TMP/mixed.log" 2>&1; then
    fail "tls-psk= on an nbd+unix:// URI was accepted"
fi
tail -n 2 "$TMP/notls.log" "$TMP/badkey.log" "$TMP/mixed.log"
grep -q 'tls-\* parameters need an nbds' "$TMP/mixed.log"

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
