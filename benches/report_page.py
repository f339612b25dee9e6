#!/usr/bin/env python3
"""How responsive a `sift report` page is in a real browser: opens the page in headless
Chromium (Debian's, driven by Playwright) and times, with the page's own clock
(performance.now()), loading (decompress, parse, first render) and each interaction a reader
makes: switching tasks, choosing the two compared retrievers, filtering by domain, by text and
by "B beats A", and opening a query's drill-down (until its thumbnails are decoded). Each
interaction is timed from the event to the second animation frame after it, so the time
includes the page's re-render and the browser's layout and paint. Prints JSON.

    pip install playwright   # its driver; the browser is the system's chromium
    python3 benches/report_page.py target/report-scale/report.html --rounds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

from playwright.sync_api import sync_playwright

# one interaction, timed in the page: `act` runs, then two animation frames, then the drill
# down's images (if any) are decoded
TIMED = """async (act) => {
  const t0 = performance.now();
  await (new Function('return (async () => {' + act + '})()'))();
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  await Promise.all([...document.querySelectorAll('#detail img')].map(i => i.decode().catch(() => 0)));
  return performance.now() - t0;
}"""


CHECK = "{{const e=document.querySelector('#beats');e.checked={};e.dispatchEvent(new Event('change'));}}"


def set_value(sel: str, value: str, event: str = "change") -> str:
    return (f"{{const e=document.querySelector({json.dumps(sel)});e.value={json.dumps(value)};"
            f"e.dispatchEvent(new Event({json.dumps(event)}));}}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("page", type=Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    a = p.parse_args()
    url = a.page.resolve().as_uri()
    out = {"page": str(a.page), "bytes": a.page.stat().st_size, "rounds": a.rounds,
           "load_ms": [], "interactions_ms": {}, "console_errors": [], "js_heap_mb": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
        for _ in range(a.rounds):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: m.type == "error" and out["console_errors"].append(m.text))
            page.on("pageerror", lambda e: out["console_errors"].append(str(e)))
            page.goto(url)
            page.wait_for_selector("body[data-ready]", timeout=120_000)
            out["load_ms"].append(int(page.evaluate("document.body.dataset.readyMs")))
            tasks = page.evaluate("D.tasks.map(t => t.task)")
            steps = []
            for i, t in enumerate(tasks):
                steps.append((f"task {t}: switch", f"document.querySelectorAll('#tasks button')[{i}].click();"))
                steps.append((f"task {t}: compare A and B", set_value("#a", "2") + set_value("#b", "5")))
                steps.append((f"task {t}: filter domain", set_value("#domain", "physics")))
                steps.append((f"task {t}: filter text", set_value("#search", "physics-1", "input")))
                steps.append((f"task {t}: B beats A", CHECK.format("true")))
                steps.append((f"task {t}: open a query", "document.querySelector('#qlist .q').click();"))
                steps.append((f"task {t}: clear filters", set_value("#search", "", "input")
                              + CHECK.format("false")
                              + set_value("#domain", "")))
            for name, act in steps:
                out["interactions_ms"].setdefault(name, []).append(round(page.evaluate(TIMED, act), 1))
            out["js_heap_mb"].append(round(page.evaluate("performance.memory.usedJSHeapSize") / 1e6, 1))
            page.close()
        browser.close()
    worst = max(max(v) for v in out["interactions_ms"].values())
    out["summary"] = {
        "load_ms_median": statistics.median(out["load_ms"]),
        "interaction_ms_median": {k: statistics.median(v) for k, v in out["interactions_ms"].items()},
        "interaction_ms_worst": worst,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
