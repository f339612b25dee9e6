#!/usr/bin/env python3
"""Build the trec_eval reference fixtures for Sift's evaluator.

Regenerate with (from the repository root):

    python3 eval/reference/make_trec_eval_fixture.py

Writes into eval/reference/trec_eval/:

  qrels.txt, run.txt, exclusions.txt, expected.json            synthetic case
  tiny_qrels.txt, tiny_run.txt, tiny_exclusions.txt,
  tiny_expected.json                                           hand-checkable case

Everything is deterministic: the synthetic case is drawn from a self-contained
SplitMix64 generator with a fixed seed (no dependency on Python's `random`
module), and JSON is written with sorted keys.  The expected numbers come from
pytrec_eval (pytrec-eval-terrier, which bundles trec_eval 9.0.8).  The run is
parsed back from the text just written (float(text)) so the scores that
pytrec_eval sees are bit-identical to what a correct f64 parser reads from
run.txt.  Exclusions are removed from the run (never from the qrels) before
evaluation.

Besides writing the files, the script checks itself:
  * `observe_semantics()` asserts, on small probes, the trec_eval behaviours
    documented in eval/reference/README.md (tie-breaking, which queries are
    evaluated, ...);
  * an independent pure-Python implementation of every measure is compared
    with pytrec_eval on both cases (|diff| <= 1e-12);
  * "mutation" checks confirm that the synthetic case is actually sensitive to
    the docid tie-break, to ignoring the rank column, to the exclusions, and to
    trec_eval's narrowing of scores to C float (f32) - i.e. an evaluator that
    gets one of these wrong fails the fixture;
  * the tiny case is compared with closed-form values derived by hand.
"""

import functools
import json
import math
import struct
import sys
from fractions import Fraction
from pathlib import Path

import pytrec_eval

SEED = 0x5EED_2024_0001
CUTOFFS = (1, 5, 10, 25, 50, 100)
MEASURES = [
    "ndcg_cut." + ",".join(map(str, CUTOFFS)),
    "map_cut." + ",".join(map(str, CUTOFFS)),
    "recall." + ",".join(map(str, CUTOFFS)),
    "P." + ",".join(map(str, CUTOFFS)),
    "recip_rank",
    "ndcg",
]
MEASURE_NAMES = sorted(
    [f"{m}_{k}" for m in ("ndcg_cut", "map_cut", "recall", "P") for k in CUTOFFS]
    + ["recip_rank", "ndcg"]
)
COMMAND = "python3 eval/reference/make_trec_eval_fixture.py"
# 1 + 2^-24 (the midpoint between f32 1.0 and its successor) + 1e-32
DOUBLE_ROUNDING_TEXT = "1.00000005960464477539062500000001"
RUN_TAG = "sift-synth"

OUT_DIR = Path(__file__).resolve().parent / "trec_eval"


# --------------------------------------------------------------------------
# Deterministic PRNG (SplitMix64); independent of the Python version.
# --------------------------------------------------------------------------
class Rng:
    MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.s = seed & self.MASK

    def u64(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & self.MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.MASK
        return z ^ (z >> 31)

    def random(self):
        return (self.u64() >> 11) * (1.0 / (1 << 53))

    def uniform(self, a, b):
        return a + (b - a) * self.random()

    def randint(self, a, b):  # inclusive
        return a + self.u64() % (b - a + 1)

    def choice(self, seq):
        return seq[self.randint(0, len(seq) - 1)]

    def shuffle(self, lst):
        for i in range(len(lst) - 1, 0, -1):
            j = self.randint(0, i)
            lst[i], lst[j] = lst[j], lst[i]

    def sample(self, seq, k):
        lst = list(seq)
        self.shuffle(lst)
        return lst[:k]


# --------------------------------------------------------------------------
# Reference semantics (independent re-implementation used as a self-check).
# --------------------------------------------------------------------------
def to_f32(x):
    """C `(float) x` for a double x (round to nearest, ties to even)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def text_to_f32_direct(text):
    """Correctly rounded decimal -> f32 in ONE step (what Rust `str::parse::<f32>`
    does).  trec_eval does NOT do this; used only for a mutation check."""
    exact = Fraction(text)
    c = to_f32(float(text))
    bits = struct.unpack("<i", struct.pack("<f", c))[0]
    cands = {c}
    for b in (bits - 1, bits + 1):
        try:
            v = struct.unpack("<f", struct.pack("<i", b))[0]
        except struct.error:
            continue
        if math.isfinite(v):
            cands.add(v)

    def key(v):
        m = struct.unpack("<I", struct.pack("<f", v))[0]
        return (abs(Fraction(v) - exact), m & 1)

    return min(cands, key=key)


def trec_cmp(a, b):
    """trec_eval form_res_rels.c comp_sim_docno: score desc, then docid desc (strcmp).
    Scores must already be narrowed to f32 (trec_eval stores them as C float)."""
    (da, sa), (db, sb) = a, b
    if sa > sb:
        return -1
    if sa < sb:
        return 1
    ba, bb = da.encode(), db.encode()
    return (bb > ba) - (bb < ba)


def trec_order(docs_scores):
    narrowed = {d: to_f32(s) for d, s in docs_scores.items()}
    return [d for d, _ in sorted(narrowed.items(), key=functools.cmp_to_key(trec_cmp))]


def f64_order(docs_scores):
    """WRONG on purpose (mutation check): compares the full doubles."""
    return [d for d, _ in sorted(docs_scores.items(), key=functools.cmp_to_key(trec_cmp))]


def measures_for_ranking(ranking, qrels_q):
    """All MEASURE_NAMES for one query given the final ranked docid list."""
    rels = [qrels_q.get(d, 0) for d in ranking]  # unjudged == non-relevant
    num_rel = sum(1 for r in qrels_q.values() if r >= 1)
    ideal = sorted((r for r in qrels_q.values() if r > 0), reverse=True)

    def dcg(gains, k=None):
        g = gains if k is None else gains[:k]
        return sum(x / math.log2(i + 2) for i, x in enumerate(g) if x > 0)

    out = {}
    for k in CUTOFFS:
        top = rels[:k]
        hits = sum(1 for r in top if r >= 1)
        out[f"P_{k}"] = hits / k
        out[f"recall_{k}"] = hits / num_rel if num_rel else 0.0
        ap, h = 0.0, 0
        for i, r in enumerate(top):
            if r >= 1:
                h += 1
                ap += h / (i + 1)
        out[f"map_cut_{k}"] = ap / num_rel if num_rel else 0.0
        idcg = dcg(ideal, k)
        out[f"ndcg_cut_{k}"] = dcg(rels, k) / idcg if idcg > 0 else 0.0
    rr = 0.0
    for i, r in enumerate(rels):
        if r >= 1:
            rr = 1.0 / (i + 1)
            break
    out["recip_rank"] = rr
    idcg = dcg(ideal)
    out["ndcg"] = dcg(rels) / idcg if idcg > 0 else 0.0
    return out


def reference_evaluate(qrels, run, order=trec_order):
    """Queries evaluated: in the run AND having >= 1 qrels line (any grade)."""
    res = {}
    for qid, docs in run.items():
        if qid not in qrels or not qrels[qid]:
            continue
        res[qid] = measures_for_ranking(order(docs), qrels[qid])
    return res


# --------------------------------------------------------------------------
# File I/O (the run is always read back from its text form).
# --------------------------------------------------------------------------
def read_qrels(path):
    qrels = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        qid, _iter, docid, rel = line.split()
        q = qrels.setdefault(qid, {})
        assert docid not in q, (qid, docid)
        q[docid] = int(rel)
    return qrels


def read_run(path, texts=None):
    """qid -> docid -> score (float parsed from the text); qid -> docid -> rank column.
    If `texts` is a dict it is filled with qid -> docid -> score text."""
    run, ranks = {}, {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        qid, _q0, docid, rank, score, _tag = line.split()
        q = run.setdefault(qid, {})
        assert docid not in q, (qid, docid)
        q[docid] = float(score)
        ranks.setdefault(qid, {})[docid] = int(rank)
        if texts is not None:
            texts.setdefault(qid, {})[docid] = score
    return run, ranks


def read_exclusions(path):
    excl = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        qid, docid = line.split()
        excl.setdefault(qid, set()).add(docid)
    return excl


def apply_exclusions(run, excl):
    return {
        qid: {d: s for d, s in docs.items() if d not in excl.get(qid, ())}
        for qid, docs in run.items()
    }


def run_pytrec_eval(qrels, run):
    ev = pytrec_eval.RelevanceEvaluator(qrels, set(MEASURES))
    per_query = ev.evaluate(run)
    for qid, vals in per_query.items():
        assert sorted(vals) == MEASURE_NAMES, (qid, sorted(vals))
    mean = {
        m: pytrec_eval.compute_aggregated_measure(m, [per_query[q][m] for q in per_query])
        for m in MEASURE_NAMES
    }
    return per_query, mean


def write_expected(path, per_query, mean, case, notes):
    doc = {
        "case": case,
        "command": COMMAND,
        "pytrec_eval_version": pytrec_eval.__version__,
        "trec_eval_version": "9.0.8 (bundled in pytrec-eval-terrier)",
        "measures_requested": MEASURES,
        "relevance_level": 1,
        "evaluated_queries": sorted(per_query),
        "num_evaluated_queries": len(per_query),
        "notes": notes,
        "per_query": per_query,
        "mean": mean,
    }
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def compare(a, b, tol=1e-12, what=""):
    assert sorted(a) == sorted(b), (what, sorted(set(a) ^ set(b)))
    worst = 0.0
    for qid in a:
        for m in MEASURE_NAMES:
            d = abs(a[qid][m] - b[qid][m])
            worst = max(worst, d)
            assert d <= tol, (what, qid, m, a[qid][m], b[qid][m])
    return worst


def n_queries_differing(a, b, tol=1e-9):
    return [q for q in a if any(abs(a[q][m] - b[q][m]) > tol for m in MEASURE_NAMES)]


# --------------------------------------------------------------------------
# Observed trec_eval / pytrec_eval semantics (asserted; documented in README).
# --------------------------------------------------------------------------
def observe_semantics():
    def ev(qrels, run, measures=("recip_rank", "P.5,10", "recall.5", "ndcg", "map_cut.5")):
        return pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(run)

    # 1. Ties: score desc, then docid desc by strcmp ("d9" > "d100" > "d10" > "D1").
    docs = ["d10", "D1", "d9", "d100"]
    pos = {}
    for target in docs:
        r = ev({"t": {target: 1}}, {"t": {d: 1.0 for d in docs}})
        pos[target] = round(1 / r["t"]["recip_rank"])
    assert [d for d, _ in sorted(pos.items(), key=lambda kv: kv[1])] == ["d9", "d100", "d10", "D1"], pos
    # -0.0 and 0.0 tie (C `>`/`<` comparison, not a total order): with a tie the
    # docid decides ("b" first, rr = 1); a total order (-0.0 < 0.0) would put "a" first.
    r = ev({"t": {"b": 1}}, {"t": {"a": 0.0, "b": -0.0}})
    assert r["t"]["recip_rank"] == 1.0, r

    # Scores are narrowed to C float (f32) before comparison: 1.0000000000000002
    # and 1.0 tie (so docid "b" > "a" decides), although they differ as doubles.
    r = ev({"t": {"a": 1}}, {"t": {"a": 1.0000000000000002, "b": 1.0}})
    assert r["t"]["recip_rank"] == 0.5, r
    # ... via the double: decimal -> f64 -> f32 (two roundings).  This text lies just
    # above the midpoint between the f32 values 1 and 1+2^-23; as a double it IS the
    # midpoint, which then rounds (ties-to-even) to 1.0f and ties with "b".
    r = ev({"t": {"a": 1}}, {"t": {"a": float(DOUBLE_ROUNDING_TEXT), "b": 1.0}})
    assert r["t"]["recip_rank"] == 0.5, r
    assert text_to_f32_direct(DOUBLE_ROUNDING_TEXT) != 1.0
    # Tiny magnitudes underflow to (-)0.0f and tie with 0.
    r = ev({"t": {"a": 1}}, {"t": {"a": 1e-300, "b": 0.0}})
    assert r["t"]["recip_rank"] == 0.5, r

    # 2. Which queries are evaluated.
    qrels = {
        "both": {"x": 1},
        "zero_only": {"x": 0, "y": 0},
        "zero_only_norun": {"x": 0},
        "qrels_only": {"x": 1},
        "empty_run": {"x": 1},
    }
    run = {
        "both": {"x": 1.0},
        "zero_only": {"x": 1.0, "z": 0.5},
        "run_only": {"x": 1.0},
        "empty_run": {},
    }
    r = ev(qrels, run)
    assert sorted(r) == ["both", "empty_run", "zero_only"], sorted(r)
    assert all(v == 0.0 for v in r["zero_only"].values()), r["zero_only"]
    assert all(v == 0.0 for v in r["empty_run"].values()), r["empty_run"]

    # 3. P@k divides by k even if fewer than k docs are retrieved.
    r = ev({"t": {"a": 1}}, {"t": {"a": 1.0, "b": 0.5}})
    assert r["t"]["P_5"] == 0.2 and r["t"]["P_10"] == 0.1, r

    # 4. Graded gains are the raw grade, discount log2(rank + 1); ideal from all qrels.
    r = ev({"t": {"a": 3, "b": 2, "c": 1, "z": 1}}, {"t": {"c": 3.0, "b": 2.0, "a": 1.0}})
    dcg = 1 / math.log2(2) + 2 / math.log2(3) + 3 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4) + 1 / math.log2(5)
    assert abs(r["t"]["ndcg"] - dcg / idcg) < 1e-15, r
    # Binary measures: rel >= 1 relevant; map_cut.k divides by total #relevant (not min(k, R)).
    r = ev({"t": {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1}}, {"t": {"a": 1.0}})
    assert abs(r["t"]["map_cut_5"] - 1 / 7) < 1e-15 and abs(r["t"]["recall_5"] - 1 / 7) < 1e-15, r

    # 5. Rank column is ignored by construction (pytrec_eval takes docid -> score).
    return [
        "ties: score descending, then docid descending by strcmp (byte order); "
        "observed order for equal scores: d9, d100, d10, D1; -0.0 ties with 0.0",
        "scores are compared after narrowing to C float (f32): text -> f64 (strtod / "
        "Python float) -> f32 (round to nearest even); 1.0000000000000002 ties with 1.0; "
        "1e-300 ties with 0.0; the two-step rounding differs from a one-step "
        "text -> f32 parse for " + DOUBLE_ROUNDING_TEXT,
        "evaluated queries: those present in the run AND with >= 1 qrels line; "
        "qrels-only queries and run-only queries are absent from the output",
        "a query whose qrels are all grade 0 IS evaluated and scores 0 on every measure",
        "a run query present with zero documents (empty dict) IS evaluated (all 0); "
        "not exercised by the fixtures (a trec_eval run file cannot express it)",
        "P_k = (#rel in top k) / k even when fewer than k docs retrieved",
        "recall_k, map_cut_k = 0 when the query has no relevant docs; denominators are the "
        "total number of rel>=1 docs in the qrels (retrieved or not)",
        "nDCG gain = raw grade, discount 1/log2(rank+1), ideal from all qrels grades",
    ]


# --------------------------------------------------------------------------
# Synthetic case.
# --------------------------------------------------------------------------
def make_docid(rng):
    r = rng.random()
    n = rng.randint(0, 9999)
    if r < 0.62:
        return f"d{n}"
    if r < 0.76:
        return f"D{n}"
    if r < 0.86:
        return f"doc{n:05d}"
    if r < 0.91:
        return f"d{rng.randint(0, 99)}_{rng.randint(0, 9)}"
    if r < 0.96:
        return f"d-{rng.randint(0, 999)}"
    return f"dA{rng.randint(0, 999)}"


def unique_docids(rng, n, taken=()):
    seen = set(taken)
    out = []
    while len(out) < n:
        d = make_docid(rng)
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def grade(rng):
    r = rng.random()
    return 1 if r < 0.5 else (2 if r < 0.8 else 3)


def fmt(x):
    return repr(float(x))  # shortest round-trip text, up to 17 significant digits


def score_sequence(rng, n, scale):
    """n non-increasing scores; natural exact ties with probability ~8%."""
    if scale == "bm25":
        s, lo, hi = rng.uniform(15, 30), 0.001, 0.35
    elif scale == "cos":  # crosses zero for long lists
        s, lo, hi = rng.uniform(0.35, 0.9), 1e-5, 0.012
    elif scale == "logp":  # all negative
        s, lo, hi = rng.uniform(-3, -1), 0.01, 0.5
    elif scale == "quant":  # one decimal: lots of ties
        s, lo, hi = rng.uniform(10, 20), 0.0, 0.25
    else:
        raise ValueError(scale)
    out = []
    for _ in range(n):
        out.append(round(s, 1) if scale == "quant" else s)
        if rng.random() >= 0.08:
            s -= rng.uniform(lo, hi)
    if scale == "quant":  # keep monotone after rounding
        for i in range(1, n):
            out[i] = min(out[i], out[i - 1])
    return out


class Query:
    def __init__(self, qid):
        self.qid = qid
        self.qrels = {}  # docid -> grade
        self.scores = {}  # docid -> score text (as written)
        self.ranks = {}  # docid -> rank column
        self.exclusions = []  # docids
        self.in_run = True
        self.split_lines = False


def generic_query(rng, qid, n_rel, n_zero, run_len, frac_rel_ret, scale,
                  n_excl=0, rank_mode=None, tie_groups=((3, 4), (8, 4)), near=False):
    """near=True: the tie groups are distinct doubles that round to the same f32."""
    q = Query(qid)
    pool = unique_docids(rng, n_rel + n_zero + run_len + 5)
    rel_docs, pool = pool[:n_rel], pool[n_rel:]
    zero_docs, pool = pool[:n_zero], pool[n_zero:]
    for d in rel_docs:
        q.qrels[d] = grade(rng)
    for d in zero_docs:
        q.qrels[d] = 0
    k_rel = min(run_len, int(round(frac_rel_ret * n_rel)))
    k_zero = min(run_len - k_rel, int(round(0.7 * n_zero)))
    retrieved = rng.sample(rel_docs, k_rel) + rng.sample(zero_docs, k_zero)
    n_unjudged = run_len - len(retrieved)
    retrieved += pool[:n_unjudged]
    spare = pool[n_unjudged:]  # never retrieved, never judged
    # intended order: relevant docs biased towards the top
    latent = {d: rng.random() + 0.35 * q.qrels.get(d, 0) for d in retrieved}
    order = sorted(retrieved, key=lambda d: (-latent[d], d))

    # exclusions (chosen from the intended top 10 so that they matter)
    excluded = []
    if n_excl:
        top = order[:10]
        rel_top = [d for d in top if q.qrels.get(d, 0) >= 1]
        non_top = [d for d in top if q.qrels.get(d, 0) < 1]
        if rel_top:
            excluded.append(rng.choice(rel_top))
        if non_top and len(excluded) < n_excl:
            excluded.append(rng.choice(non_top))
        while len(excluded) < n_excl and len(order) > 12:
            d = rng.choice(order[10:])
            if d not in excluded:
                excluded.append(d)
    kept = [d for d in order if d not in excluded]

    # make every forced tie group mixed (>= 1 relevant and >= 1 non-relevant)
    def is_rel(d):
        return q.qrels.get(d, 0) >= 1

    for start, size in tie_groups:
        grp = range(start, min(start + size, len(kept)))
        if len(grp) < 2:
            continue
        for want in (True, False):
            if not any(is_rel(kept[i]) == want for i in grp):
                for j in range(start + size, len(kept)):
                    if is_rel(kept[j]) == want:
                        i = grp[1]
                        kept[i], kept[j] = kept[j], kept[i]
                        break

    scores = score_sequence(rng, len(kept), scale)
    for start, size in tie_groups:
        if start >= len(kept):
            continue
        if near:
            base = to_f32(scores[start])
            scores[start] = base
        for i in range(start + 1, min(start + size, len(kept))):
            # exact tie, or (near) a slightly LARGER double that is the same f32
            scores[i] = base + (i - start) * abs(base) * 1e-9 if near else scores[start]
    for d, s in zip(kept, scores):
        q.scores[d] = fmt(s)
    # excluded docs that were retrieved get the score of their intended slot's
    # neighbour (often creating ties with kept docs)
    for d in excluded:
        i = min(order.index(d), len(kept) - 1)
        q.scores[d] = q.scores[kept[i]]
    if n_excl >= 2:
        # an exclusion of a doc that is not in the run: a no-op for the run; if it
        # is a relevant doc it still counts in the recall / ideal-DCG denominators
        unretrieved_rel = [d for d in rel_docs if d not in q.scores]
        excluded.append(unretrieved_rel[0] if unretrieved_rel else spare[0])
    q.exclusions = excluded
    assign_ranks(rng, q, order, rank_mode)
    return q


def assign_ranks(rng, q, intended, mode):
    docs = [d for d in intended if d in q.scores] + sorted(
        d for d in q.scores if d not in intended
    )
    mode = mode or rng.choice(["intended", "reversed", "random"])
    if mode == "intended":
        ranked = docs
    elif mode == "reversed":
        ranked = docs[::-1]
    else:
        ranked = list(docs)
        rng.shuffle(ranked)
    q.ranks = {d: i + 1 for i, d in enumerate(ranked)}


def build_synthetic(rng):
    qs = []

    # q1: single relevant doc (grade 3) inside a 4-way tie at ranks 4-7:
    # trec_eval order d9, d100, d10, D1 -> the relevant d10 lands at rank 6.
    q = Query("q1")
    filler = unique_docids(rng, 30, taken=["d9", "d10", "D1", "d100"])
    order = filler[:3] + ["d10", "D1", "d9", "d100"] + filler[3:]
    sc = score_sequence(rng, len(order), "bm25")
    for i in range(4, 7):
        sc[i] = sc[3]
    q.scores = {d: fmt(s) for d, s in zip(order, sc)}
    q.qrels = {"d10": 3, "d9": 0, "d100": 0, filler[0]: 0, filler[5]: 0}
    assign_ranks(rng, q, order, "intended")
    qs.append(q)

    # q2: single relevant doc that is never retrieved.
    q = generic_query(rng, "q2", 0, 6, 40, 0.0, "cos", rank_mode="random")
    q.qrels[unique_docids(rng, 1, taken=q.scores)[0]] = 2
    qs.append(q)

    # q3, q4: only grade-0 judgments, present in the run (evaluated, all zeros).
    qs.append(generic_query(rng, "q3", 0, 8, 50, 0.0, "bm25"))
    q = generic_query(rng, "q4", 0, 0, 20, 0.0, "logp", tie_groups=())
    q.qrels = {d: 0 for d in unique_docids(rng, 5, taken=q.scores)}  # none retrieved
    qs.append(q)

    # q5: only grade-0 judgments and no run (not evaluated).
    q = Query("q5")
    q.qrels = {d: 0 for d in unique_docids(rng, 4)}
    q.in_run = False
    qs.append(q)

    # q6, q7: more than 100 relevant docs -> recall@100 < 1.
    qs.append(generic_query(rng, "q6", 140, 30, 150, 0.7, "bm25", n_excl=3))
    qs.append(generic_query(rng, "q7", 220, 10, 150, 0.55, "quant", n_excl=2))

    # q8: qrels but no run (not evaluated).
    q = Query("q8")
    q.qrels = {d: grade(rng) for d in unique_docids(rng, 10)}
    q.in_run = False
    q.exclusions = [next(iter(q.qrels))]  # exclusion for a query without a run: no-op
    qs.append(q)

    # q9: all scores negative.
    qs.append(generic_query(rng, "q9", 25, 20, 100, 0.8, "logp", n_excl=2))
    # q10: rank column exactly reversed.
    qs.append(generic_query(rng, "q10", 12, 10, 60, 0.75, "bm25", rank_mode="reversed"))
    # q11: heavy ties from quantised scores.
    qs.append(generic_query(rng, "q11", 30, 25, 120, 0.6, "quant", n_excl=3))

    # q12: every document has the same score (order = docid descending).
    q = Query("q12")
    docs = unique_docids(rng, 60)
    q.scores = {d: "1.0" for d in docs}
    for d in rng.sample(docs, 12):
        q.qrels[d] = grade(rng)
    for d in rng.sample([d for d in docs if d not in q.qrels], 10):
        q.qrels[d] = 0
    for d in unique_docids(rng, 3, taken=docs):
        q.qrels[d] = grade(rng)
    assign_ranks(rng, q, docs, "random")
    qs.append(q)

    # q13: fewer docs retrieved than the smallest non-trivial cut-off.
    q = generic_query(rng, "q13", 4, 2, 3, 0.5, "cos", tie_groups=())
    qs.append(q)

    # q14: textual forms. Equal doubles written differently must tie; doubles
    # that differ only in the last ulp (or only beyond f32 precision) must not.
    q = Query("q14")
    groups = [
        # distinct f64, equal f32 (all three become 1.0f via text -> f64 -> f32)
        ["1.0000000000000002", "1", DOUBLE_ROUNDING_TEXT],
        ["0.3", "0.29999999999999999", "3e-1"],          # same double
        ["0.30000000000000004"],                         # next double: same f32
        ["1.5", "1.50", "15e-1", "0.15E1"],              # same double
        ["0", "0.0", "-0.0", "0e0"],                     # all equal (-0.0 == 0.0)
        ["-1e-300", "-1E-300"],                          # -0.0f: ties with the zeros
        ["-12.345678901234567", "-12.3456789012345670"],
    ]
    texts = [t for g in groups for t in g]
    docs = unique_docids(rng, len(texts), taken=["d9", "d10", "D1"])
    # pin a few tricky docids in the 1.5 group
    i15 = texts.index("1.5")
    docs[i15:i15 + 3] = ["d10", "d9", "D1"]
    q.scores = dict(zip(docs, texts))
    rel_pattern = [1, 0, 2, 2, 0, 0, 1, 0, 0, 3, 1, 0, 0, 0, 1, 0, 2, 0, 1]
    for d, r in zip(docs, rel_pattern):
        q.qrels[d] = r
    q.qrels["d9"] = 0
    q.qrels["d10"] = 2
    assign_ranks(rng, q, docs, "intended")
    q.exclusions = [docs[texts.index("0.3")]]
    qs.append(q)

    # q15: its lines are split into two chunks in run.txt (second chunk at the end).
    q = generic_query(rng, "q15", 15, 10, 80, 0.7, "cos", n_excl=1)
    q.split_lines = True
    qs.append(q)

    # q16: "near ties" at ranks 4-7 and 9-12: distinct doubles, identical f32.
    qs.append(generic_query(rng, "q16", 20, 15, 60, 0.8, "bm25", n_excl=0,
                            rank_mode="intended", near=True))

    # q17..q40: varied generic queries.
    scales = ["bm25", "cos", "logp", "quant"]
    for i in range(17, 41):
        n_rel = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 120])
        n_zero = rng.randint(0, 40)
        run_len = rng.choice([5, 9, 10, 11, 24, 26, 49, 51, 99, 100, 101, 150])
        frac = rng.choice([0.0, 0.3, 0.6, 0.9, 1.0])
        n_excl = rng.choice([0, 0, 1, 2, 4])
        qs.append(generic_query(rng, f"q{i}", n_rel, n_zero, run_len, frac,
                                rng.choice(scales), n_excl=n_excl))

    # q41: run but no qrels (ignored by trec_eval), with an exclusion line.
    q = generic_query(rng, "q41", 0, 0, 30, 0.0, "bm25", tie_groups=())
    q.qrels = {}
    q.exclusions = [next(iter(q.scores))]
    qs.append(q)
    return qs


def write_case(qs, prefix, rng=None):
    qrels_lines, run_lines, tail_lines, excl_lines = [], [], [], []
    for q in qs:
        items = list(q.qrels.items())
        if rng is not None:
            rng.shuffle(items)
        qrels_lines += [f"{q.qid} 0 {d} {r}" for d, r in items]
        if q.in_run:
            lines = [
                f"{q.qid} Q0 {d} {q.ranks[d]} {q.scores[d]} {RUN_TAG}"
                for d in sorted(q.scores, key=lambda d: q.ranks[d])
            ]
            if q.split_lines:
                cut = len(lines) // 3
                run_lines += lines[cut:]
                tail_lines += lines[:cut]
            else:
                run_lines += lines
        excl_lines += [f"{q.qid} {d}" for d in q.exclusions]
    OUT_DIR.joinpath(prefix + "qrels.txt").write_text("\n".join(qrels_lines) + "\n")
    OUT_DIR.joinpath(prefix + "run.txt").write_text("\n".join(run_lines + tail_lines) + "\n")
    OUT_DIR.joinpath(prefix + "exclusions.txt").write_text("\n".join(excl_lines) + "\n")


def evaluate_case(prefix, case, notes):
    qrels = read_qrels(OUT_DIR / (prefix + "qrels.txt"))
    run, ranks = read_run(OUT_DIR / (prefix + "run.txt"))
    excl = read_exclusions(OUT_DIR / (prefix + "exclusions.txt"))
    run_x = apply_exclusions(run, excl)
    assert all(run_x[q] for q in run_x), "a query's run became empty after exclusions"
    per_query, mean = run_pytrec_eval(qrels, run_x)
    worst = compare(per_query, reference_evaluate(qrels, run_x), what=case)
    write_expected(OUT_DIR / (prefix + "expected.json"), per_query, mean, case, notes)
    return qrels, run, ranks, excl, run_x, per_query, mean, worst


# --------------------------------------------------------------------------
# Tiny hand-written case.
# --------------------------------------------------------------------------
TINY_QRELS = """\
t1 0 dA 1
t1 0 dB 2
t1 0 dC 0
t1 0 dZ 1
t2 0 x 0
t2 0 y 0
t3 0 d10 1
t3 0 e 0
"""
TINY_RUN = """\
t1 Q0 dA 1 2.0 tiny
t1 Q0 dB 2 2.0 tiny
t1 Q0 dC 3 3.0 tiny
t1 Q0 dD 4 1.0 tiny
t2 Q0 x 1 1.0 tiny
t2 Q0 w 2 0.5 tiny
t3 Q0 d9 1 -1.25 tiny
t3 Q0 d10 2 -1.25 tiny
t3 Q0 D1 3 -1.25 tiny
t3 Q0 e 4 -0.5 tiny
"""
TINY_EXCLUSIONS = """\
t3 d9
"""


def tiny_hand_values():
    """Closed-form values derived by hand (see README)."""
    L2, L3 = math.log2(3), 2.0  # log2(3), log2(4)
    v = {}
    # t1: order dC(0) dB(2) dA(1) dD(unjudged); R = 3 (dA, dB, dZ)
    t1 = {}
    for k in CUTOFFS:
        hits = 0 if k == 1 else 2
        t1[f"P_{k}"] = hits / k
        t1[f"recall_{k}"] = hits / 3
        t1[f"map_cut_{k}"] = 0.0 if k == 1 else (1 / 2 + 2 / 3) / 3
    dcg = 2 / L2 + 1 / L3
    idcg_full = 2 + 1 / L2 + 1 / L3
    t1["ndcg_cut_1"] = 0.0
    for k in CUTOFFS[1:]:
        t1[f"ndcg_cut_{k}"] = dcg / idcg_full
    t1["ndcg"] = dcg / idcg_full
    t1["recip_rank"] = 0.5
    v["t1"] = t1
    # t2: only grade-0 judgments -> everything 0
    v["t2"] = {m: 0.0 for m in MEASURE_NAMES}
    # t3 after excluding d9: e(0) d10(1) D1(unjudged); R = 1
    t3 = {}
    for k in CUTOFFS:
        hits = 0 if k == 1 else 1
        t3[f"P_{k}"] = hits / k
        t3[f"recall_{k}"] = float(hits)
        t3[f"map_cut_{k}"] = 0.0 if k == 1 else 0.5
        t3[f"ndcg_cut_{k}"] = 0.0 if k == 1 else 1 / L2
    t3["ndcg"] = 1 / L2
    t3["recip_rank"] = 0.5
    v["t3"] = t3
    return v


def main():
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    observed = observe_semantics()
    for line in observed:
        print("observed:", line)

    # ---- synthetic case
    rng = Rng(SEED)
    qs = build_synthetic(rng)
    write_case(qs, "", rng)
    notes = [
        "Exclusions (exclusions.txt) are removed from the run, not from the qrels, "
        "before evaluation.",
        "per_query holds only evaluated queries (in run AND in qrels); "
        "mean is the arithmetic mean over exactly those queries.",
    ] + observed
    qrels, run, ranks, excl, run_x, per_query, mean, worst = evaluate_case("", "synthetic", notes)
    print(f"synthetic: {len(qrels)} qrels queries, {len(run)} run queries, "
          f"{len(per_query)} evaluated; independent re-implementation max |diff| = {worst:.3g}")

    # mutation checks: the fixture must punish the classic mistakes
    def asc_docid(docs):
        return [d for d, _ in sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))]

    def by_rank_column(docs, _ranks=ranks):
        qid = by_rank_column.qid
        return sorted(docs, key=lambda d: _ranks[qid][d])

    texts = {}
    read_run(OUT_DIR / "run.txt", texts)
    ref = reference_evaluate(qrels, run_x)
    wrong_tie = reference_evaluate(qrels, run_x, order=asc_docid)
    wrong_rank = {}
    for qid in run_x:
        if qid in qrels:
            by_rank_column.qid = qid
            wrong_rank[qid] = measures_for_ranking(by_rank_column(run_x[qid]), qrels[qid])
    no_excl = reference_evaluate(qrels, run)
    wrong_f64 = reference_evaluate(qrels, run_x, order=f64_order)
    direct = {q: {d: text_to_f32_direct(texts[q][d]) for d in docs} for q, docs in run_x.items()}
    wrong_direct = reference_evaluate(qrels, direct, order=f64_order)
    checks = {
        "docid-ascending tie-break": n_queries_differing(ref, wrong_tie),
        "ordering by the rank column": n_queries_differing(ref, wrong_rank),
        "ignoring exclusions": n_queries_differing(ref, no_excl),
        "comparing full f64 scores (no f32 narrowing)": n_queries_differing(ref, wrong_f64),
        "one-step text -> f32 parse": n_queries_differing(ref, wrong_direct),
    }
    for what, qids in checks.items():
        print(f"mutation check: {what} changes {len(qids)} evaluated queries: "
              + " ".join(sorted(qids, key=lambda q: int(q[1:]))))
        assert qids, what

    # ---- tiny case
    (OUT_DIR / "tiny_qrels.txt").write_text(TINY_QRELS)
    (OUT_DIR / "tiny_run.txt").write_text(TINY_RUN)
    (OUT_DIR / "tiny_exclusions.txt").write_text(TINY_EXCLUSIONS)
    tiny_notes = [
        "t1: ranking dC(0) dB(2) dA(1) dD(unjudged) - dA/dB tie at 2.0 broken by docid "
        "descending; dZ (grade 1) never retrieved; R = 3",
        "t2: only grade-0 judgments -> evaluated, every measure 0",
        "t3: d9, d10, D1 tie at -1.25 below e (-0.5); d9 excluded -> ranking e(0) d10(1) "
        "D1(unjudged); R = 1",
    ]
    _, _, _, _, _, tiny_pq, _, tiny_worst = evaluate_case("tiny_", "tiny", tiny_notes)
    worst_hand = compare(tiny_pq, tiny_hand_values(), tol=1e-12, what="tiny-hand")
    print(f"tiny: {len(tiny_pq)} evaluated; re-implementation max |diff| = {tiny_worst:.3g}; "
          f"hand-derived max |diff| = {worst_hand:.3g}")
    print("wrote", ", ".join(sorted(p.name for p in OUT_DIR.iterdir())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
