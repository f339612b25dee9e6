//! `benches/gpu/run.sh --dry-run`: the one-shot GPU benchmark end to end on the CPU, with the
//! tiny fixture checkpoints, this build's `sift` and transformers, so the script a lent GPU
//! machine runs cannot rot. It needs Python with torch, transformers, Pillow and numpy
//! (`scripts/test` installs them where they are missing: benches/gpu/requirements.txt);
//! without them it says SKIPPED and fails nothing.
use std::path::Path;
use std::process::Command;

fn python_has_peers() -> bool {
    Command::new("python3")
        .args(["-c", "import torch, transformers, PIL, numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn gpu_benchmark_dry_run_measures_every_model_with_both_engines() {
    if !python_has_peers() {
        eprintln!("SKIPPED: python3 lacks torch, transformers, Pillow or numpy");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let run = Command::new("bash")
        .arg(repo.join("benches/gpu/run.sh"))
        .arg("--dry-run")
        .env("SIFT_BIN", env!("CARGO_BIN_EXE_sift"))
        .env("OUT", out.path())
        .env("SIFT_GPU_WORK", work.path())
        .env("SIFT_GPU_BUDGET_S", "3600")
        .output()
        .unwrap();
    let log = std::fs::read_to_string(out.path().join("log.txt")).unwrap_or_default();
    assert!(
        run.status.success(),
        "run.sh --dry-run failed: {}\n{}\nlog:\n{log}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(results["meta"]["dry_run"], true);
    assert_eq!(results["meta"]["skipped"].as_array().unwrap().len(), 0);
    assert_eq!(results["meta"]["failed"].as_array().unwrap().len(), 0);
    let models = results["models"].as_array().unwrap();
    let mut names: Vec<&str> = models
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "clip-vit-large-patch14",
            "gme-qwen2-vl-2b",
            "mistral-7b",
            "siglip-so400m-patch14-384"
        ]
    );
    for m in models {
        let name = m["model"].as_str().unwrap();
        assert_eq!(m["rounds"], 2, "{name}: two alternating rounds");
        for key in ["sift_items_per_s", "transformers_items_per_s", "ratio"] {
            let v = m[key].as_f64().unwrap();
            assert!(v.is_finite() && v > 0.0, "{name}: {key} = {v}");
        }
        let busy = m["sift_model_busy"].as_f64().unwrap();
        assert!(busy > 0.0 && busy <= 1.0, "{name}: model busy {busy}");
        let expected = if name == "mistral-7b" {
            "text"
        } else {
            "image"
        };
        assert_eq!(m["modality"], expected, "{name}");
    }
    let table = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    assert!(table.contains("DRY RUN"), "{table}");
}
