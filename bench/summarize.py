#!/usr/bin/env python3
"""summarize.py - tables and plot data for one scripts/bench-compare.sh run.

    python3 bench/summarize.py RESULTS_DIR

Reads RESULTS_DIR/runs.tsv (one line per run), the JSON each run wrote
(ringcc-bench --json and the same schema from bench/mpi_bench.c and
bench/gloo_bench.cc), ceilings/*.log and versions.txt. Writes:
  table.md     key points, per-n busbw and time tables (medians over the
               repetitions), ratios ringcc/peer, ReduceScatter/AllGather,
               ceilings, noise, failures
  medians.csv  collective,n,config,size,reps,median/min/max time, busbw
  busbw.gp     gnuplot script for busbw.png (+ busbw_n<N>.dat)
Only the out-of-place group is compared: MPI and Gloo run with -I 0.
The median time is taken over the repetitions, and busbw is derived from it
(for an odd number of repetitions that is the median busbw).
"""
import csv
import json
import math
import os
import re
import statistics
import sys

CONFIGS = ["ringcc-shm", "ringcc-reg", "ringcc-tcp", "mpi-vader", "mpi-tcp",
           "gloo-tcp"]
LABELS = {
    "ringcc-shm": "ringcc shm",
    "ringcc-reg": "ringcc registered",
    "ringcc-tcp": "ringcc tcp",
    "mpi-vader": "Open MPI vader",
    "mpi-tcp": "Open MPI tcp",
    "gloo-tcp": "Gloo tcp",
}
# (ringcc configuration, peer) pairs whose ratio is shown.
RATIOS = [("ringcc-shm", "mpi-vader"), ("ringcc-tcp", "mpi-tcp"),
          ("ringcc-tcp", "gloo-tcp"), ("ringcc-reg", "mpi-vader"),
          ("ringcc-reg", "ringcc-shm")]
RATIO_HEAD = {("ringcc-shm", "mpi-vader"): "ratio shm/vader",
              ("ringcc-reg", "mpi-vader"): "ratio registered/vader",
              ("ringcc-reg", "ringcc-shm"): "ratio registered/shm",
              ("ringcc-tcp", "mpi-tcp"): "ratio tcp/MPI tcp",
              ("ringcc-tcp", "gloo-tcp"): "ratio tcp/Gloo"}
BUSBW_FACTOR = {"allreduce": lambda n: 2.0 * (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n,
                "allgather": lambda n: (n - 1) / n}
# The memory floor of a shared-memory collective, as busbw, for the machine's
# copy bandwidth M (read + write): every input read once, every output
# written once, the n ranks sharing M. AllReduce moves 2S per rank (busbw <=
# M(n-1)/n^2); ReduceScatter and AllGather S + S/n (busbw <= M(n-1)/(n(n+1))).
FLOOR = {"allreduce": lambda m, n: m * (n - 1) / n ** 2,
         "reduce_scatter": lambda m, n: m * (n - 1) / (n * (n + 1)),
         "allgather": lambda m, n: m * (n - 1) / (n * (n + 1))}
KEY_SMALL, KEY_LARGE = 8, 64 << 20


def size_label(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def fmt_bw(v):
    if v is None:
        return "–"
    if v >= 0.01:
        return f"{v:.3g}" if v < 10 else f"{v:.1f}"
    return f"{v:.2g}"


def fmt_us(v):
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    r = a / b
    if r < 0.1:
        return f"{r:.1g}×" if r >= 0.01 else f"{r:.2g}×"
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def read_runs(d):
    with open(os.path.join(d, "runs.tsv")) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def collect(d, runs):
    """{(coll, n, config, size): [oop time_us, ...]} and the wrong count."""
    times, wrong = {}, 0
    for r in runs:
        path = os.path.join(d, r["log"][:-4] + ".json")
        if not os.path.exists(path):
            continue
        try:
            with open(path) as f:
                rows = json.load(f)
        except (OSError, ValueError):
            continue
        for row in rows:
            if row.get("oop_time_us") is None:
                continue
            key = (row["collective"], int(row["nranks"]), r["config"],
                   int(row["size"]))
            times.setdefault(key, []).append(float(row["oop_time_us"]))
            for g in ("oop_wrong", "ip_wrong"):
                if row.get(g):
                    wrong += int(row[g])
    return times, wrong


class Stats:
    def __init__(self, coll, n, size, ts):
        self.reps = len(ts)
        self.time = statistics.median(ts)
        self.tmin, self.tmax = min(ts), max(ts)
        self.busbw = size / (self.time * 1e-6) / 1e9 * BUSBW_FACTOR[coll](n)


def medians(times):
    return {k: Stats(k[0], k[1], k[3], v) for k, v in times.items()}


def read_ceilings(d):
    c = {"membw": [], "tcpring": {}}
    p = os.path.join(d, "ceilings", "membw.log")
    if os.path.exists(p):
        for line in open(p):
            m = re.match(r"\s+(\w+)\s+(.+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$", line)
            if m:
                c["membw"].append((m.group(1), m.group(2), int(m.group(3)),
                                   float(m.group(4)), float(m.group(5))))
    cdir = os.path.join(d, "ceilings")
    for name in sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []:
        if not name.startswith("tcpring_n"):
            continue
        for line in open(os.path.join(cdir, name)):
            m = re.match(r"tcpring nranks (\d+) slowest ([\d.]+) median ([\d.]+) "
                         r"mean ([\d.]+) aggregate ([\d.]+)", line)
            if m:
                c["tcpring"][int(m.group(1))] = tuple(float(x) for x in m.groups()[1:])
    return c


def header_lines(d):
    p = os.path.join(d, "versions.txt")
    return [l.rstrip("\n") for l in open(p)] if os.path.exists(p) else []


def table(lines, head, rows, align=None):
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(align or (["---"] + ["---:"] * (len(head) - 1))) + "|")
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    lines.append("")


def write_table(d, st, runs, wrong, ceil, ns, configs, sizes):
    L = []
    reps = max((int(r["rep"]) for r in runs), default=0)
    L.append("# libringcc vs Open MPI and Gloo: side-by-side run")
    L.append("")
    L.append("Made by `scripts/bench-compare.sh` (`make bench-compare`); "
             "methodology in `docs/performance.md`.")
    L.append("")
    L.append("```")
    L.extend(header_lines(d))
    L.append("```")
    L.append("")
    L.append(f"Every number is the **median of {reps} repetitions** (interleaved: "
             "each repetition goes round all configurations). Time: µs per call, "
             "per-call average of the timed loop, max over ranks. busbw in GB/s "
             "(1e9 B/s), nccl-tests factors. Out-of-place, float32 sum. "
             "Ratios are ringcc busbw / peer busbw (= peer time / ringcc time): "
             "**above 1 ringcc is faster, below 1 it is slower**.")
    L.append("")
    L.append("Configurations: " + "; ".join(f"**{LABELS[c]}** (`{c}`)" for c in configs)
             + ".")
    L.append("")

    def get(coll, n, cfg, size):
        return st.get((coll, n, cfg, size))

    # Key points
    L.append("## Key points: AllReduce, 8 B time and 64 MiB busbw")
    L.append("")
    head = ["configuration"]
    for n in ns:
        head += [f"n={n} 8 B (µs)", f"n={n} 64 MiB (GB/s)"]
    rows = []
    for cfg in configs:
        row = [LABELS[cfg]]
        for n in ns:
            s, l = get("allreduce", n, cfg, KEY_SMALL), get("allreduce", n, cfg, KEY_LARGE)
            row += [fmt_us(s.time) if s else "–", fmt_bw(l.busbw) if l else "–"]
        rows.append(row)
    for a, b in RATIOS:
        if a not in configs or b not in configs:
            continue
        row = [f"ratio {LABELS[a]} / {LABELS[b]}"]
        for n in ns:
            sa, sb = get("allreduce", n, a, KEY_SMALL), get("allreduce", n, b, KEY_SMALL)
            la, lb = get("allreduce", n, a, KEY_LARGE), get("allreduce", n, b, KEY_LARGE)
            row += [fmt_ratio(sb.time, sa.time) if sa and sb else "–",
                    fmt_ratio(la.busbw, lb.busbw) if la and lb else "–"]
        rows.append(row)
    table(L, head, rows, ["---"] + ["---:"] * (len(head) - 1))
    L.append("For the 8 B columns the ratio is peer time / ringcc time.")
    L.append("")

    ratio_pairs = [(a, b) for a, b in RATIOS if a in configs and b in configs]
    for n in ns:
        L.append(f"## AllReduce, n = {n}")
        L.append("")
        L.append("busbw (GB/s):")
        L.append("")
        head = ["size"] + [LABELS[c] for c in configs] + \
               [RATIO_HEAD[p] for p in ratio_pairs]
        rows = []
        for size in sizes:
            row = [size_label(size)]
            for cfg in configs:
                s = get("allreduce", n, cfg, size)
                row.append(fmt_bw(s.busbw) if s else "–")
            for a, b in ratio_pairs:
                sa, sb = get("allreduce", n, a, size), get("allreduce", n, b, size)
                row.append(fmt_ratio(sa.busbw, sb.busbw) if sa and sb else "–")
            rows.append(row)
        table(L, head, rows)
        L.append("time (µs per call):")
        L.append("")
        head = ["size"] + [LABELS[c] for c in configs]
        rows = []
        for size in sizes:
            row = [size_label(size)]
            for cfg in configs:
                s = get("allreduce", n, cfg, size)
                row.append(fmt_us(s.time) if s else "–")
            rows.append(row)
        table(L, head, rows)

    extra = sorted({(k[0], k[1], k[3]) for k in st if k[0] != "allreduce"})
    if extra:
        ecfgs = [c for c in configs if c != "gloo-tcp"]
        L.append("## ReduceScatter and AllGather (busbw GB/s, time µs)")
        L.append("")
        L.append("ringcc against `MPI_Reduce_scatter_block` and `MPI_Allgather`; "
                 "size is the full input (reduce_scatter) or the gathered output "
                 "(allgather).")
        L.append("")
        epairs = [p for p in (RATIOS[0], RATIOS[1], RATIOS[3])
                  if p[0] in configs and p[1] in configs]
        head = ["collective", "n", "size"] + [LABELS[c] for c in ecfgs] + \
               [RATIO_HEAD[p] for p in epairs]
        rows = []
        for coll, n, size in extra:
            row = [coll, str(n), size_label(size)]
            for cfg in ecfgs:
                s = get(coll, n, cfg, size)
                row.append(f"{fmt_bw(s.busbw)} ({fmt_us(s.time)} µs)" if s else "–")
            for a, b in epairs:
                sa, sb = get(coll, n, a, size), get(coll, n, b, size)
                row.append(fmt_ratio(sa.busbw, sb.busbw) if sa and sb else "–")
            rows.append(row)
        table(L, head, rows, ["---", "---:", "---:"] + ["---:"] * (len(head) - 3))

    copy = [m for k, _, _, _, m in ceil["membw"] if k == "copy"]
    shm = [c for c in ("ringcc-shm", "ringcc-reg", "mpi-vader") if c in configs]
    if copy and shm:
        m = copy[0]
        L.append("## Against the memory floor (64 MiB)")
        L.append("")
        L.append(f"The floor as busbw for the copy median M = {m:.1f} GB/s of "
                 "this run's `bench/membw` (every input read once, every output "
                 "written once, the n ranks sharing M): AllReduce M(n-1)/n², "
                 "ReduceScatter and AllGather M(n-1)/(n(n+1)). Each cell: "
                 "busbw (share of the floor).")
        L.append("")
        head = ["collective", "n", "floor (GB/s)"] + [LABELS[c] for c in shm]
        rows = []
        for coll, n in sorted({(k[0], k[1]) for k in st if k[3] == KEY_LARGE}):
            if coll not in FLOOR:
                continue
            f = FLOOR[coll](m, n)
            row = [coll, str(n), f"{f:.2f}"]
            for cfg in shm:
                s = get(coll, n, cfg, KEY_LARGE)
                row.append(f"{fmt_bw(s.busbw)} ({100 * s.busbw / f:.0f}%)" if s else "–")
            rows.append(row)
        table(L, head, rows, ["---", "---:", "---:"] + ["---:"] * len(shm))

    L.append("## Ceilings (measured at the start of this run)")
    L.append("")
    if ceil["membw"]:
        L.append("Memory, `bench/membw -s 256M -t 2` (read + write GB/s, best / "
                 "median of 10):")
        L.append("")
        table(L, ["kernel", "threads", "rw best", "rw median"],
              [[f"{k}: {w}", str(t), f"{b:.1f}", f"{m:.1f}"]
               for k, w, t, b, m in ceil["membw"]],
              ["---", "---:", "---:", "---:"])
    if ceil["tcpring"]:
        L.append("Loopback TCP in a ring, `bench/tcpring -N n -t 3` (GB/s per "
                 "link; a ring runs at its slowest link, which bounds TCP busbw):")
        L.append("")
        table(L, ["n", "slowest link", "median link", "aggregate"],
              [[str(n), f"{v[0]:.2f}", f"{v[1]:.2f}", f"{v[3]:.2f}"]
               for n, v in sorted(ceil["tcpring"].items())])

    L.append("## Noise: spread of the repetitions at the key points")
    L.append("")
    L.append("max / min of the per-call time over the repetitions.")
    L.append("")
    head = ["configuration"] + [f"n={n} {size_label(s)}" for n in ns
                                for s in (KEY_SMALL, KEY_LARGE)]
    rows = []
    for cfg in configs:
        row = [LABELS[cfg]]
        for n in ns:
            for s in (KEY_SMALL, KEY_LARGE):
                x = get("allreduce", n, cfg, s)
                row.append(f"{x.tmax / x.tmin:.2f} ({x.reps})" if x else "–")
        rows.append(row)
    table(L, head, rows)

    failed = [r for r in runs if r["rc"] != "0"]
    L.append("## Runs")
    L.append("")
    total = sum(float(r["wall_s"]) for r in runs)
    L.append(f"{len(runs)} runs, {total:.0f} s of benchmark wall time; "
             f"{len(failed)} failed; wrong elements in all checked results: {wrong}.")
    L.append("")
    if failed:
        table(L, ["run", "exit", "wall (s)"],
              [[f"`{r['log']}`", r["rc"] + (" (timeout)" if r["rc"] in ("124", "137") else ""),
                r["wall_s"]] for r in failed], ["---", "---:", "---:"])
    with open(os.path.join(d, "table.md"), "w") as f:
        f.write("\n".join(L))


def write_csv(d, st):
    with open(os.path.join(d, "medians.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["collective", "n", "config", "size", "reps", "time_us_median",
                    "time_us_min", "time_us_max", "busbw_GBps_median"])
        for (coll, n, cfg, size), s in sorted(st.items()):
            w.writerow([coll, n, cfg, size, s.reps, f"{s.time:.3f}", f"{s.tmin:.3f}",
                        f"{s.tmax:.3f}", f"{s.busbw:.6g}"])


def write_plot(d, st, ceil, ns, configs, sizes):
    for n in ns:
        with open(os.path.join(d, f"busbw_n{n}.dat"), "w") as f:
            f.write("# size " + " ".join(configs) + "\n")
            for size in sizes:
                vals = [st.get(("allreduce", n, c, size)) for c in configs]
                f.write(f"{size} " + " ".join(f"{v.busbw:.6g}" if v else "?" for v in vals)
                        + "\n")
    style = {"ringcc-shm": 'lw 2.5 lc rgb "#d62728" pt 7',
             "ringcc-reg": 'lw 2.5 lc rgb "#9467bd" pt 6',
             "ringcc-tcp": 'lw 2.5 lc rgb "#ff7f0e" pt 5',
             "mpi-vader": 'lw 1.5 lc rgb "#1f77b4" pt 9 dt 2',
             "mpi-tcp": 'lw 1.5 lc rgb "#17becf" pt 11 dt 2',
             "gloo-tcp": 'lw 1.5 lc rgb "#2ca02c" pt 13 dt 4'}
    lo, hi = (min(sizes), max(sizes)) if sizes else (8, 1 << 28)
    bws = [v.busbw for k, v in st.items() if k[0] == "allreduce" and v.busbw > 0]
    ylo = 10 ** math.floor(math.log10(min(bws))) if bws else 1e-5
    yhi = max(10.0, 10 ** math.ceil(math.log10(max(bws) * 1.5))) if bws else 10.0
    tics = ", ".join(f'"{size_label(s).replace(" ", "")}" {s}' for s in
                     [8, 1 << 10, 1 << 14, 1 << 20, 1 << 24, 1 << 28] if lo <= s <= hi * 1.01)
    key_h = 0.09  # bottom strip of the figure: one key for all panels
    panel_w, panel_h = 1.0 / len(ns), 0.93 - key_h
    g = [f'set terminal pngcairo size {460 * len(ns) + 40},540 font "sans,10"',
         'set output "busbw.png"',
         'set datafile missing "?"',
         'set multiplot title "AllReduce float32 sum, out of place: '
         'busbw (median) vs size, this machine (2 vCPUs)"',
         "set logscale xy", f"set xrange [{lo / 1.5}:{hi * 1.5}]",
         f"set yrange [{ylo:g}:{yhi:g}]", f"set xtics ({tics})",
         'set format y "10^{%L}"', "set grid xtics ytics mytics lc rgb '#dddddd'",
         'set xlabel "size"', 'set ylabel "busbw (GB/s)"', "unset key",
         f"set size {panel_w:.4f},{panel_h:.4f}"]
    ceiling = 'with lines lw 1 lc rgb "#888888" dt 3'
    for i, n in enumerate(ns):
        g.append(f"set origin {i * panel_w:.4f},{key_h:.4f}")
        g.append(f'set title "n = {n}"')
        parts = [f'"busbw_n{n}.dat" using 1:{j + 2} with linespoints {style[c]}'
                 for j, c in enumerate(configs)]
        if n in ceil["tcpring"]:
            parts.append(f'{ceil["tcpring"][n][0]} {ceiling}')
        g.append("plot " + ", \\\n     ".join(parts))
    # The key: an empty plot across the bottom strip.
    g += [f"set origin 0,0", f"set size 1,{key_h}", "unset title", "unset border",
          "unset tics", "unset grid", "unset xlabel", "unset ylabel", "unset logscale",
          "set xrange [0:1]", "set yrange [0:1]",
          "set lmargin 0", "set rmargin 0", "set tmargin 0", "set bmargin 0",
          "set key center center horizontal maxrows 1 reverse Left samplen 3 "
          "width -1 font ',10'"]
    parts = [f'NaN with linespoints {style[c]} title "{LABELS[c]}"' for c in configs]
    if ceil["tcpring"]:
        parts.append(f'NaN {ceiling} title "TCP ring ceiling"')
    g.append("plot " + ", \\\n     ".join(parts))
    g.append("unset multiplot")
    with open(os.path.join(d, "busbw.gp"), "w") as f:
        f.write("\n".join(g) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py RESULTS_DIR")
    d = sys.argv[1]
    runs = read_runs(d)
    times, wrong = collect(d, runs)
    st = medians(times)
    ceil = read_ceilings(d)
    ns = sorted({k[1] for k in st} | {int(r["n"]) for r in runs})
    present = {r["config"] for r in runs}
    configs = [c for c in CONFIGS if c in present]
    sizes = sorted({k[3] for k in st if k[0] == "allreduce"})
    write_table(d, st, runs, wrong, ceil, ns, configs, sizes)
    write_csv(d, st)
    write_plot(d, st, ceil, ns, configs, sizes)


if __name__ == "__main__":
    main()
