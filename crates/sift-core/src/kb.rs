//! Knowledge-base layout: one JSONL or Parquet file whose rows are
//! `{"id" (or "qid"), "text", "image_path"}`, the form InterLV-Search's local knowledge base
//! takes. The file is one domain, named after its stem (`kb.jsonl` -> `kb`).
//!
//! - `id`, else `qid`: a string or an integer (written in decimal); required, unique.
//! - `text`: the passage; may be missing, null or blank when the row has an image (the row
//!   is then an image only).
//! - `contents`, instead of `text`: Search-R1's corpus rows (`{"id", "contents"}`, its
//!   `wiki-18.jsonl`), whose first line is the title, in double quotes: the passage is
//!   `contents` as it is (what Search-R1 indexes and returns), its title the first line
//!   without the quotes. A row with both `text` and `contents` is an error.
//! - `title`: the passage's title (optional; over `contents`' first line). With `text`, the
//!   passage indexed is the title and the text joined by a space, as BEIR's are.
//! - `image_path`: an image file, relative to the file's directory (an absolute path is taken
//!   as it is); missing, null or empty for none. Its id is the path as written, normalised
//!   ([`normalize_image_path`]). Several rows may name one image: it is one image, linked to
//!   each of their passages ([`Corpus::row_links`](crate::Corpus::row_links)).
//! - Other columns are ignored.
//!
//! A row that is not JSON (or not an object), without an id, with a duplicate id, or with a
//! value of the wrong type is an error naming the file and line (JSONL, 1-based) or row
//! (Parquet, 0-based). A row with neither text nor image is skipped and counted
//! ([`WarningKind::EmptyRow`]). Image files are checked when images are read, as the files of
//! an image folder are: one that does not exist ([`WarningKind::MissingImageFile`]), that
//! leads outside the file's directory (through `..`, an absolute path or a symbolic link),
//! is not a regular file or is larger than [`MAX_IMAGE_FILE_BYTES`]
//! ([`WarningKind::SkippedImageFile`]), or is empty ([`WarningKind::MissingImageBytes`]) is
//! skipped and counted, with the file, line/row and id; one that exists but cannot be read
//! is an error.
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use parquet::record::Field;
use serde::Deserialize;
use serde_json::Value;

use crate::corpus::{ImageRecord, MAX_IMAGE_FILE_BYTES, read_image_file};
use crate::files::Lines;
use crate::mmbright::{Table, string_at};
use crate::paths::normalize_image_path;
use crate::types::Passage;
use crate::warnings::{WarningKind, Warnings};
use crate::{Error, Result};

/// The two file formats of a knowledge base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KbFormat {
    Jsonl,
    Parquet,
}

impl KbFormat {
    /// The format a file name's extension (any case) says, if it is one.
    pub(crate) fn of(path: &Path) -> Option<KbFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "jsonl" => Some(KbFormat::Jsonl),
            "parquet" => Some(KbFormat::Parquet),
            _ => None,
        }
    }
}

/// The names a directory's knowledge base may have (`Corpus::open` on such a directory).
pub(crate) const DIR_FILES: [&str; 2] = ["kb.jsonl", "kb.parquet"];

/// A knowledge-base file.
#[derive(Debug, Clone)]
pub(crate) struct KbFile {
    pub(crate) path: PathBuf,
    pub(crate) format: KbFormat,
    /// The file's stem.
    pub(crate) domain: String,
}

impl KbFile {
    /// `path`, which must be a regular file with a `.jsonl` or `.parquet` name whose stem is a
    /// usable domain name.
    pub(crate) fn open(path: &Path) -> Result<KbFile> {
        let Some(format) = KbFormat::of(path) else {
            return Err(Error::NotACorpusFile {
                path: path.to_path_buf(),
            });
        };
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Err(Error::NotAFile {
                path: path.to_path_buf(),
                kind: crate::files::file_kind(&meta),
            });
        }
        let domain = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(problem) = crate::paths::domain_problem(&domain) {
            return Err(Error::BadDomain {
                domain,
                path: path.to_path_buf(),
                problem,
            });
        }
        Ok(KbFile {
            path: path.to_path_buf(),
            format,
            domain,
        })
    }

    /// The directory image paths are relative to (empty for the working directory).
    pub(crate) fn dir(&self) -> PathBuf {
        self.path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// Where a row is: `line N` (JSONL, 1-based) or `row N` (Parquet, 0-based).
    pub(crate) fn location(&self, at: u64) -> String {
        match self.format {
            KbFormat::Jsonl => format!("line {at}"),
            KbFormat::Parquet => format!("row {at}"),
        }
    }

    /// An error at row / line `at`.
    fn error(&self, at: u64, message: impl Into<String>) -> Error {
        match self.format {
            KbFormat::Jsonl => Error::line(&self.path, at, message),
            KbFormat::Parquet => Error::row(&self.path, at, message),
        }
    }
}

/// One row of a knowledge base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KbRow {
    /// 1-based line (JSONL) or 0-based row (Parquet).
    pub(crate) at: u64,
    pub(crate) id: String,
    /// The text, when not blank.
    pub(crate) text: Option<String>,
    /// The title, when the row gives one (not blank).
    pub(crate) title: Option<String>,
    /// The normalised image path, when the row names one.
    pub(crate) image: Option<String>,
}

/// A JSONL row: the six columns read, every other key skipped unparsed.
#[derive(Deserialize)]
struct JsonRow {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    qid: Option<Value>,
    #[serde(default)]
    text: Option<Value>,
    #[serde(default)]
    contents: Option<Value>,
    #[serde(default)]
    title: Option<Value>,
    #[serde(default)]
    image_path: Option<Value>,
    /// Only looked at to say what a BEIR `corpus.jsonl` given as a file is.
    #[serde(default, rename = "_id")]
    beir_id: Option<serde::de::IgnoredAny>,
}

/// What a JSON value is, for messages.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A cell's text (`None` when null), or what is wrong with it.
type CellResult = std::result::Result<Option<String>, String>;

/// An id cell of a JSONL row: a string, or an integer written as one (`1e3` and `2.0` have
/// several spellings of one value, so they cannot name a row unambiguously); `None` when null.
fn json_id(name: &str, v: Value) -> CellResult {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        Value::Number(n) if n.is_u64() || n.is_i64() => Ok(Some(n.to_string())),
        Value::Number(n) => Err(format!(
            "numeric {name:?} {n} is not an integer: write non-integer ids as JSON strings"
        )),
        other => Err(format!(
            "{name:?} must be a string or an integer, found {}",
            json_kind(&other)
        )),
    }
}

/// A string cell of a JSONL row; `None` when null.
fn json_string(name: &str, v: Value) -> CellResult {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(format!(
            "{name:?} must be a string or null, found {}",
            json_kind(&other)
        )),
    }
}

/// An id cell of a Parquet row: a string or an integer; `None` when null.
fn parquet_id(name: &str, f: &Field) -> CellResult {
    Ok(Some(match f {
        Field::Null => return Ok(None),
        Field::Str(s) => s.clone(),
        Field::Byte(v) => v.to_string(),
        Field::Short(v) => v.to_string(),
        Field::Int(v) => v.to_string(),
        Field::Long(v) => v.to_string(),
        Field::UByte(v) => v.to_string(),
        Field::UShort(v) => v.to_string(),
        Field::UInt(v) => v.to_string(),
        Field::ULong(v) => v.to_string(),
        other => {
            return Err(format!(
                "column {name:?}: expected a string or an integer, found {}",
                crate::mmbright::kind(other)
            ));
        }
    }))
}

/// The columns a knowledge base's rows are read from.
const COLUMNS: [&str; 4] = ["id", "qid", "text", "image_path"];

enum Source {
    Jsonl(Lines),
    Parquet {
        table: Table,
        pending: VecDeque<KbRow>,
    },
}

/// The rows of a knowledge base, one at a time: ids checked ([`crate::id_problem`]) and
/// unique, text and image path typed. Nothing is skipped here.
pub(crate) struct KbRows {
    pub(crate) file: KbFile,
    source: Source,
    seen: HashMap<String, u64>,
}

impl KbRows {
    pub(crate) fn open(file: &KbFile) -> Result<KbRows> {
        let source = match file.format {
            KbFormat::Jsonl => Source::Jsonl(Lines::open(&file.path)?),
            KbFormat::Parquet => {
                let have = crate::mmbright::column_names(&file.path)?;
                let has = |c: &str| have.iter().any(|h| h == c);
                if !has("id") && !has("qid") {
                    return Err(Error::schema(
                        &file.path,
                        format!(
                            "a knowledge base needs an \"id\" (or \"qid\") column (columns \
                             present: {})",
                            have.join(", ")
                        ),
                    ));
                }
                if !has("text") && !has("image_path") {
                    return Err(Error::schema(
                        &file.path,
                        format!(
                            "a knowledge base needs a \"text\" or an \"image_path\" column \
                             (columns present: {})",
                            have.join(", ")
                        ),
                    ));
                }
                Source::Parquet {
                    table: Table::open(&file.path, &[], &COLUMNS, 1024)?,
                    pending: VecDeque::new(),
                }
            }
        };
        Ok(KbRows {
            file: file.clone(),
            source,
            seen: HashMap::new(),
        })
    }

    /// The next row, or `None` at the end.
    pub(crate) fn next_row(&mut self) -> Result<Option<KbRow>> {
        let row = match &mut self.source {
            Source::Jsonl(lines) => {
                let Some((line, text)) = lines.next_line()? else {
                    return Ok(None);
                };
                json_row(&self.file, line, text)?
            }
            Source::Parquet { table, pending } => loop {
                if let Some(r) = pending.pop_front() {
                    break r;
                }
                let Some((first, batch)) = table.next_batch()? else {
                    return Ok(None);
                };
                for (i, cells) in batch.iter().enumerate() {
                    pending.push_back(parquet_row(&self.file, table, cells, first + i as u64)?);
                }
            },
        };
        if let Some(first) = self.seen.insert(row.id.clone(), row.at) {
            return Err(Error::DuplicateId {
                path: self.file.path.clone(),
                location: self.file.location(row.at),
                first: self.file.location(first),
                id: row.id,
            });
        }
        Ok(Some(row))
    }
}

/// The row of JSONL line `line`.
fn json_row(file: &KbFile, line: u64, text: &str) -> Result<KbRow> {
    // serde would also take an array as the struct's fields in order
    if !text.trim_start().starts_with('{') {
        return Err(file.error(
            line,
            match serde_json::from_str::<Value>(text) {
                Ok(v) => format!("not a JSON object: found {}", json_kind(&v)),
                Err(e) => format!("not JSON: {e}"),
            },
        ));
    }
    let parsed: JsonRow = serde_json::from_str(text).map_err(|e| {
        let what = if e.is_data() {
            "not a JSON object of the knowledge base's columns (\"id\" or \"qid\", \"text\", \
             \"image_path\")"
        } else {
            "not JSON"
        };
        file.error(line, format!("{what}: {e}"))
    })?;
    // a cell parsed by `parse`: `None` when absent or null
    let cell = |name: &str, v: Option<Value>, parse: fn(&str, Value) -> CellResult| {
        v.map(|v| parse(name, v))
            .transpose()
            .map(Option::flatten)
            .map_err(|m| file.error(line, m))
    };
    let id = match cell("id", parsed.id, json_id)? {
        Some(id) => Some(id),
        None => cell("qid", parsed.qid, json_id)?,
    };
    let text = RowText {
        text: cell("text", parsed.text, json_string)?,
        contents: cell("contents", parsed.contents, json_string)?,
        title: cell("title", parsed.title, json_string)?,
    };
    let image = cell("image_path", parsed.image_path, json_string)?;
    let Some(id) = id else {
        let hint = if parsed.beir_id.is_some() {
            " (it has \"_id\": a BEIR corpus.jsonl? give its directory as the corpus)"
        } else {
            ""
        };
        return Err(file.error(line, format!("row has no \"id\" or \"qid\"{hint}")));
    };
    finish_row(file, line, id, text, image)
}

/// The row `at` of a Parquet knowledge base.
fn parquet_row(
    file: &KbFile,
    table: &Table,
    cells: &parquet::record::Row,
    at: u64,
) -> Result<KbRow> {
    let err = |m: String| file.error(at, m);
    let mut id = None;
    for name in ["id", "qid"] {
        if let Some(cell) = table.column(cells, name)
            && let Some(v) = parquet_id(name, cell).map_err(err)?
        {
            id = Some(v);
            break;
        }
    }
    let string = |name: &str| -> Result<Option<String>> {
        match table.column(cells, name) {
            None => Ok(None),
            Some(cell) => string_at(cell)
                .map(|s| s.map(str::to_string))
                .map_err(|e| err(format!("column {name:?}: {e}"))),
        }
    };
    let text = RowText {
        text: string("text")?,
        contents: string("contents")?,
        title: string("title")?,
    };
    let image = string("image_path")?;
    let Some(id) = id else {
        return Err(file.error(at, "row has no \"id\" or \"qid\" (null)"));
    };
    finish_row(file, at, id, text, image)
}

/// A row's text columns as read.
struct RowText {
    text: Option<String>,
    contents: Option<String>,
    title: Option<String>,
}

impl RowText {
    /// The passage's text and title: `text` (after the title, when there is one), or
    /// Search-R1's `contents` as it is, titled by its first line unquoted.
    fn passage(self) -> std::result::Result<(Option<String>, Option<String>), String> {
        let title = self.title.filter(|t| !t.trim().is_empty());
        match (self.text, self.contents) {
            (Some(_), Some(_)) => {
                Err("has both \"text\" and \"contents\" (Search-R1's layout): give one".into())
            }
            (Some(text), None) => {
                let joined = crate::beir::passage_text(title.as_deref(), &text);
                Ok((Some(joined), title))
            }
            (None, Some(contents)) => {
                let title = title.or_else(|| contents_title(&contents));
                Ok((Some(contents), title))
            }
            (None, None) => Ok((None, title)),
        }
    }
}

/// The title of Search-R1's `contents`: its first line, without the double quotes around
/// it; none when the contents are one line or the line is blank.
pub fn contents_title(contents: &str) -> Option<String> {
    let (first, _) = contents.split_once('\n')?;
    let first = first.trim();
    let unquoted = first
        .strip_prefix('"')
        .and_then(|f| f.strip_suffix('"'))
        .unwrap_or(first);
    (!unquoted.trim().is_empty()).then(|| unquoted.to_string())
}

fn finish_row(
    file: &KbFile,
    at: u64,
    id: String,
    text: RowText,
    image: Option<String>,
) -> Result<KbRow> {
    let location = || file.location(at);
    let (text, title) = text
        .passage()
        .map_err(|m| file.error(at, format!("row {id:?} {m}")))?;
    Error::check_id(&file.path, location, "row id", &id)?;
    let image = image
        .map(|p| normalize_image_path(&p))
        .filter(|p| !p.is_empty());
    if let Some(p) = &image {
        Error::check_id(
            &file.path,
            location,
            &format!("image_path of row {id:?}:"),
            p,
        )?;
    }
    Ok(KbRow {
        at,
        id,
        text: text.filter(|t| !t.trim().is_empty()),
        title,
        image,
    })
}

/// Streams the passages of a knowledge base: its rows with text.
pub(crate) struct KbPassages {
    rows: KbRows,
    pub(crate) warnings: Warnings,
}

impl KbPassages {
    pub(crate) fn open(file: &KbFile) -> Result<KbPassages> {
        Ok(KbPassages {
            rows: KbRows::open(file)?,
            warnings: Warnings::new(),
        })
    }

    pub(crate) fn next_passage(&mut self) -> Result<Option<Passage>> {
        while let Some(row) = self.rows.next_row()? {
            match (row.text, row.image) {
                (Some(text), _) => {
                    return Ok(Some(Passage {
                        id: row.id,
                        title: row.title,
                        text,
                    }));
                }
                // an image only: no passage
                (None, Some(_)) => {}
                (None, None) => self.warnings.push(
                    WarningKind::EmptyRow,
                    &self.rows.file.path,
                    self.rows.file.location(row.at),
                    format!("row {:?} has neither text nor image_path: skipped", row.id),
                ),
            }
        }
        Ok(None)
    }
}

/// The (passage id, image id) of each row with both text and an image, in file order.
pub(crate) fn row_links(file: &KbFile) -> Result<Vec<(String, String)>> {
    let mut rows = KbRows::open(file)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next_row()? {
        if let (Some(_), Some(image)) = (row.text, row.image) {
            out.push((row.id, image));
        }
    }
    Ok(out)
}

/// Streams the images of a knowledge base: each image its rows name, once, in the order of
/// the first row naming it.
pub(crate) struct KbImages {
    rows: KbRows,
    /// The file's directory, as given (relative image paths are joined to it).
    dir: PathBuf,
    /// The same, canonical: images must lie below it.
    root: PathBuf,
    /// Image ids met so far (read or skipped).
    seen: HashSet<String>,
}

/// What became of one image file.
enum Checked {
    /// A readable regular file within the knowledge base's directory: its canonical path
    /// and size.
    Ok(PathBuf, u64),
    /// Skipped: why, counted as what.
    Skip(WarningKind, String),
}

impl KbImages {
    pub(crate) fn open(file: &KbFile) -> Result<KbImages> {
        let dir = file.dir();
        let here = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &dir
        };
        let root = here.canonicalize().map_err(|e| Error::io(here, e))?;
        Ok(KbImages {
            rows: KbRows::open(file)?,
            dir,
            root,
            seen: HashSet::new(),
        })
    }

    /// The next image; `with_bytes` reads its file, else its size alone decides.
    pub(crate) fn next_image(
        &mut self,
        with_bytes: bool,
        warnings: &mut Warnings,
    ) -> Result<Option<ImageRecord>> {
        while let Some(row) = self.rows.next_row()? {
            let Some(id) = row.image else {
                continue;
            };
            if !self.seen.insert(id.clone()) {
                continue;
            }
            let file = &self.rows.file;
            let skip = |warnings: &mut Warnings, kind, why: String| {
                warnings.push(
                    kind,
                    &file.path,
                    file.location(row.at),
                    format!("image {id:?} of row {:?}: {why}: skipped", row.id),
                );
            };
            let (path, len) = match self
                .check(&id)
                .map_err(|e| file.error(row.at, format!("image {id:?} of row {:?}: {e}", row.id)))?
            {
                Checked::Ok(path, len) => (path, len),
                Checked::Skip(kind, why) => {
                    skip(warnings, kind, why);
                    continue;
                }
            };
            let bytes = if with_bytes {
                match read_image_file(&path).map_err(|e| {
                    file.error(row.at, format!("image {id:?} of row {:?}: {e}", row.id))
                })? {
                    Some(b) => b,
                    None => {
                        skip(
                            warnings,
                            WarningKind::SkippedImageFile,
                            format!(
                                "{} is no longer a regular file of at most {MAX_IMAGE_FILE_BYTES} \
                                 bytes",
                                path.display()
                            ),
                        );
                        continue;
                    }
                }
            } else {
                Vec::new()
            };
            if len == 0 || (with_bytes && bytes.is_empty()) {
                skip(
                    warnings,
                    WarningKind::MissingImageBytes,
                    format!("{} is an empty file", path.display()),
                );
                continue;
            }
            return Ok(Some(ImageRecord {
                path: id,
                bytes,
                file: path,
                row: match file.format {
                    KbFormat::Jsonl => row.at - 1,
                    KbFormat::Parquet => row.at,
                },
            }));
        }
        Ok(None)
    }

    /// Resolves image `id` against the directory and checks what it names. An error is a
    /// file that exists but cannot be examined.
    fn check(&self, id: &str) -> std::io::Result<Checked> {
        let raw = Path::new(id);
        let joined = if raw.is_absolute() {
            raw.to_path_buf()
        } else {
            self.dir.join(raw)
        };
        let canonical = match joined.canonicalize() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Checked::Skip(
                    WarningKind::MissingImageFile,
                    format!("{} does not exist", joined.display()),
                ));
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", joined.display()),
                ));
            }
        };
        if !canonical.starts_with(&self.root) {
            return Ok(Checked::Skip(
                WarningKind::SkippedImageFile,
                format!(
                    "{} leads outside the knowledge base's directory {}",
                    joined.display(),
                    self.root.display()
                ),
            ));
        }
        let meta = std::fs::metadata(&canonical)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", canonical.display())))?;
        if !meta.is_file() {
            return Ok(Checked::Skip(
                WarningKind::SkippedImageFile,
                format!("{} is not a regular file", joined.display()),
            ));
        }
        if meta.len() > MAX_IMAGE_FILE_BYTES {
            return Ok(Checked::Skip(
                WarningKind::SkippedImageFile,
                format!(
                    "{} has {} bytes, more than {MAX_IMAGE_FILE_BYTES}",
                    joined.display(),
                    meta.len()
                ),
            ));
        }
        Ok(Checked::Ok(canonical, meta.len()))
    }
}

#[cfg(test)]
#[path = "kb_tests.rs"]
mod tests;
