use super::*;

fn unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    };
    let mut v: Vec<f32> = (0..n * dim).map(|_| next()).collect();
    for row in v.chunks_exact_mut(dim) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[test]
fn finds_exact_neighbours_and_round_trips() {
    let (n, dim) = (3000, 16);
    let v = unit_vectors(n, dim, 1);
    let g = Hnsw::build(&v, dim, 12, 100);
    assert_eq!(g.len(), n);
    let mut hits = 0;
    for q in (0..n).step_by(30) {
        let query = &v[q * dim..(q + 1) * dim];
        let mut exact: Vec<(u32, f32)> = (0..n as u32)
            .map(|i| (i, dot(query, &v[i as usize * dim..(i as usize + 1) * dim])))
            .collect();
        exact.sort_by(|a, b| b.1.total_cmp(&a.1));
        let got = g.search(&v, query, 10, 64);
        hits += exact[..10]
            .iter()
            .filter(|e| got.iter().any(|h| h.0 == e.0))
            .count();
    }
    let recall = hits as f64 / (100 * 10) as f64;
    assert!(recall >= 0.98, "recall {recall}");
    let back = Hnsw::from_bytes(&g.to_bytes(), dim).unwrap();
    assert_eq!(back, g);
    assert!(g.unreachable().len() < n / 100);
}

#[test]
fn the_walk_renumbers_every_point_once_and_keeps_the_links() {
    // level 0: 0 - 1 - 2 reachable from the entry (0); 3 - 4 apart, reachable from no one
    let (n, m0) = (5, 4);
    let lists: [&[u32]; 5] = [&[1], &[0, 2], &[1], &[4], &[3]];
    let mut base = vec![0u32; n * (1 + m0)];
    for (i, l) in lists.iter().enumerate() {
        base[i * (1 + m0)] = l.len() as u32;
        base[i * (1 + m0) + 1..i * (1 + m0) + 1 + l.len()].copy_from_slice(l);
    }
    let g = Hnsw {
        dim: 2,
        m: 2,
        m0,
        entry: 0,
        top: 0,
        levels: vec![0; n],
        base,
        upper_start: vec![NO_UPPER; n],
        upper: Vec::new(),
        walk: None,
    };
    let rounded: Vec<u16> = (0..2 * n as u16).collect();
    let w = Walk::new(&g, &rounded);
    // breadth-first from the entry, then the unreached points in ordinal order
    assert_eq!(w.ord, [0, 1, 2, 3, 4]);
    for (new, &o) in w.ord.iter().enumerate() {
        assert_eq!(w.num[o as usize] as usize, new);
        assert_eq!(
            &w.vectors[2 * new..2 * new + 2],
            &rounded[2 * o as usize..2 * o as usize + 2]
        );
        let mapped: Vec<u32> = w.with(new as u32, 0, |l| {
            l.iter().map(|&x| w.ord[x as usize]).collect()
        });
        assert_eq!(mapped, g.links(o, 0));
    }
    // an entry in the middle renumbers its neighbours first
    let g = Hnsw { entry: 2, ..g };
    let w = Walk::new(&g, &rounded);
    assert_eq!(w.ord, [2, 1, 0, 3, 4]);
}

#[test]
fn damaged_bytes_are_errors() {
    let v = unit_vectors(200, 8, 2);
    let g = Hnsw::build(&v, 8, 4, 20);
    let bytes = g.to_bytes();
    assert!(Hnsw::from_bytes(&bytes[..bytes.len() - 1], 8).is_err());
    assert!(Hnsw::from_bytes(&bytes, 9).is_err());
    let mut bad = bytes.clone();
    // a link to a point that does not exist
    let first_link = 8 + 7 * 4 + 200 + 4;
    bad[first_link..first_link + 4].copy_from_slice(&1000u32.to_le_bytes());
    assert!(Hnsw::from_bytes(&bad, 8).is_err());
    assert!(Hnsw::from_bytes(b"nonsense", 8).is_err());
}

#[test]
fn tiny_graphs() {
    assert!(
        Hnsw::build(&[], 4, 8, 16)
            .search(&[], &[1.0, 0.0, 0.0, 0.0], 3, 8)
            .is_empty()
    );
    let v = [1.0, 0.0, 0.0, 1.0];
    let g = Hnsw::build(&v, 2, 8, 16);
    assert_eq!(g.search(&v, &[0.0, 1.0], 2, 8)[0].0, 1);
    assert!(g.unreachable().is_empty());
}
