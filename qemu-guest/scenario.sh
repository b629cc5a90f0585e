#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck disable=SC2154  # NAME_sock, NAME_pid... are set by eval in guest-lib.sh
#
# scenario.sh NAME: run one QEMU guest scenario against the ramback plugin
# and exit 0 only if every guest boot reported PASS and every host-side
# check held.  NAME is one of:
#   quick     one guest, -C 4: mkfs, untar kernel/ (562 files), sync,
#             e2fsck, checksums; then the backing store checked offline
#   untar     scenario 1: -C 4 mkfs + untar of 3,484 files + checksums,
#             a second boot with one connection verifies; clean stop;
#             the backing store is checked offline
#   restart   scenario 2: untar, SIGTERM, restart on the same backing
#             store with a slow populate, attach during populate, e2fsck
#             -fn clean and every checksum matches
#   toggle    scenario 3: restart, with writeback/writethrough toggled
#             over the control socket during the untar and the sync
#   powercut  scenario 4: writethrough, drained, then kill -9 of nbdkit
#             and the guest mid-untar; restart; journal replay is all the
#             repair needed and what was synced before the cut is intact
#   jcut      writeback mode with journal= (fsync=wait): the backing
#             store and the journal are disks with a volatile write
#             cache (tests/faultdisk-plugin.c, durable=); the guest
#             untars while it writes and fsyncs files; at a random
#             moment kill -9 of nbdkit and the guest and a power cut of
#             both disks (a random subset of their unflushed writes
#             kept, torn ones too); ramback recover; then e2fsck clean
#             and every file whose fsync returned before the cut intact.
#             RAMBACK_GUEST_JCUTS=N cuts (default 1);
#             RAMBACK_GUEST_JCUT_JOURNAL=0 the same without a journal,
#             RAMBACK_GUEST_JCUT_FSYNC=ignore|wait (default wait): the
#             contrast, which is expected to fail.
#   jcut-xfs  the same with XFS (mount replays its log, xfs_repair -n)
# Environment: top_builddir (for the plugin), RAMBACK_GUEST_CACHE,
# RAMBACK_GUEST_ACCEL=auto|kvm|tcg, RAMBACK_GUEST_KEEP=1.

name=${1:?usage: scenario.sh quick|untar|restart|toggle|powercut|jcut|jcut-xfs}
. "$(dirname "$0")/guest-lib.sh"

img=$T/back.img

# The image the later steps use: a new 1 GiB backing store with a fresh
# ext4 holding parts a and b, written through ramback in writeback mode.
make_untarred () {
  g_ramback rb back="$img" size=1G
  g_boot fresh "$rb_sock" fresh ramback.conns=4
  g_wait_guest fresh
  say "untar+sync in the guest: $(g_time fresh untar+sync) s"
  g_stop rb
}

# Restart on the same backing store with populate throttled, so the guest
# attaches, checks and reads while most of the image is not in RAM yet.
verify_during_populate () {
  local rate=${RAMBACK_GUEST_POPULATE_RATE:-2M} progress populated
  g_ramback rb2 back="$img" populate-rate="$rate"
  g_boot verify "$rb2_sock" verify ramback.conns=4
  g_wait_mark verify attached
  populated=$(status_field "$rb2_ctl" populated)
  progress=$(status_field "$rb2_ctl" progress)
  say "guest attached at populate progress $progress"
  [ "$populated" = false ] ||
    die "populate finished before the guest attached (raise the image size or lower populate-rate=$rate)"
  g_wait_guest verify
  populated=$(status_field "$rb2_ctl" populated)
  say "guest done at populate progress $(status_field "$rb2_ctl" progress) (populated: $populated)"
  g_stop rb2
  g_check_image "$img" a b
}

# The entries of part b the guest's last completed sync covered.
bsynced_entries () {
  tr -d '\r' <"$T/cut.serial" |
    awk '/^RAMBACK-MARK: bsync-/ { n = $4 } END { print n + 0 }'
}

# The last "jsync-I" the guest printed: files 1..I were fsync'd.
jsynced () {
  tr -d '\r' <"$T/$1.serial" |
    awk '/^RAMBACK-MARK: jsync-/ { sub ("jsync-", "", $2); n = $2 } END { print n + 0 }'
}

# One jcut round (see the top): seed $1.
jcut_once () {
  local seed=$1 want wait_ms n journal=${RAMBACK_GUEST_JCUT_JOURNAL:-1}
  local jargs=() i fs=${RAMBACK_GUEST_JCUT_FS:-ext4} jsize=256M
  [ "$fs" = ext4 ] || jsize=512M   # mkfs.xfs wants 300 MB at least
  RANDOM=$seed
  rm -rf "$T"/bk.* "$T"/jr.* "$T/back.img" "$T/j.img"
  truncate -s "$jsize" "$T/back.img"
  truncate -s 64M "$T/j.img"
  : >"$T/bk.vol"; : >"$T/jr.vol"
  mkdir -p "$T/bk.fd" "$T/jr.fd"
  bk_fd=$T/bk.fd jr_fd=$T/jr.fd
  # Slow FLUSHes (bytes since the last one / rate): the in-place writes
  # lag, and the cut finds unflushed writes in both caches.
  g_nbdkit bk "$FAULTDISK" file="$T/bk.vol" durable="$T/back.img" dir="$bk_fd" flush-rate=4M
  g_nbdkit jr "$FAULTDISK" file="$T/jr.vol" durable="$T/j.img" dir="$jr_fd" flush-rate=32M
  [ "$journal" = 0 ] || jargs=(journal="nbd+unix:///?socket=$jr_sock" commit-interval=1)
  g_ramback rb back="nbd+unix:///?socket=$bk_sock" fsync="${RAMBACK_GUEST_JCUT_FSYNC:-wait}" "${jargs[@]}"
  g_boot jcut "$rb_sock" jcut ramback.conns=4 ramback.parts=quick ramback.fs="$fs"
  g_wait_mark jcut untar-start
  # A random moment: after 2 to 41 fsync'd files, plus 0 to 0.5 s.
  want=$(( RANDOM % 40 + 2 )) wait_ms=$(( RANDOM % 500 ))
  for (( i = 0; ; i++ )); do
    [ "$(jsynced jcut)" -ge "$want" ] && break
    [ $i -lt $(( BOOT_TIMEOUT * 20 )) ] || die "no $want fsync'd files"
    kill -0 "$jcut_qpid" 2>/dev/null || die "guest jcut ended early: $(_g_result jcut)"
    sleep 0.05
  done
  sleep "$(awk -v m="$wait_ms" 'BEGIN { print m / 1000 }')"
  g_kill9 "$rb_pid" "$jcut_qpid"
  n=$(jsynced jcut)
  fd_cmd bk powercut seed="$seed" >"$T/bk.cut"
  fd_cmd jr powercut seed="$(( seed + 1 ))" >"$T/jr.cut"
  g_kill9 "$bk_pid" "$jr_pid"
  say "cut (seed $seed): $n files fsync'd; backing store $(tr '\n' ' ' <"$T/bk.cut"); journal $(tr '\n' ' ' <"$T/jr.cut")"
  if [ "$journal" != 0 ]; then
    "$top_builddir/cli/ramback" recover "$T/back.img" "$T/j.img" ||
      die "ramback recover failed"
  fi
  g_ramback rb2 back="$T/back.img"
  g_boot jrecover "$rb2_sock" jrecover ramback.conns=4 ramback.parts=quick ramback.jsynced="$n" ramback.fs="$fs"
  g_wait_guest jrecover
  g_stop rb2
  if [ "$fs" = ext4 ]; then
    e2fsck -fn "$T/back.img" >"$T/host-fsck.log" 2>&1 ||
      { cat "$T/host-fsck.log" >&2; die "host e2fsck -fn after recovery: not clean"; }
  fi
  say "cut $seed ($fs): recovered, fsck clean, all $n fsync'd files intact"
}

case $name in
  quick)
    g_ramback rb back="$img" size=512M
    g_boot quick "$rb_sock" fresh ramback.conns=4 ramback.parts=quick
    g_wait_guest quick
    say "untar+sync in the guest: $(g_time quick untar+sync) s"
    g_stop rb
    g_check_image "$img" quick
    ;;

  untar)
    g_ramback rb back="$img" size=1G
    g_boot fresh "$rb_sock" fresh ramback.conns=4
    g_wait_guest fresh
    say "untar+sync in the guest: $(g_time fresh untar+sync) s"
    # Same server, a new single-connection client: the kernel's view
    # after a disconnect and reconnect.
    g_boot verify1 "$rb_sock" verify ramback.conns=1
    g_wait_guest verify1
    g_stop rb
    g_check_image "$img" a b
    ;;

  restart)
    make_untarred
    verify_during_populate
    ;;

  toggle)
    g_ramback rb back="$img" size=1G
    g_boot fresh "$rb_sock" fresh ramback.conns=4
    g_wait_mark fresh untar-start
    # Flip the mode as fast as the control socket answers, through the
    # untar and the sync, and check each switch took effect.
    toggles=0
    mode=writethrough
    while ! g_has_mark fresh synced; do
      kill -0 "$fresh_qpid" 2>/dev/null || break
      ctl "$rb_ctl" mode "$mode" || die "mode $mode refused"
      got=$(status_field "$rb_ctl" mode)
      [ "$got" = "$mode" ] || die "mode $mode requested, status says $got"
      toggles=$((toggles + 1))
      [ $mode = writethrough ] && mode=writeback || mode=writethrough
    done
    g_wait_guest fresh
    say "mode toggled $toggles times during untar+sync ($(g_time fresh untar+sync) s)"
    # Both directions at least once, writeback -> writethrough -> writeback.
    [ $toggles -ge 2 ] || die "only $toggles mode switches happened during the untar"
    g_stop rb
    verify_during_populate
    ;;

  powercut)
    g_ramback rb back="$img" size=1G
    g_boot cut "$rb_sock" powercut ramback.conns=4
    g_wait_mark cut untar-start
    ctl "$rb_ctl" mode writethrough
    # sync returns once everything written before it is on the backing
    # store; from here on every write is there before it is acknowledged.
    t0=$(date +%s.%N)
    ctl "$rb_ctl" sync 120000 || die "drain after the switch to writethrough failed"
    say "writethrough: drained in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s"
    [ "$(status_field "$rb_ctl" dirty_bytes)" = 0 ] || die "dirty bytes left after sync in writethrough"
    # Part a is synced by the guest.  Cut while part b is being untarred,
    # right after a guest sync during part b that covered at least
    # $cut_at entries: writes and flushes are in flight, and what that
    # sync covered must survive.  tar's list of names reaches the guest's
    # sync loop in blocks, so on a loaded host the first sync that covers
    # $cut_at entries may come after part b is complete: the guest then
    # goes on extracting it again (writes and flushes still in flight),
    # and its syncs go on too, so the cut waits for one.
    cut_at=${RAMBACK_GUEST_CUT_AT:-100}
    for (( i = 0; ; i++ )); do
      bsynced=$(bsynced_entries)
      [ "$bsynced" -ge "$cut_at" ] && break
      [ $i -lt $(( BOOT_TIMEOUT * 20 )) ] || die "no sync covering $cut_at entries of part b"
      kill -0 "$cut_qpid" 2>/dev/null || die "guest cut ended early: $(_g_result cut)"
      sleep 0.05
    done
    g_kill9 "$rb_pid" "$cut_qpid"
    g_has_mark cut synced-a || die "part a was not synced before the cut"
    # A loaded host may poll late: then the guest had finished part b
    # and was extracting it again, still writing and flushing.
    g_has_mark cut untar-b-done &&
      say "part b was complete before the cut; the cut hit its re-extraction"
    # Every bsync line in the log was printed after its sync completed,
    # so before the cut; the last one covers the most.
    bsynced=$(bsynced_entries)
    say "power cut: nbdkit and the guest killed (-9) mid-untar; $bsynced entries of part b were synced"
    g_ramback rb2 back="$img"
    g_boot recover "$rb2_sock" recover ramback.conns=4 ramback.bsynced="$bsynced"
    g_wait_guest recover
    g_stop rb2
    # The guest replayed the journal; what reached the store is clean.
    e2fsck -fn "$img" >"$T/host-fsck.log" 2>&1 ||
      { cat "$T/host-fsck.log" >&2; die "host e2fsck -fn after recovery: not clean"; }
    say "backing store after recovery: e2fsck -fn clean"
    ;;

  jcut|jcut-xfs)
    [ "$name" = jcut ] || RAMBACK_GUEST_JCUT_FS=xfs
    FAULTDISK=$top_builddir/tests/.libs/nbdkit-faultdisk-plugin.so
    [ -f "$FAULTDISK" ] || make -C "$top_builddir/tests" nbdkit-faultdisk-plugin.la >/dev/null ||
      die "cannot build the faultdisk test plugin"
    . "$guest_srcdir/../tests/remote-functions.sh"
    cuts=${RAMBACK_GUEST_JCUTS:-1} passed=0
    base=${RAMBACK_GUEST_JCUT_SEED:-$(( $(date +%s) % 100000 ))}
    for (( c = 0; c < cuts; c++ )); do
      jcut_once $(( base + c * 7 ))
      passed=$(( passed + 1 ))
    done
    say "jcut: $passed of $cuts power cuts recovered clean (seeds from $base)"
    ;;

  *)
    die "unknown scenario '$name'"
    ;;
esac
say "scenario $name: PASS"
