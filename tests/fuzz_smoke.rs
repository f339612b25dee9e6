//! A bounded fuzzing run of every fuzz target in the ordinary test suite: each target's seed
//! inputs and a few hundred deterministic mutations of them (bit flips, truncations,
//! insertions, deletions, byte-value edits, splices of two seeds), none of which may panic.
//! The same targets run coverage-guided under libFuzzer with `cargo fuzz` (`fuzz/README.md`).
#[path = "../fuzz/targets.rs"]
mod targets;

/// xorshift64: deterministic, so a failure names an input that reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let len = data.len();
        match rng.below(6) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => data.truncate(rng.below(len)),
            2 => {
                let i = rng.below(len + 1);
                let b = [0u8, 0xFF, b'\n', b'\t', b' ', b'"', b'{', 0x7F][rng.below(8)];
                data.insert(i, b);
            }
            3 if len > 1 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                data.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                data[i] = [0, 1, 0x7F, 0x80, 0xFF][rng.below(5)];
            }
            _ => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(data.len() + 1);
                let from = rng.below(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
        }
    }
    data
}

/// Mutations per target (seeds are run as they are too); `SIFT_FUZZ_MUTATIONS` raises it.
fn mutations() -> usize {
    std::env::var("SIFT_FUZZ_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

#[test]
fn every_fuzz_target_survives_mutated_inputs() {
    serve_target_seeds_reach_the_service();
    for &(name, target) in targets::TARGETS {
        let seeds = targets::seeds(name);
        assert!(!seeds.is_empty(), "{name} has seeds");
        // seed corpora for cargo fuzz: SIFT_FUZZ_WRITE_SEEDS=fuzz/corpus
        if let Some(dir) = std::env::var_os("SIFT_FUZZ_WRITE_SEEDS") {
            let dir = std::path::Path::new(&dir).join(name);
            std::fs::create_dir_all(&dir).unwrap();
            for (i, seed) in seeds.iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i}")), seed).unwrap();
            }
        }
        let mut rng = Rng(0x5EED ^ name.len() as u64 ^ (name.as_bytes()[0] as u64) << 32);
        let inputs = seeds
            .iter()
            .cloned()
            .chain((0..mutations()).map(|_| mutate(&mut rng, &seeds)));
        let start = std::time::Instant::now();
        let mut count = 0;
        for (i, input) in inputs.enumerate() {
            count += 1;
            let outcome = std::panic::catch_unwind(|| target(&input));
            if outcome.is_err() {
                let path = std::env::temp_dir().join(format!("sift-fuzz-{name}-{i}.bin"));
                std::fs::write(&path, &input).unwrap();
                panic!(
                    "fuzz target {name} panicked on input {i}, saved to {}",
                    path.display()
                );
            }
        }
        eprintln!(
            "{name}: {count} inputs in {:.2} s",
            start.elapsed().as_secs_f64()
        );
    }
    targets::cleanup();
}

/// The service targets' seeds reach the service's work, not only its parser: the search
/// seeds parse, and the MCP seeds' tool calls are answered with results and errors.
fn serve_target_seeds_reach_the_service() {
    use sift_service::api::SearchRequest;
    use sift_service::api::parse_json;
    let seeds = targets::seeds("serve_search");
    let searches: Vec<SearchRequest> = seeds
        .iter()
        .filter_map(|s| parse_json::<SearchRequest>(s).ok())
        .collect();
    assert!(searches.len() >= 5, "{} of the seeds parse", searches.len());
    let answers = targets::mcp_exchange(&targets::seeds("mcp_messages")[0]);
    let result = |id: u64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer {id}: {answers:?}"))
    };
    assert!(result(1)["result"]["tools"].as_array().unwrap().len() >= 11);
    let hits = &result(2)["result"]["structuredContent"]["hits"];
    assert_eq!(hits.as_array().map(Vec::len), Some(2), "{answers:?}");
    let answers = targets::mcp_exchange(&targets::seeds("mcp_messages")[1]);
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == 10 && a["error"]["code"] == -32602),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|a| a["id"].is_null() && a["error"]["code"] == -32700),
        "{answers:?}"
    );
}
