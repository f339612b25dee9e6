//! hnsw_rs peer runner: HNSW build and search speed on `.npy` vectors, one measured run per
//! process, printed as one JSON object of the shape `benches/hnsw.rs` prints (engine,
//! version, vectors, dim, queries, k, m, ef_construction, threads, build_seconds,
//! build_vectors_per_s, sweep [{ef, recall, queries_per_s}], peak_rss_mb), so that
//! `benches/hnsw_vs_hnswlib.py --hnsw-rs-bin ...` runs it in the same alternating rounds as
//! Sift and hnswlib.
//!
//! Parameters, mapped onto hnsw_rs 0.3's `Hnsw::new(max_nb_connection, max_elements,
//! max_layer, ef_construction, distance)`:
//! - `max_nb_connection` = `--m` (hnsw_rs keeps `max_nb_connection` neighbours per node on
//!   the upper layers and twice as many on layer 0, as hnswlib's `M` and Sift's `m` do);
//! - `ef_construction` = `--ef-construction`;
//! - `max_layer` = 16 (hnsw_rs's own maximum, `NB_LAYER_MAX`); `max_elements` = n;
//! - distance: `DistDot` (1 - dot product; the vectors are unit length, as the driver writes
//!   them), whose AVX2 kernel the `simdeez_f` feature enables (without it, a scalar loop);
//!   the same inner-product space as hnswlib's `ip` and Sift's dot product;
//! - search: `Hnsw::search(query, k, ef)` at each `--ef` (hnsw_rs explores max(ef, k)).
//!
//! Timed: `parallel_insert_slice` of all base vectors (rayon, `--threads` threads: the build,
//! in memory), then for each ef all queries searched in parallel (rayon `par_iter` over
//! `Hnsw::search`). Recall@k is against exact search (brute-force inner product, untimed).
//!
//! Usage: hnsw_rs_peer --base /abs/base.npy --queries /abs/queries.npy --m 24 \
//!   --ef-construction 200 --ef 16,32,64,128,256 --k 10 --threads 2 --json
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use hnsw_rs::prelude::{DistDot, Hnsw};
use rayon::prelude::*;

#[derive(Parser)]
struct Args {
    /// Base vectors, float32 `.npy` of shape (n, d), unit length.
    #[arg(long)]
    base: PathBuf,
    /// Query vectors, float32 `.npy` of shape (q, d), unit length.
    #[arg(long)]
    queries: PathBuf,
    #[arg(long, default_value_t = 24)]
    m: usize,
    #[arg(long, default_value_t = 200)]
    ef_construction: usize,
    /// Comma-separated ef_search values.
    #[arg(long, default_value = "16,32,64,128,256")]
    ef: String,
    #[arg(long, default_value_t = 10)]
    k: usize,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Print JSON (always on; kept for the driver's command line).
    #[arg(long)]
    json: bool,
}

/// Reads a little-endian float32 C-order `.npy` of two dimensions.
fn read_npy(path: &Path) -> Result<(Vec<f32>, usize, usize)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        bail!("{}: not a .npy file", path.display());
    }
    let (header_len, start) = if bytes[6] == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        )
    };
    let header = std::str::from_utf8(&bytes[start..start + header_len])?;
    if !header.contains("'<f4'") || header.contains("'fortran_order': True") {
        bail!(
            "{}: need little-endian float32 in C order: {header}",
            path.display()
        );
    }
    let shape = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .context("no shape")?;
    let dims: Vec<usize> = shape
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse())
        .collect::<std::result::Result<_, _>>()?;
    let [n, d] = dims[..] else {
        bail!("{}: expected 2 dimensions, got {dims:?}", path.display())
    };
    let data: Vec<f32> = bytes[start + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if data.len() != n * d {
        bail!(
            "{}: {} values for shape ({n}, {d})",
            path.display(),
            data.len()
        );
    }
    Ok((data, n, d))
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn main() -> Result<()> {
    let a = Args::parse();
    rayon::ThreadPoolBuilder::new()
        .num_threads(a.threads)
        .build_global()
        .ok();
    let (base, n, d) = read_npy(&a.base)?;
    let (queries, nq, dq) = read_npy(&a.queries)?;
    if d != dq {
        bail!("base has {d} dimensions, queries {dq}");
    }
    let k = a.k.min(n);
    // exact top k (untimed)
    let exact: Vec<Vec<usize>> = queries
        .par_chunks_exact(d)
        .map(|q| {
            let mut s: Vec<(f32, usize)> = base
                .chunks_exact(d)
                .enumerate()
                .map(|(i, v)| (dot(q, v), i))
                .collect();
            s.select_nth_unstable_by(k - 1, |x, y| y.0.total_cmp(&x.0));
            s[..k].iter().map(|&(_, i)| i).collect()
        })
        .collect();

    let start = Instant::now();
    let mut hnsw = Hnsw::<f32, DistDot>::new(a.m, n, 16, a.ef_construction, DistDot);
    let items: Vec<(&[f32], usize)> = base.chunks_exact(d).zip(0..).collect();
    hnsw.parallel_insert_slice(&items);
    let build_seconds = start.elapsed().as_secs_f64();
    hnsw.set_searching_mode(true);

    let mut sweep = Vec::new();
    for ef in a.ef.split(',').map(|s| s.trim().parse::<usize>()) {
        let ef = ef.context("--ef: comma-separated integers")?;
        let start = Instant::now();
        let found: Vec<Vec<usize>> = queries
            .par_chunks_exact(d)
            .map(|q| hnsw.search(q, k, ef).into_iter().map(|h| h.d_id).collect())
            .collect();
        let seconds = start.elapsed().as_secs_f64();
        let hit: usize = found
            .iter()
            .zip(&exact)
            .map(|(f, e)| f.iter().filter(|i| e.contains(i)).count())
            .sum();
        sweep.push(serde_json::json!({
            "ef": ef,
            "recall": hit as f64 / (nq * k) as f64,
            "queries_per_s": nq as f64 / seconds,
        }));
    }
    let out = serde_json::json!({
        "engine": "hnsw_rs",
        "version": "0.3.5",
        "vectors": n,
        "dim": d,
        "queries": nq,
        "k": k,
        "m": a.m,
        "ef_construction": a.ef_construction,
        "threads": a.threads,
        "build_seconds": build_seconds,
        "build_vectors_per_s": n as f64 / build_seconds,
        "sweep": sweep,
        "peak_rss_mb": sift_embed::bench::peak_rss_mb().unwrap_or(f64::NAN),
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
