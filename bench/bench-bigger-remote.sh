#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-bigger-remote.sh: a device eight times ram-size= over a slow
# link.  The backing store is an NBD export (nbdkit file behind the
# delay filter, 5 ms a request, and the rate filter, 25 Mbit/s), one
# per row so that no row shares its link.  fio (nbd engine) 4K random
# reads and random writes with random_distribution=zipf:1.1 over the
# whole device, queue depth 32, an fsync every 32 writes, side by side:
#   - the export direct;
#   - ramback ram-size= (an eighth of the device), fsync=ignore, with
#     the default chunk and with chunk=4K;
#   - ramback ram-size= with journal= on a local file and fsync=wait,
#     with the default chunk and with chunk=4K (left out, with nbdkit's
#     message, where the plugin refuses it);
#   - ramback holding the whole device (fsync=ignore);
#   - nbdkit's cache filter, cache=writeback, cache-max-size= the same
#     as ram-size=, cache-on-read=true, cache-min-block-size=4K (its
#     smallest: a miss loads 4K, as ramback's does), a reference.
# Every cache starts empty (populate=false) and is warmed by the read
# job first, all at once; the report says how long each took to warm.
# Then the runs, taking turns (paired), medians kept; then scan
# resistance (the read job alone, and beside a sequential read of the
# whole device); and the peak RSS of each ramback against ram-size=.
# See bench/README.md for the targets and what the figures mean.
#
#   bench/bench-bigger-remote.sh [--quick] [--build=DIR] [--dir=DIR]
#       [--size=SIZE] [--delay=MS] [--rate=BITS/S] [--runtime=S]
#       [--repeat=N] [--warm=S] [--output=FILE] [--plot[=DIR]] [--strict]
#       [--keep]
#
# Exit status: 0 when the benchmark ran (targets missed or not, unless
# --strict: then 3 if a target is missed), 1 if something failed to
# run, 2 on bad usage.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage () {
    cat <<END
Usage: $prog [OPTION...]

fio 4K zipf:1.1 random reads and writes over a device eight times
ram-size=, on an NBD export behind a 5 ms delay and a 25 Mbit/s rate:
direct, through ramback (ram-size=, whole device, journal=) and
through nbdkit's cache filter; scan resistance; peak RSS.

  --build=DIR     ramback build tree (default: \$RAMBACK_BUILD, else the
                  directory above this script if the plugin is there)
  --dir=DIR       where the work directory goes (default: \${TMPDIR:-/var/tmp})
  --size=SIZE     device size, a multiple of 8M (default 256M, --quick
                  128M); ram-size= is an eighth of it
  --delay=MS      delay of each request of the export (default 5)
  --rate=BITS     the rate filter's cap, bits per second (default 25M)
  --runtime=S     seconds per fio run, after 2 s not counted (default 6,
                  --quick 4)
  --repeat=N      paired runs, the median kept (default 3, --quick 1)
  --warm=S        seconds of the warm-up read job (default 60, --quick 30)
  --quick         smaller and shorter (about 4 minutes)
  --output=FILE   also write the report to FILE
  --plot[=DIR]    also draw the IOPS as an SVG chart (gnuplot) in DIR
                  (default: beside --output=, else here)
  --strict        exit 3 if a target is missed
  --keep          keep the work directory
END
}

size=; delay=5; rate=25M; runtime=; repeat=; warm=; quick=no; output=
strict=no; keep=no; build=${RAMBACK_BUILD:-}
workroot=${TMPDIR:-/var/tmp}
for arg in "$@"; do
    case $arg in
        --size=*) size=${arg#*=} ;;
        --delay=*) delay=${arg#*=} ;;
        --rate=*) rate=${arg#*=} ;;
        --runtime=*) runtime=${arg#*=} ;;
        --repeat=*) repeat=${arg#*=} ;;
        --warm=*) warm=${arg#*=} ;;
        *) bench_opt "$arg" ;;
    esac
done
if [ "$quick" = yes ]; then
    : "${size:=128M}" "${runtime:=4}" "${repeat:=1}" "${warm:=30}"
else
    : "${size:=256M}" "${runtime:=6}" "${repeat:=3}" "${warm:=60}"
fi
size_b=$(size_arg "$size")
rate_b=$(size_arg "$rate")
[ $(( size_b % (8 << 20) )) -eq 0 ] && [ "$size_b" -ge $(( 64 << 20 )) ] ||
    { echo "$prog: --size must be a multiple of 8M, at least 64M" >&2; exit 2; }
for v in "$delay" "$runtime" "$repeat" "$warm"; do
    [[ $v =~ ^[0-9]+$ ]] || { echo "$prog: bad number '$v'" >&2; exit 2; }
done
[ "$runtime" -ge 1 ] && [ "$repeat" -ge 1 ] && [ "$warm" -ge 10 ] ||
    { echo "$prog: --runtime and --repeat must be at least 1, --warm 10" >&2; exit 2; }
ram_b=$(( size_b / 8 ))
journal_b=$(( 64 << 20 ))       # the journal= rows' journal file
ram=$(mib "$ram_b")M
find_build
for c in nbdkit fio /usr/bin/python3; do
    command -v "$c" >/dev/null || die "'$c' is needed (apt-get install nbdkit fio python3)"
done

bench_workdir bigger-remote

# The rows: name, then nbdkit's arguments after the link's URI ($link).
rows=(direct rb rb4k journal journal4k whole cache)
declare -A label=([direct]="the export direct"
                  [rb]="ramback ram-size=$ram"
                  [rb4k]="ramback ram-size=$ram chunk=4K"
                  [journal]="ramback ram-size=$ram journal= fsync=wait"
                  [journal4k]="ramback ram-size=$ram chunk=4K journal= fsync=wait"
                  [whole]="ramback, whole device"
                  [cache]="nbdkit cache, max $ram")
rambacks=(rb rb4k journal journal4k whole)
declare -A uri alive

head -c "$size_b" /dev/urandom > "$WORK/image"
log "image: $size of random data on $(fs_type "$WORK"); ram-size=$ram;" \
    "each row its own export: delay ${delay}ms, rate $rate bit/s"

# Each row: its own copy of the image behind its own delay and rate
# filters (the rate filter's bucket is per nbdkit), then the cache.
for row in "${rows[@]}"; do
    cp "$WORK/image" "$WORK/$row.img"
    start_server "link_$row" --filter=delay --filter=rate file "$WORK/$row.img" \
        delay-read="${delay}ms" delay-write="${delay}ms" rate="$rate_b"
    linkv=link_${row}_uri
    link=${!linkv}
    ok=yes
    case $row in
        direct) uri[$row]=$link ;;
        rb) try_server rb "$PLUGIN" back="$link" control="$WORK/rb.ctl" \
                populate=false ram-size="$ram_b" || ok=no ;;
        rb4k) try_server rb4k "$PLUGIN" back="$link" control="$WORK/rb4k.ctl" \
                  populate=false ram-size="$ram_b" chunk=4K || ok=no ;;
        journal|journal4k)
            head -c "$journal_b" /dev/zero > "$WORK/$row.jnl"
            extra=()
            [ "$row" = journal ] || extra=(chunk=4K)
            try_server "$row" "$PLUGIN" back="$link" control="$WORK/$row.ctl" \
                populate=false ram-size="$ram_b" journal="$WORK/$row.jnl" \
                fsync=wait "${extra[@]}" 2>/dev/null || ok=no ;;
        whole) try_server whole "$PLUGIN" back="$link" control="$WORK/whole.ctl" \
                   populate=false || ok=no ;;
        cache) try_server cache --filter=cache nbd socket="$WORK/link_$row.sock" \
                   cache=writeback cache-max-size="$ram_b" cache-on-read=true \
                   cache-min-block-size=4K ||
                   ok=no ;;
    esac
    if [ "$ok" = no ]; then
        # Why it was refused: nbdkit's last error line.
        why=$(grep -v '^nbdkit: debug' "$WORK/$row.log" | grep -i 'error\|ramback' |
              tail -n1 | sed 's/^nbdkit: //')
        log "${label[$row]}: not started: $why"
        alive[$row]=no
        echo "$why" > "$WORK/$row.why"
        stop_server "link_$row"
        continue
    fi
    alive[$row]=yes
    if [ "$row" != direct ]; then
        uv=${row}_uri
        uri[$row]=${!uv}
    fi
done

# Resident memory of a process, kB: VmRSS or VmHWM (the peak).
vm () { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
declare -A rss0
for row in "${rambacks[@]}"; do
    [ "${alive[$row]}" = yes ] || continue
    wait_ctl "$WORK/$row.ctl"
    pv=${row}_pid
    rss0[$row]=$(vm "${!pv}" VmRSS)
done

# The RAM image's resident memory (the anonymous mapping of the
# device's size), sampled every 0.2 s while the benchmark runs: its
# peak, kB, in $WORK/ROW.img-peak.  What is not the image (libraries,
# nbdkit's request buffers, malloc's arenas) is the rest of VmHWM.
image_map () {
    local r lo hi
    while read -r r _; do
        lo=${r%-*} hi=${r#*-}
        if (( 16#$hi - 16#$lo == size_b )); then echo "$r"; return 0; fi
    done < <(grep -E '^[0-9a-f]+-[0-9a-f]+ ' "/proc/$1/smaps")
    return 1
}
image_rss () {
    awk -v m="$2" '$1 == m { f = 1 } f && /^Rss:/ { print $2; exit }' \
        "/proc/$1/smaps" 2>/dev/null
}
declare -A imgmap
for row in "${rambacks[@]}"; do
    [ "${alive[$row]}" = yes ] || continue
    pv=${row}_pid
    imgmap[$row]=$(image_map "${!pv}") || die "no RAM image mapping in nbdkit $row"
done
sample_rss () {
    local row pv r peak
    declare -A peaks
    while :; do
        for row in "${rambacks[@]}"; do
            [ "${alive[$row]}" = yes ] || continue
            pv=${row}_pid
            r=$(image_rss "${!pv}" "${imgmap[$row]}") || r=
            [ -n "$r" ] || continue
            peak=${peaks[$row]:-0}
            if [ "$r" -gt "$peak" ]; then
                peaks[$row]=$r
                echo "$r" > "$WORK/$row.img-peak"
            fi
        done
        sleep 0.2
    done
}
sample_rss &
sampler=$!

# zipf JOB URI OUT: the zipf job; prints IOPS.  The first 2 seconds
# are not counted: the rate filter lets an idle link burst for 2
# seconds (its burstiness=), which would count for more in short runs.
zipf () {
    fio_nbd "$2" "$3" --name="zipf-$1" --rw="$1" --bs=4k --iodepth=32 \
        --random_distribution=zipf:1.1 --fsync=32 --size="$size_b" \
        --time_based --ramp_time=2 --runtime="$runtime"
    fio_metric "$3" "${1#rand}" iops
}

# counters ROW: hits misses evictions demand_loaded_bytes (0s for a row
# that is not a ramback).
counters () {
    if [ -S "$WORK/$1.ctl" ] && [ "${alive[$1]}" = yes ]; then
        status_fields "$WORK/$1.ctl" hits misses evictions demand_loaded_bytes |
            tr '\n' ' '
    else
        echo "0 0 0 0"
    fi
}

# Warm-up: the read job on every cache at once (each has its own link),
# IOPS logged per second.
log "warming every cache: the read job for ${warm}s, all at once"
wpids=()
for row in "${rows[@]}"; do
    [ "$row" != direct ] && [ "${alive[$row]}" = yes ] || continue
    ( cd "$WORK" && fio --ioengine=nbd --uri="${uri[$row]}" --name="warm-$row" \
          --rw=randread --bs=4k --iodepth=32 --random_distribution=zipf:1.1 \
          --size="$size_b" --time_based --runtime="$warm" \
          --write_iops_log="warm-$row" --log_avg_msec=1000 \
          --output-format=json --output="warm-$row.json" >/dev/null ) &
    wpids+=($!)
done
# Meanwhile the counters of each ram-size= ramback, about every second:
# its hit ratio does not depend on how much CPU the others take.
t0=$(now)
while kill -0 "${wpids[0]}" 2>/dev/null; do
    sleep 1
    for row in rb rb4k journal journal4k; do
        [ "${alive[$row]}" = yes ] || continue
        echo "$(fsub "$(now)" "$t0") $(counters "$row")" >> "$WORK/warm-$row.hits"
    done
done
for p in "${wpids[@]}"; do wait "$p" || die "a warm-up fio failed"; done

# warm_time ROW: "SECONDS IOPS-AT-THE-END": the first second from which
# the mean of 3 seconds reaches 90% of that of the last 5.
warm_time () {
    /usr/bin/python3 - "$WORK/warm-$1_iops.1.log" <<'EOP'
import sys
v = {}
for line in open (sys.argv[1]):
    f = line.split (",")
    v.setdefault (int (f[0]) // 1000, 0)
    v[int (f[0]) // 1000] += int (f[1])
s = [v.get (i, 0) for i in range (1, max (v) + 1)]
end = sum (s[-5:]) / len (s[-5:])
t = next ((i for i in range (len (s) - 2)
           if sum (s[i:i + 3]) / 3 >= 0.9 * end), len (s))
print (t, round (end))
EOP
}
# warm_hits ROW: "SECONDS MISS-RATIO": the first sample from which the
# miss ratio of the 3 seconds before is within 10% (+0.01) of that of
# the last 5 seconds.
warm_hits () {
    /usr/bin/python3 - "$WORK/warm-$1.hits" <<'EOP'
import sys
s = [[float (x) for x in l.split ()[:3]] for l in open (sys.argv[1])]
def miss (a, b):
    h, m = b[1] - a[1], b[2] - a[2]
    return m / (h + m) if h + m else 1.0
def back (i, secs):
    j = i
    while j > 0 and s[i][0] - s[j][0] < secs:
        j -= 1
    return j
end = miss (s[back (len (s) - 1, 5)], s[-1])
t = next ((s[i][0] for i in range (1, len (s))
           if miss (s[back (i, 3)], s[i]) <= end * 1.1 + 0.01), s[-1][0])
print ("%.0f %.3f" % (t, end))
EOP
}
declare -A warmed warmedh
for row in "${rows[@]}"; do
    [ "$row" != direct ] && [ "${alive[$row]}" = yes ] || continue
    warmed[$row]=$(warm_time "$row")
    msg="${label[$row]}: warm after ${warmed[$row]% *}s by IOPS (${warmed[$row]#* } at the end)"
    if [ -s "$WORK/warm-$row.hits" ]; then
        warmedh[$row]=$(warm_hits "$row")
        msg+=", ${warmedh[$row]% *}s by misses (miss ratio ${warmedh[$row]#* } at the end)"
    fi
    log "$msg"
done

# The runs: job by job, the rows taking turns.
declare -A res cnt
for (( i = 1; i <= repeat; i++ )); do
    for rw in randread randwrite; do
        for row in "${rows[@]}"; do
            [ "${alive[$row]}" = yes ] || continue
            read -r -a c0 <<<"$(counters "$row")"
            v=$(zipf "$rw" "${uri[$row]}" "$WORK/$rw-$row.json")
            read -r -a c1 <<<"$(counters "$row")"
            res[$rw,$row]+=" $v"
            h=$(( c1[0] - c0[0] )) m=$(( c1[1] - c0[1] ))
            cnt[$rw,$row]+=" $h,$m,$(( c1[2] - c0[2] )),$(( c1[3] - c0[3] ))"
            log "run $i: $rw ${label[$row]}: ${v%.*} IOPS (hits $h, misses $m)"
        done
    done
done

# Scan resistance: the read job alone, then beside a sequential read
# of the whole device (1M requests, queue depth 1, from the start).
declare -A scan
for row in rb rb4k; do
    [ "${alive[$row]}" = yes ] || continue
    read -r -a c0 <<<"$(counters "$row")"
    alone=$(zipf randread "${uri[$row]}" "$WORK/alone-$row.json")
    read -r -a c1 <<<"$(counters "$row")"
    fio_nbd "${uri[$row]}" "$WORK/scan-$row.json" --name=scan --rw=read \
        --bs=1M --iodepth=1 --size="$size_b" --time_based \
        --runtime="$(( runtime + 4 ))" &
    sp=$!
    sleep 1
    with=$(zipf randread "${uri[$row]}" "$WORK/with-$row.json")
    read -r -a c2 <<<"$(counters "$row")"
    wait "$sp" || die "the scan failed"
    sbw=$(fio_metric "$WORK/scan-$row.json" read bw_bytes)
    h1=$(( c1[0] - c0[0] )) m1=$(( c1[1] - c0[1] ))
    h2=$(( c2[0] - c1[0] )) m2=$(( c2[1] - c1[1] ))
    scan[$row]="$alone $with $h1 $m1 $h2 $m2 $sbw"
    log "scan on ${label[$row]}: $alone IOPS alone, $with beside the scan" \
        "($(mib "$sbw") MiB/s)"
done

# Peak RSS, before the servers stop (ramback drains at a clean stop).
kill "$sampler"
wait "$sampler" 2>/dev/null || true
declare -A hwm
for row in "${rambacks[@]}"; do
    [ "${alive[$row]}" = yes ] || continue
    pv=${row}_pid
    hwm[$row]="$(vm "${!pv}" VmHWM) $(cat "$WORK/$row.img-peak" 2>/dev/null || echo 0)"
done
# Killed: a clean stop would write the dirty data back over the link.
for row in "${rows[@]}"; do
    [ "${alive[$row]}" = yes ] && [ "$row" != direct ] || continue
    pv=${row}_pid
    kill -KILL "${!pv}" 2>/dev/null || true
done
kill_servers

# The report (python: the arithmetic and the table).
args=()
for row in "${rows[@]}"; do
    args+=("$row.label=${label[$row]}" "$row.alive=${alive[$row]}")
    [ -f "$WORK/$row.why" ] && args+=("$row.why=$(cat "$WORK/$row.why")")
    [ -z "${warmed[$row]:-}" ] || args+=("$row.warm=${warmed[$row]}")
    [ -z "${warmedh[$row]:-}" ] || args+=("$row.warmh=${warmedh[$row]}")
    [ -z "${rss0[$row]:-}" ] || args+=("$row.rss0=${rss0[$row]}" "$row.hwm=${hwm[$row]}")
    [ -z "${scan[$row]:-}" ] || args+=("$row.scan=${scan[$row]}")
    for rw in randread randwrite; do
        [ -z "${res[$rw,$row]:-}" ] || args+=("$rw.$row=${res[$rw,$row]# }"
                                             "$rw.$row.cnt=${cnt[$rw,$row]# }")
    done
done
report=$WORK/report.txt
{
    echo "ramback bench-bigger-remote: $(date -u +%Y-%m-%dT%H:%MZ), $(uname -sr)," \
         "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $(fio --version)"
    /usr/bin/python3 - "$WORK/plot.tsv" "$size" "$ram" "$ram_b" "$delay" \
        "$rate" "$runtime" "$repeat" "$warm" "$journal_b" "${args[@]}" <<'EOP'
import statistics, sys
plot, size, ram, ram_b, delay, rate, runtime, repeat, warm, journal_b = sys.argv[1:11]
ram_b = int (ram_b)
journal_b = int (journal_b)
v = dict (a.split ("=", 1) for a in sys.argv[11:])
rows = ["direct", "rb", "rb4k", "journal", "journal4k", "whole", "cache"]
med = lambda k: statistics.median (float (x) for x in v[k].split ())
print ("a %s device of random data, ram-size=%s; each row its own NBD export "
       "(nbdkit file, delay %s ms, rate %s bit/s); fio nbd engine, 4K, "
       "zipf:1.1 over the whole device, iodepth 32, fsync=32; %s s runs "
       "(after 2 s not counted), "
       "medians of %s paired; every cache warmed first by %s s of the read "
       "job" % (size, ram, delay, rate, runtime, repeat, warm))
print ()
# name, IOPS read, x direct, hit ratio, IOPS write, x direct, hit ratio, target
def hit (k):
    h = m = 0
    for run in v.get (k + ".cnt", "").split ():
        a = run.split (",")
        h += int (a[0]); m += int (a[1])
    return "%.3f" % (h / (h + m)) if h + m else "-"
missed = []
def target (row, rw, x):
    t = {("rb", "randread"): 5, ("rb", "randwrite"): 20,
         ("rb4k", "randread"): 5, ("rb4k", "randwrite"): 20,
         ("journal", "randwrite"): 4,
         ("journal4k", "randwrite"): 4}.get ((row, rw))
    if t is None:
        return ""
    ok = x >= t
    if not ok:
        missed.append ("%s %s" % (row, rw))
    return ">= %dx %s" % (t, "ok" if ok else "MISS")
table = [("IOPS", "randread", "x direct", "hits", "randwrite", "x direct",
          "hits", "targets")]
d = {rw: med (rw + ".direct") for rw in ("randread", "randwrite")}
for row in rows:
    if v[row + ".alive"] != "yes":
        table.append ((v[row + ".label"], "-", "", "", "-", "", "",
                       "not measured"))
        continue
    cells = [v[row + ".label"]]
    tg = []
    for rw in ("randread", "randwrite"):
        x = med (rw + "." + row)
        cells += ["%.0f" % x, "%.2f" % (x / d[rw]),
                  hit (rw + "." + row) if row in ("rb", "rb4k", "journal", "journal4k") else ""]
        t = target (row, rw, x / d[rw])
        if t:
            tg.append (rw[4:] + " " + t)
    cells.append ("; ".join (tg))
    table.append (tuple (cells))
    with open (plot, "a") as f:
        f.write ("%s\t%s\t%s\n" % (cells[0], cells[1], cells[4]))
w = [max (len (r[i]) for r in table) for i in range (len (table[0]))]
for r in table:
    print ("  ".join (c.ljust (w[i]) for i, c in enumerate (r)).rstrip ())
for row in rows:
    if row + ".why" in v:
        print ("%s: not measured, nbdkit refused it: %s" % (v[row + ".label"], v[row + ".why"]))
print ()
# Bigger than RAM against the whole device.
if v["whole.alive"] == "yes":
    for row in ("rb", "rb4k"):
        if v[row + ".alive"] != "yes":
            continue
        r = [med (rw + "." + row) / med (rw + ".whole") for rw in ("randread", "randwrite")]
        ok = all (x >= 0.8 for x in r)
        if not ok:
            missed.append (row + " against whole")
        print ("%s / whole device: read %.2f, write %.2f (target >= 0.8: %s)"
               % (v[row + ".label"], r[0], r[1], "ok" if ok else "MISS"))
print ()
print ("Warm-up: the read job for %s s on every cache at once, from empty "
       "(populate=false).  Warm by IOPS: from the first second whose 3-second "
       "mean is within 90%% of the last 5 seconds' (the caches share the "
       "CPUs then); by misses (ram-size= only): from the first second whose "
       "miss ratio over the 3 before is within 10%% (+0.01) of the last 5 "
       "seconds':" % warm)
for row in rows:
    if row + ".warm" in v:
        t, end = v[row + ".warm"].split ()
        line = "  %-50s by IOPS %3s s (%5s at the end)" % (v[row + ".label"], t, end)
        if row + ".warmh" in v:
            t, end = v[row + ".warmh"].split ()
            line += ", by misses %3s s (miss ratio %s at the end)" % (t, end)
        print (line)
print ()
print ("Scan resistance (the read job alone, then beside fio reading the "
       "whole device sequentially, 1M requests, queue depth 1):")
for row in rows:
    if row + ".scan" not in v:
        continue
    alone, with_, h1, m1, h2, m2, sbw = (float (x) for x in v[row + ".scan"].split ())
    ok = with_ >= 0.8 * alone
    if not ok:
        missed.append (row + " scan")
    print ("  %-50s %6.0f IOPS alone (hits %.3f), %6.0f beside the scan (hits %.3f, "
           "scan %.1f MiB/s): %.2f (target >= 0.8: %s)"
           % (v[row + ".label"], alone, h1 / max (h1 + m1, 1), with_,
              h2 / max (h2 + m2, 1), sbw / 1048576, with_ / alone,
              "ok" if ok else "MISS"))
print ()
overhead = 48 << 20
print ("Memory: peak RSS (VmHWM) against ram-size= + 5%% + %d MiB (the fixed "
       "overhead: libraries, about 25 MiB at start, nbdkit's request buffers "
       "and malloc's arenas), and with journal= + twice the journal's %d MiB "
       "(its transactions wait in memory for the applier: the man page's "
       "bound); the RAM image's own peak (sampled every 0.2 s) "
       "against ram-size= + 5%%:" % (overhead >> 20, journal_b >> 20))
for row in ("rb", "rb4k", "journal", "journal4k", "whole"):
    if row + ".hwm" not in v:
        continue
    hwm, img = (int (x) * 1024 for x in v[row + ".hwm"].split ())
    rss0 = int (v[row + ".rss0"]) * 1024
    m = lambda b: b / 1048576
    if row == "whole":
        print ("  %-50s peak %5.1f MiB (image %5.1f), %5.1f MiB at start "
               "(no ram-size=)" % (v[row + ".label"], m (hwm), m (img), m (rss0)))
        continue
    lim = ram_b * 1.05 + overhead
    if row.startswith ("journal"):
        lim += 2 * journal_b
    ok = hwm <= lim and img <= ram_b * 1.05
    if not ok:
        missed.append (row + " memory")
    print ("  %-50s peak %5.1f MiB (limit %5.1f), image %5.1f MiB (limit %5.1f), "
           "%5.1f MiB at start: %s"
           % (v[row + ".label"], m (hwm), m (lim), m (img), m (ram_b * 1.05),
              m (rss0), "ok" if ok else "MISS"))
if missed:
    print ()
    print ("MISSED: " + ", ".join (missed))
EOP
} > "$report"
plot_bars --log iops "4K zipf:1.1, a $size device, ram-size=$ram, over a ${delay} ms, $rate bit/s link" \
    "IOPS (log scale)" randread randwrite < "$WORK/plot.tsv"
bench_finish "$report"
