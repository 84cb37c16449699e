#!/usr/bin/env python3
"""Issue 30's table from one run of tests/bench/bench16.sh on the 16-core host:

    bench16_report.py DIR        (DIR holds results.jsonl and extra.jsonl)

results.jsonl is shared/bench16's run.sh: the loopback TCP floor, the gather
limit, the engine, PyTorch in-process and over its RPC, scps at 1x8 and 2x4,
depth 1, 2 and 4. extra.jsonl is bench16.sh's: CPU per batch in rounds and
serving-small-batch. Printed, each against its target:

- lookup latency, one batch at a time, over the networked floor: the
  engine's in-process gather (wall, 8 threads) plus the answer and request
  bytes at the loopback TCP rate measured nearest their size (target
  <= 1.3); beside it the same-host floor, the gather plus one memcpy of the
  answer at the gather limit's memcpy rate, which answers through shared
  memory could reach;
- two or more batches in flight: samples/s over those of the slower stage
  alone, the batch over max(prepare, lookup) of depth 1 on the same cluster
  (target >= 0.9);
- train: samples/s over PyTorch's in-process train step (target >= 10);
- serving-small-batch at 70% of the peak: p99 / p50 (target <= 3);
- CPU per batch: client + server over the floor, the engine's gather CPU
  plus one memcpy of the answer on each side (issue 30's <= 1.5 is judged on
  the 2-core machine, tests/bench/cpu.sh; here for comparison), the round
  whose ratio is the median, and the CPU of each thread name in it.
"""
import json, os, statistics, sys


def split_line(line):
    """A line of run.sh or bench16.sh: an optional {tag} then the figure."""
    line = line.strip()
    if not line.startswith("{"):
        return None, None
    dec = json.JSONDecoder()
    first, end = dec.raw_decode(line)
    rest = line[end:].strip()
    if not rest:
        return None, first
    if not rest.startswith("{"):
        return first, None
    objs = []
    while rest:
        o, end = dec.raw_decode(rest)
        objs.append(o)
        rest = rest[end:].strip()
    return first, objs if len(objs) > 1 else objs[0]


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    d = sys.argv[1]
    wire, limit, engine, torch, rpc, scps = {}, {}, {}, {}, {}, {}
    for line in open(os.path.join(d, "results.jsonl")):
        tag, x = split_line(line)
        if x is None or isinstance(x, list):
            continue
        if tag:
            scps[(tag["w"], tag["P"], tag["S"], tag["fmt"], tag["mode"], tag["depth"])] = x
        elif x.get("bench") == "wire":
            wire[x["bytes"]] = x
        elif x.get("anchor") == "gather-limit":
            limit[len(limit)] = x
        elif x.get("bench") == "engine":
            engine[(x["workload"], x["phase"])] = x
        elif x.get("anchor") == "torch-embeddingbag":
            torch[(x["workload"], x["mode"])] = x
        elif x.get("anchor") == "torch-rpc-ps":
            rpc[(x["workload"], x["mode"])] = x
    limits = dict(zip(("dlrm8", "criteo26"), limit.values()))
    cpu, eng16, serving, knn, knn_other = [], {}, {}, [], []
    xp = os.path.join(d, "extra.jsonl")
    for line in open(xp) if os.path.exists(xp) else ():
        tag, x = split_line(line)
        if not tag or x is None:
            continue
        if "cpu" in tag:
            cpu.append((tag, x))
        elif "engine" in tag:
            for e in x if isinstance(x, list) else [x]:
                eng16[(tag["w"], e["phase"])] = e
        elif "serving" in tag:
            serving[tag["phase"]] = x
        elif tag.get("knn") == 1:
            knn.append((tag, x))
        elif tag.get("knn") == 2:
            knn_other.append(x)

    def wire_ms(n):
        """Milliseconds for n bytes at the loopback rate measured nearest n."""
        if not wire or n <= 0:
            return 0.0
        size = min(wire, key=lambda b: abs(b - n) / max(b, n))
        return n / (wire[size]["gb_per_s"] * 1e9) * 1e3

    print("== floors (servers' half for the gather, clients' half for the wire)")
    for b, x in sorted(wire.items()):
        print(f"loopback TCP {b / 2**20:.0f} MiB: median {x['ms_median']:.3f} ms, best {x['ms_best']:.3f} ms, {x['gb_per_s']:.2f} GB/s")
    for w, x in limits.items():
        print(f"{w}: gather limit {x['ms_per_batch']:.3f} ms, memcpy {x['memcpy_gb_per_s']:.1f} GB/s; engine lookup "
              f"{engine[(w, 'lookup')]['ms_median']:.3f} ms ({engine[(w, 'lookup')]['cpu_ms_median']:.2f} core-ms), update "
              f"{engine[(w, 'update')]['ms_median']:.3f} ms; PyTorch lookup {torch[(w, 'lookup')]['ms_per_batch_median']:.3f} ms, "
              f"train {torch[(w, 'train')]['ms_per_batch_median']:.3f} ms; PyTorch RPC lookup "
              f"{rpc.get((w, 'lookup'), {}).get('ms_per_batch_median', float('nan')):.3f} ms")

    print("\n== lookup, one batch at a time: ms over the floors (issue 30: <= 1.3 over gather + wire)")
    print(f"{'row':44s} {'ms':>7s} {'gather+wire':>11s} {'ratio':>6s} {'gather+copy':>11s} {'ratio':>6s} {'vs torch':>8s}")

    def lookup_row(label, w, x):
        g = engine[(w, "lookup")]["ms_median"]
        moved = x["sent_bytes_per_batch"] + x["received_bytes_per_batch"] + x.get("placed_bytes_per_batch", 0)
        ans = x["received_bytes_per_batch"] + x.get("placed_bytes_per_batch", 0)
        net = g + wire_ms(moved)
        host = g + ans / (limits[w]["memcpy_gb_per_s"] * 1e9) * 1e3
        ms = x["ms_per_batch_median"]
        print(f"{label:44s} {ms:7.3f} {net:11.3f} {ms / net:6.2f} {host:11.3f} {ms / host:6.2f} "
              f"{torch[(w, 'lookup')]['ms_per_batch_median'] / ms:8.2f}")

    for (w, P, S, fmt, mode, depth), x in sorted(scps.items()):
        if mode == "lookup" and depth == 1 and fmt == "float32":
            lookup_row(f"run.sh {w} {P}x{S} {fmt}", w, x)
    by_way = {}
    for tag, x in cpu:
        by_way.setdefault((tag["w"], tag["mode"], tag["way"]), []).append(x)
    for (w, mode, way), xs in sorted(by_way.items()):
        if mode != "lookup":
            continue
        mid = sorted(xs, key=lambda x: x["ms_per_batch_median"])[len(xs) // 2]
        lookup_row(f"bench16.sh {w} 1x8 {way if ':' in way else 'float32 ' + way} (median of {len(xs)})", w, mid)
        print(f"{'':44s} rounds: " + ", ".join(f"{x['ms_per_batch_median']:.3f}" for x in xs))

    print("\n== in flight: samples/s at depth D over the slower stage alone (issue 30: >= 0.9)")
    for (w, P, S, fmt, mode, depth), x in sorted(scps.items()):
        one = scps.get((w, P, S, fmt, mode, 1))
        if depth == 1 or not one:
            continue
        batch = one["samples_per_s"] * one["ms_per_batch_median"] / 1e3
        stage = max(one["prepare_ms_median"], one["lookup_ms_median"] + one["push_ms_median"])
        alone = batch / stage * 1e3
        print(f"{w:9s} {P}x{S} {fmt:8s} {mode:6s} depth {depth}: {x['samples_per_s']:9.0f} samples/s, slower stage alone "
              f"{alone:9.0f} ({stage:.3f} ms): {x['samples_per_s'] / alone:5.2f}")

    print("\n== train: samples/s over PyTorch's in-process train step (issue 30: >= 10)")
    for (w, P, S, fmt, mode, depth), x in sorted(scps.items()):
        if mode == "train":
            t = torch[(w, "train")]["samples_per_s"]
            print(f"{w:9s} {P}x{S} {fmt:8s} depth {depth}: {x['samples_per_s']:9.0f} samples/s, {x['samples_per_s'] / t:6.2f}x "
                  f"PyTorch ({t:.0f})")
    for (w, mode, way), xs in sorted(by_way.items()):
        if mode == "train":
            t = torch[(w, "train")]["samples_per_s"]
            med = statistics.median(x["samples_per_s"] for x in xs)
            print(f"{w:9s} 1x8 {'' if ':' in way else 'float32 '}depth 1, bench16.sh, {way}: {med:9.0f} samples/s (median of {len(xs)}), "
                  f"{med / t:6.2f}x PyTorch")

    if serving:
        print("\n== serving-small-batch, 16 clients (issue 30: p99 <= 3x p50 at 70% of the peak)")
        for phase, r in serving.items():
            l, lag = r["latency_ms"], r["send_lag_ms"]
            print(f"{phase:16s} {r['requests_per_s']:8.0f} req/s  p50 {l['p50']:7.3f}  p90 {l.get('p90', 0):7.3f}  "
                  f"p99 {l['p99']:7.3f} ms  p99/p50 {l['p99'] / l['p50']:6.2f}  send lag p99 {lag['p99']:.2f} ms")

    if knn:
        # Issue 32: approximate at >= 1.0x FAISS flat, and within 2x of the roofline bound.
        roof = [o for o in knn_other if o.get("bench") == "roofline"]
        flat = {o["k"]: o for o in knn_other if o.get("index") == "flat"}
        peak = max(o["sgemm_gflops"] for o in roof) if roof else None
        print("\n== retrieval (issue 32): TopK, 256 queries" + (f"; sgemm roofline {peak:.1f} GFLOP/s, table read "
              f"{max(o['read_gbps'] for o in roof):.1f} GB/s (clients' half)" if roof else "; no roofline measured"))
        for tag, x in knn:
            gf = 2 * x["queries"] * x["rows_scanned"] * x["dim"] / (x["median_ms"] / 1e3) / 1e9
            f = flat.get(x["k"])
            print(f"{tag['P']}x{tag['S']} {x['mode']:6s} k {x['k']:3d}: {x['qps']:8.1f} queries/s, median "
                  f"{x['median_ms']:8.2f} ms, recall {x['recall']:.4f} (L {x['bins']}, expected "
                  f"{x['expected_recall']:.4f}), {gf:6.1f} GFLOP/s" + (f" = {gf / peak:.2f} of the roofline" if peak else "")
                  + (f", {x['qps'] / f['qps']:.2f}x FAISS flat ({f['qps']:.1f})" if f else ", FAISS not on this host"))

    if cpu:
        print("\n== CPU per batch (core-ms), one at a time, 1x8: client + server over the gather's CPU + 2 memcpy")
        for (w, mode, way), xs in sorted(by_way.items()):
            g = eng16[(w, "lookup")]["cpu_ms_median"]
            res = []
            for x in xs:
                c = x["cpu"]
                floor = g + 2 * c["memcpy_answer_ms"]
                if mode == "train":
                    floor += eng16[(w, "update")]["cpu_ms_median"]
                res.append(((c["client_ms"] + c["servers_ms"]) / floor, floor, x))
            ratio, floor, x = sorted(res, key=lambda r: r[0])[len(res) // 2]
            c = x["cpu"]
            print(f"{w:9s} {mode:6s} {way:5s} client {c['client_ms']:6.2f} (prepare {c['client_prepare_ms_median']:.2f}, "
                  f"lookup {c['client_lookup_ms_median']:.2f}, push {c['client_push_ms_median']:.2f})  server "
                  f"{c['servers_ms']:6.2f}  floor {floor:6.2f}{' (+update)' if mode == 'train' else ''}  ratio "
                  f"{ratio:5.2f}  rounds: " + ", ".join(f"{r[0]:.2f}" for r in res))
            for name, p in (("client", c["client"]), ("server", c["servers"][0])):
                th = {k: v["cpu_ms"] for k, v in p.items() if isinstance(v, dict) and v["cpu_ms"] >= 0.05}
                print(f"{'':18s}{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(th.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
