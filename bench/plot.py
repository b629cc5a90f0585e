#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Bar charts of the benchmarks' tables, as SVG, drawn by gnuplot.

  plot.py OUT.svg TITLE YLABEL SERIES... [--log] [--target=Y[:LABEL]]

reads one group of bars per line of standard input: a label, then one
value per SERIES, separated by tabs ("-" or "" for a value not
measured).  --log draws the values on a logarithmic scale (when they
span orders of magnitude: IOPS of RAM against a disk's fsyncs);
--target draws a dashed line at Y (a ratio's target).  bench/lib.sh's
plot_bars calls it for the shell benchmarks, bench-writeback.sh
imports it.
"""

import os
import subprocess
import sys
import tempfile


def gp_string (s):
    """A gnuplot string literal (single quotes: no escapes inside)."""
    return "'" + s.replace ("'", "''") + "'"


def plot (out, title, ylabel, series, rows, log=False, target=None):
    """rows: [(label, [value or None, ...])], one value per series."""
    if not rows:
        raise ValueError ("no rows to plot")
    for label, values in rows:
        if len (values) != len (series):
            raise ValueError ("row %r: %d values for %d series" %
                              (label, len (values), len (series)))
    with tempfile.TemporaryDirectory (prefix="ramback-plot.") as tmp:
        dat = os.path.join (tmp, "data.tsv")
        with open (dat, "w") as f:
            f.write ("\t".join (["label"] + list (series)) + "\n")
            for label, values in rows:
                f.write ("\t".join ([label.replace ("\t", " ")] +
                                    ["-" if v is None else "%.6g" % v
                                     for v in values]) + "\n")
        lines = [
            "set terminal svg size 760,420 noenhanced"
            " font 'sans,11' background rgb 'white'",
            "set output " + gp_string (out),
            "set title " + gp_string (title),
            "set ylabel " + gp_string (ylabel),
            "set datafile separator '\\t'",
            "set datafile missing '-'",
            "set style data histograms",
            "set style histogram clustered gap 1",
            "set style fill solid 0.85 border rgb 'black'",
            "set boxwidth 0.9",
            "set key outside right top noenhanced",
            "set grid ytics",
            "set xtics nomirror noenhanced",
            "set ytics nomirror",
            "set border 3",
        ]
        if log:
            lines.append ("set logscale y")
        else:
            lines.append ("set yrange [0:*]")
        plots = ["%s using %d:xtic(1) title columnheader(%d)" %
                 (gp_string (dat), i + 2, i + 2) for i in range (len (series))]
        if target is not None:
            y, _, tlabel = target.partition (":")
            float (y)
            plots.append ("%s with lines dashtype 2 lw 2 lc rgb 'black' "
                          "title %s" % (y, gp_string (tlabel or "target " + y)))
        lines.append ("plot " + ", \\\n     ".join (plots))
        script = "\n".join (lines) + "\n"
        r = subprocess.run (["gnuplot"], input=script, text=True,
                            capture_output=True)
        if r.returncode != 0 or not os.path.exists (out):
            raise RuntimeError ("gnuplot failed on %s: %s" % (out, r.stderr))


def main (argv):
    log, target, args = False, None, []
    for a in argv[1:]:
        if a == "--log":
            log = True
        elif a.startswith ("--target="):
            target = a[len ("--target="):]
        elif a.startswith ("--") and a != "--":
            sys.exit ("plot.py: unknown option " + a)
        else:
            args.append (a)
    if len (args) < 4:
        sys.exit ("usage: plot.py OUT.svg TITLE YLABEL SERIES... "
                  "[--log] [--target=Y[:LABEL]] < rows")
    out, title, ylabel, series = args[0], args[1], args[2], args[3:]
    rows = []
    for line in sys.stdin:
        line = line.rstrip ("\n")
        if not line:
            continue
        f = line.split ("\t")
        vals = [None if v in ("", "-") else float (v) for v in f[1:]]
        rows.append ((f[0], vals))
    try:
        plot (out, title, ylabel, series, rows, log=log, target=target)
    except (ValueError, RuntimeError) as e:
        sys.exit ("plot.py: %s" % e)


if __name__ == "__main__":
    main (sys.argv)
