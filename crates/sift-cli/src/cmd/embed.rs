use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sift_embed::Role;

use crate::models::ModelFlags;
use crate::progress::Bars;

/// Embed texts (one per input line) or images, and write the vectors (L2-normalised).
///
/// Text input lines are plain text (id = line number), or JSON objects with "text" and an
/// optional "id"/"_id" (BEIR corpus.jsonl and queries.jsonl work as they are). With --image
/// (vision-language models), the input is a folder (its png, jpg, jpeg, webp, gif and bmp
/// files, sorted; id = file name) or a file listing image paths, one per line (id = the path
/// as written; relative paths are relative to the list's folder). Output: JSONL
/// `{"id", "vector"}` lines, or a float32 `.npy` matrix when the name ends in `.npy` (ids
/// then go to `<name>.ids.txt`, one per row).
#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  sift embed --model models/local/all-MiniLM-L6-v2 --input queries.txt --kind query --out q.npy\n  sift embed --model openai/clip-vit-base-patch32 --image --input figures/ --out figures.jsonl"
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
    kind: Role,
    /// Output file (.jsonl or .npy); `-` writes JSONL to standard output.
    #[arg(long)]
    out: PathBuf,
    /// Embed texts with the text tower (the default).
    #[arg(long, conflicts_with = "image")]
    text: bool,
    /// Embed images with the image side of a vision-language model (CLIP, SigLIP, GME).
    #[arg(long)]
    image: bool,
    #[command(flatten)]
    model_flags: ModelFlags,
    #[command(flatten)]
    image_limits: crate::options::ImageLimitFlags,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

/// `bytes` as text, or an error naming `place` (a file, or a file and line) and the byte.
fn utf8(bytes: Vec<u8>, place: impl std::fmt::Display) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{place}: invalid UTF-8 at byte {}",
            e.utf8_error().valid_up_to()
        )
    })
}

pub(crate) fn read_inputs(path: &std::path::Path) -> Result<Vec<(String, String)>> {
    let reader = BufReader::new(sift_core::open_regular_file(path)?);
    let mut out = Vec::new();
    let mut lines: HashMap<String, usize> = HashMap::new();
    for (i, line) in reader.split(b'\n').enumerate() {
        let n = i + 1;
        let mut line = line.with_context(|| format!("{}", path.display()))?;
        if n == 1 && line.starts_with(sift_core::UTF8_BOM) {
            line.drain(..sift_core::UTF8_BOM.len());
        }
        let text = utf8(line, format_args!("{}:{n}", path.display()))?;
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
                (title, Some(t)) => sift_core::passage_text(title, t),
            };
            let id = match v.get("id").or_else(|| v.get("_id")) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Number(x)) => x.to_string(),
                _ => n.to_string(),
            };
            if let Some(problem) = sift_core::id_problem(&id) {
                bail!("{}:{n}: id {id:?} {problem}", path.display());
            }
            if let Some(first) = lines.insert(id.clone(), n) {
                bail!(
                    "{}:{n}: id {id:?} repeats line {first}: every vector needs its own id",
                    path.display()
                );
            }
            out.push((id, body));
        } else {
            if let Some(first) = lines.insert(n.to_string(), n) {
                bail!(
                    "{}:{n}: id {n:?} (the line number) is already the id of line {first}",
                    path.display()
                );
            }
            out.push((n.to_string(), text.to_string()));
        }
    }
    Ok(out)
}

/// Writes a little-endian float32 C-order `.npy` (format version 1.0).
fn write_npy(path: &Path, rows: &[Vec<f32>], dim: usize) -> std::io::Result<()> {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {dim}), }}",
        rows.len()
    );
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = sift_core::OutputFile::create(path).map_err(std::io::Error::other)?;
    let mut w = BufWriter::new(&mut out);
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    for r in rows {
        for x in r {
            w.write_all(&x.to_le_bytes())?;
        }
    }
    w.flush()?;
    drop(w);
    out.commit().map_err(std::io::Error::other)
}

/// Image files to embed: (id, path). A folder's image files (by extension; subfolders and
/// other entries are counted and named in a warning), or the lines of a list file (a path
/// given twice is an error: ids must be unique).
pub(crate) fn image_inputs(input: &PathBuf) -> Result<Vec<(String, PathBuf)>> {
    const EXT: [&str; 6] = ["png", "jpg", "jpeg", "webp", "gif", "bmp"];
    if input.is_dir() {
        let (mut out, mut folders, mut others) = (Vec::new(), Vec::new(), Vec::new());
        for entry in std::fs::read_dir(input).with_context(|| format!("{}", input.display()))? {
            let p = entry
                .with_context(|| format!("{}", input.display()))?
                .path();
            let image_name = p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| EXT.contains(&e.to_ascii_lowercase().as_str()));
            if p.is_dir() {
                folders.push(p);
            } else if p.is_file() && image_name {
                let id = p
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                out.push((id, p));
            } else {
                others.push(p);
            }
        }
        for (what, list) in [("subfolder(s)", &folders), ("other entries", &others)] {
            if !list.is_empty() {
                let mut names: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
                names.sort();
                eprintln!(
                    "warning: {}: {} {what} not read (only the folder's own {} files are; list \
                     other images in a file): {}{}",
                    input.display(),
                    list.len(),
                    EXT.join("/"),
                    names[..names.len().min(3)].join(", "),
                    if names.len() > 3 { ", ..." } else { "" }
                );
            }
        }
        out.sort();
        return Ok(out);
    }
    let base = input.parent().map(PathBuf::from).unwrap_or_default();
    let bytes = sift_core::read_regular_file(input, 1 << 30)?;
    let text = utf8(bytes, input.display())?;
    let mut out = Vec::new();
    let mut lines: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(first) = lines.insert(l.to_string(), i + 1) {
            bail!(
                "{}:{}: {l:?} repeats line {first}: every image is listed once (its path is its id)",
                input.display(),
                i + 1
            );
        }
        out.push((l.to_string(), base.join(l)));
    }
    Ok(out)
}

fn embed_images(a: &Args, model: &sift_embed::Embedder) -> Result<(Vec<String>, Vec<Vec<f32>>)> {
    let inputs = image_inputs(&a.input)?;
    if inputs.is_empty() {
        bail!("{}: no images", a.input.display());
    }
    let bar = Bars::new(a.quiet).bar("embed", inputs.len() as u64);
    let (mut ids, mut vectors, mut skipped) = (Vec::new(), Vec::new(), 0usize);
    for chunk in inputs.chunks(256) {
        // files that cannot be read within the limits are skipped and counted like
        // undecodable ones; a file that is missing or unreadable stops the run
        let mut readable = Vec::with_capacity(chunk.len());
        let mut bytes: Vec<Vec<u8>> = Vec::with_capacity(chunk.len());
        for (id, p) in chunk {
            match a.image_limits.read(p) {
                Ok(b) => {
                    readable.push((id.clone(), p.clone()));
                    bytes.push(b);
                }
                Err(e) if refusal(&e) => {
                    skipped += 1;
                    eprintln!("warning: {e:#}: skipped");
                }
                Err(e) => return Err(e.context(format!("reading image {}", p.display()))),
            }
        }
        let refs: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let mut ok = Vec::new();
        for ((id, path), r) in readable.iter().zip(model.prepare_images(&refs)) {
            match r {
                Ok(x) => {
                    ids.push(id.clone());
                    ok.push(x);
                }
                Err(e) => {
                    skipped += 1;
                    eprintln!(
                        "warning: {}: cannot decode image: {e}: skipped",
                        path.display()
                    );
                }
            }
        }
        vectors.extend(model.embed_images(&ok)?);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    if skipped > 0 {
        eprintln!("warning: {skipped} undecodable or refused image(s) skipped");
    }
    Ok((ids, vectors))
}

/// Whether `e` is a refusal of the file (not a regular file, over a limit) rather than a
/// failure to read it.
fn refusal(e: &anyhow::Error) -> bool {
    match e.downcast_ref::<sift_core::Error>() {
        Some(sift_core::Error::NotAFile { .. } | sift_core::Error::FileTooLarge { .. }) => true,
        Some(_) => false,
        // the pixel limit and unreadable headers
        None => true,
    }
}

pub fn run(a: Args) -> Result<()> {
    let model = a.model_flags.load(&a.model)?;
    if a.image {
        if !model.capabilities().images {
            bail!(
                "{} is a text model: --image needs a vision-language model (CLIP, SigLIP, GME)",
                a.model
            );
        }
        let (ids, vectors) = embed_images(&a, &model)?;
        return write_vectors(&a, &ids, &vectors, model.dim(), "images", model.name());
    }
    let inputs = read_inputs(&a.input)?;
    if inputs.is_empty() {
        bail!("{}: no texts", a.input.display());
    }
    let bar = Bars::new(a.quiet).bar("embed", inputs.len() as u64);
    let mut vectors = Vec::with_capacity(inputs.len());
    for chunk in inputs.chunks(1024) {
        let texts: Vec<&str> = chunk.iter().map(|(_, t)| t.as_str()).collect();
        vectors.extend(model.embed_texts(&texts, a.kind)?);
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    let ids: Vec<String> = inputs.into_iter().map(|(id, _)| id).collect();
    write_vectors(&a, &ids, &vectors, model.dim(), "texts", model.name())
}

fn write_vectors(
    a: &Args,
    ids: &[String],
    vectors: &[Vec<f32>],
    dim: usize,
    what: &str,
    model: &str,
) -> Result<()> {
    let is_npy = a.out.extension().is_some_and(|e| e == "npy");
    if is_npy {
        write_npy(&a.out, vectors, dim).with_context(|| format!("{}", a.out.display()))?;
        let mut path = a.out.as_os_str().to_owned();
        path.push(".ids.txt");
        let text: String = ids.iter().map(|id| format!("{id}\n")).collect();
        sift_core::write_output(Path::new(&path), text.as_bytes())?;
    } else {
        let mut out = sift_core::OutputFile::create(&a.out)?;
        let mut w = BufWriter::new(&mut out);
        for (id, v) in ids.iter().zip(vectors) {
            serde_json::to_writer(&mut w, &serde_json::json!({"id": id, "vector": v}))?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        drop(w);
        out.commit()?;
    }
    eprintln!(
        "embedded {} {what} with {model} ({dim} dims) -> {}",
        vectors.len(),
        a.out.display()
    );
    Ok(())
}
