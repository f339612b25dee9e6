//! HNSW build and search speed of Sift's vector index on `.npy` vectors (one measured run per
//! process, printed as one JSON object), driven side by side with hnswlib by
//! `benches/hnsw_vs_hnswlib.py`.
//!
//! Timed: building the index (`sift_index::write_dense`: parallel graph insertion, the
//! level-0 reachability check, writing vectors and graph) and, for each ef_search, all
//! queries searched in parallel (`DenseDomain::search`, top k). Recall@k is against exact
//! search (brute-force inner product, untimed).
//!
//! Usage: cargo bench --bench hnsw -- --base /abs/base.npy --queries /abs/queries.npy \
//!   --m 24 --ef-construction 200 --ef 16,32,64,128,256 --k 10 --threads 2 --json
//! (`--keep DIR --passes 5`: build once into DIR, then only search it on later runs, the
//! best of 5 passes per ef: for profiling searches.)
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use rayon::prelude::*;
use sift_index::{AnnMode, DenseDomain, HnswParams, VectorDtype, dot, write_dense};

#[derive(Parser)]
struct Args {
    /// Base vectors, float32 `.npy` of shape (n, d), unit length.
    #[arg(long)]
    base: PathBuf,
    /// Query vectors, float32 `.npy` of shape (q, d).
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
    /// Keep the built index in this directory, or, when it already holds one, search it
    /// without building (build time then reported as null): for profiling searches.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Searches per ef, each over all queries (the rate reported is the best pass).
    #[arg(long, default_value_t = 1)]
    passes: usize,
    /// Print JSON (always on; kept for the driver's command line).
    #[arg(long)]
    json: bool,
    /// cargo passes --bench to harness=false benches.
    #[arg(long, hide = true)]
    bench: bool,
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
    let k = a.k;
    // exact top k (untimed)
    let exact: Vec<Vec<usize>> = queries
        .par_chunks_exact(d)
        .map(|q| {
            let mut s: Vec<(f32, usize)> = base
                .chunks_exact(d)
                .enumerate()
                .map(|(i, v)| (dot(q, v), i))
                .collect();
            s.select_nth_unstable_by(k.min(n) - 1, |x, y| y.0.total_cmp(&x.0));
            // from a borrow: collecting from `s.into_iter()` would reuse (and keep) its
            // allocation of n pairs for each query's k ids
            s[..k.min(n)].iter().map(|&(_, i)| i).collect()
        })
        .collect();
    let temp = tempfile::tempdir()?;
    let dir = a.keep.as_deref().unwrap_or(temp.path());
    let params = HnswParams {
        m: a.m,
        ef_construction: a.ef_construction,
    };
    let mut build_seconds = None;
    if a.keep.is_none() || DenseDomain::open(dir).is_err() {
        let start = Instant::now();
        let ids: Vec<String> = (0..base.len() / d).map(|i| i.to_string()).collect();
        write_dense(dir, "bench", d, &base, &ids, VectorDtype::F32, params)?;
        build_seconds = Some(start.elapsed().as_secs_f64());
    }
    let index = DenseDomain::open(dir)?;
    let mut sweep = Vec::new();
    for ef in a.ef.split(',').map(|s| s.trim().parse::<usize>()) {
        let ef = ef.context("--ef: comma-separated integers")?;
        let mut seconds = f64::INFINITY;
        let mut found: Vec<Vec<usize>> = Vec::new();
        for _ in 0..a.passes.max(1) {
            let start = Instant::now();
            found = queries
                .par_chunks_exact(d)
                .map(|q| {
                    index
                        .search(q, k, AnnMode::Hnsw(ef), &[])
                        .map(|hits| hits.into_iter().map(|h| h.ord as usize).collect())
                })
                .collect::<sift_index::Result<_>>()?;
            seconds = seconds.min(start.elapsed().as_secs_f64());
        }
        let hit: usize = found
            .iter()
            .zip(&exact)
            .map(|(f, e)| f.iter().filter(|i| e.contains(i)).count())
            .sum();
        sweep.push(serde_json::json!({
            "ef": ef,
            "recall": hit as f64 / (nq * k.min(n)) as f64,
            "queries_per_s": nq as f64 / seconds,
        }));
    }
    let out = serde_json::json!({
        "engine": "sift",
        "version": env!("CARGO_PKG_VERSION"),
        "vectors": n,
        "dim": d,
        "queries": nq,
        "k": k,
        "m": a.m,
        "ef_construction": a.ef_construction,
        "threads": a.threads,
        "build_seconds": build_seconds,
        "build_vectors_per_s": build_seconds.map(|s| n as f64 / s),
        "sweep": sweep,
        "peak_rss_mb": sift_embed::bench::peak_rss_mb().unwrap_or(f64::NAN),
    });
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
