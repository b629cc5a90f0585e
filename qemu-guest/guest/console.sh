# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=dash
# What PID 1 of every test guest (qemu-guest/guest/init, dm/guest-init.sh,
# dm/guest-bench.sh) shares, sourced by busybox sh as /guest/console.sh:
# its first steps, and the serial-console protocol:
#   RAMBACK-MARK: <name> <uptime>     progress the host may act on
#   RAMBACK-TIME: <name> <seconds>    a measured duration
#   RAMBACK-RESULT: PASS | FAIL <why> the verdict, always the last one
# The guest powers off after its verdict; a guest that dies instead
# reports nothing, which the host counts as a failure.

# guest_start: busybox's applets, /proc, /sys, /dev and /tmp mounted,
# the console as stdin, stdout and stderr.
guest_start () {
    /bin/busybox --install -s /bin
    export PATH=/bin:/sbin
    mount -t proc proc /proc
    mount -t sysfs sysfs /sys
    mount -t devtmpfs devtmpfs /dev
    mount -t tmpfs tmpfs /tmp
    exec </dev/console >/dev/console 2>&1
}

# load_modules [SKIP.ko...]: insmod the modules the image holds, in the
# order of /lib/modules/load-order (dependencies first), but SKIP.
load_modules () {
    local m
    for m in $(cat /lib/modules/load-order); do
        case " $* " in *" $m "*) continue ;; esac
        insmod "/lib/modules/$m" || fail "insmod $m"
    done
}

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
