//! MM-BRIGHT hub layout: `{config}/{domain}.parquet` (or sharded
//! `{domain}-00000-of-00002.parquet`) for the configs `documents`, `examples`,
//! `examples_multimodal`, `document_images` and `examples_images`
//! (`shared/docs/mm-bright-protocol.md`, "Dataset on the hub").
//!
//! Columns are looked up by name so unknown extra columns are ignored; list columns of image
//! annotations may hold plain strings or structs with an `image_path` field.
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use crate::paths::normalize_image_path;
use crate::types::{Example, ImageLabels, Passage};
use crate::warnings::{WarningKind, Warnings};
use crate::{Error, Result};

/// A parquet file read batch by batch, with the wanted columns resolved by name.
pub(crate) struct Table {
    pub(crate) path: PathBuf,
    reader: ParquetRecordBatchReader,
    /// Column name -> index in the projected batches (absent optional columns are missing).
    columns: HashMap<String, usize>,
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
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::parquet(path, e))?;
        let schema = builder.schema().clone();
        let num_rows = builder.metadata().file_metadata().num_rows().max(0) as u64;
        let mut roots = Vec::new();
        for name in required.iter().chain(optional) {
            match schema.index_of(name) {
                Ok(i) => roots.push((i, name.to_string())),
                Err(_) if optional.contains(name) => {}
                Err(_) => {
                    let have: Vec<&str> =
                        schema.fields().iter().map(|f| f.name().as_str()).collect();
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
        let mask = ProjectionMask::roots(
            builder.parquet_schema(),
            roots.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        );
        let columns = roots
            .into_iter()
            .enumerate()
            .map(|(pos, (_, name))| (name, pos))
            .collect();
        let reader = builder
            .with_projection(mask)
            .with_batch_size(batch_size)
            .build()
            .map_err(|e| Error::parquet(path, e))?;
        Ok(Table {
            path: path.to_path_buf(),
            reader,
            columns,
            next_row: 0,
            num_rows,
        })
    }

    /// Next batch and the file row number of its first row.
    pub(crate) fn next_batch(&mut self) -> Result<Option<(u64, RecordBatch)>> {
        let next = crate::catch_panics(|| self.reader.next())
            .map_err(|what| reader_panicked(&self.path, &what))?;
        match next {
            None => Ok(None),
            Some(Err(e)) => Err(Error::parquet(
                &self.path,
                format!("at rows from {}: {e}", self.next_row),
            )),
            Some(Ok(batch)) => {
                let first = self.next_row;
                self.next_row += batch.num_rows() as u64;
                Ok(Some((first, batch)))
            }
        }
    }

    pub(crate) fn column<'b>(&self, batch: &'b RecordBatch, name: &str) -> Option<&'b ArrayRef> {
        self.columns.get(name).map(|&i| batch.column(i))
    }
}

/// The parquet reader panicked on `path` (it does on some corrupt files).
fn reader_panicked(path: &Path, what: &str) -> Error {
    Error::parquet(
        path,
        format!("the file is corrupt (the reader failed: {what})"),
    )
}

/// The string at `row`, or `None` when null. Errors on a non-string column.
pub(crate) fn string_at(col: &dyn Array, row: usize) -> std::result::Result<Option<&str>, String> {
    if col.is_null(row) {
        return Ok(None);
    }
    Ok(Some(match col.data_type() {
        DataType::Utf8 => col.as_string::<i32>().value(row),
        DataType::LargeUtf8 => col.as_string::<i64>().value(row),
        DataType::Utf8View => col.as_string_view().value(row),
        // dictionary-encoded strings (what pandas / polars categoricals write)
        DataType::Dictionary(_, value) if is_string(value) => {
            let dict = col.as_any_dictionary();
            let key = dict.normalized_keys()[row];
            return string_at(dict.values().as_ref(), key);
        }
        other => return Err(format!("expected a string, found {other}")),
    }))
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// Required string cell: errors name the column.
fn required_string<'a>(
    table: &Table,
    col: &'a dyn Array,
    name: &str,
    row: usize,
    file_row: u64,
) -> Result<&'a str> {
    match string_at(col, row) {
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

/// Strings of one element of a list value: plain strings, or structs whose `image_path`
/// (else `path`) field holds the string; null elements are left out and counted.
fn strings_of(values: &dyn Array, nulls: &mut usize) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(values.len());
    match values.data_type() {
        DataType::Struct(fields) => {
            let strukt = values.as_struct();
            let idx = ["image_path", "path"]
                .iter()
                .find_map(|n| fields.iter().position(|f| f.name() == n))
                .ok_or_else(|| {
                    format!(
                        "list of structs without an image_path field (fields: {})",
                        fields
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
            let inner = strukt.column(idx);
            for i in 0..strukt.len() {
                if strukt.is_null(i) {
                    *nulls += 1;
                    continue;
                }
                match string_at(inner.as_ref(), i)? {
                    Some(s) => out.push(s.to_string()),
                    None => *nulls += 1,
                }
            }
        }
        DataType::Null => *nulls += values.len(),
        _ => {
            for i in 0..values.len() {
                match string_at(values, i)? {
                    Some(s) => out.push(s.to_string()),
                    None => *nulls += 1,
                }
            }
        }
    }
    Ok(out)
}

/// The list of strings at `row` (empty when null). Accepts `List`/`LargeList` of strings or
/// of structs with `image_path`, and also a single string (taken as a one-element list).
fn string_list_at(
    col: &dyn Array,
    row: usize,
    nulls: &mut usize,
) -> std::result::Result<Vec<String>, String> {
    if col.is_null(row) {
        return Ok(Vec::new());
    }
    match col.data_type() {
        DataType::List(_) => strings_of(col.as_list::<i32>().value(row).as_ref(), nulls),
        DataType::LargeList(_) => strings_of(col.as_list::<i64>().value(row).as_ref(), nulls),
        t if is_string(t) || matches!(t, DataType::Dictionary(_, v) if is_string(v)) => {
            Ok(string_at(col, row)?
                .map(|s| vec![s.to_string()])
                .unwrap_or_default())
        }
        other => Err(format!("expected a list of strings, found {other}")),
    }
}

/// The ids listed in column `name` at `row`: image paths (columns ending in `_images` or
/// `image_paths`) normalised, each id checked ([`crate::id_problem`]); null elements are
/// skipped and counted in `warnings`.
fn list_column(
    table: &Table,
    batch: &RecordBatch,
    name: &str,
    row: usize,
    file_row: u64,
    warnings: &mut Warnings,
) -> Result<Vec<String>> {
    let Some(col) = table.column(batch, name) else {
        return Ok(Vec::new());
    };
    let mut nulls = 0;
    let mut ids = string_list_at(col.as_ref(), row, &mut nulls)
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
    for id in &ids {
        Error::check_id(
            &table.path,
            || format!("row {file_row}"),
            &format!("{name} element"),
            id,
        )?;
    }
    Ok(ids)
}

/// `(image path, source passage id)` of each element of the struct list in column `name` at
/// `row` that has both an `image_path` and a `source_passage_id` (image paths normalised, both
/// ids checked); nothing when the column is not a list of structs with those fields.
fn source_column(
    table: &Table,
    batch: &RecordBatch,
    name: &str,
    row: usize,
    file_row: u64,
) -> Result<Vec<(String, String)>> {
    let Some(col) = table.column(batch, name) else {
        return Ok(Vec::new());
    };
    if col.is_null(row) {
        return Ok(Vec::new());
    }
    let values = match col.data_type() {
        DataType::List(_) => col.as_list::<i32>().value(row),
        DataType::LargeList(_) => col.as_list::<i64>().value(row),
        _ => return Ok(Vec::new()),
    };
    let DataType::Struct(fields) = values.data_type() else {
        return Ok(Vec::new());
    };
    let field = |n: &str| fields.iter().position(|f| f.name() == n);
    let (Some(ip), Some(sp)) = (field("image_path"), field("source_passage_id")) else {
        return Ok(Vec::new());
    };
    let strukt = values.as_struct();
    let mut out = Vec::new();
    for i in 0..strukt.len() {
        if strukt.is_null(i) {
            continue;
        }
        let get = |c: usize| {
            string_at(strukt.column(c).as_ref(), i)
                .map_err(|e| Error::row(&table.path, file_row, format!("column {name:?}: {e}")))
        };
        if let (Some(img), Some(pid)) = (get(ip)?, get(sp)?) {
            let img = normalize_image_path(img);
            let loc = || format!("row {file_row}");
            Error::check_id(&table.path, loc, &format!("{name} image_path"), &img)?;
            Error::check_id(&table.path, loc, &format!("{name} source_passage_id"), pid)?;
            out.push((img, pid.to_string()));
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
            let ids = table.column(&batch, "id").expect("projected");
            let contents = table.column(&batch, "content").expect("projected");
            for i in 0..batch.num_rows() {
                let row = first_row + i as u64;
                let id = required_string(table, ids.as_ref(), "id", i, row)?;
                Error::check_id(&table.path, || format!("row {row}"), "passage id", id)?;
                let text = match string_at(contents.as_ref(), i) {
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
            "negative_ids",
            "image_paths",
            "positive_images",
            "negative_images",
        ]
    } else {
        &["gold_ids", "negative_ids", "image_paths"]
    };
    for file in files {
        let mut table = Table::open(file, &["id", "query"], optional, 1024)?;
        if table.column_missing("gold_ids") {
            return Err(Error::schema(file, "missing column \"gold_ids\""));
        }
        while let Some((first_row, batch)) = table.next_batch()? {
            let ids = table.column(&batch, "id").expect("projected");
            let queries = table.column(&batch, "query").expect("projected");
            for i in 0..batch.num_rows() {
                let row = first_row + i as u64;
                let id = required_string(&table, ids.as_ref(), "id", i, row)?.to_string();
                Error::check_id(file, || format!("row {row}"), "query id", &id)?;
                let query = string_at(queries.as_ref(), i)
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
                        sources.extend(source_column(&table, &batch, name, i, row)?);
                    }
                    Some(ImageLabels {
                        positive: list_column(&table, &batch, "positive_images", i, row, warnings)?,
                        negative: list_column(&table, &batch, "negative_images", i, row, warnings)?,
                        sources,
                    })
                } else {
                    None
                };
                out.push(Example {
                    id,
                    query,
                    gold_ids: list_column(&table, &batch, "gold_ids", i, row, warnings)?,
                    negative_ids: list_column(&table, &batch, "negative_ids", i, row, warnings)?,
                    image_paths: list_column(&table, &batch, "image_paths", i, row, warnings)?,
                    images,
                });
            }
        }
    }
    Ok(out)
}

impl Table {
    fn column_missing(&self, name: &str) -> bool {
        !self.columns.contains_key(name)
    }
}

/// The bytes at `row` of a binary column, `None` when null.
pub(crate) fn binary_at(col: &dyn Array, row: usize) -> std::result::Result<Option<&[u8]>, String> {
    if col.is_null(row) {
        return Ok(None);
    }
    Ok(Some(match col.data_type() {
        DataType::Binary => col.as_binary::<i32>().value(row),
        DataType::LargeBinary => col.as_binary::<i64>().value(row),
        DataType::BinaryView => col.as_binary_view().value(row),
        other => return Err(format!("expected binary image bytes, found {other}")),
    }))
}
