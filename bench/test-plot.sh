#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# --plot of the benchmarks: plot.py draws a table as a valid SVG (XML
# with an <svg> root, the title, every label and series in it, on a
# linear and a log scale, with a target line); a table that does not
# fit its series is refused with a message; lib.sh's plot_bars writes
# DIR/PREFIX-NAME.svg only with --plot and lists it.

source "$top_builddir/tests/functions.sh"
set -x
command -v gnuplot >/dev/null || fail "gnuplot is missing: run scripts/deps.sh"
PLOT="$top_srcdir/bench/plot.py"

check_svg () {      # check_svg FILE TEXT...: an SVG image showing each TEXT
    /usr/bin/python3 - "$@" <<'EOP'
import sys, xml.etree.ElementTree as ET
root = ET.parse (sys.argv[1]).getroot ()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
assert float (root.get ("width")) > 0 and float (root.get ("height")) > 0
texts = {"".join (t.itertext ()).strip ()
         for t in root.iter ("{http://www.w3.org/2000/svg}text")}
paths = list (root.iter ("{http://www.w3.org/2000/svg}path"))
assert len (paths) >= 10, "%d paths: no bars" % len (paths)
for want in sys.argv[2:]:
    assert want in texts, "%r not among the texts %s" % (want, sorted (texts))
print ("%s: an SVG with %d texts, %d paths" % (sys.argv[1], len (texts), len (paths)))
EOP
}

printf 'randread4k\t44187\t30399\t16785\nfsync4k\t15483\t18351\t2599\nwith space\t1\t-\t3\n' |
    /usr/bin/python3 "$PLOT" "$TMP/log.svg" "fio: 4 KiB jobs" "IOPS" \
        ramback "nbdkit memory" "nbdkit file" --log || fail "plot.py --log failed"
check_svg "$TMP/log.svg" "fio: 4 KiB jobs" IOPS randread4k fsync4k "with space" \
    ramback "nbdkit memory" "nbdkit file" || fail "log.svg"
printf 'drain\t0.65\npopulate\t1.05\n' |
    /usr/bin/python3 "$PLOT" "$TMP/ratio.svg" "against the disk" ratio \
        "ramback/backing" --target=0.9:target || fail "plot.py --target failed"
check_svg "$TMP/ratio.svg" "against the disk" drain populate ramback/backing \
    target || fail "ratio.svg"

# Bad tables: a clear message, no chart.
rc=0
printf 'drain\t1\t2\n' | /usr/bin/python3 "$PLOT" "$TMP/bad.svg" t y one \
    2>"$TMP/err" || rc=$?
cat "$TMP/err"
[ "$rc" -ne 0 ] && [ ! -e "$TMP/bad.svg" ] || fail "a row of 2 values for 1 series was drawn"
grep -q "row 'drain': 2 values for 1 series" "$TMP/err" || fail "no clear message"
rc=0
/usr/bin/python3 "$PLOT" "$TMP/empty.svg" t y one </dev/null 2>"$TMP/err" || rc=$?
[ "$rc" -ne 0 ] && grep -q "no rows to plot" "$TMP/err" || fail "an empty table"

# lib.sh: only with --plot, named after the benchmark, listed.
(
    WORK=$TMP prog=bench-demo.sh srcdir="$top_srcdir/bench"
    source "$top_srcdir/bench/lib.sh"
    printf 'a\t1\n' | plot_bars none "no --plot" y one
    [ ! -e bench-demo-none.svg ] && [ ! -e "$TMP/plots.txt" ] ||
        fail "a chart without --plot"
    bench_opt --plot="$TMP/charts"
    printf 'a\t1\t2\nb\t3\t4\n' | plot_bars --log demo "a demo" y one two
    check_svg "$TMP/charts/bench-demo-demo.svg" "a demo" a b one two ||
        fail "plot_bars' chart"
    [ "$(list_charts)" = "chart: $TMP/charts/bench-demo-demo.svg" ] ||
        fail "list_charts: $(list_charts)"
) || exit 1
echo "plot: ok"
