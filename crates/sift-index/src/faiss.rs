//! Passage vectors in a FAISS index file, as faiss's `write_index` writes it
//! (`faiss/impl/index_write.cpp`): an `IndexFlatIP` (`IxFI`), an `IndexFlatL2` (`IxF2`), or an
//! `IndexHNSWFlat` (`IHNf`) whose storage is one of the two. Row `i` of the index is passage
//! `i` of the corpus domain it is adopted for.
//!
//! Layout (little-endian, no padding):
//!
//! ```text
//! fourcc u32
//! header: d i32, ntotal i64, dummy i64, dummy i64, is_trained u8, metric_type i32,
//!         metric_arg f32 (only when metric_type > 1)
//! IxFI / IxF2: n u64 (= ntotal * d), n float32 (row-major)
//! IHNf: header, then the graph: assign_probas (u64 n, n f64), cum_nneighbor_per_level
//!       (u64 n, n i32), levels (u64 n = ntotal, n i32), offsets (u64 n, n u64),
//!       neighbors (u64 n, n i32), entry_point i32, max_level i32, efConstruction i32,
//!       efSearch i32, upper_beam i32; then the storage, a whole IxFI / IxF2 index
//! ```
//!
//! Every count read from the file is checked against the bytes left in it before anything
//! is allocated or skipped, so a truncated or damaged file is an error naming what is short.
//! Only the vectors are adopted: faiss's graph is skipped, and the build makes Sift's own.
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// faiss's `METRIC_INNER_PRODUCT`.
const METRIC_INNER_PRODUCT: i32 = 0;
/// faiss's `METRIC_L2`.
const METRIC_L2: i32 = 1;
/// How far from 1 the length of a vector in an L2 index may be: ranking by L2 distance equals
/// ranking by inner product (what Sift ranks by) only for vectors of one length. float32
/// vectors normalised by faiss or numpy are within a few 1e-6 of it.
pub const UNIT_TOLERANCE: f32 = 1e-4;
/// The largest dimension faiss reads (`FAISS_CHECK_RANGE(idx.d, 0, (1 << 20) + 1)`).
const MAX_DIM: i64 = 1 << 20;
/// The index types Sift adopts, for messages.
const SUPPORTED: &str = "IxFI (IndexFlatIP), IxF2 (IndexFlatL2), IHNf (IndexHNSWFlat)";

/// How a FAISS index compares vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaissMetric {
    /// Inner product (`METRIC_INNER_PRODUCT`): Sift's own ranking.
    InnerProduct,
    /// Squared Euclidean distance (`METRIC_L2`): adopted for unit-length vectors only.
    L2,
}

/// A FAISS index file whose header and layout have been checked; its vectors are read by
/// [`FaissFile::read_vectors`].
#[derive(Debug, Clone)]
pub struct FaissFile {
    path: PathBuf,
    /// `IxFI`, `IxF2` or `IHNf`.
    fourcc: String,
    metric: FaissMetric,
    dim: usize,
    ntotal: u64,
    /// Where the float32 rows start.
    offset: u64,
}

/// A fourcc as text when printable, else its bytes in hex.
fn show_fourcc(b: [u8; 4]) -> String {
    if b.iter().all(|c| c.is_ascii_graphic()) {
        format!("{:?}", String::from_utf8_lossy(&b))
    } else {
        format!("0x{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3])
    }
}

fn metric_name(m: i32) -> String {
    let name = match m {
        0 => "inner product",
        1 => "L2",
        2 => "L1",
        3 => "Linf",
        4 => "Lp",
        20 => "Canberra",
        21 => "BrayCurtis",
        22 => "JensenShannon",
        23 => "Jaccard",
        24 => "NaNEuclidean",
        25 => "GOWER",
        _ => "unknown",
    };
    format!("metric_type {m} ({name})")
}

/// A reader that knows how many bytes the file has left.
struct Cursor {
    path: PathBuf,
    reader: BufReader<File>,
    pos: u64,
    len: u64,
}

impl Cursor {
    fn err(&self, message: String) -> Error {
        Error::Vectors {
            path: self.path.clone(),
            message,
        }
    }

    fn truncated(&self, need: u64, what: &str) -> Error {
        self.err(format!(
            "truncated FAISS file: {what} needs {need} bytes at offset {}, but the file has {} bytes ({} left)",
            self.pos,
            self.len,
            self.len - self.pos
        ))
    }

    /// Fails unless `need` more bytes are in the file.
    fn ensure(&self, need: u64, what: &str) -> Result<()> {
        if need > self.len - self.pos {
            return Err(self.truncated(need, what));
        }
        Ok(())
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        self.ensure(N as u64, what)?;
        let mut b = [0u8; N];
        self.reader
            .read_exact(&mut b)
            .map_err(|e| Error::io(&self.path, e))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn i32(&mut self, what: &str) -> Result<i32> {
        self.bytes::<4>(what).map(i32::from_le_bytes)
    }

    fn i64(&mut self, what: &str) -> Result<i64> {
        self.bytes::<8>(what).map(i64::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.bytes::<8>(what).map(u64::from_le_bytes)
    }

    /// Skips a faiss vector (`u64` count, then `count` elements of `size` bytes) after
    /// checking it lies inside the file; returns its count.
    fn skip_vector(&mut self, size: u64, what: &str) -> Result<u64> {
        let n = self.u64(&format!("the length of {what}"))?;
        let bytes = n
            .checked_mul(size)
            .ok_or_else(|| self.err(format!("{what}: impossible length {n}")))?;
        self.ensure(bytes, &format!("{what} ({n} elements)"))?;
        self.reader
            .seek_relative(bytes as i64)
            .map_err(|e| Error::io(&self.path, e))?;
        self.pos += bytes;
        Ok(n)
    }
}

/// The common header of every faiss index (`write_index_header`).
struct Header {
    dim: i64,
    ntotal: i64,
    metric: i32,
}

fn read_header(c: &mut Cursor, fourcc: &str) -> Result<Header> {
    let what = format!("the {fourcc} header");
    let dim = i64::from(c.i32(&what)?);
    let ntotal = c.i64(&what)?;
    let _dummy = c.i64(&what)?;
    let _dummy = c.i64(&what)?;
    let _is_trained = c.bytes::<1>(&what)?;
    let metric = c.i32(&what)?;
    if metric > 1 {
        let _metric_arg = c.bytes::<4>(&what)?;
    }
    if !(1..=MAX_DIM).contains(&dim) {
        return Err(c.err(format!(
            "{fourcc} header: dimension {dim} (faiss allows 1 to {MAX_DIM})"
        )));
    }
    if ntotal < 0 {
        return Err(c.err(format!("{fourcc} header: ntotal {ntotal} is negative")));
    }
    Ok(Header {
        dim,
        ntotal,
        metric,
    })
}

impl FaissFile {
    /// Reads and checks `path`'s header (and, for HNSW, the sizes of its graph): the index
    /// type, dimension, count and metric, and that the file holds all `ntotal * d` floats.
    pub fn open(path: &Path) -> Result<FaissFile> {
        let file = sift_core::open_regular_file(path)?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut c = Cursor {
            path: path.to_path_buf(),
            reader: BufReader::new(file),
            pos: 0,
            len,
        };
        let top = c.bytes::<4>("the index type (fourcc)")?;
        let (flat, hnsw) = match &top {
            b"IxFI" | b"IxF2" | b"IxFl" => (top, None),
            b"IHNf" => {
                let h = read_header(&mut c, "IHNf")?;
                c.skip_vector(8, "the HNSW assign_probas")?;
                c.skip_vector(4, "the HNSW cum_nneighbor_per_level")?;
                let levels = c.skip_vector(4, "the HNSW levels")?;
                c.skip_vector(8, "the HNSW offsets")?;
                c.skip_vector(4, "the HNSW neighbors")?;
                // entry_point, max_level, efConstruction, efSearch, upper_beam
                for _ in 0..5 {
                    c.i32("the HNSW parameters")?;
                }
                if levels != h.ntotal as u64 {
                    return Err(c.err(format!(
                        "IHNf: {levels} HNSW levels for ntotal {} (a damaged file)",
                        h.ntotal
                    )));
                }
                let storage = c.bytes::<4>("the HNSW storage's index type")?;
                if &storage == b"null" {
                    return Err(c.err(
                        "IHNf written without its storage (IO_FLAG_SKIP_STORAGE): it holds no vectors to adopt".into(),
                    ));
                }
                if !matches!(&storage, b"IxFI" | b"IxF2" | b"IxFl") {
                    return Err(c.err(format!(
                        "IHNf whose storage is index type {}: Sift adopts an IndexHNSWFlat's flat storage (IxFI or IxF2)",
                        show_fourcc(storage)
                    )));
                }
                (storage, Some(h))
            }
            _ => {
                return Err(c.err(format!(
                    "unknown FAISS index type {} (fourcc); Sift adopts {SUPPORTED}",
                    show_fourcc(top)
                )));
            }
        };
        let fourcc = show_fourcc(flat).trim_matches('"').to_string();
        let h = read_header(&mut c, &fourcc)?;
        let metric = match h.metric {
            METRIC_INNER_PRODUCT => FaissMetric::InnerProduct,
            METRIC_L2 => FaissMetric::L2,
            m => {
                return Err(c.err(format!(
                    "{fourcc} index with {}: Sift adopts inner-product or L2 indexes only",
                    metric_name(m)
                )));
            }
        };
        if let Some(outer) = &hnsw
            && (outer.dim, outer.ntotal, outer.metric) != (h.dim, h.ntotal, h.metric)
        {
            return Err(c.err(format!(
                "IHNf says dimension {}, ntotal {}, {}, its storage dimension {}, ntotal {}, {} (a damaged file)",
                outer.dim,
                outer.ntotal,
                metric_name(outer.metric),
                h.dim,
                h.ntotal,
                metric_name(h.metric)
            )));
        }
        let floats = c.u64(&format!("the length of the {fourcc} vectors"))?;
        let expected = (h.ntotal as u64).checked_mul(h.dim as u64);
        if expected != Some(floats) {
            return Err(c.err(format!(
                "{fourcc}: {floats} floats stored for ntotal {} x dimension {} (a damaged file)",
                h.ntotal, h.dim
            )));
        }
        let bytes = floats
            .checked_mul(4)
            .ok_or_else(|| c.err(format!("{fourcc}: impossible length {floats}")))?;
        c.ensure(
            bytes,
            &format!("the {} vectors of dimension {}", h.ntotal, h.dim),
        )?;
        let offset = c.pos;
        let rest = len - offset - bytes;
        if rest != 0 {
            return Err(c.err(format!(
                "{rest} bytes after the {fourcc} vectors: not an index as faiss's write_index writes one"
            )));
        }
        Ok(FaissFile {
            path: path.to_path_buf(),
            fourcc: if hnsw.is_some() {
                format!("IHNf over {fourcc}")
            } else {
                fourcc
            },
            metric,
            dim: h.dim as usize,
            ntotal: h.ntotal as u64,
            offset,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The index type, e.g. `IxFI` or `IHNf over IxF2`.
    pub fn kind(&self) -> &str {
        &self.fourcc
    }

    /// How the index compares vectors.
    pub fn metric(&self) -> FaissMetric {
        self.metric
    }

    /// Vector length.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of vectors (rows).
    pub fn ntotal(&self) -> u64 {
        self.ntotal
    }

    /// All vectors, row-major (the size was checked against the file by
    /// [`FaissFile::open`]). Refuses a value that is not finite and, in an L2 index, a
    /// vector whose length is not 1 (within [`UNIT_TOLERANCE`]), naming the row. `progress`
    /// is told of each row read.
    pub fn read_vectors(&self, progress: &dyn crate::Progress) -> Result<Vec<f32>> {
        let err = |message: String| Error::Vectors {
            path: self.path.clone(),
            message,
        };
        let mut file = sift_core::open_regular_file(&self.path)?;
        let len = file.metadata().map_err(|e| Error::io(&self.path, e))?.len();
        let total = self.ntotal as usize * self.dim;
        if len < self.offset + total as u64 * 4 {
            return Err(err(format!(
                "the file shrank to {len} bytes since it was opened"
            )));
        }
        file.seek(SeekFrom::Start(self.offset))
            .map_err(|e| Error::io(&self.path, e))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut out: Vec<f32> = Vec::with_capacity(total);
        let rows_per_chunk = (1 << 20) / (self.dim * 4) + 1;
        let mut buf = vec![0u8; rows_per_chunk * self.dim * 4];
        let mut row = 0u64;
        while row < self.ntotal {
            let rows = rows_per_chunk.min((self.ntotal - row) as usize);
            let chunk = &mut buf[..rows * self.dim * 4];
            reader
                .read_exact(chunk)
                .map_err(|e| Error::io(&self.path, e))?;
            for (r, bytes) in chunk.chunks_exact(self.dim * 4).enumerate() {
                let at = out.len();
                out.extend(
                    bytes
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
                self.check_row(row + r as u64, &out[at..]).map_err(err)?;
            }
            row += rows as u64;
            progress.inc(rows as u64);
        }
        Ok(out)
    }

    fn check_row(&self, row: u64, v: &[f32]) -> std::result::Result<(), String> {
        if let Some(j) = v.iter().position(|x| !x.is_finite()) {
            return Err(format!(
                "row {row} holds {} (value {j} of {}): vectors must be finite",
                v[j], self.dim
            ));
        }
        if self.metric == FaissMetric::L2 {
            let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            if (norm - 1.0).abs() > f64::from(UNIT_TOLERANCE) {
                return Err(format!(
                    "row {row} has length {norm:.6}: an L2 index ({}) is adopted only when every vector has unit length (within {UNIT_TOLERANCE}), where ranking by L2 distance equals ranking by inner product, which is how Sift ranks; normalise the vectors or write an IndexFlatIP",
                    self.fourcc
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_index_header`'s bytes.
    fn header(d: i32, ntotal: i64, metric: i32) -> Vec<u8> {
        let mut b = d.to_le_bytes().to_vec();
        b.extend(ntotal.to_le_bytes());
        b.extend([(1i64 << 20).to_le_bytes(), (1i64 << 20).to_le_bytes()].concat());
        b.push(1);
        b.extend(metric.to_le_bytes());
        b
    }

    /// A faiss vector: its length, then its elements' bytes.
    fn vector(n: u64, elem: usize) -> Vec<u8> {
        let mut b = n.to_le_bytes().to_vec();
        b.extend(vec![0u8; n as usize * elem]);
        b
    }

    /// An IndexFlat (`fourcc`) of `rows`.
    fn flat(fourcc: &[u8; 4], metric: i32, rows: &[[f32; 2]]) -> Vec<u8> {
        let mut b = fourcc.to_vec();
        b.extend(header(2, rows.len() as i64, metric));
        b.extend((rows.len() as u64 * 2).to_le_bytes());
        b.extend(rows.iter().flatten().flat_map(|x| x.to_le_bytes()));
        b
    }

    /// An IndexHNSWFlat with `levels` graph levels over `storage`.
    fn hnsw(ntotal: i64, metric: i32, levels: u64, storage: &[u8]) -> Vec<u8> {
        let mut b = b"IHNf".to_vec();
        b.extend(header(2, ntotal, metric));
        b.extend(vector(3, 8)); // assign_probas
        b.extend(vector(4, 4)); // cum_nneighbor_per_level
        b.extend(vector(levels, 4));
        b.extend(vector(levels + 1, 8)); // offsets
        b.extend(vector(levels * 16, 4)); // neighbors
        b.extend([0i32, 0, 40, 16, 1].iter().flat_map(|x| x.to_le_bytes()));
        b.extend(storage);
        b
    }

    fn open(bytes: &[u8]) -> Result<FaissFile> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.index");
        std::fs::write(&path, bytes).unwrap();
        let f = FaissFile::open(&path)?;
        let v = f.read_vectors(&crate::NoProgress)?;
        assert_eq!(v.len(), f.dim() * f.ntotal() as usize);
        Ok(f)
    }

    fn message(r: Result<FaissFile>) -> String {
        match r {
            Ok(f) => panic!("opened {f:?}"),
            Err(e) => e.to_string(),
        }
    }

    const ROWS: [[f32; 2]; 3] = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]];

    #[test]
    fn hnsw_storage_is_found_after_the_graph() {
        let f = open(&hnsw(3, 1, 3, &flat(b"IxF2", 1, &ROWS))).unwrap();
        assert_eq!((f.kind(), f.dim(), f.ntotal()), ("IHNf over IxF2", 2, 3));
        assert_eq!(f.metric(), FaissMetric::L2);
        let f = open(&flat(b"IxFI", 0, &ROWS)).unwrap();
        assert_eq!((f.kind(), f.metric()), ("IxFI", FaissMetric::InnerProduct));
    }

    #[test]
    fn damaged_hnsw_files_are_named_as_such() {
        let e = message(open(&hnsw(3, 0, 2, &flat(b"IxFI", 0, &ROWS))));
        assert!(e.contains("2 HNSW levels for ntotal 3"), "{e}");
        let e = message(open(&hnsw(3, 0, 3, b"null")));
        assert!(e.contains("without its storage"), "{e}");
        let e = message(open(&hnsw(3, 0, 3, b"IxPQ")));
        assert!(e.contains("storage is index type \"IxPQ\""), "{e}");
        let e = message(open(&hnsw(3, 1, 3, &flat(b"IxFI", 0, &ROWS))));
        assert!(e.contains("metric_type 1 (L2)"), "{e}");
        let mut big = hnsw(3, 0, 3, &flat(b"IxFI", 0, &ROWS));
        // the neighbors' length claims far more than the file holds
        let at = 4 + 33 + (8 + 24) + (8 + 16) + (8 + 12) + (8 + 32);
        big[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
        let e = message(open(&big));
        assert!(e.contains("impossible length"), "{e}");
        big[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let e = message(open(&big));
        assert!(
            e.contains("truncated FAISS file: the HNSW neighbors"),
            "{e}"
        );
    }

    #[test]
    fn trailing_bytes_and_a_header_count_mismatch_are_refused() {
        let mut extra = flat(b"IxFI", 0, &ROWS);
        extra.push(0);
        assert!(message(open(&extra)).contains("1 bytes after the IxFI vectors"));
        let mut wrong = flat(b"IxFI", 0, &ROWS);
        wrong[4 + 33..4 + 41].copy_from_slice(&5u64.to_le_bytes());
        assert!(message(open(&wrong)).contains("5 floats stored for ntotal 3 x dimension 2"));
    }
}
