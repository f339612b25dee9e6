#!/usr/bin/env python3
"""Sift against transformers on a decoder embedder, on the CPU, alternating in one run.

    python3 benches/make_random_decoder.py --out target/random-mistral-7b
    cargo build --release -p sift-cli
    python3 benches/embed_decoder_cpu.py --model target/random-mistral-7b \
        --input eval/results/embed_mistral7b_bf16_cpu.texts.txt \
        --out eval/results/embed_mistral7b_bf16_cpu

Each round runs `sift bench embed` (batch 1, no warm-up, the lines of --input) and
eval/peers/decoder_peer.py (transformers, the model card's last-token pooling) on the same
texts with the same thread count, one after the other; the order flips every round so
neither always runs on a warmer machine. Every process is measured by `/usr/bin/time -v`
(peak resident memory as the kernel counts it, user and system CPU seconds) besides what it
reports itself. Writes OUT.json (every round's raw outputs, versions, the machine) and
OUT.table.md (medians and the ratio; > 1 means Sift is ahead; OUT.md is written by hand around it).
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd, env):
    """Runs cmd under /usr/bin/time -v; returns (its JSON stdout, the time -v fields)."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    fields = {}
    for line in p.stderr.splitlines():
        m = re.match(r"\s*(Maximum resident set size \(kbytes\)|User time \(seconds\)|"
                     r"System time \(seconds\)|Elapsed \(wall clock\) time.*?): (.*)", line)
        if m:
            fields[m.group(1)] = m.group(2)
    try:
        out = json.loads(p.stdout)
    except json.JSONDecodeError:  # a log line before the one-line JSON object
        out = json.loads(p.stdout.strip().splitlines()[-1])
    return out, {
        "max_rss_gb": int(fields["Maximum resident set size (kbytes)"]) * 1024 / 1e9,
        "user_s": float(fields["User time (seconds)"]),
        "system_s": float(fields["System time (seconds)"]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--sift", default=str(ROOT / "target" / "release" / "sift"))
    ap.add_argument("--out", required=True, help="output prefix (OUT.json, OUT.md)")
    a = ap.parse_args()
    texts = [l for l in open(a.input, encoding="utf-8") if l.strip()]
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads))
    sift = [a.sift, "bench", "embed", "--model", a.model, "--dtype", a.dtype, "--batch-size", "1",
            "--warmup", "0", "--input", a.input, "--items", str(len(texts)), "--json"]
    peer = [sys.executable, str(ROOT / "eval" / "peers" / "decoder_peer.py"), "--model", a.model,
            "--input", a.input, "--threads", str(a.threads), "--dtype", a.dtype]
    rounds = []
    for r in range(a.rounds):
        order = [("sift", sift), ("transformers", peer)]
        if r % 2:
            order.reverse()
        row = {}
        for name, cmd in order:
            out, t = timed(cmd, env)
            ips = out["best"]["items_per_s"] if name == "sift" else out["items_per_s"]
            row[name] = {"items_per_s": ips, "load_seconds": out["load_seconds"], "time": t, "raw": out}
            print(f"round {r + 1} {name}: {ips:.4f} texts/s, load {out['load_seconds']:.1f} s, "
                  f"peak RSS {t['max_rss_gb']:.1f} GB", file=sys.stderr)
        rounds.append(row)
    med = {n: {k: statistics.median(rr[n][k] if k != "rss" else rr[n]["time"]["max_rss_gb"] for rr in rounds)
               for k in ("items_per_s", "load_seconds", "rss")} for n in ("sift", "transformers")}
    ratio = med["sift"]["items_per_s"] / med["transformers"]["items_per_s"]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    tokens = rounds[0]["transformers"]["raw"]["tokens"]
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{cpu}, {os.cpu_count()} CPUs, {platform.platform()}",
        "threads": a.threads, "dtype": a.dtype, "model": a.model, "texts": len(texts), "tokens": tokens,
        "transformers": rounds[0]["transformers"]["raw"].get("version"),
        "torch": rounds[0]["transformers"]["raw"].get("torch"),
        "sift": rounds[0]["sift"]["raw"].get("version"),
        "commands": {"sift": " ".join(sift), "transformers": " ".join(peer)},
    }
    Path(a.out + ".json").write_text(json.dumps({"meta": meta, "median": med, "ratio": ratio,
                                                 "rounds": rounds}, indent=2) + "\n")
    s, t = med["sift"], med["transformers"]
    md = f"""| | Sift {meta['sift']} | transformers {meta['transformers']} (torch {meta['torch']}) | ratio (> 1: Sift ahead) |
|---|---:|---:|---:|
| texts/s ({len(texts)} texts of {', '.join(map(str, tokens))} tokens, batch 1) | {s['items_per_s']:.4f} | {t['items_per_s']:.4f} | {ratio:.2f}x |
| load (s) | {s['load_seconds']:.1f} | {t['load_seconds']:.1f} | |
| peak RSS (GB, `time -v`) | {s['rss']:.1f} | {t['rss']:.1f} | |

Medians of {a.rounds} alternating rounds, {a.threads} threads, {a.dtype}, {meta['date']}, {meta['machine']}.
Raw rounds: `{Path(a.out).name}.json`.
"""
    Path(a.out + ".table.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
