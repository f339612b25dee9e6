//! HNSW against exact search: recall@10 at the default ef_search, every vector finds itself,
//! f16 storage, persistence round trip.
use sift_index::{AnnMode, DenseDomain, HnswParams, VectorDtype, write_dense};

/// xorshift64* mapped to [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    }
}

/// Deterministic unit vectors shaped like text embeddings: points on a 16-dimensional latent
/// manifold (a fixed random linear map, shared by all calls) in clusters, plus isotropic
/// noise in the full space.
fn clustered(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    const LATENT: usize = 16;
    let mut basis_rng = Rng(0x9E37_79B9_7F4A_7C15);
    let basis: Vec<f32> = (0..LATENT * dim).map(|_| basis_rng.next()).collect();
    let mut centre_rng = Rng(0x1234_5678_9ABC_DEF1);
    let centres: Vec<f32> = (0..clusters * LATENT).map(|_| centre_rng.next()).collect();
    let mut rng = Rng(seed);
    let mut next = || rng.next();
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        let c = &centres[(i % clusters) * LATENT..(i % clusters + 1) * LATENT];
        let z: Vec<f32> = c.iter().map(|x| x + 0.5 * next()).collect();
        let v: Vec<f32> = (0..dim)
            .map(|j| (0..LATENT).map(|l| z[l] * basis[l * dim + j]).sum::<f32>() + 0.3 * next())
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        out.extend(v.iter().map(|x| x / norm));
    }
    out
}

/// Ids `v0`, `v1`, ... for `n` vectors.
fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("v{i}")).collect()
}

fn recall_at_10(domain: &DenseDomain, queries: &[f32], dim: usize, ef: usize) -> f64 {
    let mut found = 0usize;
    let mut total = 0usize;
    for q in queries.chunks_exact(dim) {
        let exact = domain.search(q, 10, AnnMode::Exact, &[]).unwrap();
        let approx = domain.search(q, 10, AnnMode::Hnsw(ef), &[]).unwrap();
        total += exact.len();
        found += exact
            .iter()
            .filter(|e| approx.iter().any(|a| a.ord == e.ord))
            .count();
    }
    found as f64 / total as f64
}

#[test]
fn recall_on_100k_vectors_and_every_vector_finds_itself() {
    let dim = 64;
    let n = 100_000;
    let vectors = clustered(n, dim, 500, 7);
    let queries = clustered(300, dim, 500, 99);
    let tmp = tempfile::tempdir().unwrap();
    let meta = write_dense(
        tmp.path(),
        "synthetic",
        dim,
        &vectors,
        &ids(vectors.len() / dim),
        VectorDtype::F32,
        HnswParams::default(),
    )
    .unwrap();
    assert_eq!(meta.count, n);
    let domain = DenseDomain::open(tmp.path()).unwrap();
    let recall = recall_at_10(&domain, &queries, dim, 128);
    eprintln!(
        "100k x {dim}: recall@10 = {recall:.4}, unreachable after build: {}",
        meta.unreachable.len()
    );
    assert!(recall >= 0.99, "recall@10 {recall}");
    // every inserted vector finds itself (graph-unreachable points are searched exactly)
    for ord in (0..n as u32).step_by(7) {
        let hits = domain
            .search(domain.vector(ord), 1, AnnMode::Hnsw(128), &[])
            .unwrap();
        let top = hits[0];
        assert!(
            top.ord == ord || (top.score - 1.0).abs() < 1e-6,
            "vector {ord} found {top:?}"
        );
    }
    for &ord in &meta.unreachable {
        let hits = domain
            .search(domain.vector(ord), 1, AnnMode::Hnsw(128), &[])
            .unwrap();
        assert!((hits[0].score - 1.0).abs() < 1e-6);
    }
}

#[test]
fn f16_storage_round_trips_and_excludes_before_the_cut() {
    let dim = 48;
    let vectors = clustered(2_000, dim, 20, 3);
    let tmp = tempfile::tempdir().unwrap();
    write_dense(
        tmp.path(),
        "m",
        dim,
        &vectors,
        &ids(vectors.len() / dim),
        VectorDtype::F16,
        HnswParams {
            m: 16,
            ef_construction: 100,
        },
    )
    .unwrap();
    let d = DenseDomain::open(tmp.path()).unwrap();
    assert_eq!(d.meta().dtype, VectorDtype::F16);
    for (i, v) in vectors.chunks_exact(dim).enumerate().step_by(97) {
        let stored = d.vector(i as u32);
        assert!(v.iter().zip(stored).all(|(a, b)| (a - b).abs() < 1e-3));
    }
    let q = &vectors[..dim];
    let all = d.search(q, 5, AnnMode::Exact, &[]).unwrap();
    let without = d.search(q, 4, AnnMode::Exact, &[all[0].ord]).unwrap();
    assert_eq!(without, all[1..]);
    let hnsw_without = d.search(q, 4, AnnMode::Hnsw(64), &[all[0].ord]).unwrap();
    assert!(!hnsw_without.iter().any(|h| h.ord == all[0].ord));
    assert!(recall_at_10(&d, &vectors[..50 * dim], dim, 128) >= 0.99);
}

#[test]
fn bad_parameters_and_damaged_files_are_errors() {
    let dim = 8;
    let vectors = clustered(100, dim, 4, 1);
    let tmp = tempfile::tempdir().unwrap();
    let err = write_dense(
        tmp.path(),
        "m",
        dim,
        &vectors,
        &ids(vectors.len() / dim),
        VectorDtype::F32,
        HnswParams {
            m: 300,
            ef_construction: 400,
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("M must be"), "{err}");
    write_dense(
        tmp.path(),
        "m",
        dim,
        &vectors,
        &ids(vectors.len() / dim),
        VectorDtype::F32,
        HnswParams::default(),
    )
    .unwrap();
    let d = DenseDomain::open(tmp.path()).unwrap();
    assert!(d.search(&[0.0; 3], 1, AnnMode::Exact, &[]).is_err());
    let file = tmp.path().join("vectors.f32");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 4]).unwrap();
    let err = DenseDomain::open(tmp.path())
        .err()
        .expect("truncated vectors must not open");
    assert!(err.to_string().contains("vectors.f32"), "{err}");
}

/// One insertion thread: the same vectors give the same graph, byte for byte.
#[test]
fn single_threaded_builds_are_deterministic() {
    let dim = 32;
    let vectors = clustered(5_000, dim, 50, 3);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let build = || pool.install(|| sift_index::Hnsw::build(&vectors, dim, 16, 100).to_bytes());
    assert_eq!(build(), build());
}
