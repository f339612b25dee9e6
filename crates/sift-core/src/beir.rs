//! BEIR layout: `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`, `text`),
//! `qrels/<split>.tsv` (header row, then `query-id corpus-id score`, graded scores).
use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

use crate::files::Lines;
use crate::types::{Example, Passage, Qrels};
use crate::warnings::{WarningKind, Warnings};
use crate::{Error, Result};

/// An id in BEIR files: usually a string, sometimes a bare number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Str(String),
    Num(serde_json::Number),
}

impl Id {
    /// The id as text. A numeric id must be an integer (written as such): `1e30` or `2.0`
    /// have several spellings of one value, so they cannot name a document unambiguously.
    fn into_string(self) -> std::result::Result<String, String> {
        match self {
            Id::Str(s) => Ok(s),
            Id::Num(n) if n.is_u64() || n.is_i64() => Ok(n.to_string()),
            Id::Num(n) => Err(format!(
                "numeric _id {n} is not an integer: write non-integer ids as JSON strings"
            )),
        }
    }
}

#[derive(Deserialize)]
struct CorpusLine {
    #[serde(rename = "_id")]
    id: Id,
    #[serde(default)]
    title: Option<String>,
    text: Option<String>,
}

#[derive(Deserialize)]
struct QueryLine {
    #[serde(rename = "_id")]
    id: Id,
    text: Option<String>,
}

/// The UTF-8 byte-order mark.
pub const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// Streams `corpus.jsonl`.
pub(crate) struct JsonlPassages {
    lines: Lines,
    seen: HashMap<String, u64>,
    pub(crate) warnings: Warnings,
}

impl JsonlPassages {
    pub(crate) fn open(path: &Path) -> Result<Self> {
        Ok(JsonlPassages {
            lines: Lines::open(path)?,
            seen: HashMap::new(),
            warnings: Warnings::new(),
        })
    }

    pub(crate) fn next_passage(&mut self) -> Result<Option<Passage>> {
        let path = self.lines.path().to_path_buf();
        let Some((line, text)) = self.lines.next_line()? else {
            return Ok(None);
        };
        let parsed: CorpusLine = serde_json::from_str(text)
            .map_err(|e| Error::line(&path, line, format!("malformed JSON: {e}")))?;
        let id = parsed
            .id
            .into_string()
            .map_err(|m| Error::line(&path, line, m))?;
        Error::check_id(&path, || format!("line {line}"), "passage _id", &id)?;
        let Some(body) = parsed.text else {
            return Err(Error::line(
                &path,
                line,
                format!("passage {id:?} has no \"text\""),
            ));
        };
        let title = parsed.title.filter(|t| !t.trim().is_empty());
        let text = passage_text(title.as_deref(), &body);
        if text.trim().is_empty() {
            self.warnings.push(
                WarningKind::EmptyPassage,
                &path,
                format!("line {line}"),
                format!("passage {id:?} has no text"),
            );
        }
        if let Some(first) = self.seen.insert(id.clone(), line) {
            return Err(Error::DuplicateId {
                path,
                location: format!("line {line}"),
                first: format!("line {first}"),
                id,
            });
        }
        Ok(Some(Passage { id, text, title }))
    }
}

/// Reads `queries.jsonl` into examples (no judgements; those come from the qrels).
pub(crate) fn read_queries(path: &Path, warnings: &mut Warnings) -> Result<Vec<Example>> {
    let mut lines = Lines::open(path)?;
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::new();
    while let Some((line, text)) = lines.next_line()? {
        let parsed: QueryLine = serde_json::from_str(text)
            .map_err(|e| Error::line(path, line, format!("malformed JSON: {e}")))?;
        let id = parsed
            .id
            .into_string()
            .map_err(|m| Error::line(path, line, m))?;
        Error::check_id(path, || format!("line {line}"), "query _id", &id)?;
        if let Some(first) = seen.insert(id.clone(), line) {
            return Err(Error::DuplicateId {
                path: path.to_path_buf(),
                location: format!("line {line}"),
                first: format!("line {first}"),
                id,
            });
        }
        let query = parsed.text.unwrap_or_default();
        if query.trim().is_empty() {
            warnings.push(
                WarningKind::EmptyQuery,
                path,
                format!("line {line}"),
                format!("query {id:?} has no text: skipped"),
            );
            continue;
        }
        out.push(Example {
            id,
            query,
            ..Example::default()
        });
    }
    Ok(out)
}

/// Reads a BEIR qrels TSV (`query-id corpus-id score`, header row optional).
/// Queries not in `known_queries` are skipped with a warning.
pub(crate) fn read_qrels(
    path: &Path,
    known_queries: Option<&HashSet<&str>>,
    warnings: &mut Warnings,
) -> Result<Qrels> {
    let mut lines = Lines::open(path)?;
    let mut qrels = Qrels::new();
    let mut first = true;
    while let Some((line, text)) = lines.next_line()? {
        let fields: Vec<&str> = text.split('\t').map(str::trim).collect();
        let is_first = std::mem::replace(&mut first, false);
        if is_first && is_qrels_header(&fields) {
            continue;
        }
        if fields.len() != 3 {
            return Err(Error::line(
                path,
                line,
                format!(
                    "expected 3 tab-separated fields (query-id, corpus-id, score), found {}",
                    fields.len()
                ),
            ));
        }
        let grade = parse_grade(fields[2])
            .ok_or_else(|| Error::line(path, line, format!("bad score {:?}", fields[2])))?;
        let (qid, did) = (fields[0], fields[1]);
        Error::check_id(path, || format!("line {line}"), "query id", qid)?;
        Error::check_id(path, || format!("line {line}"), "corpus id", did)?;
        if let Some(known) = known_queries
            && !known.contains(qid)
        {
            warnings.push(
                WarningKind::UnknownQueryId,
                path,
                format!("line {line}"),
                format!("qrels name unknown query {qid:?}: skipped"),
            );
            continue;
        }
        let prev = qrels
            .entry(qid.to_string())
            .or_default()
            .insert(did.to_string(), grade);
        if prev.is_some() {
            warnings.push(
                WarningKind::DuplicateQrel,
                path,
                format!("line {line}"),
                format!("({qid}, {did}) judged twice: the last grade wins"),
            );
        }
    }
    Ok(qrels)
}

/// Whether the fields of a first qrels line are a header row (`query-id corpus-id score`
/// and the like) rather than a judgement with a bad grade: its grade column or its first
/// column is one of the usual header names.
pub fn is_qrels_header(fields: &[&str]) -> bool {
    let is = |s: &str, names: &[&str]| names.contains(&s.to_ascii_lowercase().as_str());
    fields.len() >= 3
        && parse_grade(fields[fields.len() - 1]).is_none()
        && (is(
            fields[fields.len() - 1],
            &[
                "score",
                "relevance",
                "rel",
                "grade",
                "label",
                "judgement",
                "judgment",
            ],
        ) || is(
            fields[0],
            &["query-id", "query_id", "qid", "queryid", "query", "topic"],
        ))
}

/// The text of a BEIR passage as it is indexed and embedded: its title and text joined by a
/// space, or the text alone when the title is absent or blank.
pub fn passage_text(title: Option<&str>, text: &str) -> String {
    match title {
        Some(title) if !title.trim().is_empty() => format!("{title} {text}"),
        _ => text.to_string(),
    }
}

/// Parses a relevance grade: an integer, or a `1.0`-style float with no fraction.
pub fn parse_grade(s: &str) -> Option<i32> {
    if let Ok(v) = s.parse::<i32>() {
        return Some(v);
    }
    let f = s.parse::<f64>().ok()?;
    (f.fract() == 0.0 && f.abs() < i32::MAX as f64).then_some(f as i32)
}
