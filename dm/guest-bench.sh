#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# PID 1 of the dm-ramback benchmark guest (bench/bench-dm-guest.sh builds
# the initramfs and computes the ratios).  /dev/vda is the backing disk.
# fio runs the same jobs on three devices of the same size:
#   brd     the guest kernel's RAM disk (brd, rd_nr=1)
#   ramback dm-ramback, populated, writeback, over dm-delay on vda
#   delay   that dm-delay'd device alone
# Each result is a console line "RAMBACK-BENCH: <dev> <job> <rep> <value>"
# (IOPS for the 4 KiB and fsync jobs, KiB/s for the 1 MiB ones).
# /ramback/bench.conf sets SECTORS, DELAY_R, DELAY_W (ms), RUNTIME (s),
# REPS.

. /guest/console.sh
guest_start
export DM_DISABLE_UDEV=1
. /ramback/bench.conf

load_modules brd.ko                   # brd: loaded below, sized
insmod /ramback/dm-ramback.ko || fail "insmod dm-ramback.ko"

# job NAME: fio's arguments for it, and the terse field of its metric
# (7: read KiB/s, 8: read IOPS, 48: write KiB/s, 49: write IOPS).
job () {
  case $1 in
    randread4k)  echo "--rw=randread --bs=4k --iodepth=16 8" ;;
    randwrite4k) echo "--rw=randwrite --bs=4k --iodepth=16 49" ;;
    seqread1m)   echo "--rw=read --bs=1M --iodepth=4 7" ;;
    seqwrite1m)  echo "--rw=write --bs=1M --iodepth=4 48" ;;
    fsync4k)     echo "--rw=randwrite --bs=4k --iodepth=1 --fsync=1 49" ;;
  esac
}
JOBS="randread4k randwrite4k seqread1m seqwrite1m fsync4k"

run () {   # DEV NAME REP
  local a f v
  a=$(job "$2")
  f=${a##* }
  a=${a% *}
  v=$(fio --name="$2" --filename="$1" --direct=1 --ioengine=libaio \
          --time_based --runtime="$RUNTIME" --size=$((SECTORS * 512)) \
          --minimal $a 2>/dev/null | cut -d';' -f"$f")
  [ -n "$v" ] || fail "fio $2 on $1 gave no result"
  echo "RAMBACK-BENCH: $DEVNAME $2 $3 $v"
}

delay="0 $SECTORS delay /dev/vda 0 $DELAY_R /dev/vda 0 $DELAY_W"
# Jobs in turn, every device within a round, so a change in the host's
# load hits all three alike.
rep=1
while [ $rep -le "$REPS" ]; do
  for j in $JOBS; do
    insmod /lib/modules/brd.ko rd_nr=1 rd_size=$((SECTORS / 2)) || fail "insmod brd"
    DEVNAME=brd run /dev/ram0 $j $rep
    rmmod brd || fail "rmmod brd"

    dmsetup create slow --table "$delay" || fail "create slow"
    dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/slow" || fail "create rb"
    i=0
    until dmsetup status rb | grep -q ' populated '; do
      i=$((i + 1)); [ $i -le 3000 ] || fail "populate did not finish"
      usleep 100000
    done
    DEVNAME=ramback run /dev/mapper/rb $j $rep
    dmsetup remove rb || fail "remove rb"

    DEVNAME=delay run /dev/mapper/slow $j $rep
    dmsetup remove slow || fail "remove slow"
  done
  rep=$((rep + 1))
done
rmmod dm_ramback || fail "rmmod dm_ramback"
pass
