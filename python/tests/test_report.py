"""`sift report` in a real headless browser (Chromium): the sample's all-task evaluation
with three retrievers opens without console errors, its DOM holds every domain, retriever
and query, a drill-down shows the query's images and the candidates' thumbnails, and the
overview and a drill-down are captured as screenshots."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_sift

CLIP = str(ROOT / "models" / "fixtures" / "vision" / "tiny-clip-quickgelu")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def report(tmp_path_factory, sift_bin, sample, minilm_dir) -> Path:
    work = tmp_path_factory.mktemp("report")
    index = work / "index"
    run_sift(sift_bin, "index", "--corpus", str(sample), "--index", str(index), "--dense",
             minilm_dir, "--dense", CLIP, "--quiet")
    run_sift(sift_bin, "eval", "--corpus", str(sample), "--index", str(index), "--task", "all",
             "--retriever", "bm25", "--retriever", "dense:minilm", "--retriever",
             "dense:tiny-clip-quickgelu", "--out", str(work / "eval"), "--quiet")
    out = work / "report.html"
    run_sift(sift_bin, "report", str(work / "eval"), "--corpus", str(sample), "--out", str(out),
             "--figures", str(work / "figures"))
    return out


def chromium(*args: str) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("no Chromium (Debian: apt-get install chromium)")
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000",
         "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]


def test_report_is_self_contained_with_figures(report):
    html = report.read_text()
    # nothing fetched: no external script, style, image or link
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    figures = sorted(p.name for p in (report.parent / "figures").iterdir())
    kinds = ("heatmap", "means", "domains")
    assert figures == sorted(f"task{t}_{k}.{x}" for t in "1234" for k in kinds for x in ("svg", "png"))
    # each PNG is its SVG rendered at twice the size
    for name in figures:
        if name.endswith(".png"):
            png = (report.parent / "figures" / name).read_bytes()
            assert png[:8] == b"\x89PNG\r\n\x1a\n", name
            width, height = struct.unpack(">II", png[16:24])
            svg = (report.parent / "figures" / name.replace(".png", ".svg")).read_text()
            w, h = (float(x) for x in re.search(r'width="([0-9.]+)" height="([0-9.]+)"', svg).groups())
            # the SVG's size rounded up to whole pixels, then doubled
            assert (width, height) == (2 * int(-(-w // 1)), 2 * int(-(-h // 1))), name
    svg = (report.parent / "figures" / "task2_heatmap.svg").read_text()
    assert svg.startswith("<svg") and svg.count('class="cell"') == 3 * 3
    grouped = (report.parent / "figures" / "task2_domains.svg").read_text()
    assert grouped.count('class="gbar"') == 3 * 3


def test_overview_in_chromium(report, tmp_path):
    done = chromium("--dump-dom", f"file://{report}#task=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_errors(done.stderr) == []
    dom = done.stdout
    assert 'data-ready="1"' in dom and "data-error" not in dom
    # 3 domains x 3 retrievers in Task 2's heatmap, 3 retrievers to compare, 15 queries
    heatmap = dom.split('class="heatmap"')[1].split("</svg>")[0]
    assert heatmap.count('class="cell"') == 9
    assert dom.split('class="grouped"')[1].split("</svg>")[0].count('class="gbar"') == 9
    assert sorted(set(re.findall(r'class="domain"[^>]*>([^<]+)<', heatmap))) == ["biology", "gis", "physics"]
    select_a = dom.split('id="a"')[1].split("</select>")[0]
    assert select_a.count("<option") == 3
    assert dom.count('class="q"') == 15
    shot = tmp_path / "overview.png"
    done = chromium("--window-size=1300,1500", f"--screenshot={shot}", f"file://{report}#task=2")
    assert shot.stat().st_size > 20_000


def test_drill_down_in_chromium(report, tmp_path):
    view = f"file://{report}#task=4&query=gis/gis-2"
    done = chromium("--dump-dom", view)
    assert console_errors(done.stderr) == []
    detail = done.stdout.split('id="detail"')[1].split("<script")[0]
    assert "gis / gis-2" in detail
    # the query's two images; each retriever's top 10 Task 4 pairs, with the thumbnails of
    # the pairs' images
    assert detail.count('class="thumb qimg"') == 2
    assert detail.count("<ol") == 3
    assert len(re.findall(r"<li[ >]", detail)) == 30
    assert detail.count('class="thumb cand"') >= 10
    shot = tmp_path / "drill.png"
    chromium("--window-size=1300,1800", f"--screenshot={shot}", view)
    assert shot.stat().st_size > 20_000
