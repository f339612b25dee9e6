#!/usr/bin/env python3
"""Write `tokenizer.json` for a SigLIP (v1) checkpoint that only ships `spiece.model`.

SigLIP v1 checkpoints on the Hugging Face hub (google/siglip-base-patch16-224,
google/siglip-so400m-patch14-384, ...) have `spiece.model` + `tokenizer_config.json` with
`"tokenizer_class": "SiglipTokenizer"` (SentencePiece, T5's English vocabulary) but no
`tokenizer.json`, which is what Sift (Rust `tokenizers` crate) loads. This script converts the
SentencePiece model with transformers' slow->fast converter machinery (`SpmConverter`, as
`T5Converter` does for T5's identical vocabulary, minus T5's `<extra_id_*>` tokens):

- model: Unigram with every SentencePiece piece and score, same ids (`<pad>` 0, `</s>` 1,
  `<unk>` 2 for SigLIP's vocabulary);
- normalizer: SentencePiece's precompiled charsmap (nmt_nfkc), trailing-space strip, space runs;
- pre-tokenizer: Metaspace (dummy "▁" prefix, split on "▁"), prepend_scheme "first": the
  prefix only at the start of the text, not after a literal `</s>`/`<unk>` in it, as
  SiglipTokenizer does (it encodes each piece after a special token as `<unk>` + piece and
  drops the `<unk>` pieces, so no dummy prefix);
- post-processor: append `</s>` (SiglipTokenizer.build_inputs_with_special_tokens);
- added tokens: the SentencePiece control pieces, plus `</s>`/`<unk>` as
  tokenizer_config.json declares them (special, lstrip/rstrip, not normalised);
- no truncation or padding is stored (Sift sets both from the model config).

`SiglipTokenizer` also *canonicalises* text in Python before SentencePiece
(`canonicalize_text`: lower-case when `do_lower_case`, drop `string.punctuation`, collapse
whitespace runs, strip; "▁" becomes a space first; it runs on the pieces between literal
`</s>`/`<unk>`, which stay special tokens). A tokenizer.json cannot express that, so the caller
applies it first (`siglip_canonicalize` below is the Python reference of what it must do):
Sift does so with `sift_embed::siglip_canonicalize` when tokenizer_config.json names
`SiglipTokenizer`. With that done outside, the ids equal
`SiglipTokenizer(texts, padding="max_length", max_length=64, truncation=True)`; the fixture
`models/fixtures/vision/siglip-spm/` and `crates/sift-embed/tests/siglip_tokenizer.rs` check it.

Usage:

    pip install "transformers==5.24.0" "tokenizers==0.23.3" sentencepiece protobuf
    python3 models/siglip_tokenizer_json.py path/to/siglip-base-patch16-224
    python3 models/siglip_tokenizer_json.py DIR --output other/tokenizer.json --force
    python3 models/siglip_tokenizer_json.py DIR --check "A photo of a dog." "Zwei Hunde!"

DIR must hold `spiece.model` and normally `tokenizer_config.json` (its eos/unk/pad tokens,
`do_lower_case` and `model_max_length` are used; defaults are SiglipTokenizer's). The output
is DIR/tokenizer.json unless `--output` is given; an existing file is kept unless `--force`.
After writing, the script re-loads the file and compares it with `SiglipTokenizer` on a
built-in set of texts (plus any `--check` texts), canonicalising in Python the way Sift does,
and exits non-zero on a mismatch. No network access is needed (nothing is downloaded).
"""

import argparse
import re
import string
import sys
import unicodedata
from pathlib import Path

SPIECE_UNDERLINE = "\u2581"
# SiglipTokenizer's special tokens (eos = pad, unk): matched in the raw text.
SIGLIP_SPECIALS = ("</s>", "<unk>")

# Texts the post-write self-check encodes (on top of --check TEXT...).
SELF_CHECK_TEXTS = [
    "a photo of a dog",
    "A Photo of TWO cats, sleeping!",
    "",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew\r\nlines",
    "Café naïve résumé Straße",
    "東京タワー 🐶🐱",
    "https://example.com/a?b=c&d=e",
    "3.14159 and 2,718 and 1e-9",
    "ΟΔΟΣ. Σίσυφος",
    "x\u3000y\u00a0z\u2009w",
    "Ti\u00ea\u0301ng Vi\u00ea\u0323t",  # precomposed + combining (cp1258 style)
    unicodedata.normalize("NFD", "Tiếng Việt, 한국어"),
    "x\x1cy",
    "under\u2581score",
    "hello </s> world <unk>",
    "word " * 100,
]


def _joins(c: str) -> bool:
    """A combining mark or a Hangul medial/final jamo: part of the cluster before it."""
    return unicodedata.category(c) in ("Mn", "Mc", "Me") or 0x1160 <= ord(c) <= 0x11FF


def compose_like_sentencepiece(text: str) -> str:
    """Compose canonical decompositions the way SentencePiece's nmt_nfkc charsmap does.

    SentencePiece replaces, by longest match, the exact canonical decomposition of a character
    (NFD "ế" = e U+0302 U+0301, NFD Hangul jamo) with the character, and leaves other mark
    sequences alone (a precomposed "ê" + U+0301 stays two characters). tokenizers' `Precompiled`
    normaliser instead replaces a whole short grapheme by its shortest matching prefix and
    drops the rest (NFD "ế" -> "ê"; huggingface/tokenizers#2116, #2334). Composing here first
    leaves it only composed characters and lone marks, which it maps like SentencePiece.
    Not covered: a compatibility character followed by a mark ("ﬁ" U+0301: SentencePiece "fi"
    U+0301, tokenizers "fi").
    """
    if not any(_joins(c) for c in text):
        return text
    out = []
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and _joins(text[j]):
            j += 1
        k, composed = i + 1, text[i]
        for end in range(i + 2, j + 1):
            c = unicodedata.normalize("NFC", text[i:end])
            if len(c) == 1 and unicodedata.normalize("NFD", c) == text[i:end]:
                k, composed = end, c
        out.append(composed + text[k:j])
        i = j
    return "".join(out)


def _canonicalize_piece(text: str, do_lower_case: bool) -> str:
    if do_lower_case:
        text = text.lower()
    text = text.translate(str.maketrans("", "", string.punctuation))
    return compose_like_sentencepiece(re.sub(r"\s+", " ", text).strip())


def siglip_canonicalize(text: str, do_lower_case: bool = True, specials=SIGLIP_SPECIALS) -> str:
    """Python reference of what Sift's `sift_embed::siglip_canonicalize` must compute.

    SiglipTokenizer.tokenize: "▁" -> " "; split the raw text on its special tokens
    (`</s>`, `<unk>`; case-sensitive, before any canonicalisation); `canonicalize_text` each
    piece between them (lower-case when do_lower_case, remove `string.punctuation`,
    `re.sub(r"\\s+", " ")`, strip; the specials' lstrip/rstrip only remove whitespace that
    the strip removes anyway), then `compose_like_sentencepiece`. The specials stay in the
    text, so tokenizer.json matches them as added tokens. Leading whitespace may be stripped:
    SentencePiece drops it anyway.
    """
    text = text.replace(SPIECE_UNDERLINE, " ")
    if not specials:
        return _canonicalize_piece(text, do_lower_case)
    parts = re.split("(" + "|".join(re.escape(s) for s in specials) + ")", text)
    return "".join(
        part if i % 2 else _canonicalize_piece(part, do_lower_case) for i, part in enumerate(parts)
    )


def build(directory: Path):
    """The converted `tokenizers.Tokenizer` and the loaded SiglipTokenizer."""
    from tokenizers import AddedToken, decoders, pre_tokenizers, processors
    from transformers import SiglipTokenizer
    from transformers.convert_slow_tokenizer import SpmConverter

    class SiglipConverter(SpmConverter):
        """T5Converter without `<extra_id_*>`: SigLIP's spiece.model is T5's vocabulary."""

        def pre_tokenizer(self, replacement, add_prefix_space):
            return pre_tokenizers.Metaspace(replacement=replacement, prepend_scheme="first")

        def decoder(self, replacement, add_prefix_space):
            return decoders.Metaspace(replacement=replacement, prepend_scheme="first")

        def post_processor(self):
            eos = str(self.original_tokenizer.eos_token)
            eos_id = self.original_tokenizer.convert_tokens_to_ids(eos)
            return processors.TemplateProcessing(
                single=["$A", eos],
                pair=["$A", eos, "$B", eos],
                special_tokens=[(eos, eos_id)],
            )

    slow = SiglipTokenizer.from_pretrained(str(directory))
    fast = SiglipConverter(slow).converted()
    # The special tokens as tokenizer_config.json declares them (SiglipTokenizer makes them
    # lstrip/rstrip, not normalised); they keep their SentencePiece ids.
    specials = []
    for token in (slow.eos_token, slow.unk_token, slow.pad_token):
        content = str(token)
        if content in [str(t) for t in specials]:
            continue
        tid = slow.convert_tokens_to_ids(content)
        if tid is None or slow.convert_ids_to_tokens(tid) != content:
            raise SystemExit(f"special token {content!r} is not a SentencePiece piece")
        specials.append(
            AddedToken(content, lstrip=True, rstrip=True, normalized=False, special=True)
        )
    fast.add_special_tokens(specials)
    return fast, slow


def check(fast, slow, texts, max_length: int) -> list[str]:
    """Mismatches between SiglipTokenizer and canonicalise + tokenizer.json, as messages."""
    from tokenizers import Tokenizer

    fast = Tokenizer.from_str(fast.to_str())
    pad_id = slow.convert_tokens_to_ids(str(slow.pad_token))
    fast.enable_truncation(max_length=max_length, direction="right")
    fast.enable_padding(length=max_length, pad_id=pad_id, pad_token=str(slow.pad_token))
    want = slow(texts, padding="max_length", max_length=max_length, truncation=True)["input_ids"]
    lower = getattr(slow, "do_lower_case", True)
    specials = [str(t) for t in (slow.eos_token, slow.unk_token)]
    got = [e.ids for e in fast.encode_batch([siglip_canonicalize(t, lower, specials) for t in texts])]
    return [
        f"{t!r}:\n  SiglipTokenizer {w}\n  tokenizer.json  {g}"
        for t, w, g in zip(texts, want, got)
        if w != g
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Write DIR/tokenizer.json for a SigLIP v1 checkpoint (SiglipTokenizer, "
        "spiece.model) using transformers' SpmConverter; the text canonicalisation "
        "(lower-case, punctuation, whitespace) is left to the caller (Sift applies "
        "siglip_canonicalize). Offline.",
        epilog="example: python3 models/siglip_tokenizer_json.py "
        "models/local/siglip-base-patch16-224",
    )
    parser.add_argument("dir", type=Path, help="folder with spiece.model (+ tokenizer_config.json)")
    parser.add_argument("--output", type=Path, help="where to write (default DIR/tokenizer.json)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing tokenizer.json")
    parser.add_argument(
        "--check", nargs="*", default=[], metavar="TEXT", help="extra texts for the self-check"
    )
    parser.add_argument("--no-check", action="store_true", help="skip the self-check")
    args = parser.parse_args(argv)

    if not (args.dir / "spiece.model").is_file():
        parser.error(f"{args.dir / 'spiece.model'} not found")
    output = args.output or args.dir / "tokenizer.json"
    if output.exists() and not args.force:
        parser.error(f"{output} exists (use --force to overwrite)")

    fast, slow = build(args.dir)
    if not args.no_check:
        max_length = min(int(slow.model_max_length), 4096)
        bad = check(fast, slow, SELF_CHECK_TEXTS + list(args.check), max_length)
        if bad:
            print("tokenizer.json does not reproduce SiglipTokenizer:", *bad, sep="\n", file=sys.stderr)
            return 1
    output.parent.mkdir(parents=True, exist_ok=True)
    # Same layout as tokenizers' own `save(pretty=True)`, deterministic.
    output.write_text(fast.to_str(pretty=True) + "\n", encoding="utf-8")
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
