//! Python clients against `sift serve`: OpenAI's and MCP's, and the agent harnesses' own.
use super::*;

/// OpenAI's Python client and MCP's Python client (streamable HTTP) against the service:
/// tests/serve_clients.py (needs `pip install -r tests/requirements-serve.txt`, which
/// scripts/test does).
#[test]
#[ignore = "needs the openai and mcp Python packages (scripts/test installs them)"]
fn python_clients_openai_embeddings_and_mcp_over_http() {
    let server = Server::start(&["--quiet"]);
    let clip = repo().join(CLIP);
    let out = Command::new("python3")
        .arg(repo().join("tests/serve_clients.py"))
        .args(["--base", &server.base, "--model", "tiny-clip-quickgelu"])
        .args([
            "--sift",
            env!("CARGO_BIN_EXE_sift"),
            "--model-dir",
            s(&clip),
        ])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "tests/serve_clients.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(String::from_utf8_lossy(&out.stdout).lines().last().unwrap());
    assert_eq!(report["openai_equal"], true, "{report}");
    assert!(report["mcp_tools"].as_u64().unwrap() >= 11, "{report}");
    assert_eq!(report["mcp_search_hits"], 3, "{report}");
}

/// The agent harnesses' own clients (tests/harness_clients.py: VisBrowse-Bench's Serper
/// tools and Jina Reader visits, MERRIN's smolagents and paged searches, InterLV-Search's
/// SerpAPI client and BeautifulSoup fetch, pyserini's MCP bridge script itself) against the
/// service started WITHOUT --domain over the sample's three domains.
#[test]
#[ignore = "needs the requests and beautifulsoup4 Python packages (scripts/test installs them)"]
fn harness_clients_run_unchanged_against_every_domain() {
    let server = Server::start(&["--quiet"]);
    let out = Command::new("python3")
        .arg(repo().join("tests/harness_clients.py"))
        .args(["--base", &server.base, "--key", "any-key"])
        .arg("--bridge")
        .arg(repo().join("tests/clients/pyserini_bridge.py"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tests/harness_clients.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(stdout.lines().last().unwrap());
    assert_eq!(report["failures"], json!([]), "{report}");
    assert_eq!(
        report["domains_seen"],
        json!(["biology", "gis", "physics"]),
        "{report}"
    );
    assert!(report["calls"].as_u64().unwrap() >= 30, "{report}");
}
