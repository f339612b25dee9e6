#!/usr/bin/env python3
"""Lucene / Anserini / gensim reference fixtures for Sift's BM25 (crates/sift-index/tests).

What it writes, under crates/sift-index/tests/fixtures/lucene/:
  texts.jsonl.gz        a few thousand varied texts (hand-written edge cases, Cranfield's
                        documents and queries, generated mixes of numbers, hyphens, apostrophes,
                        URLs, e-mail addresses, code, many scripts and emoji, and a sweep over
                        Unicode: every code point assigned in the Basic Multilingual Plane, most
                        of the rest, in a few contexts each)
  tokens.jsonl.gz       Anserini's default English analyzer's token stream for each of them
  generated/            a generated collection (corpus.jsonl.gz, queries.jsonl) in BEIR layout
  {cranfield,generated}.anserini.run.gz
                        Anserini's BM25 runs (k1 0.9, b 0.4, top 100): Lucene's BM25Similarity
  {cranfield,generated}.reference.run.gz
                        the BRIGHT / MM-BRIGHT reference scoring, run with gensim exactly as
                        BRIGHT's retrieval code does it (Lucene tokens, Dictionary,
                        LuceneBM25Model(k1=0.9, b=0.4), SparseMatrixSimilarity), top 100

Needs: Java 21+ (--java, or JAVA; a JDK 25 is looked for under /usr/lib/jvm), Anserini's fat
jar (--jar; it ships inside PyPI's pyserini source package:
  pip download --no-deps --no-binary :all: pyserini==1.6.0 -d /tmp/pyserini
  tar xzf /tmp/pyserini/pyserini-1.6.0.tar.gz -C /tmp/pyserini
  -> /tmp/pyserini/pyserini-1.6.0/pyserini/resources/jars/anserini-1.7.1-fatjar.jar),
gensim (pip install -r eval/reference/lucene/requirements.txt) and the Cranfield collection
(--cranfield, default ../shared/data/cranfield).

  python3 eval/reference/lucene/make_fixtures.py --jar .../anserini-1.7.1-fatjar.jar

The output is deterministic (a SplitMix64 generator with fixed seeds; gzip without
timestamps); Anserini 1.7.1 (Lucene 9.9.1) and gensim 4.4.0 produced the committed files.
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
OUT = os.path.join(ROOT, "crates", "sift-index", "tests", "fixtures", "lucene")


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & 0xFFFFFFFFFFFFFFFF

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n

    def pick(self, xs):
        return xs[self.below(len(xs))]


def write_gz(path, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(data)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def passage_text(title, text):
    """Sift's join of a BEIR title and text (sift_core::passage_text)."""
    if title is not None and title.strip():
        return f"{title} {text}"
    return text


HAND = [
    "The Flows of BOUNDARY layers, running!",
    "don't John's JOHN'S John\u2019s John\uff07s O'Neil's rock'n'roll 'quoted' ''",
    "e-mail foo@bar.com first.last+tag@sub.example.co.uk http://example.com/a/b?x=1&y=2#frag",
    "https://en.wikipedia.org/wiki/Navier%E2%80%93Stokes_equations www.example.org ftp://x.y",
    "3.14 -2.5e-10 1,000,000 1.2.3.4 10:30 12/25/2020 $5.99 50% #1 v2.0.1 0x1F IPv4 192.168.0.1",
    "U.S.A. e.g. i.e. Ph.D. a.b.c. A.B.C.D.E",
    "a:b a_b a.b a'b a-b a/b a\\b a|b a;b a,b 1:2 1_2 1.2 1'2 1-2 _a_ __init__ x_1 a__b",
    "foo_bar(x) -> y; std::vector<int> v = {1, 2}; x += 1; #include <stdio.h> a->b a=>b",
    "def f(x): return x**2  # comment\nif (a && b || !c) { print(\"hi\"); }",
    "$\\frac{a}{b}$ \\alpha + \\beta = \\gamma, E=mc^2, H_2O, CO\u2082, x\u00b2 + y\u00b2",
    "caresses ponies ties caress cats feed agreed disabled matting mating meeting milling messing meetings",
    "generalizations oscillators relational conditional rational valenci hesitanci digitizer "
    "conformabli radicalli differentli vileli analogousli vietnamization predication operator "
    "feudalism decisiveness hopefulness callousness formaliti sensitiviti sensibiliti",
    "triplicate formative formalize electriciti electrical hopeful goodness revival allowance "
    "inference airliner gyroscopic adjustable defensible irritant replacement adjustment "
    "dependent adoption homologou communism activate angulariti homologous effective bowdlerize",
    "probate rate cease controlling rolling aed eed oed ion sion tion y yy by sky skies dying",
    "\u0130stanbul \u03a3\u039f\u03a6\u0399\u0391\u03a3 na\u00efve caf\u00e9 \ufb01le \u00df STRASSE \u1e9e \u01c5 \u2126 \u212a",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u30ab\u30bf\u30ab\u30ca \u3072\u3089\u304c\u306a \ud55c\uad6d\uc5b4 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u1781\u17d2\u1798\u17c2\u179a",
    "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5ABC123\u4e2d\u6587 \u30c6\u30b9\u30c8123abc \u30fb\u30fc \uff21\uff22\uff23\uff11\uff12\uff13",
    "\u05e9\u05dc\u05d5\u05dd \u05e6\u05d4\u05f4\u05dc \u05d2'\u05d5\u05e8\u05d2' \u05d0\"\u05d1 \u0645\u0631\u062d\u0628\u0627 \u0928\u092e\u0938\u094d\u0924\u0947 \u0939\u093f\u0928\u094d\u0926\u0940",
    "\U0001F600 \U0001F44D\U0001F3FD 1\ufe0f\u20e3 #\ufe0f\u20e3 *\u20e3 \U0001F1FA\U0001F1F8 \U0001F1FA\U0001F1F8\U0001F1EC "
    "\U0001F468\u200d\U0001F469\u200d\U0001F467 \u00a9 \u00ae \u2122 \u2764\ufe0f \u2764\ufe0e \U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F",
    "a\u0301b c\u0327 \u0301x x\u200db x\u200cb x\u00adb x\u2060b x\ufeffb \u200d\U0001F600",
    "x" * 300,
    "y" * 254 + "'s",
    "z" * 255 + ".a",
    "\U0001F600" * 130,
    "a" + "\U00010400" * 140,
    "\U00010400\U00010428 \U0001D400\U0001D41A \U00020000\U0002A6D6",
    "tab\tseparated\ttext\nnew line\r\nwindows\u2028line\u2029para\u0085nel",
    "   ", "", ".,;:!?", "'s", "s's", "the and of a", "The THE tHe",
    "rock-'n'-roll 9-to-5 x-ray e-commerce co-operate re-enter pre-/post-processing",
    "C++ C# F# .NET node.js Node.JS ASP.NET 3D 2nd 1st 100m 5kg 10km/h",
    "10^-3 1e6 1E+6 0.5% \u00b1 3 \u2248 \u221e \u2211 \u222b \u2202 \u2207 \u03c0r\u00b2",
    "\u00bd \u2153 \u2460 \u2461 \u0660\u0661\u0662 \u0966\u0967 \u0e51\u0e52 \uff10\uff19 \U0001D7CE",
    "...dots... --dashes-- __under__ **bold** ~~strike~~ `code` <tag> [link](url)",
]

WORDS = ("flow boundary layer pressure gradient turbulent laminar shock wave heat transfer "
         "velocity profile airfoil wing supersonic subsonic viscous equation solution model "
         "experimental theoretical numerical analysis measurement plate cylinder cone nozzle "
         "mass momentum energy temperature density compressible incompressible stability "
         "running generalization oscillator rationalization happiness hopefully nationalities "
         "connected connecting connection connections electrical electricity organization").split()


def generated_texts(rng, n):
    frags = [
        lambda: rng.pick(WORDS),
        lambda: rng.pick(WORDS).capitalize(),
        lambda: rng.pick(WORDS).upper(),
        lambda: rng.pick(WORDS) + rng.pick(["'s", "\u2019s", "'S", "'", "s'"]),
        lambda: "-".join(rng.pick(WORDS) for _ in range(1 + rng.below(3))),
        lambda: "%d%s%d" % (rng.below(1000), rng.pick([".", ",", ":", "/", "-", "_", "'", ""]), rng.below(1000)),
        lambda: "%s%d" % (rng.pick(WORDS), rng.below(100)),
        lambda: "http%s://%s.%s/%s" % (rng.pick(["", "s"]), rng.pick(WORDS), rng.pick(["com", "org", "io"]), rng.pick(WORDS)),
        lambda: "%s@%s.com" % (rng.pick(WORDS), rng.pick(WORDS)),
        lambda: "%s_%s(%s)" % (rng.pick(WORDS), rng.pick(WORDS), rng.pick(WORDS)),
        lambda: "%s::%s" % (rng.pick(WORDS), rng.pick(WORDS)),
        lambda: "%s.%s" % (rng.pick(WORDS), rng.pick(WORDS)),
        lambda: rng.pick(["(", ")", "[", "]", "{", "}", "\"", "'", ",", ".", ";", "!", "?", "--", "...", "/", "\\", "|", "&", "*", "+", "=", "<", ">", "^", "~", "`", "#", "%"]),
        lambda: rng.pick(["caf\u00e9", "na\u00efve", "\u00fcber", "Stra\u00dfe", "\u0130zmir", "\u03b1\u03b2\u03b3", "\u041f\u0440\u0438\u0432\u0435\u0442", "\u65e5\u672c", "\u30c6\u30b9\u30c8", "\u3072\u3089", "\ud55c\uae00", "\u0e44\u0e17\u0e22", "\u05e2\u05d1\u05e8\u05d9\u05ea", "\u0639\u0631\u0628\u064a", "\u0939\u093f\u0928\u094d\u0926\u0940", "\U0001F600", "\U0001F44D\U0001F3FB", "\u2764\ufe0f", "1\ufe0f\u20e3", "\U0001F1EF\U0001F1F5", "\ufb01", "\u00bd", "\uff21\uff11", "\u00b2", "\u2163"]),
        lambda: chr(rng.pick([0x20, 0x200d, 0x200c, 0x00ad, 0x0301, 0x2019, 0x2018, 0x201c, 0x2027, 0x00b7, 0x0387, 0xfe13, 0xff0e, 0xff07, 0x2044, 0x066c, 0x003a])),
    ]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(1 + rng.below(25)):
            parts.append(frags[rng.below(len(frags))]())
            parts.append(rng.pick([" ", " ", " ", "", "\n", "\t", ", ", ". "]))
        out.append("".join(parts))
    return out


def unicode_sweep():
    """Every assigned code point of the BMP except the big uniform blocks (sampled), and the
    assigned ones elsewhere, each in a few contexts; 8 per text."""
    import unicodedata
    cps = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or unicodedata.category(chr(cp)) in ("Cn", "Co", "Cs"):
            continue
        # CJK ideographs, Hangul syllables and Yi / Tangut / Nushu blocks: one in 64
        if (0x3400 <= cp <= 0x4DBF or 0x4E00 <= cp <= 0x9FFF or 0xAC00 <= cp <= 0xD7A3
                or 0x20000 <= cp <= 0x3FFFF or 0x17000 <= cp <= 0x18CFF or 0xA000 <= cp <= 0xA48F) and cp % 64:
            continue
        cps.append(cp)
    texts = []
    for i in range(0, len(cps), 8):
        parts = []
        for cp in cps[i:i + 8]:
            c = chr(cp)
            parts.append(f"a{c}b {c} 7{c}8 {c}{c}s x{c} {c}y")
        texts.append(" | ".join(parts))
    return texts


def texts(cranfield):
    rng = SplitMix64(20261201)
    out = [("hand", t) for t in HAND]
    if cranfield:
        for d in read_jsonl(os.path.join(cranfield, "corpus.jsonl")):
            out.append(("cranfield", passage_text(d.get("title"), d.get("text", ""))))
        for q in read_jsonl(os.path.join(cranfield, "queries.jsonl")):
            out.append(("cranfield-query", q["text"]))
    out += [("generated", t) for t in generated_texts(rng, 2500)]
    out += [("unicode", t) for t in unicode_sweep()]
    return out


def lucene_tokens(java, jar, texts_list, work):
    src = os.path.join(work, "texts.jsonl")
    dst = os.path.join(work, "tokens.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for t in texts_list:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    subprocess.run([java, "-cp", jar, os.path.join(HERE, "LuceneTokens.java"), src, dst], check=True)
    return [r["tokens"] for r in read_jsonl(dst)]


def generated_collection():
    """A BEIR-layout collection: Zipf-ish vocabulary with the edge fragments mixed in, a few
    documents of stop words only, queries of 3 to 150 words."""
    rng = SplitMix64(338)
    vocab = WORDS + ["%s%s" % (a, b) for a in WORDS[:40] for b in ("s", "ed", "ing", "er", "ation", "ness", "ity", "ical")]
    frags = generated_texts(SplitMix64(7), 400)

    def zipf_word():
        # a rank drawn with probability ~ 1/rank
        r = int(len(vocab) ** (rng.below(1_000_000) / 1_000_000))
        return vocab[min(r, len(vocab)) - 1]

    docs = []
    for i in range(3000):
        if i % 997 == 5:
            text = "the and of a to in is"
        else:
            words = [zipf_word() for _ in range(5 + rng.below(150))]
            if rng.below(3) == 0:
                words.insert(rng.below(len(words) + 1), rng.pick(frags))
            text = " ".join(words)
        title = " ".join(zipf_word() for _ in range(rng.below(6)))
        docs.append({"_id": "g%04d" % i, "title": title, "text": text})
    queries = []
    for i in range(60):
        n = [3, 10, 40, 150][i % 4]
        words = [zipf_word() for _ in range(n)]
        if i % 5 == 0:
            words.append(rng.pick(frags))
        queries.append({"_id": "q%02d" % i, "text": " ".join(words)})
    return docs, queries


def anserini_run(java, jar, docs, queries, work, name):
    coll = os.path.join(work, name, "collection")
    os.makedirs(coll, exist_ok=True)
    with open(os.path.join(coll, "docs.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"id": d["_id"], "contents": passage_text(d.get("title"), d.get("text", ""))},
                               ensure_ascii=False) + "\n")
    topics = os.path.join(work, name, "topics.tsv")
    with open(topics, "w", encoding="utf-8") as f:
        for q in queries:
            text = " ".join(q["text"].split())
            f.write(f"{q['_id']}\t{text}\n")
    index = os.path.join(work, name, "index")
    run = os.path.join(work, name, "run.txt")
    subprocess.run([java, "-cp", jar, "io.anserini.index.IndexCollection", "-collection", "JsonCollection",
                    "-input", coll, "-index", index, "-generator", "DefaultLuceneDocumentGenerator",
                    "-threads", "1"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([java, "-cp", jar, "io.anserini.search.SearchCollection", "-index", index,
                    "-topics", topics, "-topicReader", "TsvString", "-output", run, "-bm25",
                    "-bm25.k1", "0.9", "-bm25.b", "0.4", "-hits", "100", "-threads", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(run, encoding="utf-8") as f:
        return f.read()


def reference_run(java, jar, docs, queries, work, k=100):
    """BRIGHT's retrieval_bm25, verbatim in its use of gensim, top k per query."""
    from gensim.corpora import Dictionary
    from gensim.models import LuceneBM25Model
    from gensim.similarities import SparseMatrixSimilarity

    texts_ = [passage_text(d.get("title"), d.get("text", "")) for d in docs]
    corpus = lucene_tokens(java, jar, texts_, work)
    qtokens = lucene_tokens(java, jar, [q["text"] for q in queries], work)
    dictionary = Dictionary(corpus)
    model = LuceneBM25Model(dictionary=dictionary, k1=0.9, b=0.4)
    bm25_corpus = model[list(map(dictionary.doc2bow, corpus))]
    bm25_index = SparseMatrixSimilarity(bm25_corpus, num_docs=len(corpus), num_terms=len(dictionary),
                                        normalize_queries=False, normalize_documents=False)
    lines = []
    for q, toks in zip(queries, qtokens):
        bm25_query = model[dictionary.doc2bow(toks)]
        sims = bm25_index[bm25_query].tolist()
        scored = sorted(((s, d["_id"]) for s, d in zip(sims, docs) if s > 0),
                        key=lambda x: x[0], reverse=True)[:k]
        for rank, (s, did) in enumerate(scored, 1):
            lines.append(f"{q['_id']} Q0 {did} {rank} {s:.9g} gensim")
    return "\n".join(lines) + "\n"


def find_java(arg):
    cands = [arg, os.environ.get("JAVA")] + sorted(glob.glob("/usr/lib/jvm/*25*/bin/java")) + [shutil.which("java")]
    for c in cands:
        if not c or not os.path.exists(c):
            continue
        out = subprocess.run([c, "-version"], capture_output=True, text=True).stderr
        try:
            major = int(out.split('"')[1].split(".")[0])
        except (IndexError, ValueError):
            continue
        if major >= 21:
            return c
    sys.exit("no Java 21+ found: pass --java")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jar", required=True, help="anserini-*-fatjar.jar")
    ap.add_argument("--java", help="a java 21+ binary")
    ap.add_argument("--cranfield", default=os.path.join(ROOT, "..", "shared", "data", "cranfield"))
    args = ap.parse_args()
    java = find_java(args.java)
    cranfield = args.cranfield if os.path.exists(os.path.join(args.cranfield, "corpus.jsonl")) else None
    if not cranfield:
        sys.exit(f"no Cranfield collection at {args.cranfield}")

    with tempfile.TemporaryDirectory() as work:
        tl = texts(cranfield)
        toks = lucene_tokens(java, args.jar, [t for _, t in tl], work)
        write_gz(os.path.join(OUT, "texts.jsonl.gz"),
                 "".join(json.dumps({"kind": k, "text": t}, ensure_ascii=False) + "\n" for k, t in tl).encode())
        write_gz(os.path.join(OUT, "tokens.jsonl.gz"),
                 "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in toks).encode())
        print(f"{len(tl)} texts, {sum(len(t) for t in toks)} Lucene tokens")

        docs, queries = generated_collection()
        gdir = os.path.join(OUT, "generated")
        write_gz(os.path.join(gdir, "corpus.jsonl.gz"),
                 "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs).encode())
        with open(os.path.join(gdir, "queries.jsonl"), "w", encoding="utf-8") as f:
            for q in queries:
                f.write(json.dumps(q, ensure_ascii=False) + "\n")

        cdocs = read_jsonl(os.path.join(cranfield, "corpus.jsonl"))
        cqueries = read_jsonl(os.path.join(cranfield, "queries.jsonl"))
        for name, d, q in [("cranfield", cdocs, cqueries), ("generated", docs, queries)]:
            write_gz(os.path.join(OUT, f"{name}.anserini.run.gz"),
                     anserini_run(java, args.jar, d, q, work, name).encode())
            write_gz(os.path.join(OUT, f"{name}.reference.run.gz"),
                     reference_run(java, args.jar, d, q, work).encode())
            print(f"{name}: Anserini and gensim runs written")


if __name__ == "__main__":
    main()
