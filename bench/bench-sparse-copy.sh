#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-sparse-copy.sh: nbdcopy of a big sparse device through ramback
# against nbdkit file on the same image.  The image is SIZE (default
# 4G) holding DATA (default 64M) of random data in 64 pieces spread
# over it, the rest holes.  nbdcopy asks the server's block status and
# reads only what is data; the figures say what that costs through
# ramback, fresh (not populated: the file store answers from the
# image's holes, SEEK_DATA) and populated (the chunk map answers from
# RAM), against nbdkit file, and against nbdkit file with the
# noextents filter (every byte copied as data: what a copy costs
# without block status).  Each copy goes to null: (reading only) and
# to a sparse file (checked against the image once per server); for
# ramback the report also has the bytes its store read (loaded_bytes).
# See bench/README.md.
#
#   bench/bench-sparse-copy.sh [--quick] [--build=DIR] [--dir=DIR]
#       [--size=SIZE] [--data=SIZE] [--repeat=N] [--output=FILE]
#       [--plot[=DIR]] [--keep]
#
# Exit status: 0 when the benchmark ran, 1 if something failed to run,
# 2 on bad usage.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage () {
    cat <<END
Usage: $prog [OPTION...]

Time nbdcopy of a sparse device (SIZE holding DATA in 64 pieces)
through ramback, fresh and populated, against nbdkit file on the same
image, with and without block status.

  --build=DIR     ramback build tree (default: \$RAMBACK_BUILD, else the
                  directory above this script if the plugin is there)
  --dir=DIR       where the image goes (default: \${TMPDIR:-/var/tmp});
                  its file system must report holes (SEEK_DATA)
  --size=SIZE     device size (default 4G, --quick 1G)
  --data=SIZE     data in it, 64 pieces (default 64M, --quick 16M)
  --repeat=N      copies per server and destination, median kept
                  (default 5, --quick 2)
  --quick         smaller and fewer
  --output=FILE   also write the report to FILE
  --plot[=DIR]    also draw the table as an SVG chart (gnuplot) in DIR
                  (default: beside --output=, else here)
  --keep          keep the work directory
END
}

size=; data=; repeat=; quick=no; output=; keep=no
workroot=${TMPDIR:-/var/tmp}
build=${RAMBACK_BUILD:-}
for arg in "$@"; do
    case $arg in
        --size=*) size=${arg#*=} ;;
        --data=*) data=${arg#*=} ;;
        --repeat=*) repeat=${arg#*=} ;;
        *) bench_opt "$arg" ;;
    esac
done
if [ "$quick" = yes ]; then
    : "${size:=1G}" "${data:=16M}" "${repeat:=2}"
else
    : "${size:=4G}" "${data:=64M}" "${repeat:=5}"
fi
size_b=$(size_arg "$size")
data_b=$(size_arg "$data")
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "$prog: bad --repeat '$repeat'" >&2; exit 2; }
piece=$(( data_b / 64 ))
[ $(( piece % 65536 )) -eq 0 ] && [ "$piece" -gt 0 ] ||
    { echo "$prog: --data must be a multiple of 4M (64 pieces of 64K)" >&2; exit 2; }
[ $(( size_b / 64 )) -ge $(( 2 * piece )) ] ||
    { echo "$prog: --data must be at most half of --size" >&2; exit 2; }
find_build
for c in nbdkit nbdcopy truncate; do
    command -v "$c" >/dev/null || die "'$c' is needed (apt-get install nbdkit libnbd-bin)"
done
nbdkit --filter=noextents null --dump-plugin >/dev/null 2>&1 ||
    die "nbdkit's noextents filter is missing (apt-get install nbdkit)"

WORK=$(mktemp -d "$workroot/ramback-sparse-copy.XXXXXX")
cleanup () {
    set +e
    kill_servers
    if [ "$keep" = yes ]; then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

IMG=$WORK/disk.img
truncate -s "$size_b" "$IMG"
/usr/bin/python3 - "$IMG" <<'EOP' || die "$WORK ($(fs_type "$WORK")) does not report holes: use --dir="
import os, sys
fd = os.open (sys.argv[1], os.O_RDONLY)
try:
    os.lseek (fd, 0, os.SEEK_DATA)
    sys.exit (1)
except OSError:
    sys.exit (0)
EOP
# One piece in each 64th of the device, at a different place in each.
stride=$(( size_b / 64 ))
for (( i = 0; i < 64; i++ )); do
    off=$(( (i * stride + (i * 131072) % (stride - piece)) / 65536 * 65536 ))
    head -c "$piece" /dev/urandom |
        dd of="$IMG" bs=64K seek=$(( off / 65536 )) conv=notrunc status=none
done
sync
log "image: $size with $data of data in 64 pieces ($(du -h "$IMG" | cut -f1)" \
    "allocated), on $(fs_type "$WORK")"

# copy URI DEST: seconds nbdcopy takes from URI to null: (DEST=null)
# or to a new sparse file, $WORK/copy.img (DEST=file).
copy () {
    local uri=$1 dest=$2 t0 t1
    if [ "$dest" = file ]; then
        rm -f "$WORK/copy.img"
        truncate -s "$size_b" "$WORK/copy.img"
        t0=$(now)
        nbdcopy --destination-is-zero "$uri" "$WORK/copy.img"
    else
        t0=$(now)
        nbdcopy "$uri" null:
    fi
    t1=$(now)
    fsub "$t1" "$t0"
}

declare -A secs loaded
servers=(fresh populated file noextents)
declare -A label=([fresh]="ramback, fresh" [populated]="ramback, populated"
                  [file]="nbdkit file" [noextents]="nbdkit file, noextents")
rb_start () {
    start_server rb "$PLUGIN" back="$IMG" control="$WORK/rb.ctl" "$@"
    wait_ctl "$WORK/rb.ctl"
}

# Fresh: a new ramback for each copy, nothing in RAM yet.
for dest in null file; do
    for (( r = 0; r < repeat; r++ )); do
        rb_start populate=false
        t=$(copy "$rb_uri" "$dest")
        l=$(status_field "$WORK/rb.ctl" loaded_bytes)
        stop_server rb
        secs[fresh,$dest]+=" $t"
        loaded[fresh,$dest]+=" $l"
        log "ramback, fresh, to $dest: $t s, its store read $l bytes"
        if [ "$dest" = file ] && [ "$r" -eq 0 ]; then
            cmp "$IMG" "$WORK/copy.img" || die "the copy through a fresh ramback differs"
        fi
    done
done

# The others, taking turns in each round.
rb_start
ctl_wait "$WORK/rb.ctl" "wait-populated 3600000" >/dev/null
l0=$(status_field "$WORK/rb.ctl" loaded_bytes)
log "ramback, populated: its store read $l0 bytes to populate"
start_server file file "$IMG"
start_server noext --filter=noextents file "$IMG"
declare -A uri=([populated]=$rb_uri [file]=$file_uri [noextents]=$noext_uri)
for dest in null file; do
    for (( r = 0; r < repeat; r++ )); do
        for s in populated file noextents; do
            t=$(copy "${uri[$s]}" "$dest")
            secs[$s,$dest]+=" $t"
            log "${label[$s]} to $dest: $t s"
            if [ "$dest" = file ] && [ "$r" -eq 0 ]; then
                cmp "$IMG" "$WORK/copy.img" || die "the copy from ${label[$s]} differs"
            fi
        done
    done
done
l1=$(status_field "$WORK/rb.ctl" loaded_bytes)
loaded[populated,null]=" $(( l1 - l0 ))"
stop_server rb

report=$WORK/report.txt
# shellcheck disable=SC2086
file_null=$(median ${secs[file,null]})
{
    echo "ramback bench-sparse-copy: $(date -u +%Y-%m-%dT%H:%MZ), $(uname -sr)," \
         "$(nproc) CPUs; $(nbdcopy --version | head -1)"
    echo "a $size device holding $data of random data in 64 pieces, on" \
         "$(fs_type "$WORK"), page cache warm; medians of $repeat copies"
    echo
    printf '%-24s %9s %10s %8s %11s\n' "seconds" "to null:" "to a file" \
        "/ file" "store read"
    for s in "${servers[@]}"; do
        # shellcheck disable=SC2086
        n=$(median ${secs[$s,null]})
        # shellcheck disable=SC2086
        f=$(median ${secs[$s,file]})
        rd=-
        # shellcheck disable=SC2086
        [ -z "${loaded[$s,null]:-}" ] ||
            rd="$(mib "$(median ${loaded[$s,null]})") MiB"
        printf '%-24s %9.3f %10.3f %7.2fx %11s\n' "${label[$s]}" "$n" "$f" \
            "$(fdiv "$n" "$file_null")" "$rd"
        printf '%s\t%s\t%s\n' "${label[$s]}" "$n" "$f" >> "$WORK/plot.tsv"
    done
    echo
    echo "/ file: the copy to null: against nbdkit file's.  store read: what"
    echo "ramback's store read during a copy to null: (loaded_bytes); the"
    echo "populated one read $(mib "$l0") MiB to populate, before."
} > "$report"
plot_bars --log copy "nbdcopy of a $size device holding $data of data" \
    "seconds (log scale)" "to null:" "to a sparse file" < "$WORK/plot.tsv"
bench_finish "$report"
