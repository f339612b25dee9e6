//! Knowledge-base layout: one JSONL or Parquet file whose rows are
//! `{"id" (or "qid"), "text", "image_path"}`, the form InterLV-Search's local knowledge base
//! takes. The file is one domain, named after its stem (`kb.jsonl` -> `kb`).
//!
//! - `id`, else `qid`: a string or an integer (written in decimal); required, unique.
//! - `text`: the passage; may be missing, null or blank when the row has an image (the row
//!   is then an image only).
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

use crate::beir::Lines;
use crate::corpus::{ImageRecord, MAX_IMAGE_FILE_BYTES, read_image_file};
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
    /// The normalised image path, when the row names one.
    pub(crate) image: Option<String>,
}

/// A JSONL row: the four columns read, every other key skipped unparsed.
#[derive(Deserialize)]
struct JsonRow {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    qid: Option<Value>,
    #[serde(default)]
    text: Option<Value>,
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

/// An id cell of a JSONL row: a string, or an integer written as one (`1e3` and `2.0` have
/// several spellings of one value, so they cannot name a row unambiguously); `None` when null.
fn json_id(name: &str, v: Value) -> std::result::Result<Option<String>, String> {
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
fn json_string(name: &str, v: Value) -> std::result::Result<Option<String>, String> {
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
fn parquet_id(name: &str, f: &Field) -> std::result::Result<Option<String>, String> {
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
    let err = |m: String| file.error(line, m);
    let id = match parsed
        .id
        .map(|v| json_id("id", v))
        .transpose()
        .map_err(err)?
    {
        Some(Some(id)) => Some(id),
        _ => parsed
            .qid
            .map(|v| json_id("qid", v))
            .transpose()
            .map_err(err)?
            .flatten(),
    };
    let text = parsed
        .text
        .map(|v| json_string("text", v))
        .transpose()
        .map_err(err)?
        .flatten();
    let image = parsed
        .image_path
        .map(|v| json_string("image_path", v))
        .transpose()
        .map_err(err)?
        .flatten();
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
    let (text, image) = (string("text")?, string("image_path")?);
    let Some(id) = id else {
        return Err(file.error(at, "row has no \"id\" or \"qid\" (null)"));
    };
    finish_row(file, at, id, text, image)
}

fn finish_row(
    file: &KbFile,
    at: u64,
    id: String,
    text: Option<String>,
    image: Option<String>,
) -> Result<KbRow> {
    let location = || file.location(at);
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
                (Some(text), _) => return Ok(Some(Passage { id: row.id, text })),
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
mod tests {
    use std::fs;
    use std::sync::Arc;

    use super::*;
    use crate::{Corpus, Layout};

    /// A tiny valid PNG.
    fn png(rgb: [u8; 3]) -> Vec<u8> {
        let mut bytes = Vec::new();
        image::RgbImage::from_pixel(3, 2, image::Rgb(rgb))
            .write_to(
                &mut std::io::Cursor::new(&mut bytes),
                image::ImageFormat::Png,
            )
            .unwrap();
        bytes
    }

    /// A KB directory with `images/a.png`, `images/b.png` and `kb.jsonl` holding `rows`.
    fn kb(rows: &str) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kbdir");
        fs::create_dir_all(dir.join("images")).unwrap();
        fs::write(dir.join("images/a.png"), png([200, 0, 0])).unwrap();
        fs::write(dir.join("images/b.png"), png([0, 200, 0])).unwrap();
        let file = dir.join("kb.jsonl");
        fs::write(&file, rows).unwrap();
        (tmp, file)
    }

    fn passages(c: &Corpus) -> Result<(Vec<Passage>, Warnings)> {
        let mut p = c.passages("kb")?;
        let v = p.by_ref().collect::<Result<Vec<_>>>()?;
        Ok((v, p.warnings().clone()))
    }

    fn images(c: &Corpus, bytes: bool) -> Result<(Vec<ImageRecord>, Warnings)> {
        let mut i = if bytes {
            c.images("kb")?
        } else {
            c.image_paths("kb")?
        };
        let v = i.by_ref().collect::<Result<Vec<_>>>()?;
        Ok((v, i.warnings().clone()))
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    const GOOD: &str = concat!(
        "\u{feff}{\"id\": \"doc1\", \"image_path\": \"images/a.png\", \"text\": \"red square\", \"score\": 3}\n",
        "{\"qid\": 2, \"image_path\": \"./images/b.png\", \"text\": \"green square\"}\n",
        "\n",
        "{\"id\": \"doc3\", \"image_path\": null, \"text\": \"text alone\", \"extra\": {\"x\": [1]}}\n",
        "{\"id\": \"only-image\", \"image_path\": \"images\\\\b.png\", \"text\": \"  \"}\n",
        "{\"id\": \"doc5\", \"qid\": \"ignored\", \"image_path\": \"images/a.png\", \"text\": \"red again\"}\n",
        "{\"id\": \"doc6\", \"image_path\": \"\", \"text\": \"empty image path\"}\n",
    );

    #[test]
    fn reads_rows_as_passages_images_and_row_links() {
        let (_tmp, file) = kb(GOOD);
        let c = Corpus::open(&file).unwrap();
        assert_eq!(c.layout(), Layout::Kb);
        assert_eq!(c.layout().name(), "kb");
        assert_eq!(c.root(), file);
        assert_eq!(c.domains().unwrap(), ["kb"]);
        assert_eq!(c.select_domains(&[]).unwrap(), ["kb"]);
        assert_eq!(c.passage_files("kb").unwrap(), std::slice::from_ref(&file));
        let (p, w) = passages(&c).unwrap();
        let ids: Vec<&str> = p.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["doc1", "2", "doc3", "doc5", "doc6"]);
        assert_eq!(p[0].text, "red square");
        assert!(w.is_empty(), "{:?}", w.examples());

        // one image per file named, in the order of the first row naming it
        let (imgs, w) = images(&c, true).unwrap();
        let ids: Vec<&str> = imgs.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(ids, ["images/a.png", "images/b.png"]);
        assert!(w.is_empty(), "{:?}", w.examples());
        assert_eq!(imgs[0].bytes, png([200, 0, 0]));
        assert_eq!(imgs[1].row, 1, "the 0-based row of the first row naming it");
        assert!(imgs[1].file.is_absolute() && imgs[1].file.ends_with("images/b.png"));
        let (listed, _) = images(&c, false).unwrap();
        assert_eq!(
            listed.iter().map(|i| i.path.as_str()).collect::<Vec<_>>(),
            ids
        );
        assert!(listed.iter().all(|i| i.bytes.is_empty()));

        // the rows with text and an image
        assert_eq!(
            c.row_links("kb").unwrap().unwrap(),
            pairs(&[
                ("doc1", "images/a.png"),
                ("2", "images/b.png"),
                ("doc5", "images/a.png")
            ])
        );
        // no queries
        let err = c.examples("kb", false, &mut Warnings::new()).unwrap_err();
        assert!(
            err.to_string()
                .contains("a knowledge base has no queries or qrels"),
            "{err}"
        );
        assert!(matches!(
            c.beir_qrels("test", None, &mut Warnings::new()),
            Err(Error::NoQueries { .. })
        ));
        assert_eq!(c.query_images("kb").unwrap().count(), 0);
        // one domain
        let err = c.passages("other").err().expect("no such domain");
        assert!(err.to_string().contains("no domain \"other\""), "{err}");
    }

    #[test]
    fn other_layouts_have_no_row_links() {
        let c = Corpus::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/sample")).unwrap();
        assert_eq!(c.row_links("gis").unwrap(), None);
    }

    #[test]
    fn the_fingerprint_covers_the_file() {
        let (_tmp, file) = kb(GOOD);
        let c = Corpus::open(&file).unwrap();
        let before = c.fingerprint("kb").unwrap();
        assert_eq!(before, c.fingerprint("kb").unwrap());
        fs::write(&file, GOOD.replace("red square", "red squares")).unwrap();
        assert_ne!(before, c.fingerprint("kb").unwrap());
    }

    #[test]
    fn a_directory_with_one_kb_file_opens_it() {
        let (_tmp, file) = kb(GOOD);
        let dir = file.parent().unwrap();
        let c = Corpus::open(dir).unwrap();
        assert_eq!(c.layout(), Layout::Kb);
        assert_eq!(c.root(), file);
        assert_eq!(c.domains().unwrap(), ["kb"]);
        assert_eq!(passages(&c).unwrap().0.len(), 5);
        fs::write(dir.join("kb.parquet"), b"").unwrap();
        let err = Corpus::open(dir).unwrap_err();
        assert!(matches!(err, Error::AmbiguousKb { .. }), "{err}");
        fs::remove_file(&file).unwrap();
        fs::remove_file(dir.join("kb.parquet")).unwrap();
        let err = Corpus::open(dir).unwrap_err();
        assert!(err.to_string().contains("kb.jsonl / kb.parquet"), "{err}");
    }

    #[test]
    fn file_names_must_be_a_kb_and_a_domain() {
        let tmp = tempfile::tempdir().unwrap();
        let txt = tmp.path().join("kb.txt");
        fs::write(&txt, "{}").unwrap();
        let err = Corpus::open(&txt).unwrap_err();
        assert!(
            matches!(err, Error::NotACorpusFile { .. })
                && err.to_string().contains(".jsonl or .parquet"),
            "{err}"
        );
        // the stem of `...jsonl` is `..`
        let dots = tmp.path().join("...jsonl");
        fs::write(&dots, "{}").unwrap();
        let err = Corpus::open(&dots).unwrap_err();
        assert!(
            matches!(err, Error::BadDomain { .. }) && err.to_string().contains("\"..\""),
            "{err}"
        );
        let upper = tmp.path().join("My KB.JSONL");
        fs::write(&upper, "{\"id\": 1, \"text\": \"x\"}\n").unwrap();
        assert_eq!(Corpus::open(&upper).unwrap().domains().unwrap(), ["My KB"]);
        let missing = tmp.path().join("none.jsonl");
        let err = Corpus::open(&missing).unwrap_err();
        assert!(err.to_string().contains("corpus not found"), "{err}");
        #[cfg(unix)]
        {
            let fifo = tmp.path().join("fifo.jsonl");
            let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let err = Corpus::open(&fifo).unwrap_err();
            assert!(err.to_string().contains("a FIFO"), "{err}");
        }
    }

    /// The error reading `rows` (as passages, or as images), as text.
    fn error_of(rows: &str) -> String {
        let (_tmp, file) = kb(rows);
        let c = Corpus::open(&file).unwrap();
        let p = passages(&c).err();
        let i = images(&c, true).err();
        let l = c.row_links("kb").err();
        let p = p.expect("passages fail").to_string();
        // images and links read the same rows, so they fail on them too
        assert_eq!(i.map(|e| e.to_string()).as_deref(), Some(p.as_str()));
        assert_eq!(l.map(|e| e.to_string()).as_deref(), Some(p.as_str()));
        p
    }

    #[test]
    fn bad_rows_are_errors_naming_file_line_and_id() {
        let ok = "{\"id\": \"a\", \"text\": \"x\"}\n";
        let cases: &[(&str, &[&str])] = &[
            ("not json at all", &["kb.jsonl:2:", "not JSON"]),
            ("[1, 2]", &["kb.jsonl:2:", "not a JSON object"]),
            (
                "{\"text\": \"no id\"}",
                &["kb.jsonl:2:", "row has no \"id\" or \"qid\""],
            ),
            (
                "{\"id\": null, \"qid\": null, \"text\": \"x\"}",
                &["kb.jsonl:2:", "no \"id\" or \"qid\""],
            ),
            (
                "{\"_id\": \"b\", \"text\": \"beir\"}",
                &["kb.jsonl:2:", "a BEIR corpus.jsonl?"],
            ),
            (
                "{\"id\": \"a\", \"text\": \"again\"}",
                &[
                    "kb.jsonl: line 2:",
                    "duplicate id \"a\"",
                    "first seen at line 1",
                ],
            ),
            (
                "{\"id\": 1.5, \"text\": \"x\"}",
                &["kb.jsonl:2:", "numeric \"id\" 1.5 is not an integer"],
            ),
            (
                "{\"id\": true, \"text\": \"x\"}",
                &[
                    "kb.jsonl:2:",
                    "\"id\" must be a string or an integer, found a boolean",
                ],
            ),
            (
                "{\"id\": \"b\", \"text\": 5}",
                &[
                    "kb.jsonl:2:",
                    "\"text\" must be a string or null, found a number",
                ],
            ),
            (
                "{\"id\": \"b\", \"image_path\": [\"x.png\"]}",
                &[
                    "kb.jsonl:2:",
                    "\"image_path\" must be a string or null, found an array",
                ],
            ),
            (
                "{\"id\": \"b c\", \"text\": \"x\"}",
                &["kb.jsonl: line 2:", "row id \"b c\" contains whitespace"],
            ),
            (
                "{\"id\": \"b\", \"text\": \"x\", \"image_path\": \"my image.png\"}",
                &[
                    "kb.jsonl: line 2:",
                    "image_path of row \"b\": \"my image.png\" contains whitespace",
                ],
            ),
        ];
        for (line, wanted) in cases {
            let err = error_of(&format!("{ok}{line}\n"));
            for w in *wanted {
                assert!(err.contains(w), "{line}: {err:?} lacks {w:?}");
            }
        }
        // an integer id and the same id as a string are one id
        let err = error_of("{\"qid\": 7, \"text\": \"x\"}\n{\"id\": \"7\", \"text\": \"y\"}\n");
        assert!(err.contains("duplicate id \"7\""), "{err}");
        // a duplicate id is refused even when a row is an image only
        let err = error_of(
            "{\"id\": \"a\", \"image_path\": \"images/a.png\"}\n{\"id\": \"a\", \"text\": \"x\"}\n",
        );
        assert!(err.contains("duplicate id \"a\""), "{err}");
        // invalid UTF-8
        let (_tmp, file) = kb("");
        fs::write(&file, b"{\"id\": \"a\", \"text\": \"\xff\"}\n").unwrap();
        let err = passages(&Corpus::open(&file).unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("kb.jsonl:1: invalid UTF-8"),
            "{err}"
        );
    }

    #[test]
    fn rows_with_neither_text_nor_image_are_skipped_and_counted() {
        let (_tmp, file) = kb(
            "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\"}\n{\"id\": \"c\", \"text\": \" \", \"image_path\": null}\n",
        );
        let c = Corpus::open(&file).unwrap();
        let (p, w) = passages(&c).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(w.count(WarningKind::EmptyRow), 2);
        let e = &w.examples()[0];
        assert_eq!(e.location, "line 2");
        assert!(
            e.to_string()
                .contains("row \"b\" has neither text nor image_path: skipped"),
            "{e}"
        );
        // images do not count them again
        assert!(images(&c, true).unwrap().1.is_empty());
    }

    #[test]
    fn image_files_that_cannot_be_used_are_skipped_and_counted() {
        let (tmp, file) = kb("");
        let dir = file.parent().unwrap();
        let outside = tmp.path().join("outside.png");
        fs::write(&outside, png([1, 2, 3])).unwrap();
        fs::create_dir(dir.join("images/sub")).unwrap();
        fs::write(dir.join("images/empty.png"), b"").unwrap();
        let big = fs::File::create(dir.join("images/big.png")).unwrap();
        big.set_len(MAX_IMAGE_FILE_BYTES + 1).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&outside, dir.join("images/link-out.png")).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("a.png", dir.join("images/link-in.png")).unwrap();
        let inside_abs = dir.canonicalize().unwrap().join("images/b.png");
        let rows = [
            ("missing", "images/none.png"),
            ("dotdot", "../outside.png"),
            ("abs-out", outside.to_str().unwrap()),
            ("abs-in", inside_abs.to_str().unwrap()),
            ("dir", "images/sub"),
            ("empty", "images/empty.png"),
            ("big", "images/big.png"),
            ("link-out", "images/link-out.png"),
            ("link-in", "images/link-in.png"),
            ("twice", "images/none.png"),
        ];
        let jsonl: String = rows
            .iter()
            .map(|(id, p)| {
                format!(
                    "{}\n",
                    serde_json::json!({"id": id, "text": format!("text of {id}"), "image_path": p})
                )
            })
            .collect();
        fs::write(&file, jsonl).unwrap();
        let c = Corpus::open(&file).unwrap();
        // every row with text is a passage, whatever became of its image
        assert_eq!(passages(&c).unwrap().0.len(), rows.len());
        for bytes in [true, false] {
            let (imgs, w) = images(&c, bytes).unwrap();
            let ids: Vec<&str> = imgs.iter().map(|i| i.path.as_str()).collect();
            assert_eq!(ids, [inside_abs.to_str().unwrap(), "images/link-in.png"]);
            assert_eq!(w.count(WarningKind::MissingImageFile), 1, "one per image");
            assert_eq!(w.count(WarningKind::MissingImageBytes), 1);
            assert_eq!(w.count(WarningKind::SkippedImageFile), 5);
            let text: Vec<String> = w.examples().iter().map(|e| e.to_string()).collect();
            let has = |needle: &[&str]| {
                assert!(
                    text.iter().any(|t| needle.iter().all(|n| t.contains(n))),
                    "{needle:?} not in {text:#?}"
                )
            };
            has(&[
                "kb.jsonl: line 1:",
                "\"images/none.png\" of row \"missing\"",
                "does not exist: skipped",
            ]);
            has(&[
                "line 2:",
                "row \"dotdot\"",
                "leads outside the knowledge base's directory",
            ]);
            has(&["line 3:", "row \"abs-out\"", "leads outside"]);
            has(&["line 5:", "row \"dir\"", "is not a regular file"]);
            has(&["line 6:", "row \"empty\"", "is an empty file"]);
            has(&["line 7:", "row \"big\"", "more than"]);
            has(&["line 8:", "row \"link-out\"", "leads outside"]);
        }
        // the links name the images as the rows do; the skipped ones link to nothing later
        assert_eq!(c.row_links("kb").unwrap().unwrap().len(), rows.len());
    }

    #[cfg(unix)]
    #[test]
    fn an_image_that_exists_but_cannot_be_examined_is_an_error() {
        let (_tmp, file) =
            kb("{\"id\": \"loop\", \"text\": \"x\", \"image_path\": \"images/l1.png\"}\n");
        let dir = file.parent().unwrap();
        std::os::unix::fs::symlink("l2.png", dir.join("images/l1.png")).unwrap();
        std::os::unix::fs::symlink("l1.png", dir.join("images/l2.png")).unwrap();
        let c = Corpus::open(&file).unwrap();
        let err = images(&c, true).unwrap_err().to_string();
        assert!(
            err.contains("kb.jsonl:1: image \"images/l1.png\" of row \"loop\""),
            "{err}"
        );
        assert_eq!(passages(&c).unwrap().0.len(), 1);
    }

    enum Col<'a> {
        Str(&'a str, Vec<Option<&'a str>>),
        Int(&'a str, Vec<Option<i64>>),
    }

    /// Writes a parquet file of optional string / int64 columns with parquet's own writer.
    fn write_parquet(path: &Path, cols: &[Col<'_>]) {
        use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
        let fields: Vec<String> = cols
            .iter()
            .map(|c| match c {
                Col::Str(n, _) => format!("OPTIONAL BYTE_ARRAY {n} (UTF8);"),
                Col::Int(n, _) => format!("OPTIONAL INT64 {n};"),
            })
            .collect();
        let schema = parquet::schema::parser::parse_message_type(&format!(
            "message kb {{ {} }}",
            fields.join(" ")
        ))
        .unwrap();
        let props = Arc::new(parquet::file::properties::WriterProperties::builder().build());
        let f = fs::File::create(path).unwrap();
        let mut w =
            parquet::file::writer::SerializedFileWriter::new(f, Arc::new(schema), props).unwrap();
        let mut rg = w.next_row_group().unwrap();
        for col in cols {
            let mut c = rg.next_column().unwrap().unwrap();
            match col {
                Col::Str(_, v) => {
                    let defs: Vec<i16> = v.iter().map(|x| x.is_some() as i16).collect();
                    let vals: Vec<ByteArray> =
                        v.iter().flatten().map(|s| ByteArray::from(*s)).collect();
                    c.typed::<ByteArrayType>()
                        .write_batch(&vals, Some(&defs), None)
                        .unwrap();
                }
                Col::Int(_, v) => {
                    let defs: Vec<i16> = v.iter().map(|x| x.is_some() as i16).collect();
                    let vals: Vec<i64> = v.iter().flatten().copied().collect();
                    c.typed::<Int64Type>()
                        .write_batch(&vals, Some(&defs), None)
                        .unwrap();
                }
            }
            c.close().unwrap();
        }
        rg.close().unwrap();
        w.close().unwrap();
    }

    #[test]
    fn parquet_kbs_read_the_same_columns() {
        let (_tmp, jsonl) = kb("");
        let dir = jsonl.parent().unwrap();
        fs::remove_file(&jsonl).unwrap();
        let file = dir.join("docs.parquet");
        write_parquet(
            &file,
            &[
                Col::Str("extra", vec![Some("e"), None, None, None]),
                Col::Str("id", vec![Some("d0"), None, None, Some("d3")]),
                Col::Int("qid", vec![None, Some(11), Some(12), Some(99)]),
                Col::Str(
                    "text",
                    vec![Some("red"), None, Some("green"), Some("plain")],
                ),
                Col::Str(
                    "image_path",
                    vec![
                        Some("images/a.png"),
                        Some("images/b.png"),
                        Some("./images/b.png"),
                        None,
                    ],
                ),
            ],
        );
        let c = Corpus::open(&file).unwrap();
        assert_eq!(c.layout(), Layout::Kb);
        assert_eq!(c.domains().unwrap(), ["docs"]);
        let mut p = c.passages("docs").unwrap();
        let ids: Vec<String> = p.by_ref().map(|p| p.unwrap().id).collect();
        assert_eq!(ids, ["d0", "12", "d3"]);
        assert!(p.warnings().is_empty());
        let imgs: Vec<ImageRecord> = c.images("docs").unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(
            imgs.iter()
                .map(|i| (i.path.as_str(), i.row))
                .collect::<Vec<_>>(),
            [("images/a.png", 0), ("images/b.png", 1)]
        );
        assert_eq!(
            c.row_links("docs").unwrap().unwrap(),
            pairs(&[("d0", "images/a.png"), ("12", "images/b.png")])
        );

        // bad rows and schemas name the file and the row
        let bad = |cols: &[Col<'_>]| -> String {
            write_parquet(&file, cols);
            let c = Corpus::open(&file).unwrap();
            c.passages("docs")
                .and_then(|p| p.collect::<Result<Vec<_>>>())
                .unwrap_err()
                .to_string()
        };
        let err = bad(&[Col::Str("text", vec![Some("x")])]);
        assert!(
            err.contains("docs.parquet: a knowledge base needs an \"id\" (or \"qid\") column"),
            "{err}"
        );
        let err = bad(&[
            Col::Str("id", vec![Some("x")]),
            Col::Str("body", vec![Some("x")]),
        ]);
        assert!(
            err.contains("needs a \"text\" or an \"image_path\" column"),
            "{err}"
        );
        let err = bad(&[
            Col::Str("id", vec![Some("a"), None]),
            Col::Str("text", vec![Some("x"), Some("y")]),
        ]);
        assert!(
            err.contains("docs.parquet: row 1: row has no \"id\" or \"qid\""),
            "{err}"
        );
        let err = bad(&[
            Col::Int("qid", vec![Some(1), Some(2), Some(1)]),
            Col::Str("text", vec![Some("x"), Some("y"), Some("z")]),
        ]);
        assert!(
            err.contains("docs.parquet: row 2: duplicate id \"1\" (first seen at row 0)"),
            "{err}"
        );
        let err = bad(&[
            Col::Str("id", vec![Some("a")]),
            Col::Int("text", vec![Some(1)]),
        ]);
        assert!(
            err.contains("row 0: column \"text\": expected a string, found an integer"),
            "{err}"
        );
        let (imgs, w) = {
            write_parquet(
                &file,
                &[
                    Col::Str("id", vec![Some("a"), Some("b")]),
                    Col::Str("image_path", vec![Some("images/gone.png"), None]),
                ],
            );
            let c = Corpus::open(&file).unwrap();
            let mut p = c.passages("docs").unwrap();
            assert_eq!(p.by_ref().count(), 0);
            assert_eq!(p.warnings().count(WarningKind::EmptyRow), 1);
            let mut i = c.images("docs").unwrap();
            let v: Vec<_> = i.by_ref().collect();
            (v, i.warnings().clone())
        };
        assert!(imgs.is_empty());
        assert_eq!(w.examples()[0].location, "row 0");
    }
}
