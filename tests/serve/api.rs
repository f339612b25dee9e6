//! The service's answers compared with the command line's: `sift search`, `sift embed`,
//! `sift search --rerank`; the local generator; corpus files served as vetted at start.
use super::*;

/// A corpus image's bytes, read from the sample's parquet through `sift check`-free means:
/// the image endpoint's answer is compared with what the corpus reader gives.
fn corpus_image(domain: &str, id: &str) -> Vec<u8> {
    let corpus = sift_core::Corpus::open(sample()).unwrap();
    corpus
        .images(domain)
        .unwrap()
        .map(Result::unwrap)
        .find(|r| r.path == id)
        .unwrap_or_else(|| panic!("no image {id}"))
        .bytes
}

/// Every file under `dir` with its length and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert(e.path(), (m.len(), m.modified().unwrap()));
        }
    }
    out
}

#[test]
fn serve_answers_the_json_api_serper_and_pyserini_shapes_as_sift_search_does() {
    let before = snapshot(index());
    let server = Server::start(&["--json"]);

    let (status, info) = get_json(&server.url("/v1/indexes"));
    assert_eq!(status, 200);
    assert_eq!(info["domains"].as_array().unwrap().len(), 3);
    assert_eq!(info["retrievers"][0]["name"], "bm25");
    assert_eq!(info["retrievers"][1]["name"], "dense:tiny-clip-quickgelu");
    assert_eq!(info["retrievers"][1]["ranks_images"], true);
    assert_eq!(info["has_corpus"], true);

    // text search, BM25 and dense: the same ids and scores as `sift search --json`
    for retriever in ["bm25", "dense:tiny-clip-quickgelu"] {
        let (status, res) = post(
            &server.url("/v1/search"),
            &json!({"query": "how do plants make sugar", "domain": "biology",
                    "retriever": retriever, "top_k": 5}),
        );
        assert_eq!(status, 200, "{res}");
        let cli = json(&ok(&[
            "search",
            "--index",
            s(index()),
            "--domain",
            "biology",
            "--retriever",
            retriever,
            "--query",
            "how do plants make sugar",
            "--top-k",
            "5",
            "--json",
        ]));
        let ids = |v: &Value| -> Vec<(String, f64)> {
            v["hits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    (
                        h["id"].as_str().unwrap().to_string(),
                        h["score"].as_f64().unwrap(),
                    )
                })
                .collect()
        };
        assert_eq!(ids(&res), ids(&cli), "{retriever}");
        assert!(!res["hits"].as_array().unwrap().is_empty());
        let hit = &res["hits"][0];
        assert_eq!(hit["rank"], 1);
        assert!(!hit["text"].as_str().unwrap().is_empty());
        // the link serves the passage
        let (status, doc) = get_json(&server.url(hit["passage_url"].as_str().unwrap()));
        assert_eq!(status, 200);
        assert_eq!(doc["id"], hit["id"]);
        assert!(
            doc["contents"]
                .as_str()
                .unwrap()
                .starts_with(hit["text"].as_str().unwrap())
        );
    }

    // snippets are cut to max_text_chars
    let (_, res) = post(
        &server.url("/v1/search"),
        &json!({"query": "photosynthesis", "domain": "biology", "max_text_chars": 20}),
    );
    assert_eq!(res["hits"][0]["text"].as_str().unwrap().chars().count(), 20);

    // text -> images; the image endpoint returns the corpus bytes with their type
    let (status, res) = post(
        &server.url("/v1/search"),
        &json!({"query": "leaf", "domain": "biology", "candidates": "images", "top_k": 3}),
    );
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["retriever"], "dense:tiny-clip-quickgelu");
    let image_id = res["hits"][0]["image_id"].as_str().unwrap().to_string();
    let (status, ct, bytes) = get(&server.url(res["hits"][0]["image_url"].as_str().unwrap()));
    assert_eq!(status, 200);
    assert_eq!(bytes, corpus_image("biology", &image_id));
    assert!(ct.starts_with("image/"), "{ct}");

    // reverse image search by corpus id and by uploaded bytes: the image itself first
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    for image in [json!({"image_id": image_id}), json!({"data": b64})] {
        let (status, res) = post(
            &server.url("/v1/search"),
            &json!({"images": [image], "domain": "biology", "candidates": "images"}),
        );
        assert_eq!(status, 200, "{res}");
        assert_eq!(res["hits"][0]["image_id"], image_id.as_str());
        assert!((res["hits"][0]["score"].as_f64().unwrap() - 1.0).abs() < 1e-4);
    }
    // ... and by the image file as the body
    let mut r = agent()
        .post(&server.url("/v1/reverse_image_search?domain=biology&top_k=2"))
        .header("content-type", "image/png")
        .send(&bytes[..])
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let res = json(&r.body_mut().read_to_string().unwrap());
    assert_eq!(res["hits"][0]["image_id"], image_id.as_str(), "{res}");
    assert_eq!(res["hits"].as_array().unwrap().len(), 2);
    // a crop searches with other pixels than the whole image
    let (status, crop) = post(
        &server.url("/v1/search"),
        &json!({"images": [{"image_id": image_id, "bbox": [0, 0, 400, 400]}],
                "domain": "biology", "candidates": "images"}),
    );
    assert_eq!(status, 200, "{crop}");
    assert!(crop["hits"][0]["score"].as_f64().unwrap() < 0.9999);

    // text + image -> passage+image pairs: the same as `sift search --candidates pairs`
    let tmp = tempfile::tempdir().unwrap();
    let png = tmp.path().join("q.png");
    std::fs::write(&png, &bytes).unwrap();
    let (status, pairs) = post(
        &server.url("/v1/search"),
        &json!({"query": "leaf", "images": [{"data": format!("data:image/png;base64,{b64}")}],
                "domain": "biology", "candidates": "pairs", "top_k": 8}),
    );
    assert_eq!(status, 200, "{pairs}");
    let cli = json(&ok(&[
        "search",
        "--index",
        s(index()),
        "--domain",
        "biology",
        "--retriever",
        "dense:tiny-clip-quickgelu",
        "--query",
        "leaf",
        "--image",
        s(&png),
        "--candidates",
        "pairs",
        "--corpus",
        s(&sample()),
        "--top-k",
        "8",
        "--json",
    ]));
    let ids = |v: &Value| -> Vec<String> {
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&pairs), ids(&cli));

    // Serper shapes, with links that resolve on this service
    let (status, res) = post(
        &server.url("/search"),
        &json!({"q": "photosynthesis light reactions", "num": 3, "domain": "biology", "gl": "us"}),
    );
    assert_eq!(status, 200, "{res}");
    let organic = res["organic"].as_array().unwrap();
    assert_eq!(organic.len(), 3);
    assert_eq!(organic[0]["position"], 1);
    let (status, _, _) = get(organic[0]["link"].as_str().unwrap());
    assert_eq!(status, 200);
    let (status, res) = post(
        &server.url("/images"),
        &json!({"q": "leaf", "num": 2, "domain": "biology"}),
    );
    assert_eq!(status, 200, "{res}");
    let img = &res["images"][0];
    let (status, _, served) = get(img["imageUrl"].as_str().unwrap());
    assert_eq!(status, 200);
    assert!(!served.is_empty());
    let (status, lens) = post(
        &server.url("/lens"),
        &json!({"url": img["imageUrl"], "num": 2}),
    );
    assert_eq!(status, 200, "{lens}");
    assert_eq!(lens["organic"][0]["imageUrl"], img["imageUrl"]);
    assert_eq!(lens["organic"].as_array().unwrap().len(), 2);

    // pyserini's REST shape
    let (status, res) = get_json(&server.url("/v1/biology/search?query=enzyme%20kinetics&hits=2"));
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["hits"].as_array().unwrap().len(), 2);

    // InterLV-Search's local tools
    let (status, res) = post(
        &server.url("/v1/local_text_search"),
        &json!({"query": "enzyme", "domain": "biology", "top_k": 2, "max_text_chars": 30}),
    );
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["source"], "local_kb");
    assert_eq!(res["results"].as_array().unwrap().len(), 2);
    assert!(res["results"][0]["text"].as_str().unwrap().chars().count() <= 30);
    let (status, res) = post(
        &server.url("/v1/local_image_search"),
        &json!({"image": image_id, "domain": "biology"}),
    );
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["results"][0]["entity_id"], image_id.as_str());
    assert_eq!(res["results"][0]["has_image"], true);

    // fusion and scoring
    let (status, res) = post(
        &server.url("/v1/fuse"),
        &json!({"lists": [[{"id": "a", "score": 3}, {"id": "b", "score": 2}],
                          [{"id": "b", "score": 9}, {"id": "c", "score": 1}]], "top_k": 3}),
    );
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["hits"][0]["id"], "b");
    let (status, res) = post(
        &server.url("/v1/eval"),
        &json!({"run": {"q1": [{"id": "d1", "score": 2}, {"id": "d2", "score": 1}]},
                "qrels": {"q1": {"d2": 1}}}),
    );
    assert_eq!(status, 200, "{res}");
    // one relevant document at rank 2: nDCG@10 = 1 / log2(3)
    let expected = 1.0 / 3f64.log2();
    assert!(
        (res["mean"]["ndcg@10"].as_f64().unwrap() - expected).abs() < 1e-4,
        "{res}"
    );

    // health, OpenAPI, JSON access logs
    let (status, health) = get_json(&server.url("/healthz"));
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let (status, doc) = get_json(&server.url("/openapi.json"));
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/v1/search"]["post"].is_object());
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains("\"path\":\"/v1/indexes\""))
        .unwrap_or_else(|| panic!("no JSON access log line:\n{log}"));
    assert_eq!(json(line)["status"], 200);

    // the service wrote nothing to the index
    drop(server);
    assert_eq!(snapshot(index()), before);
}

#[test]
fn serve_embeddings_equal_sift_embed() {
    let server = Server::start(&["--quiet"]);
    let texts = ["how do plants make sugar", "map projection distortion", "x"];
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("texts.txt");
    std::fs::write(&input, texts.join("\n")).unwrap();
    let clip = repo().join(CLIP);
    let expected: Vec<Vec<f32>> = ok(&[
        "embed",
        "--model",
        s(&clip),
        "--input",
        s(&input),
        "--out",
        "-",
    ])
    .lines()
    .map(|l| serde_json::from_value(json(l)["vector"].clone()).unwrap())
    .collect();
    let (st, res) = post(
        &server.url("/v1/embeddings"),
        &json!({"model": "tiny-clip-quickgelu", "input": texts}),
    );
    assert_eq!(st, 200, "{res}");
    assert_eq!(res["object"], "list");
    assert!(res["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    for (i, want) in expected.iter().enumerate() {
        let got: Vec<f32> = serde_json::from_value(res["data"][i]["embedding"].clone()).unwrap();
        assert_eq!(&got, want, "text {i}");
        assert_eq!(res["data"][i]["index"], i);
    }
    // base64, as OpenAI's Python client asks by default: little-endian float32
    let (st, res) = post(
        &server.url("/v1/embeddings"),
        &json!({"model": "tiny-clip-quickgelu", "input": texts[0], "encoding_format": "base64"}),
    );
    assert_eq!(st, 200, "{res}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(res["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let got: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, expected[0]);
    // an image as a data URL: the vector `sift embed --image` gives
    let png = repo().join("models/fixtures/vision/images/shapes_rgb_50x37.png");
    let list = tmp.path().join("images.txt");
    std::fs::write(&list, format!("{}\n", s(&png))).unwrap();
    let want: Vec<f32> = serde_json::from_value(
        json(
            ok(&[
                "embed",
                "--model",
                s(&clip),
                "--image",
                "--input",
                s(&list),
                "--out",
                "-",
            ])
            .lines()
            .next()
            .unwrap(),
        )["vector"]
            .clone(),
    )
    .unwrap();
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(&png).unwrap())
    );
    let (st, res) = post(
        &server.url("/v1/embeddings"),
        &json!({"model": "tiny-clip-quickgelu", "input": [url]}),
    );
    assert_eq!(st, 200, "{res}");
    let got: Vec<f32> = serde_json::from_value(res["data"][0]["embedding"].clone()).unwrap();
    assert_eq!(got, want);
    let (st, models) = get_json(&server.url("/v1/models"));
    assert_eq!(st, 200);
    assert_eq!(models["data"][0]["id"], "tiny-clip-quickgelu");
}

#[test]
fn chat_completions_come_from_the_local_generator_as_openai_clients_read_them() {
    // the tiny Qwen2-VL-Instruct: the GME fixture's weights with a chat template
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny-qwen2-vl-instruct");
    tiny_qwen2_vl_instruct(&model);
    let name = s(&model).to_string();
    let server = Server::start(&["--generator", &name, "--quiet"]);
    // Sift's own OpenAI-compatible client, and the generator run in this process
    use sift_generate::{Generator, Message, Part, Request, Sampling};
    let client = sift_generate::OpenAiCompatible::new(&server.url("/v1"), &name);
    let local = sift_generate::LocalQwen2Vl::load(&name, &candle_core::Device::Cpu).unwrap();
    let image = std::fs::read(repo().join("models/fixtures/gme/images/photo_120x90.jpg")).unwrap();
    let req = Request {
        messages: vec![
            Message::system("You describe images."),
            Message::user(vec![Part::image(image), Part::text("What is shown?")]),
        ],
        sampling: Sampling::greedy(10),
    };
    let served = client.generate(&req).unwrap();
    let direct = local.generate(&req).unwrap();
    assert_eq!(served, direct);
    assert_eq!(served.usage.completion_tokens, 10);
    assert_eq!(served.finish_reason.as_deref(), Some("length"));
    // the official openai client, sending the same messages
    let has_openai = Command::new("python3")
        .args(["-c", "import openai"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if has_openai {
        let script = repo().join("crates/sift-generate/tests/openai_client.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let spec = json!({"base_url": server.url("/v1"), "model": name, "body": client.body(&req)});
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), spec.to_string().as_bytes())
            .unwrap();
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "the openai client failed");
        let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(theirs["text"], served.text.as_str());
        assert_eq!(theirs["prompt_tokens"], served.usage.prompt_tokens);
        assert_eq!(theirs["finish_reason"], "length");
    } else {
        eprintln!("skipped: the openai Python client's chat completion (pip install openai)");
    }
    // the model list names the generator; the OpenAPI document has the route
    let (status, models) = get_json(&server.url("/v1/models"));
    assert_eq!(status, 200);
    assert!(
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == name.as_str()),
        "{models}"
    );
    let (_, doc) = get_json(&server.url("/openapi.json"));
    assert!(doc["paths"]["/v1/chat/completions"]["post"].is_object());
    // errors name the field
    let chat = server.url("/v1/chat/completions");
    let body = |extra: Value| {
        let mut b = json!({"model": name, "messages": [{"role": "user", "content": "hi"}]});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    for (extra, status, field) in [
        (json!({"stream": true}), 400, "stream"),
        (json!({"model": "other"}), 404, "model"),
        (json!({"max_tokens": 0}), 400, "max_tokens"),
        (
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            400,
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}),
            400,
            "messages[0].content[0]",
        ),
    ] {
        let (got, res) = post(&chat, &body(extra.clone()));
        assert_eq!(got, status, "{extra}: {res}");
        assert_eq!(res["error"]["field"], field, "{extra}: {res}");
    }
}

#[test]
fn serve_reranks_every_search_as_sift_search_does() {
    let ce = repo().join("models/fixtures/cross_encoder/tiny-bert-ce");
    let server = Server::start(&["--rerank", s(&ce), "--rerank-depth", "6"]);
    let query = "how do the plants and cells of a leaf make sugar from light and water";
    let (status, res) = post(
        &server.url("/v1/search"),
        &json!({"query": query, "domain": "biology", "top_k": 6}),
    );
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["reranker"], "tiny-bert-ce", "{res}");
    let cli = json(&ok(&[
        "search",
        "--index",
        s(index()),
        "--corpus",
        s(&sample()),
        "--domain",
        "biology",
        "--query",
        query,
        "--top-k",
        "6",
        "--rerank",
        s(&ce),
        "--rerank-depth",
        "6",
        "--json",
    ]));
    let hits = |v: &Value| -> Vec<(String, f64)> {
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                let id = h["id"].as_str().or(h["passage"]["id"].as_str());
                (
                    id.unwrap_or_default().to_string(),
                    h["score"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let (served, searched) = (hits(&res), hits(&cli));
    assert!(served.len() >= 4, "{res}");
    assert_eq!(served.len(), searched.len());
    for ((a, x), (b, y)) in served.iter().zip(&searched) {
        assert_eq!(a, b, "{res}\n{cli}");
        assert!((x - y).abs() < 1e-5, "{a}: {x} vs {y}");
    }
    // the agents' shapes go through it too: Serper's organic results in the same order
    let (status, serper) = post(&server.url("/search"), &json!({"q": query, "num": 6}));
    assert_eq!(status, 200, "{serper}");
    // a reranker without the corpus cannot start
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sift"))
        .args([
            "serve",
            "--index",
            s(index()),
            "--addr",
            "127.0.0.1:0",
            "--rerank",
            s(&ce),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("give the corpus"), "{err}");
}

/// Issue 52, 1: a served image file was re-read by its path: swapped for a link to a
/// system file it was served, swapped for a FIFO every worker that asked for it blocked
/// for ever. Now it is served only while it is the regular file vetted at start; anything
/// else is a prompt 500 whose detail stays in the log.
#[test]
fn serve_reads_corpus_files_only_as_they_were_vetted_at_start() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    copy_dir(&sample(), &corpus);
    let mut ids = Vec::new();
    for r in sift_core::Corpus::open(sample())
        .unwrap()
        .images("physics")
        .unwrap()
    {
        let r = r.unwrap();
        let p = corpus.join("document_images").join(&r.path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &r.bytes).unwrap();
        ids.push((r.path, p, r.bytes));
    }
    std::fs::remove_file(corpus.join("document_images/physics.parquet")).unwrap();
    let server = Server::start_on(
        index(),
        &corpus,
        &[
            "--domain",
            "physics",
            "--retriever",
            "bm25",
            "--max-concurrency",
            "2",
            "--timeout",
            "5",
        ],
    );
    let image_url = |id: &str| server.url(&format!("/v1/physics/image/{id}"));
    let (id, path, bytes) = &ids[0];
    let (status, _, got) = get(&image_url(id));
    assert_eq!(status, 200);
    assert_eq!(&got, bytes);

    // a link to a file outside the corpus (the original kept, so its inode is not reused)
    let secret = tmp.path().join("passwd");
    std::fs::write(&secret, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::fs::rename(path, tmp.path().join("kept.png")).unwrap();
    symlink(&secret, path).unwrap();
    let (status, _, body) = get(&image_url(id));
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 500, "{text}");
    assert!(!text.contains("root:x"), "{text}");
    assert!(
        !text.contains(s(tmp.path())),
        "the path stays in the log: {text}"
    );
    assert!(text.contains("internal error"), "{text}");

    // a FIFO: every request answered at once, more of them than there are workers
    std::fs::remove_file(path).unwrap();
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
    let start = Instant::now();
    for _ in 0..4 {
        let (status, _, _) = get(&image_url(id));
        assert_eq!(status, 500);
    }
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    // the other images are still served, and the log has the detail
    let (other, _, other_bytes) = &ids[1];
    let (status, _, got) = get(&image_url(other));
    assert_eq!(status, 200);
    assert_eq!(&got, other_bytes);
    let log = server.log();
    assert!(log.contains("not a regular file"), "{log}");
}
