//! Precomputed embeddings in Parquet: rows of `id` (string) and `vector` (a list of
//! float32, or float64, of one length), as a cluster job writes them (`sift_ir.ray`, Ray
//! Data's `write_parquet`). Read column by column through parquet's column readers, without
//! building a record per number: a 338k-passage domain of 4096-dimensional vectors is 1.4
//! billion values.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use parquet::basic::Type as Physical;
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::DataType;
use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::{Error, Result};

/// The vectors of one Parquet file, in row order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VectorRows {
    /// Row ids.
    pub ids: Vec<String>,
    /// Vector length (0 when the file has no rows).
    pub dim: usize,
    /// `ids.len() * dim` values, row after row.
    pub data: Vec<f32>,
}

impl VectorRows {
    /// The vector of row `i`.
    pub fn vector(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// Rows read per call of a column reader.
const BATCH: usize = 1024;

/// Reads the `id` and `vector` columns of the Parquet file `path`. A null id or vector, a
/// null element, vectors of different lengths, a non-finite value or a column of another
/// type is an error naming the file (and the row).
pub fn read_vector_file(path: &Path) -> Result<VectorRows> {
    let file = crate::open_regular_file(path)?;
    let pq_err = |e: parquet::errors::ParquetError| Error::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let reader = SerializedFileReader::new(file).map_err(pq_err)?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    let schema_err = |message: String| Error::Schema {
        path: path.to_path_buf(),
        message,
    };
    let mut id_col = None;
    let mut vec_col = None;
    for (i, c) in schema.columns().iter().enumerate() {
        let parts = c.path().parts();
        match parts.first().map(String::as_str) {
            Some("id") if parts.len() == 1 => id_col = Some(i),
            Some("vector") => {
                if vec_col.is_some() {
                    return Err(schema_err(
                        "column \"vector\" must be a list of numbers (it has several leaves)"
                            .into(),
                    ));
                }
                vec_col = Some(i);
            }
            _ => {}
        }
    }
    let (Some(id_col), Some(vec_col)) = (id_col, vec_col) else {
        return Err(schema_err(format!(
            "expected columns \"id\" (string) and \"vector\" (list of float32); found {}",
            schema
                .columns()
                .iter()
                .map(|c| c.path().string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let id_desc = schema.column(id_col);
    if id_desc.physical_type() != Physical::BYTE_ARRAY {
        return Err(schema_err(format!(
            "column \"id\" is {}, not a string",
            id_desc.physical_type()
        )));
    }
    let v_desc = schema.column(vec_col);
    if v_desc.max_rep_level() != 1 {
        return Err(schema_err(format!(
            "column \"vector\" ({}) is not a list of numbers",
            v_desc.path().string()
        )));
    }
    let physical = v_desc.physical_type();
    if !matches!(physical, Physical::FLOAT | Physical::DOUBLE) {
        return Err(schema_err(format!(
            "column \"vector\" holds {physical}, not float32 (or float64)"
        )));
    }
    let mut out = VectorRows::default();
    let mut reader_state = Rows {
        path: path.to_path_buf(),
        max_def: v_desc.max_def_level(),
        out: &mut out,
        first_row: 0,
    };
    for g in 0..reader.num_row_groups() {
        let group = reader.get_row_group(g).map_err(pq_err)?;
        let ids = read_ids(
            group.get_column_reader(id_col).map_err(pq_err)?,
            id_desc.max_def_level(),
        )
        .map_err(|e| match e {
            Ok(e) => pq_err(e),
            Err(row) => Error::Row {
                path: path.to_path_buf(),
                row: reader_state.out.ids.len() as u64 + row as u64,
                message: "the id is null".into(),
            },
        })?;
        let column = group.get_column_reader(vec_col).map_err(pq_err)?;
        let read = match column {
            ColumnReader::FloatColumnReader(r) => reader_state.read(r, ids.len(), |x| x),
            ColumnReader::DoubleColumnReader(r) => reader_state.read(r, ids.len(), |x| x as f32),
            _ => unreachable!("the physical type was checked above"),
        };
        read.map_err(|e| match e {
            Ok(e) => pq_err(e),
            Err(e) => e,
        })?;
        reader_state.out.ids.extend(ids);
        reader_state.first_row = reader_state.out.ids.len();
    }
    if out.ids.len() * out.dim != out.data.len() {
        return Err(Error::Parquet {
            path: path.to_path_buf(),
            message: format!(
                "{} ids but {} values of {}-dimensional vectors",
                out.ids.len(),
                out.data.len(),
                out.dim
            ),
        });
    }
    Ok(out)
}

/// The ids of a row group; `Err(Err(row))` for a null id in row `row` of the group.
fn read_ids(
    column: ColumnReader,
    max_def: i16,
) -> std::result::Result<Vec<String>, std::result::Result<parquet::errors::ParquetError, usize>> {
    let ColumnReader::ByteArrayColumnReader(mut r) = column else {
        unreachable!("the physical type was checked")
    };
    let mut ids = Vec::new();
    let mut values = Vec::new();
    let mut defs = Vec::new();
    loop {
        values.clear();
        defs.clear();
        let (records, _, _) = r
            .read_records(BATCH, (max_def > 0).then_some(&mut defs), None, &mut values)
            .map_err(Ok)?;
        if records == 0 {
            break;
        }
        if let Some(j) = defs.iter().position(|&d| d < max_def) {
            return Err(Err(ids.len() + j));
        }
        for v in &values {
            ids.push(String::from_utf8_lossy(v.data()).into_owned());
        }
    }
    Ok(ids)
}

/// The vector column's reader state across row groups.
struct Rows<'a> {
    path: PathBuf,
    max_def: i16,
    out: &'a mut VectorRows,
    /// the file row of the row group's first row
    first_row: usize,
}

impl Rows<'_> {
    /// Appends the vectors of a row group of `rows` rows.
    fn read<T: DataType>(
        &mut self,
        mut r: ColumnReaderImpl<T>,
        rows: usize,
        cast: impl Fn(T::T) -> f32,
    ) -> std::result::Result<(), std::result::Result<parquet::errors::ParquetError, Error>>
    where
        T::T: Copy,
    {
        let mut values: Vec<T::T> = Vec::new();
        let mut defs: Vec<i16> = Vec::new();
        let mut reps: Vec<i16> = Vec::new();
        let mut row = self.first_row;
        let end = self.first_row + rows;
        loop {
            values.clear();
            defs.clear();
            reps.clear();
            let (records, _, levels) = r
                .read_records(BATCH, Some(&mut defs), Some(&mut reps), &mut values)
                .map_err(Ok)?;
            if records == 0 {
                break;
            }
            let mut len = 0usize;
            for l in 0..levels {
                if reps[l] == 0 && l > 0 {
                    self.end_row(row, len)?;
                    row += 1;
                    len = 0;
                }
                if defs[l] < self.max_def {
                    return Err(Err(
                        self.row_err(row, "the vector is null, empty or holds a null".into())
                    ));
                }
                // every level so far held a value (a null stops the read): level l is value l
                let x = cast(values[l]);
                if !x.is_finite() {
                    return Err(Err(self.row_err(
                        row,
                        format!("element {len} of the vector is not finite ({x})"),
                    )));
                }
                self.out.data.push(x);
                len += 1;
            }
            if levels > 0 {
                self.end_row(row, len)?;
                row += 1;
            }
        }
        if row != end {
            return Err(Err(Error::Parquet {
                path: self.path.clone(),
                message: format!(
                    "a row group holds {} ids but {} vectors",
                    rows,
                    row - self.first_row
                ),
            }));
        }
        Ok(())
    }

    /// Checks the length of the vector of `row`, `len`, against the others.
    fn end_row(
        &mut self,
        row: usize,
        len: usize,
    ) -> std::result::Result<(), std::result::Result<parquet::errors::ParquetError, Error>> {
        if row == 0 {
            self.out.dim = len;
        } else if len != self.out.dim {
            return Err(Err(self.row_err(
                row,
                format!(
                    "the vector has {len} values, the first row's {}",
                    self.out.dim
                ),
            )));
        }
        Ok(())
    }

    fn row_err(&self, row: usize, message: String) -> Error {
        Error::Row {
            path: self.path.clone(),
            row: row as u64,
            message,
        }
    }
}

/// The vectors of every Parquet file of a directory (`*.parquet`, in name order: Ray
/// Data writes a domain as several), looked up by id.
#[derive(Debug, Clone, Default)]
pub struct VectorTable {
    rows: VectorRows,
    by_id: HashMap<String, u32>,
}

impl VectorTable {
    /// Reads every `*.parquet` file of `dir`. An id in two rows, vectors of different
    /// lengths across files or a directory without Parquet files is an error.
    pub fn read_dir(dir: &Path) -> Result<VectorTable> {
        let io = |e: std::io::Error| Error::Io {
            path: dir.to_path_buf(),
            source: e,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()
            .map_err(io)?;
        files.retain(|p| p.extension().is_some_and(|x| x == "parquet"));
        files.sort();
        if files.is_empty() {
            return Err(Error::Schema {
                path: dir.to_path_buf(),
                message: "no .parquet files of vectors here".into(),
            });
        }
        let mut table = VectorTable::default();
        // (file, the global index of its first row) of the files read so far
        let mut starts: Vec<(usize, usize)> = Vec::new();
        for (f, path) in files.iter().enumerate() {
            let rows = read_vector_file(path)?;
            if rows.ids.is_empty() {
                continue;
            }
            if let Some(&(first, _)) = starts.first() {
                if rows.dim != table.rows.dim {
                    return Err(Error::Schema {
                        path: path.clone(),
                        message: format!(
                            "{}-dimensional vectors, but {} holds {}-dimensional ones",
                            rows.dim,
                            files[first].display(),
                            table.rows.dim
                        ),
                    });
                }
            } else {
                table.rows.dim = rows.dim;
            }
            let start = table.rows.ids.len();
            starts.push((f, start));
            for (r, id) in rows.ids.iter().enumerate() {
                if let Some(&g) = table.by_id.get(id) {
                    let g = g as usize;
                    let (ff, fs) = starts[starts.partition_point(|s| s.1 <= g) - 1];
                    return Err(Error::DuplicateId {
                        path: path.clone(),
                        location: format!("row {r}"),
                        first: format!("{} row {}", files[ff].display(), g - fs),
                        id: id.clone(),
                    });
                }
                table.by_id.insert(id.clone(), (start + r) as u32);
            }
            table.rows.ids.extend(rows.ids);
            table.rows.data.extend(rows.data);
        }
        Ok(table)
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.rows.ids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rows.ids.is_empty()
    }

    /// Vector length (0 when empty).
    pub fn dim(&self) -> usize {
        self.rows.dim
    }

    /// The vector of `id`.
    pub fn get(&self, id: &str) -> Option<&[f32]> {
        self.by_id.get(id).map(|&i| self.rows.vector(i as usize))
    }

    /// The ids, in file and row order.
    pub fn ids(&self) -> &[String] {
        &self.rows.ids
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parquet::data_type::{ByteArray, ByteArrayType, FloatType};

    use super::*;

    /// A row: its id and its vector, `None` elements written as nulls.
    type RowIn<'a> = (&'a str, Vec<Option<f32>>);

    /// Writes `rows` with parquet's own writer in pyarrow's layout (an optional list of
    /// optional floats), one row group per `group` rows.
    fn write(path: &Path, rows: &[RowIn<'_>], group: usize) {
        let schema = parquet::schema::parser::parse_message_type(
            "message v { REQUIRED BYTE_ARRAY id (UTF8); OPTIONAL group vector (LIST) { \
             REPEATED group list { OPTIONAL FLOAT element; } } }",
        )
        .unwrap();
        let props = Arc::new(parquet::file::properties::WriterProperties::builder().build());
        let f = std::fs::File::create(path).unwrap();
        let mut w =
            parquet::file::writer::SerializedFileWriter::new(f, Arc::new(schema), props).unwrap();
        for chunk in rows.chunks(group) {
            let mut rg = w.next_row_group().unwrap();
            let mut c = rg.next_column().unwrap().unwrap();
            let ids: Vec<ByteArray> = chunk.iter().map(|r| ByteArray::from(r.0)).collect();
            c.typed::<ByteArrayType>()
                .write_batch(&ids, None, None)
                .unwrap();
            c.close().unwrap();
            let mut c = rg.next_column().unwrap().unwrap();
            let (mut vals, mut defs, mut reps) = (Vec::new(), Vec::new(), Vec::new());
            for (_, v) in chunk {
                for (j, x) in v.iter().enumerate() {
                    reps.push(if j == 0 { 0 } else { 1 });
                    match x {
                        Some(x) => {
                            vals.push(*x);
                            defs.push(3);
                        }
                        None => defs.push(2),
                    }
                }
            }
            c.typed::<FloatType>()
                .write_batch(&vals, Some(&defs), Some(&reps))
                .unwrap();
            c.close().unwrap();
            rg.close().unwrap();
        }
        w.close().unwrap();
    }

    fn some(v: &[f32]) -> Vec<Option<f32>> {
        v.iter().copied().map(Some).collect()
    }

    #[test]
    fn reads_rows_across_row_groups_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<(String, Vec<f32>)> = (0..2500)
            .map(|i| (format!("p{i}"), vec![i as f32, -(i as f32), 0.5]))
            .collect();
        let (a, b) = rows.split_at(1700);
        let to_in = |r: &[(String, Vec<f32>)]| -> Vec<(String, Vec<Option<f32>>)> {
            r.iter().map(|(id, v)| (id.clone(), some(v))).collect()
        };
        for (name, part, group) in [("part-0.parquet", a, 1000), ("part-1.parquet", b, 300)] {
            let owned = to_in(part);
            let refs: Vec<RowIn<'_>> = owned.iter().map(|(i, v)| (i.as_str(), v.clone())).collect();
            write(&dir.path().join(name), &refs, group);
        }
        // not a parquet file: ignored
        std::fs::write(dir.path().join("_SUCCESS"), "").unwrap();
        let t = VectorTable::read_dir(dir.path()).unwrap();
        assert_eq!((t.len(), t.dim()), (2500, 3));
        assert_eq!(t.ids()[1700], "p1700");
        for (id, v) in &rows {
            assert_eq!(t.get(id).unwrap(), v.as_slice(), "{id}");
        }
        assert!(t.get("p2500").is_none());
    }

    #[test]
    fn refuses_duplicates_nulls_ragged_and_non_finite_rows() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write(&d.join("a.parquet"), &[("x", some(&[1.0, 2.0]))], 10);
        write(
            &d.join("b.parquet"),
            &[("y", some(&[1.0, 2.0])), ("x", some(&[3.0, 4.0]))],
            10,
        );
        let e = VectorTable::read_dir(d).unwrap_err().to_string();
        assert!(
            e.contains("b.parquet: row 1: duplicate id \"x\"") && e.contains("a.parquet row 0"),
            "{e}"
        );

        let cases: [(&str, Vec<RowIn<'_>>, &str); 3] = [
            (
                "null.parquet",
                vec![("a", some(&[1.0])), ("b", vec![Some(1.0), None])],
                "row 1: the vector is null",
            ),
            (
                "ragged.parquet",
                vec![("a", some(&[1.0, 2.0])), ("b", some(&[1.0]))],
                "row 1: the vector has 1 values, the first row's 2",
            ),
            (
                "nan.parquet",
                vec![("a", some(&[1.0, f32::NAN]))],
                "row 0: element 1 of the vector is not finite",
            ),
        ];
        for (name, rows, want) in cases {
            let path = d.join(name);
            write(&path, &rows, 10);
            let e = read_vector_file(&path).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains(want), "{name}: {e}");
        }
        let empty = tempfile::tempdir().unwrap();
        let e = VectorTable::read_dir(empty.path()).unwrap_err().to_string();
        assert!(e.contains("no .parquet files"), "{e}");
    }
}
