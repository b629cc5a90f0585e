# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=dash
# The serial-console protocol of every test guest (qemu-guest/guest/init,
# dm/guest-init.sh), sourced by busybox sh as /guest/console.sh:
#   RAMBACK-MARK: <name> <uptime>     progress the host may act on
#   RAMBACK-TIME: <name> <seconds>    a measured duration
#   RAMBACK-RESULT: PASS | FAIL <why> the verdict, always the last one
# The guest powers off after its verdict; a guest that dies instead
# reports nothing, which the host counts as a failure.

now () { cut -d' ' -f1 /proc/uptime; }
mark () { echo "RAMBACK-MARK: $1 $(now)"; }

# elapsed START: seconds since START (a now value), two decimals.
elapsed () { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
timing () { echo "RAMBACK-TIME: $1 $2"; }

# pass syncs first, so a passing guest leaves no write queued.  fail
# reports at once, then runs fail_details if the guest defined it (state
# dumps, a sync: anything that might hang comes after the verdict).
# poweroff -f does not return; the sleep covers the moment it takes.
pass () {
    sync
    echo "RAMBACK-RESULT: PASS"
    poweroff -f
    sleep 10
}
fail () {
    echo "RAMBACK-RESULT: FAIL $*"
    if type fail_details >/dev/null 2>&1; then fail_details; fi
    poweroff -f
    sleep 10
}
