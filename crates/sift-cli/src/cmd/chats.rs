//! `sift generate chats`: OpenAI chats from a JSONL file through a generator, each turned
//! into a generation request and its answer by `sift_service::chat`, as `sift serve`'s
//! `POST /v1/chat/completions` turns them, so one chat gets one answer at either door.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sift_generate::{Generator, Job, Outcome, generate_all};
use sift_service::api::{ChatRequest, parse_json};
use sift_service::chat::{ImageSources, chat_request, chat_response};
use sift_service::{ApiError, Limits};

use crate::options::GenerationFlags;
use crate::progress::Bars;

/// A chats file's line, read: its request, and the id of an OpenAI batch line.
struct ChatLine {
    line: u64,
    custom_id: Option<String>,
    request: sift_generate::Request,
}

/// Bytes of one line at most: a chat with its images as data: URLs.
const CHAT_LINE_LIMIT: u64 = 256 << 20;

/// What a chats run writes and reports.
pub struct ChatsRun<'a> {
    /// The chats (JSONL).
    pub chats: &'a Path,
    /// The generator's spec (`--generator`) and the model an endpoint serves (`--model`).
    pub generator: &'a str,
    /// The model an endpoint serves.
    pub model: Option<&'a str>,
    /// Answers written here (JSONL), else printed.
    pub out: Option<&'a Path>,
    /// Cache, concurrency, endpoint settings.
    pub requests: &'a GenerationFlags,
    /// No progress bar.
    pub quiet: bool,
    /// A JSON summary on stderr's place (stdout is the answers' when there is no --out).
    pub json: bool,
}

/// Reads every chat of the file (each checked, its line named in any error), then generates
/// the answers through `generator` and writes them, one line per chat in the file's order:
/// OpenAI's chat completion, or for a batch line (`custom_id`, `body`) OpenAI's batch
/// output line.
pub fn run(r: ChatsRun<'_>, generator: &dyn Generator, local: bool) -> Result<()> {
    let name = r.model.unwrap_or(r.generator);
    let lines = read_chats(r.chats, name)?;
    let jobs: Vec<Job> = lines
        .iter()
        .map(|l| Job {
            query_id: l
                .custom_id
                .clone()
                .unwrap_or_else(|| format!("line {}", l.line)),
            template: ("chat".into(), 1),
            request: l.request.clone(),
        })
        .collect();
    // the cache: --cache, else beside --out; printing, a scratch cache is dropped after
    let scratch = tempfile::tempdir().context("creating a scratch folder")?;
    let cache_path = r
        .requests
        .cache
        .clone()
        .or_else(|| r.out.map(cache_beside))
        .unwrap_or_else(|| scratch.path().join("cache.jsonl"));
    let cache = sift_generate::GenerationCache::open(&cache_path)
        .with_context(|| format!("opening the cache {}", cache_path.display()))?;
    let bars = Bars::new(r.quiet || r.out.is_none());
    let bar = bars.bar("chats", jobs.len() as u64);
    let outcomes = generate_all(
        generator,
        &jobs,
        &cache,
        r.requests.run_options(local),
        Some(&bar),
    );
    bar.finish_and_clear();
    let mut text = String::new();
    let mut failed = 0;
    for (l, o) in lines.iter().zip(&outcomes) {
        let answer = match o {
            Outcome::Cached(g) | Outcome::Generated(g) => Ok(chat_response(name, g.clone())),
            Outcome::Failed(m) => {
                failed += 1;
                eprintln!("error: {}: line {}: {m}", r.chats.display(), l.line);
                Err(m.clone())
            }
        };
        let value = match (&l.custom_id, answer) {
            (None, Ok(a)) => serde_json::to_value(a)?,
            (None, Err(m)) => json!({"error": {"message": m}}),
            (Some(id), Ok(a)) => json!({
                "id": format!("batch_req_{}", l.line),
                "custom_id": id,
                "response": {"status_code": 200, "body": a},
                "error": null,
            }),
            (Some(id), Err(m)) => json!({
                "id": format!("batch_req_{}", l.line),
                "custom_id": id,
                "response": null,
                "error": {"code": "generation_failed", "message": m},
            }),
        };
        text.push_str(&serde_json::to_string(&value)?);
        text.push('\n');
    }
    match r.out {
        Some(path) => sift_core::write_output(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?,
        None => print!("{text}"),
    }
    let s = sift_generate::RunSummary::of(&outcomes);
    let summary = format!(
        "{} chats: {} generated, {} cached, {} failed; {} + {} tokens",
        lines.len(),
        s.generated,
        s.cached,
        s.failed,
        s.prompt_tokens,
        s.completion_tokens
    );
    if r.json && r.out.is_some() {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "chats": lines.len(),
                "generated": s.generated,
                "cached": s.cached,
                "failed": s.failed,
                "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.completion_tokens,
                "out": r.out,
                "cache": r.requests.cache.is_some().then_some(&cache_path),
            }))?
        );
    } else {
        eprintln!("{summary}");
    }
    if failed > 0 {
        bail!("{failed} chat(s) failed (see above); rerun to retry them: the rest are cached");
    }
    Ok(())
}

/// `answers.jsonl` -> `answers.jsonl.cache.jsonl`, beside it.
fn cache_beside(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".cache.jsonl");
    out.with_file_name(name)
}

/// Every chat of the file, checked before anything is generated. A line is a chat
/// completion body (`messages`, sampling fields) or an OpenAI batch line (`custom_id` and
/// the body under `body`); its `model`, if any, is ignored (`--generator` answers).
fn read_chats(path: &Path, model: &str) -> Result<Vec<ChatLine>> {
    let folder = path.parent().unwrap_or(Path::new("."));
    let limits = Limits::default();
    let mut lines = sift_core::Lines::open(path)
        .with_context(|| format!("reading {}", path.display()))?
        .with_line_limit(CHAT_LINE_LIMIT);
    let mut out = Vec::new();
    while let Some((n, text)) = lines.next_line()? {
        let at = |e: ApiError| anyhow::anyhow!("{}: line {n}: {e}", path.display());
        let mut value: Value = parse_json(text.as_bytes()).map_err(at)?;
        let custom_id = match value.get("custom_id") {
            None => None,
            Some(Value::String(id)) => Some(id.clone()),
            Some(_) => bail!("{}: line {n}: custom_id: give a string", path.display()),
        };
        if custom_id.is_some() {
            value = match value.get_mut("body").map(Value::take) {
                Some(body @ Value::Object(_)) => body,
                _ => bail!(
                    "{}: line {n}: a batch line (custom_id) carries its chat under \"body\"",
                    path.display()
                ),
            };
        }
        let Value::Object(fields) = &mut value else {
            bail!("{}: line {n}: give a JSON object", path.display());
        };
        fields.insert("model".into(), Value::String(model.to_string()));
        let bytes = serde_json::to_vec(&value)?;
        let req: ChatRequest = parse_json(&bytes).map_err(at)?;
        let request =
            chat_request(&req, &limits, ImageSources::DataUrlsAndFiles(folder)).map_err(at)?;
        out.push(ChatLine {
            line: n,
            custom_id,
            request,
        });
    }
    if out.is_empty() {
        bail!("{}: no chat", path.display());
    }
    let mut seen = std::collections::HashSet::new();
    for l in &out {
        if let Some(id) = &l.custom_id
            && !seen.insert(id.as_str())
        {
            bail!(
                "{}: line {}: custom_id {id:?} is given twice",
                path.display(),
                l.line
            );
        }
    }
    Ok(out)
}
