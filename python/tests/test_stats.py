"""`sift eval --compare`'s significance tests against scipy's (ttest_rel, permutation_test)
on the sample's per-query scores: BM25 against the tiny CLIP model, every task."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT, run_sift, sift_json

stats = pytest.importorskip("scipy.stats", reason="scipy is not installed")

CLIP = str(ROOT / "models" / "fixtures" / "vision" / "tiny-clip-quickgelu")


@pytest.fixture(scope="module")
def index(tmp_path_factory, sift_bin, sample):
    path = tmp_path_factory.mktemp("stats") / "index"
    run_sift(sift_bin, "index", "--corpus", str(sample), "--index", str(path), "--dense", CLIP,
             "--quiet")
    return path


def compare(sift_bin, sample, index, resamples: int) -> dict:
    return sift_json(sift_bin, "eval", "--corpus", str(sample), "--index", str(index),
                     "--task", "all", "--retriever", "bm25", "--retriever",
                     "dense:tiny-clip-quickgelu", "--compare", "bm25,dense:tiny-clip-quickgelu",
                     "--resamples", str(resamples), "--quiet")


def paired_scores(report: dict, comparison: dict, domain: str) -> tuple[np.ndarray, np.ndarray]:
    """The per-query metric of both jobs of a comparison, in query-id order."""
    jobs = {j["label"]: j for j in report["reports"]
            if str(j["task"]).split()[0] == comparison["task"]}
    a, b = jobs[comparison["a"]]["per_query"], jobs[comparison["b"]]["per_query"]
    domains = sorted(a) if domain == "all" else [domain]
    xa, xb = [], []
    for d in domains:
        for q in sorted(a[d]):
            xa.append(a[d][q][comparison["metric"]])
            xb.append(b[d][q][comparison["metric"]])
    return np.array(xa), np.array(xb)


def holm(p: list[float]) -> list[float]:
    order = np.argsort(p, kind="stable")
    out, running = [0.0] * len(p), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - k) * p[i]))
        out[i] = running
    return out


def mean_difference(x, y, axis=-1):
    return np.mean(x - y, axis=axis)


def test_exact_tests_equal_scipy(sift_bin, sample, index):
    # 40,000 resamples: every sign flip of 15 queries (32,768) is enumerated, by both
    report = compare(sift_bin, sample, index, 40_000)
    comparisons = report["comparisons"]
    # Task 3 ranks images, which BM25 cannot
    assert [c["task"] for c in comparisons] == ["1", "2", "4"]
    tested = 0
    for c in comparisons:
        for d in c["domains"]:
            a, b = paired_scores(report, c, d["domain"])
            assert d["n"] == len(a)
            assert (d["wins"], d["ties"], d["losses"]) == (
                int((a > b).sum()), int((a == b).sum()), int((a < b).sum()))
            assert d["mean_a"] == pytest.approx(a.mean(), abs=1e-12)
            if np.all(a == b):
                continue
            tested += 1
            t = stats.ttest_rel(a, b)
            if np.isfinite(t.statistic):
                assert d["t"] == pytest.approx(t.statistic, rel=1e-9), (c["task"], d["domain"])
                assert d["t_p"] == pytest.approx(t.pvalue, rel=1e-9, abs=1e-15)
            perm = stats.permutation_test((a, b), mean_difference, permutation_type="samples",
                                          n_resamples=40_000, vectorized=True,
                                          alternative="two-sided")
            assert d["perm_exact"]
            assert d["perm_p"] == pytest.approx(perm.pvalue, rel=1e-12), (c["task"], d["domain"])
        per_domain = [d for d in c["domains"] if d["domain"] != "all"]
        if all(d["t_p"] is not None for d in per_domain):
            want = holm([d["perm_p"] for d in per_domain])
            assert [d["perm_p_holm"] for d in per_domain] == pytest.approx(want, rel=1e-12)
    # the sample's scores differ on most tasks: the tests above ran
    assert tested >= 8, tested


def test_random_flips_agree_with_scipy_within_sampling_error(sift_bin, sample, index):
    resamples = 4_000  # fewer than 2^15: random sign flips, for the pooled 15 queries
    report = compare(sift_bin, sample, index, resamples)
    checked = 0
    for c in report["comparisons"]:
        d = c["domains"][-1]
        assert d["domain"] == "all"
        a, b = paired_scores(report, c, "all")
        if np.all(a == b):
            continue
        assert not d["perm_exact"] and d["resamples"] == resamples
        exact = stats.permutation_test((a, b), mean_difference, permutation_type="samples",
                                       n_resamples=40_000, vectorized=True).pvalue
        se = max(np.sqrt(exact * (1 - exact) / resamples), 1 / resamples)
        assert abs(d["perm_p"] - exact) < 4 * 2 * se, (c["task"], d["perm_p"], exact)
        checked += 1
    assert checked >= 2


def test_latex_tables_mark_the_best_and_second(sift_bin, sample, index, tmp_path):
    import re

    tex = run_sift(sift_bin, "eval", "--corpus", str(sample), "--index", str(index), "--task",
                   "all", "--retriever", "bm25", "--retriever", "dense:tiny-clip-quickgelu",
                   "--format", "latex", "--quiet", "--out", str(tmp_path / "out"))
    assert tex == (tmp_path / "out" / "results.tex").read_text()
    tables = tex.split("\\end{tabular}")[:-1]
    assert len(tables) == 4  # tasks 1-4 (Task 3: the CLIP model alone)
    for table in tables:
        header = re.search(r"Retriever & (.*) \\\\", table).group(1).split(" & ")
        assert header == ["biology", "gis", "physics", "Avg."]
        rows = re.findall(r"^(.+?) & (.*) \\\\$", table.split("\\midrule")[1], re.M)
        values = [[float(re.sub(r"[^0-9.]", "", c)) for c in cells.split(" & ")] for _, cells in rows]
        marks = [cells.split(" & ") for _, cells in rows]
        for c in range(len(header)):
            column = sorted({v[c] for v in values}, reverse=True)
            for r in range(len(rows)):
                bold = marks[r][c].startswith("\\textbf")
                under = marks[r][c].startswith("\\underline")
                assert bold == (values[r][c] == column[0]), (table, r, c)
                assert under == (len(column) > 1 and values[r][c] == column[1]), (table, r, c)
