#!/usr/bin/env python3
"""The tables of benches/gpu/run.sh: reads raw/<model>.<engine>.<round>.json (Sift's
`sift bench embed --json`, benches/gpu/peer.py's JSON) and writes results.json and results.md:
per model the median items/s over rounds of each engine, their ratio (Sift / transformers,
> 1: Sift is faster), the peak GPU memory and mean GPU utilisation (nvidia-smi, whole device),
and Sift's model-busy share (time in the model / wall time)."""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--skipped", default="")
    ap.add_argument("--failed", default="")
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--dry-run", action="store_true",
                    help="the CPU dry run: tiny fixture checkpoints under the full-size names")
    a = ap.parse_args()
    runs: dict[str, dict[str, list[dict]]] = {}
    for f in sorted(Path(a.raw).glob("*.json")):
        model, engine, _round = f.name[:-5].rsplit(".", 2)
        text = f.read_text().strip()
        if not text:
            raise SystemExit(f"{f}: empty (the run failed: see log.txt)")
        runs.setdefault(model, {}).setdefault(engine, []).append(json.loads(text))
    rows = []
    for model, by in runs.items():
        sift, peer = by.get("sift", []), by.get("peer", [])
        if not sift or not peer:
            continue  # named in --failed

        def med(xs, key):
            vals = [x[key] for x in xs if x.get(key) is not None]
            return statistics.median(vals) if vals else None
        s_best = [x["best"] for x in sift]
        row = {
            "model": model,
            "modality": sift[0]["modality"],
            "batch_size": s_best[0]["batch_size"],
            "items": s_best[0]["items"],
            "rounds": len(sift),
            "sift_items_per_s": statistics.median(b["items_per_s"] for b in s_best),
            "transformers_items_per_s": med(peer, "items_per_s"),
            "sift_gpu_memory_mb": med(sift, "gpu_memory_mb"),
            "transformers_gpu_memory_mb": med(peer, "gpu_memory_mb"),
            "transformers_torch_reserved_mb": med(peer, "torch_max_reserved_mb"),
            "sift_gpu_utilization_pct": med(sift, "gpu_utilization_pct"),
            "transformers_gpu_utilization_pct": med(peer, "gpu_utilization_pct"),
            "sift_model_busy": statistics.median(b["model_busy"] for b in s_best),
            "sift_peak_rss_mb": med(sift, "peak_rss_mb"),
            "sift_kernels": sift[0].get("kernels"),
            "all_items_per_s": {"sift": [b["items_per_s"] for b in s_best],
                                "transformers": [x["items_per_s"] for x in peer]},
        }
        row["ratio"] = row["sift_items_per_s"] / row["transformers_items_per_s"]
        rows.append(row)
    skipped = [s for s in a.skipped.split(",") if s]
    failed = [s for s in a.failed.split(",") if s]
    peers = [r for by in runs.values() for r in by.get("peer", [])]
    meta = {"dry_run": a.dry_run, "device": a.device, "seconds": a.seconds, "skipped": skipped,
            "failed": failed,
            "transformers": peers[0].get("version") if peers else None,
            "torch": peers[0].get("torch") if peers else None}
    Path(a.out, "results.json").write_text(json.dumps({"meta": meta, "models": rows}, indent=2) + "\n")

    def f(x, fmt="{:.0f}"):
        return "-" if x is None else fmt.format(x)
    lines = [f"# Sift vs transformers on {a.device} (bf16; transformers {meta['transformers']}, "
             f"torch {meta['torch']}, sdpa)", ""]
    if a.dry_run:
        lines += ["DRY RUN: the CPU and the tiny fixture checkpoints under the full-size models' "
                  "names; it checks the script, the numbers say nothing about speed.", ""]
    lines += [
             "Median over rounds, alternating engines; items/s over the whole path (decode / "
             "tokenise + model + normalise). GPU memory: peak used on the device (nvidia-smi); "
             "utilisation: mean of nvidia-smi samples; model busy: Sift's time in the model / "
             "wall time.", "",
             "| model | items | batch | Sift items/s | transformers items/s | Sift / transformers "
             "| Sift GPU MB | transformers GPU MB | Sift GPU util | transformers GPU util "
             "| Sift model busy |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['model']} ({r['modality']}) | {r['items']} | {r['batch_size']} "
            f"| {f(r['sift_items_per_s'], '{:.1f}')} | {f(r['transformers_items_per_s'], '{:.1f}')} "
            f"| {r['ratio']:.2f}x | {f(r['sift_gpu_memory_mb'])} | {f(r['transformers_gpu_memory_mb'])} "
            f"| {f(r['sift_gpu_utilization_pct'], '{:.0f}%')} "
            f"| {f(r['transformers_gpu_utilization_pct'], '{:.0f}%')} "
            f"| {100 * r['sift_model_busy']:.0f}% |")
    if skipped:
        lines += ["", "SKIPPED (time budget): " + ", ".join(skipped)]
    if failed:
        lines += ["", "FAILED (see log.txt): " + ", ".join(failed)]
    lines += ["", f"Whole run: {a.seconds:.0f} s."]
    Path(a.out, "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
