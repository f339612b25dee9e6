//! Queries rewritten by generated text before retrieval ([`QueryAugment`]): captions of their
//! images, reformulations or reasoning (`sift generate`), appended to the query or put in
//! its place.
use std::collections::HashMap;
use std::path::Path;

use sift_core::Example;

use crate::{Error, Result};

/// Generated text per query id, and how it joins the query.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryAugment {
    /// Its name in tables (`captions`, `reasoning`, ...).
    pub label: String,
    /// Text by query id.
    pub texts: HashMap<String, String>,
    /// Put the text in the query's place instead of after it.
    pub replace: bool,
}

impl QueryAugment {
    /// Reads `path`: a JSONL file, or a directory of them (`sift generate`'s `--out`: one
    /// `<domain>.jsonl` each; other files are ignored), each line an object with `id` and
    /// `text`. A line that is not such an object is an error naming file and line; an id
    /// given twice is an error too.
    pub fn from_path(label: &str, path: &Path, replace: bool) -> Result<QueryAugment> {
        let io = |p: &Path, source| Error::Io {
            path: p.to_path_buf(),
            source,
        };
        let files: Vec<std::path::PathBuf> = if path.is_dir() {
            let mut f: Vec<_> = std::fs::read_dir(path)
                .map_err(|e| io(path, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "jsonl")
                        && p.file_name().is_some_and(|n| n != "cache.jsonl")
                })
                .collect();
            f.sort();
            f
        } else {
            vec![path.to_path_buf()]
        };
        let mut texts = HashMap::new();
        for file in &files {
            let mut lines = sift_core::Lines::open(file)?;
            while let Some((n, line)) = lines.next_line()? {
                let bad = |message: String| {
                    Error::Unsupported(format!(
                        "{}:{n}: query augmentation: {message}",
                        file.display(),
                    ))
                };
                let v: serde_json::Value =
                    serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
                let (Some(id), Some(text)) = (
                    v.get("id").and_then(|x| x.as_str()),
                    v.get("text").and_then(|x| x.as_str()),
                ) else {
                    return Err(bad("needs string fields \"id\" and \"text\"".into()));
                };
                if texts.insert(id.to_string(), text.to_string()).is_some() {
                    return Err(bad(format!("query {id} given twice")));
                }
            }
        }
        if files.is_empty() {
            return Err(Error::Unsupported(format!(
                "{}: no .jsonl file of query augmentations",
                path.display()
            )));
        }
        Ok(QueryAugment {
            label: label.to_string(),
            texts,
            replace,
        })
    }

    /// `queries` with their text augmented (appended after a newline, or replaced), and how
    /// many had no text here (left as they are).
    pub fn apply(&self, queries: &[Example]) -> (Vec<Example>, usize) {
        let mut missing = 0;
        let out = queries
            .iter()
            .map(|q| {
                let mut q = q.clone();
                match self
                    .texts
                    .get(&q.id)
                    .map(|t| t.trim())
                    .filter(|t| !t.is_empty())
                {
                    Some(t) if self.replace => q.query = t.to_string(),
                    Some(t) => q.query = format!("{}\n{t}", q.query),
                    None => missing += 1,
                }
                q
            })
            .collect();
        (out, missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: &str, text: &str) -> Example {
        Example {
            id: id.into(),
            query: text.into(),
            gold_ids: vec![],
            negative_ids: vec![],
            gold_answers: vec![],
            image_paths: vec![],
            images: None,
        }
    }

    #[test]
    fn reads_a_directory_and_appends_or_replaces() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.jsonl"),
            "{\"id\":\"q1\",\"text\":\"Image 1: a plot\"}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.jsonl"),
            "\n{\"id\":\"q2\",\"text\":\"  \"}\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("cache.jsonl"), "not read").unwrap();
        let a = QueryAugment::from_path("captions", dir.path(), false).unwrap();
        let (out, missing) = a.apply(&[q("q1", "why?"), q("q2", "how?"), q("q3", "what?")]);
        assert_eq!(out[0].query, "why?\nImage 1: a plot");
        assert_eq!(
            (out[1].query.as_str(), out[2].query.as_str()),
            ("how?", "what?")
        );
        assert_eq!(missing, 2);
        let r = QueryAugment { replace: true, ..a };
        assert_eq!(r.apply(&[q("q1", "why?")]).0[0].query, "Image 1: a plot");
        std::fs::write(
            dir.path().join("b.jsonl"),
            "{\"id\":\"q1\",\"text\":\"again\"}\n",
        )
        .unwrap();
        let err = QueryAugment::from_path("x", dir.path(), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("b.jsonl:1") && err.contains("twice"), "{err}");
        std::fs::write(dir.path().join("b.jsonl"), "{\"id\":\"q9\"}\n").unwrap();
        let err = QueryAugment::from_path("x", dir.path(), false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("b.jsonl:1") && err.contains("\"text\""),
            "{err}"
        );
    }
}
