#!/usr/bin/env python3
"""The table of tests/bench/run.sh: reads the raw outputs a run left in DIR
(build-bench/suite/), prints the figures and ratios with the targets beside
them and writes everything to OUT (build-bench/bench-results.json).

    report.py DIR OUT --workloads dlrm8 criteo26 [--batches K] [--rounds R] [--seconds S]

Ratios divide samples/s (the same batches on both sides, so ids/s gives the
same quotient); the engine's divide ids/s by the gather limit's. PyTorch,
Redis and scps each ran R rounds (run.sh --rounds): every figure is the
round with the most samples/s, the worst round's ms/batch beside it, so
the anchors and scps are judged alike on a machine whose speed drifts.
A PyTorch lookup whose best round reads fewer than half the gather limit's
ids/s ran slow in every round (seen: 13.4 ms where the same run's other
figures and other runs put it at 3.5 ms), so on that workload the lookup
ratios are information: a pass against a slowed anchor would not be one. With
wire.json (scps-bench-wire), each 1-process depth-1 scps lookup also gets
its wire floor: its request and answer bytes at the loopback TCP rate,
the least time such a lookup can take, and the lookup/torch ratio that
floor allows. Targets are
checked on the float32 wire, and on bfloat16 only when wire_loss.sh's
trainer runs (wire-loss.json) found no harm to the loss: without that
verdict bfloat16 rows are information. e4m3 rows (an 8-bit wire) are judged
on dlrm8 against issue 31's targets (lookup >= 0.8x, train >= 4x PyTorch),
with the same condition on e4m3's loss; over loopback TCP they get their
wire floor too. scps runs at
depth 1 (one batch at a time: samples/s from the median batch) and depth 2
(two batches in flight from two threads: samples/s from the wall time of
all batches, the throughput a trainer with two pipelines gets).
"""
import argparse, datetime, json, math, os, platform, subprocess

# key: (target, comparison, issue): the targets and the issue naming each.
# Issue 4 set lookup >= 0.5x and train >= 2x PyTorch for dlrm8 with one
# server process; issue 7 raised them to 1x and 4x for every scps row.
TARGETS = {
    "engine_lookup": (0.5, ">=", 7),
    "engine_update": (0.25, ">=", 7),
    "lookup_vs_torch": (1.0, ">=", 7),
    "train_vs_torch": (4.0, ">=", 7),
    "lookup_vs_torch_one_server": (0.5, ">=", 4),
    "train_vs_torch_one_server": (2.0, ">=", 4),
    "lookup_vs_redis": (5.0, ">=", 7),
    "serving_p99_over_p50": (3.0, "<=", 7),
    "lookup_vs_torch_8bit": (0.8, ">=", 31),
    "train_vs_torch_8bit": (4.0, ">=", 31),
}
# Issue 4's targets hold for this workload, one server process. Issue 4
# names no wire format and predates issue 7's rule for lower-precision
# ones, so only the float32 rows are judged against them.
ONE_SERVER_WORKLOAD = "dlrm8"


def load_lines(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def machine():
    model, mem_kb = "unknown", 0
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "kernel": platform.release()}


def git_commit(repo):
    try:
        return subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def best_round(lines):
    """The round with the most samples/s, with every round's figures."""
    best = dict(max(lines, key=lambda t: t["samples_per_s"]))
    best["ms_per_batch_median_all_runs"] = [t["ms_per_batch_median"] for t in lines]
    best["samples_per_s_all_runs"] = [t["samples_per_s"] for t in lines]
    return best


def collect(d, w):
    """Everything measured on workload w, or None where a step was skipped."""
    r = {}
    eng = load(os.path.join(d, f"{w}-engine.json"))
    if eng:
        r["gather_limit"] = eng["anchor"]
        r["gather_limit_ids_per_s_all_runs"] = eng["anchor_ids_per_s_all_runs"]
        r["engine"] = {e["phase"]: e for e in eng["engine"]}
    torch = load_lines(os.path.join(d, f"{w}-torch.json"))
    if torch:
        r["torch"] = {m: best_round([t for t in torch if t["mode"] == m]) for m in sorted({t["mode"] for t in torch})}
    redis = load_lines(os.path.join(d, f"{w}-redis.json"))
    if redis:
        r["redis"] = best_round(redis)
        mem = os.path.join(d, f"{w}-redis-memory.txt")
        if os.path.exists(mem):
            r["redis"]["used_memory"] = open(mem).read().strip()
    scps = {}
    for procs in ("1", "2"):
        for mode in ("lookup", "train"):
            for fmt in ("float32", "bfloat16", "e4m3"):
                for depth in ("1", "2"):
                    for via in ("", "-tcp"):
                        s = load_lines(os.path.join(d, f"{w}-scps-{procs}-{mode}-{fmt}-d{depth}{via}.json"))
                        if s:
                            scps.setdefault(procs, {}).setdefault(mode, {})[f"{fmt}-d{depth}{via}"] = best_round(s)
    if scps:
        r["scps"] = scps
    return r


def wire_rate(wire, n):
    """GB/s scps-bench-wire measured at the size nearest n bytes (by ratio)."""
    best = min(wire, key=lambda x: abs(math.log(max(n, 1) / x["bytes"])))
    return best["gb_per_s"]


# Below this share of the gather limit's ids/s PyTorch's lookup counts as
# slowed (its best rounds read 0.87-0.98x the limit on dlrm8, the slowed
# one 0.28x).
TORCH_SLOW_SHARE = 0.5


def check(key, value):
    target, cmp, issue = TARGETS[key]
    met = value >= target if cmp == ">=" else value <= target
    return {"value": round(value, 3), "target": f"{cmp} {target:g}", "met": met, "issue": issue}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--workloads", nargs="+", required=True)
    ap.add_argument("--batches", type=int, default=0, help="batches per measurement (recorded only)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds of each anchor and of scps (recorded only)")
    ap.add_argument("--seconds", type=int, default=0, help="wall time of the run (recorded only)")
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": machine(), "commit": git_commit(repo), "batches": a.batches,
           "rounds": a.rounds,
           "run_seconds": a.seconds, "workloads": {}, "ratios": []}
    for when in ("start", "end"):
        path = os.path.join(a.dir, f"busy-{when}.txt")
        if os.path.exists(path):
            res[f"cpu_busy_percent_{when}"] = int(open(path).read().strip())
    rows = []  # (workload, label, ms/batch, samples/s, ids/s, ratio, target, met)

    def ratio(w, label, key, value, info=False):
        c = check(key, value)
        entry = {"workload": w, "name": label, **c}
        if info:
            entry.update(target="info", met=None)
        res["ratios"].append(entry)
        return c

    # The issue's condition for a lower-precision wire: the benchmark says
    # so and the trainer's loss shows no harm (wire_loss.sh, same run).
    wire_loss = load(os.path.join(a.dir, "wire-loss.json"))
    bf16_counts = bool(wire_loss and wire_loss.get("no_harm"))
    e4m3_counts = bool(wire_loss and wire_loss.get("e4m3_no_harm"))
    if wire_loss:
        res["wire_loss"] = wire_loss
        for x in wire_loss.get("cases", []):
            base = x["case"] == "float32"
            rows.append(("loss", f"trainer {wire_loss['workload']}, {x['steps']} steps, {x['case']}: log-loss "
                                 f"{x['heldout_logloss']:.4f}" + ("" if base else f" ({100 * x['logloss_change']:+.2f}%)")
                                 + f", AUC {x['heldout_auc']:.4f}", None, None, None, None,
                         None if base else "no harm", None if base else x["no_harm"]))
    # The floor of the wire itself: scps-bench-wire moving bytes between two
    # threads over loopback TCP, nothing else.
    wire = load_lines(os.path.join(a.dir, "wire.json"))
    if wire:
        res["wire"] = wire
        for x in wire:
            rows.append(("wire", f"loopback TCP, {x['bytes'] / 2**20:g} MiB one way: {x['gb_per_s']:.2f} GB/s "
                                 f"(best {x['ms_best']:.2f} ms)", x["ms_median"], None, None, None, None, None))
    for w in a.workloads:
        r = collect(a.dir, w)
        res["workloads"][w] = r
        if "gather_limit" in r:
            g = r["gather_limit"]
            rows.append((w, f"gather limit ({g['tables']}x{g['rows']} rows x {g['dim']}, best of "
                            f"{len(r['gather_limit_ids_per_s_all_runs'])})",
                         g["ms_per_batch"], None, g["ids_per_s"], None, None, None))
            for phase, key in (("lookup", "engine_lookup"), ("update", "engine_update")):
                e = r["engine"][phase]
                c = ratio(w, f"engine {phase} / gather limit", key, e["ids_per_s"] / g["ids_per_s"])
                label = f"engine {phase}" + (f" ({e['optimizer']})" if "optimizer" in e else "")
                rows.append((w, label + ", 2 threads", e["ms_median"], None, e["ids_per_s"], c["value"],
                             c["target"], c["met"]))
        torch = r.get("torch", {})
        torch_slow = ("lookup" in torch and "gather_limit" in r and
                      torch["lookup"]["ids_per_s"] < TORCH_SLOW_SHARE * r["gather_limit"]["ids_per_s"])
        if torch_slow:
            r["torch"]["lookup"]["slowed"] = True
        for m in ("lookup", "train"):
            if m in torch:
                t = torch[m]
                runs = len(t["ms_per_batch_median_all_runs"])
                worst = max(t["ms_per_batch_median_all_runs"])
                rows.append((w, f"torch EmbeddingBag {m}, {t['threads']} thr, best of {runs} (worst {worst:.1f})",
                             t["ms_per_batch_median"],
                             t["samples_per_s"], t["ids_per_s"], None, None, None))
        if torch_slow:
            share = torch["lookup"]["ids_per_s"] / r["gather_limit"]["ids_per_s"]
            rows.append((w, f"  torch lookup slowed: {share:.2f}x the gather limit's ids/s in its best round; "
                            f"lookup ratios are info", None, None, None, None, None, None))
        if "redis" in r:
            x = r["redis"]
            rows.append((w, f"redis {x['redis_version']} MGET, depth {x['depth']}, {x['rows_per_s'] / 1e6:.2f} M rows/s "
                            f"(worst {max(x['ms_per_batch_median_all_runs']):.1f})", x["ms_per_batch_median"],
                         x["samples_per_s"],
                         x["ids_per_s"], None, None, None))
        for procs, modes in sorted(r.get("scps", {}).items()):
            for m in ("lookup", "train"):
                for fmt, depth, via in (("float32", 1, ""), ("float32", 2, ""), ("bfloat16", 1, ""),
                                        ("bfloat16", 2, ""), ("e4m3", 1, ""), ("e4m3", 2, ""),
                                        ("float32", 1, "-tcp"), ("e4m3", 1, "-tcp")):
                    s = modes.get(m, {}).get(f"{fmt}-d{depth}{via}")
                    if not s:
                        continue
                    # Answers through shared memory (libscps's default with
                    # the servers on this host) are judged; the same over
                    # loopback TCP, as for a trainer on another host, is
                    # information.
                    tcp = via == "-tcp" or not s.get("placed_bytes_per_batch")
                    # e4m3 rows are judged by issue 31's 8-bit targets, on
                    # dlrm8, when the trainer's loss shows no harm from it.
                    eight = fmt == "e4m3"
                    info = ((fmt == "bfloat16" and not bf16_counts) or via == "-tcp"
                            or (eight and (not e4m3_counts or w != ONE_SERVER_WORKLOAD)))
                    info_torch = info or (m == "lookup" and torch_slow)
                    label = (f"scps {m}, {procs} proc, {fmt}, depth {depth}, "
                             + ("loopback TCP" if tcp else "shared memory"))
                    worst = f" (worst {max(s['ms_per_batch_median_all_runs']):.1f})"
                    if m in torch:
                        key = ("lookup_vs_torch" if m == "lookup" else "train_vs_torch") + ("_8bit" if eight else "")
                        c = ratio(w, f"{label} / torch {m}", key, s["samples_per_s"] / torch[m]["samples_per_s"],
                                  info_torch)
                        rows.append((w, f"{label} / torch{worst}", s["ms_per_batch_median"], s["samples_per_s"],
                                     s["ids_per_s"], c["value"], "info" if info_torch else c["target"],
                                     None if info_torch else c["met"]))
                        if w == ONE_SERVER_WORKLOAD and procs == "1" and fmt == "float32":
                            c = ratio(w, f"{label} / torch {m}, issue 4", f"{key}_one_server",
                                      s["samples_per_s"] / torch[m]["samples_per_s"], info_torch)
                            rows.append((w, f"  same, issue 4's target (one server)", None, None, None, c["value"],
                                         "info" if info_torch else c["target"], None if info_torch else c["met"]))
                    else:
                        rows.append((w, label + worst, s["ms_per_batch_median"], s["samples_per_s"], s["ids_per_s"],
                                     None, None, None))
                    # A depth-1 lookup moves its request, then its answer:
                    # it cannot beat the wire's time for those bytes.
                    if (wire and m == "lookup" and depth == 1 and procs == "1" and "lookup" in torch
                            and "received_bytes_per_batch" in s and tcp):
                        out_b, back_b = s["sent_bytes_per_batch"], s["received_bytes_per_batch"]
                        floor_ms = (out_b / wire_rate(wire, out_b) + back_b / wire_rate(wire, back_b)) * 1e-6
                        c = ratio(w, f"{label}: wire floor, ceiling of lookup / torch", "lookup_vs_torch",
                                  torch["lookup"]["ms_per_batch_median"] / floor_ms, True)
                        res["ratios"][-1]["wire_floor_ms"] = round(floor_ms, 3)
                        rows.append((w, f"  wire floor: {out_b / 1e6:.1f} MB out, {back_b / 1e6:.1f} MB back; "
                                        f"ratio ceiling", floor_ms, None, None, c["value"], "info", None))
                    if m == "lookup" and "redis" in r:
                        c = ratio(w, f"{label} / redis MGET", "lookup_vs_redis",
                                  s["samples_per_s"] / r["redis"]["samples_per_s"], info)
                        rows.append((w, f"  same / redis MGET", None, None, None, c["value"],
                                     "info" if info else c["target"], None if info else c["met"]))
    serving = load(os.path.join(a.dir, "serving.json"))
    if serving:
        res["serving"] = serving
        at70, peak = serving["at70"], serving["peak"]
        lat = at70["latency_ms"]
        c = ratio("serving", "p99 / p50 at 70% of peak, 16 clients", "serving_p99_over_p50", lat["p99"] / lat["p50"])
        # serving.sh judged whether its open loop kept to its rate; if not,
        # the p99/p50 is its own queue's, not the server's at 70% of peak.
        if serving.get("not_valid"):
            c["met"] = False
            c["note"] = "  not valid: " + serving["not_valid"]
            res["ratios"][-1].update(met=False, note=c["note"])
        rows.append(("serving", f"peak, {peak['concurrency']} clients (p50 {peak['latency_ms']['p50']:.2f} ms, "
                                f"p99 {peak['latency_ms']['p99']:.2f} ms)", None, peak["samples_per_s"],
                     peak["ids_per_s"], None, None, None))
        if "peak_after" in serving:
            pa = serving["peak_after"]
            rows.append(("serving", f"  peak again after the 70% run (p50 {pa['latency_ms']['p50']:.2f} ms)", None,
                         pa["samples_per_s"], pa["ids_per_s"], None, None, None))
        errors = sum(peak["errors"].values()) + sum(at70["errors"].values())
        if errors:
            rows.append(("serving", f"{errors} requests failed (scps-loadgen errors; see serving.json)",
                         None, None, None, None, None, None))
        rows.append(("serving", f"70% of peak: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms; p99/p50",
                     None, at70["samples_per_s"], at70["ids_per_s"], c["value"], c["target"], c["met"]))
        if "note" in c:
            rows.append(("serving", c["note"], None, None, None, None, None, None))
        st = serving.get("stalls")
        if st:
            who = "SCHED_FIFO" if st["fifo"] else "normal-priority"
            rows.append(("serving", f"  machine stalls in that run: {st['late_over_5ms']} over 5 ms, latest "
                                    f"{st['max_late_ms']:.1f} ms ({who} sleeper)", None, None, None, None, None, None))
        ot = serving.get("others")
        if ot:
            top = ", ".join(f"{name} {ms:.0f} ms" for name, ms in ot["top"][:3])
            rows.append(("serving", f"  other tasks' CPU in that run: {ot['cpu_ms']:.0f} ms in {ot['seconds']:.0f} s "
                                    f"({top})", None, None, None, None, None, None))

    m = res["machine"]
    print(f"scps benchmark suite, {res['date']}, commit {res['commit']}: {m['cpu']}, {m['cores']} cores, "
          f"{m['memory_gib']} GiB; {a.batches} batches per figure (medians), best of {a.rounds} round{'s' if a.rounds != 1 else ''}; cores busy with other work "
          f"{res.get('cpu_busy_percent_start', '?')}% before, {res.get('cpu_busy_percent_end', '?')}% after")
    busy = max(res.get("cpu_busy_percent_start", 0), res.get("cpu_busy_percent_end", 0))
    if busy > 10:
        print(f"warning: other processes kept the cores {busy}% busy around the run; the anchors' OpenMP "
              "threads suffer most from that")
    head = ("workload", "measurement", "ms/batch", "samples/s", "ids/s", "ratio", "target", "met")
    fmt = "{:<9} {:<64} {:>9} {:>11} {:>12} {:>7} {:>7} {:>4}"
    print(fmt.format(*head))
    num = lambda v, spec: "" if v is None else format(v, spec)
    for w, label, ms, sps, ids, rat, tgt, met in rows:
        print(fmt.format(w, label, num(ms, ".2f"), num(sps, ",.0f"), num(ids, ",.0f"), num(rat, ".2f"),
                         tgt or "", "" if met is None else ("yes" if met else "NO")))
    if bf16_counts:
        wire = "targets on float32 and bfloat16 (the trainer's loss shows no harm from bfloat16);"
    elif wire_loss:
        wire = "targets on the float32 wire, bfloat16 is info (it harmed the trainer's loss);"
    else:
        wire = "targets on the float32 wire, bfloat16 is info (its loss was not measured: wire_loss.sh);"
    wire += (" e4m3 on dlrm8 against issue 31's 8-bit targets" + ("" if e4m3_counts else
             " as info (its loss was not measured, or it harmed)") + ";")
    print("ratios: samples/s over the anchor's (engine: ids/s); " + wire)
    print("scps depth 1: one batch at a time (median); depth 2: two in flight, samples/s over the wall time")
    print("torch, redis and scps: the round with the most samples/s (scps: each round on a cluster started anew); "
          "worst: the slowest round's ms/batch")
    print("scps ids/s count each batch's ids before dedup, as redis ids/s do (redis rows/s: distinct rows returned)")
    if wire:
        print("wire floor: a batch's request and answer bytes at the loopback TCP rate measured nearest their size; "
              "no depth-1 lookup is faster, so its ratio to torch cannot pass the ceiling")
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"written: {a.out}")


if __name__ == "__main__":
    main()
