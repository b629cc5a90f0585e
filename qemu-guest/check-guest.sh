#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# check-guest.sh SCENARIO...: run QEMU guest scenarios one after the
# other (see scenario.sh), print the time each took and a closing
# "N passed, N failed" line; exit non-zero if any failed.

set -u
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- untar restart toggle powercut jcut jcut-xfs
logdir=${RAMBACK_GUEST_LOGDIR:-.}
pass=0 fail=0 failed=()
summary=()
for s in "$@"; do
  log=$logdir/guest-$s.log
  t0=$(date +%s)
  echo "=== guest scenario $s (log: $log)"
  if "$here/scenario.sh" "$s" 2>&1 | tee "$log"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
    r=PASS; pass=$((pass + 1))
  else
    r=FAIL; fail=$((fail + 1)); failed+=("$s")
  fi
  summary+=("$(printf '%-4s %-9s %4d s' "$r" "$s" $(( $(date +%s) - t0 )))")
done
accel=$(sed -n 2p "${RAMBACK_GUEST_CACHE:-/var/cache/ramback-guest}/accel" 2>/dev/null)
echo "=== guest scenarios (accel: ${RAMBACK_GUEST_ACCEL:-${accel:-?}})"
printf '%s\n' "${summary[@]}"
echo "guest: $pass passed, $fail failed"
[ $fail -eq 0 ]
