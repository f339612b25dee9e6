//! Early truncation (`sift_embed::families::truncate`) gives the token ids of tokenising the
//! whole text and then truncating, for every tokenizer family Sift loads: CLIP's byte-level
//! BPE, SigLIP's SentencePiece (both fixture styles) and BERT's WordPiece (all-MiniLM-L6-v2,
//! when installed), on long texts of many shapes: prose, one unspaced run, CJK, code,
//! punctuation and whitespace runs, texts just around the cut-off.
use std::path::{Path, PathBuf};

use candle_core::Device;
use sift_embed::{
    ModelFiles, Role, TextEmbedder, TextEmbedderOptions, VisionEmbedder, VisionOptions,
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Long and awkward texts, deterministic.
fn texts() -> Vec<String> {
    let words = [
        "shock",
        "wave",
        "heats",
        "the",
        "flow",
        "Mach",
        "3.5",
        "boundary-layer",
        "don't",
        "naïve",
        "café",
        "x²",
        "e=mc^2",
        "https://example.org/a?b=c",
        "user@example.com",
        "日本語",
        "テキスト",
        "한국어",
        "ไทย",
        "😀",
        "👩‍🔬",
        "(a)",
        "[b]",
        "{c}",
        "--",
        "...",
        "C++",
        "fn(x)->y",
        "\t",
        "\n",
        "  ",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    for n in [
        10, 60, 63, 64, 65, 76, 77, 78, 200, 255, 256, 257, 511, 512, 513, 1500, 6000,
    ] {
        let mut t = String::new();
        for _ in 0..n {
            t.push_str(words[(next() % words.len() as u64) as usize]);
            t.push(if next() % 7 == 0 { '\n' } else { ' ' });
        }
        out.push(t);
    }
    out.push("a".repeat(20_000)); // no whitespace at all
    out.push("日本語のテキスト".repeat(3_000));
    out.push(format!("{} {}", "word ".repeat(2_000), "z".repeat(5_000)));
    out.push(format!("{}{}", "x".repeat(2_000), " tail".repeat(500)));
    out.push("!@#$%^&*() ".repeat(3_000));
    out.push(" ".repeat(10_000) + "late words here");
    out.push("fn main() { let x = vec![1, 2, 3]; println!(\"{x:?}\"); }\n".repeat(400));
    out
}

#[test]
fn vision_tokenizers_give_the_whole_texts_ids() {
    let root = repo().join("models/fixtures/vision");
    let texts = texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut checked = 0;
    for model in [
        "tiny-clip-quickgelu",
        "tiny-clip-gelu",
        "tiny-siglip",
        "tiny-siglip2-style",
    ] {
        let files = ModelFiles::from_dir(&root.join(model)).unwrap();
        let m = VisionEmbedder::load(&files, &Device::Cpu, VisionOptions::default()).unwrap();
        let early = m.tokenize(&refs).unwrap();
        let whole = m.tokenize_whole(&refs).unwrap();
        for ((t, e), w) in texts.iter().zip(&early).zip(&whole) {
            assert_eq!(
                e,
                w,
                "{model}: {:?}...",
                &t.chars().take(60).collect::<String>()
            );
        }
        // the long texts really were cut at the model's length
        assert!(
            early
                .iter()
                .filter(|(ids, _)| ids.len() == m.max_text_len())
                .count()
                > 10
        );
        checked += 1;
    }
    assert_eq!(checked, 4);
}

fn minilm() -> Option<PathBuf> {
    let dir = std::env::var_os("SIFT_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("models/local/all-MiniLM-L6-v2"));
    dir.join("model.safetensors").is_file().then_some(dir)
}

#[test]
#[ignore = "needs the all-MiniLM-L6-v2 weights: scripts/test installs them and runs it"]
fn wordpiece_gives_the_whole_texts_ids() {
    let dir: PathBuf = minilm().expect("all-MiniLM-L6-v2 installed (scripts/test)");
    let files = ModelFiles::from_dir(Path::new(&dir)).unwrap();
    let m = TextEmbedder::load(&files, &Device::Cpu, TextEmbedderOptions::default()).unwrap();
    let texts = texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for role in [Role::Query, Role::Passage] {
        let early = m.tokenize(&refs, role).unwrap();
        let whole = m.tokenize_whole(&refs, role).unwrap();
        assert_eq!(early, whole);
        assert!(
            early
                .iter()
                .filter(|ids| ids.len() == m.max_seq_len())
                .count()
                > 5
        );
    }
}
