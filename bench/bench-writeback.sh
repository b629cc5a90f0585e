#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-writeback.sh: what write back costs.  ramback with direct I/O
# (direct-io=auto) and through the page cache (direct-io=false, the
# write path before direct I/O existed), side by side with nbdkit
# memory and nbdkit null, on the same write jobs: fio throughput, CPU
# seconds of the whole nbdkit process per GiB the clients wrote, CPU
# seconds of ramback's write-back thread per GiB it wrote back (per
# thread, from /proc/PID/task/TID/stat), and the write amplification
# (stored_bytes / written_bytes) of 4K random writes, uniform and zipf.
# See bench/README.md.
#
#   bench/bench-writeback.sh [--build=DIR] [--dir=DIR] [--size=SIZE]
#                            [--repeat=N] [--quick] [--output=FILE]
#                            [--plot[=DIR]]

set -euo pipefail
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
export LC_ALL=C
srcdir=$(cd "$(dirname "$0")" && pwd)
build=${RAMBACK_BUILD:-}
if [ -z "$build" ] && [ -f "$srcdir/../plugin/.libs/nbdkit-ramback-plugin.so" ]; then
    build=$srcdir/..
fi
for c in nbdkit fio; do
    command -v "$c" >/dev/null || { echo "${0##*/}: '$c' is needed" >&2; exit 1; }
done
exec /usr/bin/python3 - "$srcdir" "$build" "$@" <<'EOP'
import json, os, re, shutil, signal, socket, statistics as st, subprocess
import sys, tempfile, time

sys.path.insert(0, sys.argv.pop(1))
import plot

prog = "bench-writeback.sh"
build, args = sys.argv[1], sys.argv[2:]
opt = {"dir": os.environ.get("TMPDIR", "/var/tmp"), "size": "1G",
       "repeat": "3", "output": None, "quick": False, "plot": None}
for a in args:
    if a == "--quick":
        opt["quick"] = True
    elif a == "--plot" or a.startswith("--plot="):
        # Charts beside --output=, else here, unless a DIR is given.
        opt["plot"] = a[len("--plot="):] if "=" in a else ""
    elif a in ("-h", "--help"):
        print("usage: bench-writeback.sh [--build=DIR] [--dir=DIR] "
              "[--size=SIZE] [--repeat=N] [--quick] [--output=FILE] "
              "[--plot[=DIR]]")
        sys.exit(0)
    elif a.startswith("--") and "=" in a and a[2:].split("=")[0] in (
            "build", "dir", "size", "repeat", "output"):
        k, v = a[2:].split("=", 1)
        if k == "build":
            build = v
        else:
            opt[k] = v
    else:
        sys.exit("%s: unknown option %r (try --help)" % (prog, a))
if opt["quick"]:
    opt["size"], opt["repeat"] = "256M", "1"
if not build:
    sys.exit("%s: give --build=DIR (the ramback build tree)" % prog)
PLUGIN = os.path.join(os.path.abspath(build),
                      "plugin/.libs/nbdkit-ramback-plugin.so")
if not os.path.exists(PLUGIN):
    sys.exit("%s: plugin not built: %s" % (prog, PLUGIN))

def to_bytes(v):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(v[:-1]) * m[v[-1].upper()] if v[-1].upper() in m else int(v)

size = to_bytes(opt["size"])
half = size // 2
repeat = int(opt["repeat"])
TCK = os.sysconf("SC_CLK_TCK")
GiB = float(1 << 30)
work = tempfile.mkdtemp(prefix="ramback-bench-wb.", dir=opt["dir"])
procs = {}

def log(*a):
    print("[%s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)

def cleanup():
    for p in procs.values():
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(120)
        except Exception:
            p.kill()
    shutil.rmtree(work, ignore_errors=True)

def start(name, *a):
    sock = os.path.join(work, name + ".sock")
    p = subprocess.Popen(["nbdkit", "-f", "-U", sock] + list(a),
                         stdout=open(os.path.join(work, name + ".log"), "w"),
                         stderr=subprocess.STDOUT)
    for _ in range(30000):
        if os.path.exists(sock):
            break
        if p.poll() is not None:
            sys.exit("%s: nbdkit %s failed to start" % (prog, name))
        time.sleep(0.002)
    procs[name] = p
    return "nbd+unix:///?socket=" + sock

def ctl(name, req):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.path.join(work, name + ".ctl"))
    s.sendall((req + "\n").encode())
    out = []
    for line in s.makefile("r"):
        line = line.rstrip("\n")
        if line == "OK":
            return out
        if line.startswith("ERR"):
            sys.exit("%s: control %s: %s" % (prog, req, line))
        out.append(line)
    sys.exit("%s: control connection closed" % prog)

def status(name):
    return json.loads(ctl(name, "status json")[0])

def stat_fields(path):
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()

def cpu(pid):
    """Whole process (dead threads included), and per live thread
    (ticks, nice)."""
    v = stat_fields("/proc/%d/stat" % pid)
    total = int(v[11]) + int(v[12])
    threads = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            w = stat_fields("/proc/%d/task/%s/stat" % (pid, t))
        except OSError:
            continue
        threads[t] = (int(w[11]) + int(w[12]), int(w[16]))
    return total, threads

def fio(uri, name, extra):
    out = os.path.join(work, "fio.json")
    subprocess.run(["fio", "--ioengine=nbd", "--uri=" + uri,
                    "--name=" + name, "--numjobs=2", "--group_reporting",
                    "--size=%d" % half, "--offset_increment=%d" % half,
                    "--output-format=json", "--output=" + out] + extra,
                   check=True, stdout=subprocess.DEVNULL)
    j = json.load(open(out))["jobs"][0]["write"]
    return j["bw_bytes"], j["iops"]

# 4K random writes: 256 MiB of them per run (64 per chunk of a 1 GiB
# device on average), uniform and zipf (a hot spot).
nio = max(size // 4, 1 << 24)
jobs = {
    "seqwrite1m": ["--rw=write", "--bs=1M", "--iodepth=8"],
    "randwrite4k": ["--rw=randwrite", "--bs=4k", "--iodepth=32",
                    "--norandommap", "--randrepeat=0",
                    "--io_size=%d" % (nio // 2)],
    "randwrite4k-zipf": ["--rw=randwrite", "--bs=4k", "--iodepth=32",
                         "--norandommap", "--randrepeat=0",
                         "--random_distribution=zipf:1.2",
                         "--io_size=%d" % (nio // 2)],
}
targets = ["direct", "buffered", "memory", "null"]

try:
    load0 = open("/proc/loadavg").read().split()[:3]
    log("work directory %s, image %s, %d round(s)" % (work, opt["size"], repeat))
    uris = {}
    for t in ("direct", "buffered"):
        img = os.path.join(work, t + ".img")
        subprocess.run(["fio", "--name=create", "--filename=" + img,
                        "--rw=write", "--bs=1M", "--size=%d" % size,
                        "--ioengine=psync", "--end_fsync=1",
                        "--output=/dev/null"], check=True)
        uris[t] = start(t, PLUGIN, "back=" + img,
                        "control=" + os.path.join(work, t + ".ctl"),
                        "direct-io=" + ("auto" if t == "direct" else "false"))
        ctl(t, "wait-populated")
        if status(t).get("store_direct_io") != (t == "direct"):
            sys.exit("%s: %s: store_direct_io is %s (is %s on a file system "
                     "with direct I/O?)" % (prog, t,
                                            status(t).get("store_direct_io"),
                                            work))
    uris["memory"] = start("memory", "memory", str(size))
    uris["null"] = start("null", "null", str(size))
    # memory holds data (its reads and rewrites are then not of holes).
    fio(uris["memory"], "fill", ["--rw=write", "--bs=1M", "--iodepth=8"])

    res = {}          # (job, target) -> list of dicts
    for job, extra in jobs.items():
        for r in range(repeat):
            for t in targets:
                rb = t in ("direct", "buffered")
                if rb:
                    ctl(t, "sync")
                subprocess.run(["sync"])
                pid = procs[t].pid
                c0, th0 = cpu(pid)
                s0 = status(t) if rb else None
                t0 = time.time()
                bw, iops = fio(uris[t], job, extra)
                if rb:
                    ctl(t, "sync")      # write back is part of the cost
                t1 = time.time()
                c1, th1 = cpu(pid)
                d = {"bw": bw, "iops": iops, "wall": t1 - t0,
                     "cpu": (c1 - c0) / TCK}
                if rb:
                    s1 = status(t)
                    written = s1["written_bytes"] - s0["written_bytes"]
                    stored = s1["stored_bytes"] - s0["stored_bytes"]
                    # The write-back thread: the one at nice 5 (populate
                    # has finished, so it is the only one).
                    fl = sum(th1[k][0] - th0.get(k, (0, 0))[0]
                             for k in th1 if th1[k][1] == 5) / TCK
                    d.update(written=written, stored=stored, flusher=fl,
                             amp=stored / written if written else 0,
                             fl_per_gib=fl / (stored / GiB) if stored else 0,
                             fl_per_wgib=fl / (written / GiB),
                             cpu_per_gib=d["cpu"] / (written / GiB))
                else:
                    d["cpu_per_gib"] = d["cpu"] / (nio / GiB if job != "seqwrite1m" else size / GiB)
                res.setdefault((job, t), []).append(d)
                log("%s %s: %.0f MiB/s %.0f IOPS, cpu %.2f s%s" % (
                    job, t, bw / 2**20, iops, d["cpu"],
                    (", flusher %.2f s, stored/written %.0f/%.0f MiB (%.2fx)" % (
                        d["flusher"], d["stored"] / 2**20,
                        d["written"] / 2**20, d["amp"])) if rb else ""))

    med = lambda job, t, k: st.median(d[k] for d in res[(job, t)])
    lines = []
    p = lines.append
    p("ramback bench-writeback: %s, %s, %d CPUs, image %s on %s, fio %s, "
      "2 connections, medians of %d round(s)" % (
          time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
          os.uname().release, os.cpu_count(), opt["size"],
          subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", work],
                         capture_output=True, text=True).stdout.strip(),
          subprocess.run(["fio", "--version"], capture_output=True,
                         text=True).stdout.strip(), repeat))
    p("load average at start: %s, at end: %s" % (
        " ".join(load0), " ".join(open("/proc/loadavg").read().split()[:3])))
    p("")
    p("%-17s %-5s %8s %8s %8s %8s %7s %7s %7s" % (
        "throughput", "unit", "direct", "buffered", "memory", "null",
        "dir/mem", "buf/mem", "dir/nul"))
    for job in jobs:
        k = "bw" if job == "seqwrite1m" else "iops"
        div = 2**20 if k == "bw" else 1
        v = {t: med(job, t, k) / div for t in targets}
        p("%-17s %-5s %8.0f %8.0f %8.0f %8.0f %7.2f %7.2f %7.2f" % (
            job, "MiB/s" if k == "bw" else "IOPS", v["direct"],
            v["buffered"], v["memory"], v["null"],
            v["direct"] / v["memory"], v["buffered"] / v["memory"],
            v["direct"] / v["null"]))
    p("")
    p("%-17s %-5s %8s %8s   (until the data is on the backing store: "
      "the job and a sync)" % ("write + sync", "unit", "direct", "buffered"))
    for job in jobs:
        n = size if job == "seqwrite1m" else nio
        v = {t: n / med(job, t, "wall") for t in ("direct", "buffered")}
        p("%-17s %-5s %8.0f %8.0f" % (job, "MiB/s", v["direct"] / 2**20,
                                      v["buffered"] / 2**20))
    p("")
    p("%-17s %9s %9s %9s %9s %7s" % (
        "CPU s per GiB", "direct", "buffered", "memory", "null", "dir/buf"))
    for job in jobs:
        v = {t: med(job, t, "cpu_per_gib") for t in targets}
        p("%-17s %9.2f %9.2f %9.2f %9.2f %7.2f   (whole process, per GiB "
          "written by clients)" % (job, v["direct"], v["buffered"],
                                   v["memory"], v["null"],
                                   v["direct"] / v["buffered"]))
    for job in jobs:
        v = {t: med(job, t, "fl_per_gib") for t in ("direct", "buffered")}
        p("%-17s %9.2f %9.2f %9s %9s %7.2f   (write-back thread, per GiB "
          "written back)" % (job, v["direct"], v["buffered"], "-", "-",
                             v["direct"] / v["buffered"] if v["buffered"] else 0))
    for job in jobs:
        v = {t: med(job, t, "fl_per_wgib") for t in ("direct", "buffered")}
        p("%-17s %9.2f %9.2f %9s %9s %7.2f   (write-back thread, per GiB "
          "written by clients)" % (job, v["direct"], v["buffered"], "-", "-",
                             v["direct"] / v["buffered"] if v["buffered"] else 0))
    p("")
    p("%-17s %9s %9s   (stored_bytes / written_bytes)" % (
        "write amplification", "direct", "buffered"))
    for job in jobs:
        p("%-17s %9.2f %9.2f" % (job, med(job, "direct", "amp"),
                                 med(job, "buffered", "amp")))
    report = "\n".join(lines) + "\n"
    sys.stdout.write(report)
    if opt["output"]:
        open(opt["output"], "w").write(report)
    if opt["plot"] is not None:
        pdir = opt["plot"] or (os.path.dirname(opt["output"] or "") or ".")
        os.makedirs(pdir, exist_ok=True)
        names = ("direct", "buffered", "memory", "null")
        charts = [
            ("iops", "4 KiB write jobs", "IOPS",
             [(j, [med(j, t, "iops") for t in names])
              for j in jobs if j != "seqwrite1m"]),
            ("cpu", "CPU seconds of the whole nbdkit per GiB clients wrote",
             "CPU s / GiB",
             [(j, [med(j, t, "cpu_per_gib") for t in names]) for j in jobs]),
            ("amplification", "write amplification (stored / written bytes)",
             "stored / written",
             [(j, [med(j, t, "amp") for t in names[:2]]) for j in jobs]),
        ]
        for name, title, ylabel, rows in charts:
            out = os.path.join(pdir, "bench-writeback-%s.svg" % name)
            plot.plot(out, title, ylabel,
                      names[:2] if name == "amplification" else names, rows)
            print("chart: " + out)
finally:
    cleanup()
EOP
