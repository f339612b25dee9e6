//! TREC file formats: runs (`qid Q0 docid rank score tag`), qrels (`qid iter docid grade`)
//! and exclusion lists (`qid docid`).
use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use sift_core::{Qrels, WarningKind, Warnings, parse_grade};

use crate::metrics::{Exclusions, Run, RunEntry, trec_order};
use crate::{Error, Result, Task};

/// `name` with every character other than ASCII letters, digits, `-` and `.` replaced by
/// `_`: safe as a file or directory name.
pub fn safe_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The file name of a job's run (its task and retriever label) in an evaluation
/// directory's `runs/` (`sift eval --out`): `task<N>.<label>.trec`.
pub fn run_file_name(task: Task, label: &str) -> String {
    format!("task{task}.{}.trec", safe_name(label))
}

/// The longest line of a run, qrels or exclusion file (1 MiB: six fields, two of them ids).
pub const TREC_LINE_LIMIT: u64 = 1 << 20;

/// Calls `f` with each non-blank line that is not a `#` comment, trimmed, read through
/// sift-core's guarded line reader (a regular file only, lines of bounded length).
fn for_each_line(path: &Path, mut f: impl FnMut(u64, &str) -> Result<()>) -> Result<()> {
    let mut lines = sift_core::Lines::open(path)?.with_line_limit(TREC_LINE_LIMIT);
    while let Some((line, text)) = lines.next_line()? {
        let text = text.trim();
        if text.starts_with('#') {
            continue;
        }
        f(line, text)?;
    }
    Ok(())
}

/// The whitespace-separated fields of `text`, line `line` of `path`: as many as `names`
/// names, else an error naming them.
fn fields<'t>(path: &Path, line: u64, text: &'t str, names: &str) -> Result<Vec<&'t str>> {
    let f: Vec<&str> = text.split_whitespace().collect();
    let want = names.split(' ').count();
    if f.len() != want {
        return Err(Error::line(
            path,
            line,
            format!("expected {want} fields ({names}), found {}", f.len()),
        ));
    }
    Ok(f)
}

/// Reads a TREC run. The rank column is ignored (as trec_eval ignores it); a document listed
/// twice for the same query is an error.
pub fn read_run(path: &Path) -> Result<Run> {
    let mut run = Run::new();
    let mut seen: HashMap<(String, String), u64> = HashMap::new();
    for_each_line(path, |line, text| {
        let f = fields(path, line, text, "qid Q0 docid rank score tag")?;
        let score: f64 = f[4]
            .parse()
            .map_err(|_| Error::line(path, line, format!("bad score {:?}", f[4])))?;
        if !score.is_finite() {
            return Err(Error::line(
                path,
                line,
                format!("score {:?} is not finite", f[4]),
            ));
        }
        if let Some(first) = seen.insert((f[0].to_string(), f[2].to_string()), line) {
            return Err(Error::line(
                path,
                line,
                format!(
                    "document {:?} listed twice for query {:?} (first on line {first})",
                    f[2], f[0]
                ),
            ));
        }
        for (what, id) in [("query id", f[0]), ("document id", f[2])] {
            if let Some(problem) = sift_core::id_problem(id) {
                return Err(Error::line(path, line, format!("{what} {id:?} {problem}")));
            }
        }
        run.entry(f[0].to_string()).or_default().push(RunEntry {
            doc: f[2].to_string(),
            score,
        });
        Ok(())
    })?;
    non_empty(run, path, "run entries")
}

/// `map`, or [`Error::Empty`] naming `path` when it holds nothing.
fn non_empty<K, V>(map: BTreeMap<K, V>, path: &Path, what: &'static str) -> Result<BTreeMap<K, V>> {
    if map.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
            what,
        });
    }
    Ok(map)
}

/// Reads TREC qrels (`qid iter docid grade`; a tab-separated BEIR file, `query-id
/// corpus-id score`, with or without its header row, is accepted too). A pair judged twice
/// keeps its last grade and is counted in `warnings`.
pub fn read_qrels(path: &Path, warnings: &mut Warnings) -> Result<Qrels> {
    let mut qrels = Qrels::new();
    let mut first = true;
    for_each_line(path, |line, text| {
        let f: Vec<&str> = text.split_whitespace().collect();
        let is_first = std::mem::replace(&mut first, false);
        if is_first && sift_core::is_qrels_header(&f) {
            return Ok(());
        }
        let (qid, doc, grade) = match f.len() {
            4 => (f[0], f[2], f[3]),
            3 if text.contains('\t') => (f[0], f[1], f[2]), // BEIR TSV
            n => {
                return Err(Error::line(
                    path,
                    line,
                    format!(
                        "expected 4 fields (qid iter docid grade), or 3 tab-separated ones (BEIR: query-id corpus-id score), found {n}"
                    ),
                ));
            }
        };
        let Some(grade) = parse_grade(grade) else {
            return Err(Error::line(path, line, format!("bad grade {grade:?}")));
        };
        for (what, id) in [("query id", qid), ("document id", doc)] {
            if let Some(problem) = sift_core::id_problem(id) {
                return Err(Error::line(path, line, format!("{what} {id:?} {problem}")));
            }
        }
        if qrels
            .entry(qid.to_string())
            .or_default()
            .insert(doc.to_string(), grade)
            .is_some()
        {
            warnings.push(
                WarningKind::DuplicateQrel,
                path,
                format!("line {line}"),
                format!("({qid}, {doc}) judged twice: the last grade wins"),
            );
        }
        Ok(())
    })?;
    non_empty(qrels, path, "judgements")
}

/// Reads an exclusion list: lines `qid docid`.
pub fn read_exclusions(path: &Path) -> Result<Exclusions> {
    let mut out = Exclusions::new();
    for_each_line(path, |line, text| {
        let f = fields(path, line, text, "qid docid")?;
        out.entry(f[0].to_string())
            .or_default()
            .insert(f[1].to_string());
        Ok(())
    })?;
    Ok(out)
}

/// Writes `path` through sift-core's [`sift_core::OutputFile`]: atomically for files (a
/// failure never leaves half a file under the name), straight to `-` (standard output),
/// FIFOs and character devices, never over a directory or a block device.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&mut sift_core::OutputFile>) -> std::io::Result<()>,
) -> Result<()> {
    let mut out = sift_core::OutputFile::create(path)?;
    let result = (|| {
        let mut w = BufWriter::new(&mut out);
        write(&mut w)?;
        w.flush()
    })();
    result.map_err(|e| Error::io(path, e))?;
    Ok(out.commit()?)
}

fn check_token(kind: &str, s: &str) -> std::io::Result<()> {
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{kind} {s:?} is empty or contains whitespace: not expressible in TREC format"),
        ));
    }
    Ok(())
}

/// Writes a run in TREC format, each query's documents in trec_eval order with ranks from 1.
/// Scores are written in their shortest exact form, so reading the file back gives the same
/// ranking.
pub fn write_run(path: &Path, run: &BTreeMap<String, Vec<RunEntry>>, tag: &str) -> Result<()> {
    write_atomically(path, |w| {
        check_token("run tag", tag)?;
        for (qid, entries) in run {
            write_query(w, qid, entries, tag)?;
        }
        Ok(())
    })
}

fn write_query(
    w: &mut impl Write,
    qid: &str,
    entries: &[RunEntry],
    tag: &str,
) -> std::io::Result<()> {
    check_token("query id", qid)?;
    let mut sorted: Vec<&RunEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| trec_order(a, b));
    for (i, e) in sorted.iter().enumerate() {
        check_token("document id", &e.doc)?;
        writeln!(w, "{qid} Q0 {} {} {} {tag}", e.doc, i + 1, e.score)?;
    }
    Ok(())
}

/// A TREC run written query by query, as the rankings are made (memory does not grow with
/// the run), in the format of [`write_run`]. A file appears under its name only when
/// [`RunWriter::finish`] succeeds (dropped before, it leaves nothing behind); `-` is standard
/// output, and a device or pipe is written straight.
pub struct RunWriter {
    path: PathBuf,
    out: Option<sift_core::OutputFile>,
    buf: Vec<u8>,
    tag: String,
}

impl RunWriter {
    /// Starts the run `path`.
    pub fn create(path: &Path, tag: &str) -> Result<RunWriter> {
        check_token("run tag", tag).map_err(|e| Error::io(path, e))?;
        let out = sift_core::OutputFile::create(path)?;
        Ok(RunWriter {
            path: path.to_path_buf(),
            out: Some(out),
            buf: Vec::new(),
            tag: tag.to_string(),
        })
    }

    /// The file it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the ranking of query `qid` (any order; written in trec_eval's).
    pub fn write(&mut self, qid: &str, entries: &[RunEntry]) -> Result<()> {
        self.buf.clear();
        write_query(&mut self.buf, qid, entries, &self.tag)
            .map_err(|e| Error::io(&self.path, e))?;
        let out = self.out.as_mut().expect("not finished");
        out.write_all(&self.buf)
            .and_then(|()| out.flush())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Appends every query of `run`.
    pub fn write_all(&mut self, run: &Run) -> Result<()> {
        run.iter().try_for_each(|(q, e)| self.write(q, e))
    }

    /// Syncs and renames the file into place (flushes a stream).
    pub fn finish(mut self) -> Result<()> {
        let out = self.out.take().expect("not finished");
        Ok(out.commit()?)
    }
}

/// Writes qrels in TREC format (`qid 0 docid grade`).
pub fn write_qrels(path: &Path, qrels: &Qrels) -> Result<()> {
    write_atomically(path, |w| {
        for (qid, docs) in qrels {
            check_token("query id", qid)?;
            for (doc, grade) in docs {
                check_token("document id", doc)?;
                writeln!(w, "{qid} 0 {doc} {grade}")?;
            }
        }
        Ok(())
    })
}

/// Writes an exclusion list (`qid docid` lines).
pub fn write_exclusions(path: &Path, exclusions: &Exclusions) -> Result<()> {
    write_atomically(path, |w| {
        for (qid, docs) in exclusions {
            check_token("query id", qid)?;
            for doc in docs {
                check_token("document id", doc)?;
                writeln!(w, "{qid} {doc}")?;
            }
        }
        Ok(())
    })
}
