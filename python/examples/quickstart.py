import sift_ir

# index the bundled sample (BM25 per domain, and a dense index of a tiny CLIP test model)
index = sift_ir.Index.build(
    "corpora/sample",
    "target/py-sample-index",
    dense=["models/fixtures/vision/tiny-clip-quickgelu"],
    replace=True,
)
for hit in index.search("how do plants make sugar", domain="biology", top_k=3):
    print(hit.rank, hit.id, round(hit.score, 4), hit.text[:60])

# all four tasks for both retrievers, as `sift eval --out` writes them
report = sift_ir.evaluate(
    "corpora/sample",
    index,
    tasks="all",
    retrievers=["bm25", "dense:tiny-clip-quickgelu"],
    out="target/py-sample-eval",
)
for row in report.to_dicts():
    print(row["task"], row["label"], row["domain"], round(row["ndcg@10"], 4))

# vectors as numpy float32, equal to `sift embed`'s
clip = sift_ir.Embedder("models/fixtures/vision/tiny-clip-quickgelu")
texts = clip.embed_texts(["a map projection"], kind="query")
images = clip.embed_images(["models/fixtures/vision/images/shapes_rgb_50x37.png"])
print(texts.shape, images.shape, float(texts[0] @ images[0]))
