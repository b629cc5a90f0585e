#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The remote fails 20% of its writes with EIO (nbdkit's error filter).
# Nothing may be lost: the failed writes are counted and retried until
# the remote's file equals the model.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
set -x

size=$(( 32 * 1024 * 1024 ))
truncate -s "$size" "$TMP/r.img"
cp "$TMP/r.img" "$TMP/model"

start_remote r --filter=error file "$TMP/r.img" \
    error=EIO error-pwrite-rate=20%
start_rb rb back="$r_uri"
ctl "$rb_ctl" wait-populated 60000

# Small scattered writes: most write-back requests are one chunk.
rio write "$rb_uri" "$TMP/model" 31 400 65536
ok=
for i in $(seq 1 30); do
    if ctl "$rb_ctl" sync 30000; then ok=1; break; fi
done
[ -n "$ok" ] || fail "sync never succeeded"
errors=$(status_field "$rb_ctl" store_errors)
[ "$errors" -gt 0 ] || fail "no store errors counted with 20% failing writes"
[ "$(status_field "$rb_ctl" last_errno)" = EIO ] || fail "last_errno not EIO"
[ "$(status_field "$rb_ctl" dirty_bytes)" -eq 0 ] || fail "still dirty"
assert_same "$TMP/r.img" "$TMP/model"
grep -c 'error: injecting' "$r_log" || true

rio check "$rb_uri" "$TMP/model"
stop_rb_same rb "$TMP/r.img" "$TMP/model"
kill_remote r TERM
echo "store_errors: $errors"
echo PASS
