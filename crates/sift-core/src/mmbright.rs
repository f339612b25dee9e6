//! MM-BRIGHT hub layout: `{config}/{domain}.parquet` (or sharded
//! `{domain}-00000-of-00002.parquet`) for the configs `documents`, `examples`,
//! `examples_multimodal`, `document_images` and `examples_images`
//! (`docs/src/mm-bright-protocol.md`, "Dataset on the hub").
//!
//! Columns are looked up by name so unknown extra columns are ignored; list columns of image
//! annotations may hold plain strings or structs with an `image_path` field.
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::reader::RowIter;
use parquet::record::{Field, Row};
use parquet::schema::types::Type;

use crate::paths::normalize_image_path;
use crate::types::{Example, ImageLabels, Passage};
use crate::warnings::{WarningKind, Warnings};
use crate::{Error, Result};

/// A parquet file read batch by batch, with the wanted columns resolved by name.
///
/// Rows come from parquet's record reader (nested lists and structs assembled as
/// [`Field`]s), which needs no Arrow: the Arrow crates would more than double what a first
/// build compiles for these few columns.
pub(crate) struct Table {
    pub(crate) path: PathBuf,
    rows: RowIter<'static>,
    /// Column name -> index in the projected rows (absent optional columns are missing).
    columns: HashMap<String, usize>,
    /// Rows per [`Table::next_batch`].
    batch_size: usize,
    /// Row number (0-based, in the file) of the first row of the next batch.
    next_row: u64,
    /// Rows in the file, from the footer.
    pub(crate) num_rows: u64,
}

impl Table {
    /// Opens `path`, projecting to `required` + whichever of `optional` exist.
    pub(crate) fn open(
        path: &Path,
        required: &[&str],
        optional: &[&str],
        batch_size: usize,
    ) -> Result<Table> {
        crate::catch_panics(|| Self::open_unguarded(path, required, optional, batch_size))
            .unwrap_or_else(|what| Err(reader_panicked(path, &what)))
    }

    fn open_unguarded(
        path: &Path,
        required: &[&str],
        optional: &[&str],
        batch_size: usize,
    ) -> Result<Table> {
        let file = crate::open_regular_file(path)?;
        let reader = SerializedFileReader::new(file).map_err(|e| Error::parquet(path, e))?;
        let meta = reader.metadata().file_metadata();
        let num_rows = meta.num_rows().max(0) as u64;
        let schema = meta.schema();
        let fields = schema.get_fields();
        let mut roots = Vec::new();
        for name in required.iter().chain(optional) {
            match fields.iter().position(|f| f.name() == *name) {
                Some(i) => roots.push((i, name.to_string())),
                None if optional.contains(name) => {}
                None => {
                    let have: Vec<&str> = fields.iter().map(|f| f.name()).collect();
                    return Err(Error::schema(
                        path,
                        format!(
                            "missing column {name:?} (columns present: {})",
                            have.join(", ")
                        ),
                    ));
                }
            }
        }
        roots.sort();
        let projection = Type::group_type_builder(schema.name())
            .with_fields(roots.iter().map(|(i, _)| fields[*i].clone()).collect())
            .build()
            .map_err(|e| Error::parquet(path, e))?;
        let columns = roots
            .into_iter()
            .enumerate()
            .map(|(pos, (_, name))| (name, pos))
            .collect();
        let rows = RowIter::from_file_into(Box::new(reader))
            .project(Some(projection))
            .map_err(|e| Error::parquet(path, e))?
            .with_batch_size(batch_size);
        Ok(Table {
            path: path.to_path_buf(),
            rows,
            columns,
            batch_size: batch_size.max(1),
            next_row: 0,
            num_rows,
        })
    }

    /// Next batch (empty at the end) and the file row number of its first row.
    pub(crate) fn next_batch(&mut self) -> Result<Option<(u64, Vec<Row>)>> {
        let first = self.next_row;
        let (rows, batch_size) = (&mut self.rows, self.batch_size);
        let batch = crate::catch_panics(|| {
            let mut batch = Vec::with_capacity(batch_size.min(1024));
            for row in rows.by_ref() {
                batch.push(row.map_err(|e| (batch.len(), e))?);
                if batch.len() == batch_size {
                    break;
                }
            }
            Ok(batch)
        })
        .map_err(|what| reader_panicked(&self.path, &what))?
        .map_err(|(at, e)| {
            Error::parquet(&self.path, format!("at row {}: {e}", first + at as u64))
        })?;
        if batch.is_empty() {
            return Ok(None);
        }
        self.next_row += batch.len() as u64;
        Ok(Some((first, batch)))
    }

    pub(crate) fn column<'b>(&self, row: &'b Row, name: &str) -> Option<&'b Field> {
        let i = *self.columns.get(name)?;
        row.get_column_iter().nth(i).map(|(_, field)| field)
    }

    fn column_missing(&self, name: &str) -> bool {
        !self.columns.contains_key(name)
    }
}

/// The names of the top-level columns of the parquet file `path`.
pub(crate) fn column_names(path: &Path) -> Result<Vec<String>> {
    crate::catch_panics(|| {
        let file = crate::open_regular_file(path)?;
        let reader = SerializedFileReader::new(file).map_err(|e| Error::parquet(path, e))?;
        let names = reader
            .metadata()
            .file_metadata()
            .schema()
            .get_fields()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        Ok(names)
    })
    .unwrap_or_else(|what| Err(reader_panicked(path, &what)))
}

/// The parquet reader panicked on `path` (it does on some corrupt files).
fn reader_panicked(path: &Path, what: &str) -> Error {
    Error::parquet(
        path,
        format!("the file is corrupt (the reader failed: {what})"),
    )
}

/// What a cell holds, for error messages.
pub(crate) fn kind(field: &Field) -> &'static str {
    match field {
        Field::Null => "null",
        Field::Bool(_) => "a boolean",
        Field::Byte(_)
        | Field::Short(_)
        | Field::Int(_)
        | Field::Long(_)
        | Field::UByte(_)
        | Field::UShort(_)
        | Field::UInt(_)
        | Field::ULong(_) => "an integer",
        Field::Float16(_) | Field::Float(_) | Field::Double(_) | Field::Decimal(_) => "a number",
        Field::Str(_) => "a string",
        Field::Bytes(_) => "binary data",
        Field::Date(_)
        | Field::TimeMillis(_)
        | Field::TimeMicros(_)
        | Field::TimestampMillis(_)
        | Field::TimestampMicros(_) => "a date or time",
        Field::Group(_) => "a struct",
        Field::ListInternal(_) => "a list",
        Field::MapInternal(_) => "a map",
    }
}

/// The string in a cell, or `None` when null. Errors on a non-string value. (Dictionary
/// encoded strings, what pandas / polars write for categoricals, read as plain strings.)
pub(crate) fn string_at(field: &Field) -> std::result::Result<Option<&str>, String> {
    match field {
        Field::Null => Ok(None),
        Field::Str(s) => Ok(Some(s)),
        other => Err(format!("expected a string, found {}", kind(other))),
    }
}

/// The field of a struct value named `name`.
fn struct_field<'r>(row: &'r Row, name: &str) -> Option<&'r Field> {
    row.get_column_iter()
        .find(|(n, _)| n.as_str() == name)
        .map(|(_, f)| f)
}

/// Required string cell: errors name the column.
fn required_string<'a>(
    table: &Table,
    field: &'a Field,
    name: &str,
    file_row: u64,
) -> Result<&'a str> {
    match string_at(field) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(Error::row(
            &table.path,
            file_row,
            format!("column {name:?} is null"),
        )),
        Err(e) => Err(Error::row(
            &table.path,
            file_row,
            format!("column {name:?}: {e}"),
        )),
    }
}

/// Strings of the elements of a list value: plain strings, or structs whose `image_path`
/// (else `path`) field holds the string; null elements are left out and counted.
fn strings_of(elements: &[Field], nulls: &mut usize) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(elements.len());
    for element in elements {
        let value = match element {
            Field::Group(strukt) => ["image_path", "path"]
                .iter()
                .find_map(|n| struct_field(strukt, n))
                .ok_or_else(|| {
                    format!(
                        "list of structs without an image_path field (fields: {})",
                        strukt
                            .get_column_iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?,
            other => other,
        };
        match string_at(value)? {
            Some(s) => out.push(s.to_string()),
            None => *nulls += 1,
        }
    }
    Ok(out)
}

/// The list of strings in a cell (empty when null). Accepts lists of strings or of structs
/// with `image_path`, and also a single string (taken as a one-element list).
fn string_list_at(field: &Field, nulls: &mut usize) -> std::result::Result<Vec<String>, String> {
    match field {
        Field::Null => Ok(Vec::new()),
        Field::ListInternal(list) => strings_of(list.elements(), nulls),
        Field::Str(s) => Ok(vec![s.clone()]),
        other => Err(format!("expected a list of strings, found {}", kind(other))),
    }
}

/// The ids listed in column `name` of `row`: image paths (columns ending in `_images` or
/// `image_paths`) normalised, each id checked ([`crate::id_problem`]); null elements are
/// skipped and counted in `warnings`.
fn list_column(
    table: &Table,
    row: &Row,
    name: &str,
    file_row: u64,
    warnings: &mut Warnings,
) -> Result<Vec<String>> {
    let Some(field) = table.column(row, name) else {
        return Ok(Vec::new());
    };
    let mut nulls = 0;
    let mut ids = string_list_at(field, &mut nulls)
        .map_err(|e| Error::row(&table.path, file_row, format!("column {name:?}: {e}")))?;
    if name.ends_with("images") || name == "image_paths" {
        ids.iter_mut().for_each(|p| *p = normalize_image_path(p));
    }
    if nulls > 0 {
        warnings.push(
            WarningKind::NullListElement,
            &table.path,
            format!("row {file_row}"),
            format!("{nulls} null element(s) in {name:?}: skipped"),
        );
    }
    // answers are free text; every other list holds ids
    for id in ids.iter().filter(|_| name != "gold_answers") {
        Error::check_id(
            &table.path,
            || format!("row {file_row}"),
            &format!("{name} element"),
            id,
        )?;
    }
    Ok(ids)
}

/// `(image path, source passage id)` of each element of the struct list in column `name` of
/// `row` that has both an `image_path` and a `source_passage_id` (image paths normalised, both
/// ids checked); nothing for elements that are not structs with those fields.
fn source_column(
    table: &Table,
    row: &Row,
    name: &str,
    file_row: u64,
) -> Result<Vec<(String, String)>> {
    let Some(Field::ListInternal(list)) = table.column(row, name) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for element in list.elements() {
        let Field::Group(strukt) = element else {
            continue;
        };
        let (Some(img), Some(pid)) = (
            struct_field(strukt, "image_path"),
            struct_field(strukt, "source_passage_id"),
        ) else {
            continue;
        };
        let get = |f: &'_ Field| {
            string_at(f)
                .map(|s| s.map(str::to_string))
                .map_err(|e| Error::row(&table.path, file_row, format!("column {name:?}: {e}")))
        };
        if let (Some(img), Some(pid)) = (get(img)?, get(pid)?) {
            let img = normalize_image_path(&img);
            let loc = || format!("row {file_row}");
            Error::check_id(&table.path, loc, &format!("{name} image_path"), &img)?;
            Error::check_id(&table.path, loc, &format!("{name} source_passage_id"), &pid)?;
            out.push((img, pid));
        }
    }
    Ok(out)
}

/// Streams the passages of one or more `documents` shards.
pub(crate) struct ParquetPassages {
    files: VecDeque<PathBuf>,
    table: Option<Table>,
    pending: VecDeque<Passage>,
    seen: HashMap<String, (PathBuf, u64)>,
    pub(crate) warnings: Warnings,
}

impl ParquetPassages {
    pub(crate) fn open(files: Vec<PathBuf>) -> Result<Self> {
        Ok(ParquetPassages {
            files: files.into(),
            table: None,
            pending: VecDeque::new(),
            seen: HashMap::new(),
            warnings: Warnings::new(),
        })
    }

    pub(crate) fn next_passage(&mut self) -> Result<Option<Passage>> {
        loop {
            if let Some(p) = self.pending.pop_front() {
                return Ok(Some(p));
            }
            if self.table.is_none() {
                let Some(file) = self.files.pop_front() else {
                    return Ok(None);
                };
                self.table = Some(Table::open(&file, &["id", "content"], &[], 4096)?);
            }
            let table = self.table.as_mut().expect("table set above");
            let Some((first_row, batch)) = table.next_batch()? else {
                self.table = None;
                continue;
            };
            for (i, cells) in batch.iter().enumerate() {
                let row = first_row + i as u64;
                let id = table.column(cells, "id").expect("projected");
                let id = required_string(table, id, "id", row)?;
                Error::check_id(&table.path, || format!("row {row}"), "passage id", id)?;
                let content = table.column(cells, "content").expect("projected");
                let text = match string_at(content) {
                    Ok(t) => t.unwrap_or(""),
                    Err(e) => {
                        return Err(Error::row(
                            &table.path,
                            row,
                            format!("column \"content\": {e}"),
                        ));
                    }
                };
                if text.trim().is_empty() {
                    self.warnings.push(
                        WarningKind::EmptyPassage,
                        &table.path,
                        format!("row {row}"),
                        format!("passage {id:?} has no text"),
                    );
                }
                if let Some((first_path, first_row)) =
                    self.seen.insert(id.to_string(), (table.path.clone(), row))
                {
                    return Err(Error::DuplicateId {
                        path: table.path.clone(),
                        location: format!("row {row}"),
                        first: format!("{} row {first_row}", first_path.display()),
                        id: id.to_string(),
                    });
                }
                self.pending.push_back(Passage {
                    id: id.to_string(),
                    text: text.to_string(),
                    title: None,
                });
            }
        }
    }
}

/// Reads every example of the given `examples` / `examples_multimodal` shards.
pub(crate) fn read_examples(
    files: &[PathBuf],
    multimodal: bool,
    warnings: &mut Warnings,
) -> Result<Vec<Example>> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, (PathBuf, u64)> = HashMap::new();
    let optional: &[&str] = if multimodal {
        &[
            "gold_ids",
            "gold_answers",
            "negative_ids",
            "image_paths",
            "positive_images",
            "negative_images",
        ]
    } else {
        &["gold_ids", "gold_answers", "negative_ids", "image_paths"]
    };
    for file in files {
        let mut table = Table::open(file, &["id", "query"], optional, 1024)?;
        if table.column_missing("gold_ids") {
            return Err(Error::schema(file, "missing column \"gold_ids\""));
        }
        while let Some((first_row, batch)) = table.next_batch()? {
            for (i, cells) in batch.iter().enumerate() {
                let row = first_row + i as u64;
                let id = table.column(cells, "id").expect("projected");
                let id = required_string(&table, id, "id", row)?.to_string();
                Error::check_id(file, || format!("row {row}"), "query id", &id)?;
                let query = string_at(table.column(cells, "query").expect("projected"))
                    .map_err(|e| Error::row(file, row, format!("column \"query\": {e}")))?
                    .unwrap_or("")
                    .to_string();
                if let Some((first_path, first_row)) = seen.insert(id.clone(), (file.clone(), row))
                {
                    return Err(Error::DuplicateId {
                        path: file.clone(),
                        location: format!("row {row}"),
                        first: format!("{} row {first_row}", first_path.display()),
                        id,
                    });
                }
                if query.trim().is_empty() {
                    warnings.push(
                        WarningKind::EmptyQuery,
                        file,
                        format!("row {row}"),
                        format!("query {id:?} has no text: skipped"),
                    );
                    continue;
                }
                let images = if multimodal {
                    let mut sources = Vec::new();
                    for name in ["positive_images", "negative_images"] {
                        sources.extend(source_column(&table, cells, name, row)?);
                    }
                    Some(ImageLabels {
                        positive: list_column(&table, cells, "positive_images", row, warnings)?,
                        negative: list_column(&table, cells, "negative_images", row, warnings)?,
                        sources,
                    })
                } else {
                    None
                };
                out.push(Example {
                    id,
                    query,
                    gold_ids: list_column(&table, cells, "gold_ids", row, warnings)?,
                    negative_ids: list_column(&table, cells, "negative_ids", row, warnings)?,
                    gold_answers: list_column(&table, cells, "gold_answers", row, warnings)?,
                    image_paths: list_column(&table, cells, "image_paths", row, warnings)?,
                    images,
                });
            }
        }
    }
    Ok(out)
}

/// The bytes in a binary cell, `None` when null.
pub(crate) fn binary_at(field: &Field) -> std::result::Result<Option<&[u8]>, String> {
    match field {
        Field::Null => Ok(None),
        Field::Bytes(b) => Ok(Some(b.data())),
        other => Err(format!(
            "expected binary image bytes, found {}",
            kind(other)
        )),
    }
}
