#!/usr/bin/python3
"""The table of tests/bench/knn.sh from its output folder:

  knn_report.py OUT [--json FILE] [--seconds S] [--quick]

OUT holds scps-1x2.json and scps-2x1.json (scps-bench-knn: 1 process x 2
SparseCores, 2 processes x 1), faiss-flat-passive.json and
faiss-flat-active.json (knn_faiss.py's flat index under OMP_WAIT_POLICY
passive and active), faiss-roofline-0.json and -1.json (the roofline after
each cluster) and faiss-index.json (IVF, HNSW). Prints
markdown: per k and mode, scps's queries/s and recall next to FAISS's flat
(the better of the two wait policies), IVF and HNSW indexes (with their build
times), the ratio to FAISS flat; then the scan's attained GFLOP/s
(2 Q N D / median time) and bytes/s (N D 4 / median time) against the
measured peaks (the best of the measurements), the roofline bound
min(sgemm peak, read peak x Q / 2 flop per byte) and the fraction of it
reached; and the two verdicts of the issue: approximate mode at recall >= the
target with at least 1.0x FAISS flat's queries/s, and within 2x of the
roofline bound (attained >= 0.5 x bound). Exits 1 when a figure the table needs
is missing (a step failed), never for a verdict.
"""

import argparse
import json
import os
import sys

TOPOS = ("1x2", "2x1")
TOPO_NAME = {"1x2": "1 proc x 2 SC", "2x1": "2 procs x 1 SC"}


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--json")
    p.add_argument("--seconds", type=int)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()

    missing = []
    scps = {}
    for topo in TOPOS:
        for r in lines(os.path.join(a.out, f"scps-{topo}.json")):
            scps[(topo, r["k"], r["mode"])] = r
    faiss = {}
    roofs = []
    for name in ("faiss-flat-passive.json", "faiss-flat-active.json", "faiss-roofline-0.json",
                 "faiss-roofline-1.json", "faiss-index.json"):
        for r in lines(os.path.join(a.out, name)):
            if r.get("bench") == "roofline":
                roofs.append(r)
                continue
            key = (r["index"], r["k"])
            old = faiss.get(key)
            # The better of the two wait policies (flat is measured under both).
            if old is None or (r.get("qps") or 0) > (old.get("qps") or 0):
                faiss[key] = r
    # The peaks are the best seen: the sgemm figures from one measurement,
    # the read figures from the best one.
    roof = None
    if roofs:
        roof = dict(max(roofs, key=lambda r: r["sgemm_gflops"]))
        best_read = max(roofs, key=lambda r: r["read_gbps"])
        for f in ("read_gbps", "read_sum_gbps", "read_dot_gbps"):
            roof[f] = best_read[f]
        roof["measurements"] = len(roofs)
    if not scps:
        sys.exit(f"knn_report.py: no scps-bench-knn output in '{a.out}'")
    any_r = next(iter(scps.values()))
    rows, dim, queries, target = any_r["rows"], any_r["dim"], any_r["queries"], None
    ks = sorted({k for (_, k, _) in scps})
    for (topo, k, mode), r in scps.items():
        if mode == "approx":
            target = r["recall_target"]
    for topo in TOPOS:
        for k in ks:
            for mode in ("exact", "approx"):
                if (topo, k, mode) not in scps:
                    missing.append(f"scps {topo} k {k} {mode}")
    for k in ks:
        for index in ("flat", "ivf") + (() if a.quick else ("hnsw",)):
            if (index, k) not in faiss:
                missing.append(f"FAISS {index} k {k}")
    if roof is None:
        missing.append("roofline")

    flops = 2.0 * queries * rows * dim
    nbytes = 4.0 * rows * dim
    intensity = flops / nbytes
    bound = None
    if roof:
        bound = min(roof["sgemm_gflops"], roof["read_gbps"] * intensity)

    head = f"## TopK retrieval: {rows:,} rows x {dim}, {queries} queries"
    if target is not None:
        head += f", recall target {target}"
    threads = roof["threads"] if roof else None
    if threads:
        head += f", FAISS and roofline on {threads} threads"
    if a.seconds is not None:
        head += f" ({a.seconds} s run)"
    print(head)
    print()
    print("Queries/s of one batch (queries / median latency); scps over loopback, FAISS in-process.")
    print()
    print("| k | mode | scps 1x2 q/s | scps 2x1 q/s | recall 1x2 / 2x1 | bins L (expected recall) "
          "| FAISS flat q/s | IVF q/s (nprobe; build s) | HNSW q/s (efSearch; build s) | scps / flat 1x2, 2x1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    results = []
    verdicts = []
    for k in ks:
        flat = faiss.get(("flat", k))
        for mode in ("exact", "approx"):
            s = {t: scps.get((t, k, mode)) for t in TOPOS}
            ratio = {t: (s[t]["qps"] / flat["qps"]) if s[t] and flat else None for t in TOPOS}
            rec = " / ".join(fmt(s[t]["recall"], 4) if s[t] else "-" for t in TOPOS)
            one = s["1x2"] or s["2x1"]
            bins = f"{one['bins']} ({one['expected_recall']:.4f})" if one and mode == "approx" else "exact"

            def index_cell(name, param):
                r = faiss.get((name, k))
                if mode == "exact":
                    return "-"
                if r is None:
                    return "-"
                if not r.get("reached"):
                    return f"recall {r['recall']:.3f} at most"
                on = ""
                if r.get("rows_indexed", rows) < rows:
                    on = f"; on the first {r['rows_indexed']:,} rows"
                return f"{fmt(r['qps'])} ({param} {r['value']}; {r['build_s']:.1f}{on})"

            print(f"| {k} | {mode} | {fmt(s['1x2'] and s['1x2']['qps'])} | {fmt(s['2x1'] and s['2x1']['qps'])} "
                  f"| {rec} | {bins} | {fmt(flat and flat['qps'])} | {index_cell('ivf', 'nprobe')} "
                  f"| {index_cell('hnsw', 'efSearch')} "
                  f"| {', '.join(fmt(ratio[t], 2) + 'x' if ratio[t] is not None else '-' for t in TOPOS)} |")
            for t in TOPOS:
                if not s[t]:
                    continue
                sec = s[t]["median_ms"] * 1e-3
                gflops, gbps = flops / sec / 1e9, nbytes / sec / 1e9
                frac = gflops / bound if bound else None
                results.append(dict(k=k, mode=mode, topology=t, qps=s[t]["qps"], median_ms=s[t]["median_ms"],
                                    p90_ms=s[t]["p90_ms"], recall=s[t]["recall"], bins=s[t]["bins"],
                                    expected_recall=s[t]["expected_recall"], faiss_flat_qps=flat and flat["qps"],
                                    ratio_to_flat=ratio[t], gflops=gflops, gbps=gbps, roofline_fraction=frac))
    for k in ks:
        r = faiss.get(("hnsw", k))
        if r and r.get("subset_reason"):
            print()
            print(f"HNSW: {r['subset_reason']}.")
            break
    print()
    if roof:
        print(f"Roofline: sgemm of {queries} queries x {dim} and blocks of {roof['sgemm_block']} rows "
              f"({roof['sgemm_orientation']}) over the table "
              f"{roof['sgemm_gflops']:.1f} GFLOP/s (square 2048 sgemm {roof['sgemm_square_gflops']:.1f}); "
              f"read of the table {roof['read_gbps']:.1f} GB/s (sum {roof['read_sum_gbps']:.1f}, "
              f"dot {roof['read_dot_gbps']:.1f}); intensity {intensity:.0f} flop/byte, so the bound is "
              f"{bound:.1f} GFLOP/s ({'compute' if bound == roof['sgemm_gflops'] else 'memory'} bound); "
              f"the best of {roof['measurements']} measurements.")
        print()
    print("| k | mode | topology | median ms | p90 ms | GFLOP/s (of sgemm peak) | GB/s (of read peak) "
          "| of roofline bound | >= 1.0x FAISS flat | within 2x of roofline |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        pk = f" ({100 * r['gflops'] / roof['sgemm_gflops']:.0f}%)" if roof else ""
        pb = f" ({100 * r['gbps'] / roof['read_gbps']:.0f}%)" if roof else ""
        approx = r["mode"] == "approx"
        t1 = t2 = "-"
        if approx:
            ok1 = r["ratio_to_flat"] is not None and r["ratio_to_flat"] >= 1.0 and r["recall"] >= target
            ok2 = r["roofline_fraction"] is not None and r["roofline_fraction"] >= 0.5
            t1, t2 = ("yes" if ok1 else "no"), ("yes" if ok2 else "no")
            r["target_flat"], r["target_roofline"] = ok1, ok2
            verdicts.append(r)
        print(f"| {r['k']} | {r['mode']} | {TOPO_NAME[r['topology']]} | {r['median_ms']:.2f} | {r['p90_ms']:.2f} "
              f"| {r['gflops']:.1f}{pk} | {r['gbps']:.2f}{pb} "
              f"| {fmt(r['roofline_fraction'] and 100 * r['roofline_fraction'])}% | {t1} | {t2} |")
    print()
    for k in ks:
        vs = [v for v in verdicts if v["k"] == k]
        if not vs:
            continue
        best = max(vs, key=lambda v: v["qps"])
        print(f"k {k}, approximate: best {TOPO_NAME[best['topology']]}, {best['qps']:,.0f} q/s at recall "
              f"{best['recall']:.4f}: {fmt(best['ratio_to_flat'], 2)}x FAISS flat "
              f"({'meets' if best.get('target_flat') else 'misses'} >= 1.0x), "
              f"{fmt(best['roofline_fraction'] and 100 * best['roofline_fraction'])}% of the roofline bound "
              f"({'meets' if best.get('target_roofline') else 'misses'} >= 50%).")
    busy = {}
    for when in ("start", "end"):
        path = os.path.join(a.out, f"busy-{when}.txt")
        if os.path.exists(path):
            busy[when] = int(open(path).read().strip())
    if busy:
        print()
        print(f"Cores busy over 2 s before the run {busy.get('start', '?')}%, after it {busy.get('end', '?')}% "
              "(others' untimed work does not take the bench lock).")
    if missing:
        print()
        print("Missing (a step failed): " + ", ".join(missing))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(rows=rows, dim=dim, queries=queries, recall_target=target, roofline=roof,
                           roofline_bound_gflops=bound, intensity=intensity, scps=results,
                           faiss=[dict(v) for v in faiss.values()], missing=missing, seconds=a.seconds,
                           cpu_busy_percent=busy), f, indent=1)
    if missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
