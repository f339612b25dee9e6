use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use sift_embed::Kind;

use crate::models::{ModelFlags, load_text_model};
use crate::progress::Bars;

/// Embed texts, one per input line, and write the vectors (L2-normalised).
///
/// Input lines are plain text (id = line number), or JSON objects with "text" and an
/// optional "id"/"_id" (BEIR corpus.jsonl and queries.jsonl work as they are). Output: JSONL
/// `{"id", "vector"}` lines, or a float32 `.npy` matrix when the name ends in `.npy` (ids
/// then go to `<name>.ids.txt`, one per row).
#[derive(clap::Args)]
#[command(
    after_help = "Example:\n  sift embed --model models/local/all-MiniLM-L6-v2 --input queries.txt --kind query --out q.npy"
)]
pub struct Args {
    /// Model: a directory in Hugging Face layout, or a hub id / registry alias.
    #[arg(long)]
    model: String,
    /// Input file.
    #[arg(long)]
    input: PathBuf,
    /// Whether the texts are queries or passages (selects the model's prefix).
    #[arg(long, value_enum, default_value = "passage")]
    kind: TextKind,
    /// Output file (.jsonl or .npy).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    model_flags: ModelFlags,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum TextKind {
    Query,
    Passage,
}

fn read_inputs(path: &PathBuf) -> Result<Vec<(String, String)>> {
    let reader = BufReader::new(File::open(path).with_context(|| format!("{}", path.display()))?);
    let mut out = Vec::new();
    for (i, line) in reader.split(b'\n').enumerate() {
        let n = i + 1;
        let line = line.with_context(|| format!("{}", path.display()))?;
        let text = String::from_utf8(line).map_err(|e| {
            anyhow::anyhow!(
                "{}:{n}: invalid UTF-8 at byte {}",
                path.display(),
                e.utf8_error().valid_up_to()
            )
        })?;
        let text = text.trim_end_matches('\r');
        if text.trim().is_empty() {
            continue;
        }
        if text.trim_start().starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| anyhow::anyhow!("{}:{n}: malformed JSON: {e}", path.display()))?;
            let body = match (
                v.get("title").and_then(|t| t.as_str()),
                v.get("text").and_then(|t| t.as_str()),
            ) {
                (_, None) => bail!(
                    "{}:{n}: JSON line without a \"text\" string",
                    path.display()
                ),
                (Some(title), Some(t)) if !title.trim().is_empty() => format!("{title} {t}"),
                (_, Some(t)) => t.to_string(),
            };
            let id = match v.get("id").or_else(|| v.get("_id")) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Number(x)) => x.to_string(),
                _ => n.to_string(),
            };
            out.push((id, body));
        } else {
            out.push((n.to_string(), text.to_string()));
        }
    }
    Ok(out)
}

/// Writes a little-endian float32 C-order `.npy` (format version 1.0).
fn write_npy(path: &PathBuf, rows: &[Vec<f32>], dim: usize) -> std::io::Result<()> {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {dim}), }}",
        rows.len()
    );
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut w = BufWriter::new(File::create(path)?);
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    for r in rows {
        for x in r {
            w.write_all(&x.to_le_bytes())?;
        }
    }
    w.flush()
}

pub fn run(a: Args) -> Result<()> {
    let inputs = read_inputs(&a.input)?;
    if inputs.is_empty() {
        bail!("{}: no texts", a.input.display());
    }
    let model = load_text_model(&a.model, &a.model_flags)?;
    let kind = match a.kind {
        TextKind::Query => Kind::Query,
        TextKind::Passage => Kind::Passage,
    };
    let bar = Bars::new(a.quiet).bar("embed", inputs.len() as u64);
    let mut vectors = Vec::with_capacity(inputs.len());
    for chunk in inputs.chunks(1024) {
        let texts: Vec<&str> = chunk.iter().map(|(_, t)| t.as_str()).collect();
        vectors.extend(model.embed(&texts, kind)?);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    let is_npy = a.out.extension().is_some_and(|e| e == "npy");
    if is_npy {
        write_npy(&a.out, &vectors, model.dim()).with_context(|| format!("{}", a.out.display()))?;
        let mut ids = a.out.as_os_str().to_owned();
        ids.push(".ids.txt");
        let text: String = inputs.iter().map(|(id, _)| format!("{id}\n")).collect();
        std::fs::write(&ids, text).with_context(|| format!("{}", PathBuf::from(&ids).display()))?;
    } else {
        let mut w =
            BufWriter::new(File::create(&a.out).with_context(|| format!("{}", a.out.display()))?);
        for ((id, _), v) in inputs.iter().zip(&vectors) {
            serde_json::to_writer(&mut w, &serde_json::json!({"id": id, "vector": v}))?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
    }
    eprintln!(
        "embedded {} texts with {} ({} dims) -> {}",
        vectors.len(),
        model.name(),
        model.dim(),
        a.out.display()
    );
    Ok(())
}
