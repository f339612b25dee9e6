//! The training harnesses' batch searches: Search-R1's and verl's `POST /retrieve`,
//! BrowseComp-Plus's single query on the same path, R1-Searcher's `POST /queries`, each
//! answer equal to `/v1/search`'s for the same query, over every domain of the index.
use super::*;

/// `/v1/search`'s hits for `query` over every domain: (id, score, text).
fn searched(server: &Server, query: &str, top_k: usize) -> Vec<(String, f64, String)> {
    let (status, res) = post(
        &server.url("/v1/search"),
        &json!({"query": query, "top_k": top_k, "max_text_chars": 1_000_000}),
    );
    assert_eq!(status, 200, "{res}");
    res["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["id"].as_str().unwrap().to_string(),
                h["score"].as_f64().unwrap(),
                h["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn retrieve_and_queries_answer_the_training_harnesses_as_search_does() {
    let server = Server::start(&["--max-batch-queries", "3"]);
    let queries = [
        "how do plants make sugar",
        "map projection distortion",
        "dark matter",
    ];
    let url = server.url("/retrieve");
    // Search-R1 / verl: every query in order, `"Title"\ntext` contents, scores on request
    let (status, res) = post(
        &url,
        &json!({"queries": queries, "topk": 3, "return_scores": true}),
    );
    assert_eq!(status, 200, "{res}");
    let result = res["result"].as_array().unwrap();
    assert_eq!(result.len(), queries.len());
    let mut domains = std::collections::BTreeSet::new();
    for (q, hits) in queries.iter().zip(result) {
        let want = searched(&server, q, 3);
        let hits = hits.as_array().unwrap();
        // BM25 finds at most topk; a query with fewer matches has fewer
        assert_eq!(hits.len(), want.len(), "{q}: {res}");
        assert!(!hits.is_empty() && hits.len() <= 3, "{q}: {res}");
        for (h, (id, score, text)) in hits.iter().zip(&want) {
            assert_eq!(h["document"]["id"], id.as_str());
            assert_eq!(h["score"].as_f64().unwrap(), *score);
            let contents = h["document"]["contents"].as_str().unwrap();
            // the reader splits the title off at the first newline
            let (title, body) = contents.split_once('\n').unwrap();
            assert_eq!(title, format!("\"{id}\""));
            assert_eq!(body, text);
            domains.insert(id.split('/').next().unwrap().to_string());
        }
    }
    // without scores each item is the document itself; a null topk is the default (3)
    let (status, plain) = post(&url, &json!({"queries": [queries[0]], "topk": null}));
    assert_eq!(status, 200, "{plain}");
    let first = &plain["result"][0];
    assert_eq!(first.as_array().unwrap().len(), 3);
    assert_eq!(first[0]["id"], result[0][0]["document"]["id"]);
    assert!(first[0].get("score").is_none(), "{plain}");
    // an empty batch is an empty result
    let (status, empty) = post(&url, &json!({"queries": []}));
    assert_eq!((status, empty), (200, json!({"result": []})));
    // BrowseComp-Plus: one query, {document: {title, text}, docid}
    let (status, one) = post(&url, &json!({"query": queries[1]}));
    assert_eq!(status, 200, "{one}");
    let want = searched(&server, queries[1], 3);
    let got = one["result"].as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for (h, (id, _, text)) in got.iter().zip(&want) {
        assert_eq!(h["docid"], id.as_str());
        assert_eq!(h["document"]["text"], text.as_str());
    }
    // R1-Searcher: the queries back, and each one's passage texts
    let (status, r1) = post(
        &server.url("/queries"),
        &json!({"queries": [queries[0], queries[2]], "k": 2}),
    );
    assert_eq!(status, 200, "{r1}");
    assert_eq!(r1["queries"], json!([queries[0], queries[2]]));
    for (i, q) in [queries[0], queries[2]].iter().enumerate() {
        let texts: Vec<String> = searched(&server, q, 2).into_iter().map(|h| h.2).collect();
        assert_eq!(r1["answers"][i], json!(texts));
    }
    // bad input names the field; past --max-batch-queries a 413 names the limit
    for (body, code, field) in [
        (json!({"queries": ["a"], "topk": 0}), 400, "topk"),
        (json!({"queries": ["a"], "topk": -2}), 400, "topk"),
        (json!({"queries": ["a"], "topk": 1_000_000}), 400, "topk"),
        (json!({"queries": ["a", 7]}), 400, "queries[1]"),
        (json!({"queries": ["a", "b", "c", "d"]}), 413, "queries"),
        (json!({"topk": 3}), 400, "queries"),
    ] {
        let (status, err) = post(&url, &body);
        assert_eq!(status, code, "{body}: {err}");
        assert_eq!(err["error"]["field"], field, "{body}: {err}");
    }
    // invalid UTF-8 names the query; a 1 MB query is answered (BM25 takes its terms, a
    // dense model cuts it to its length)
    let (status, body) = post_raw(&url, b"{\"queries\": [\"ok\", \"\xff\xfe\"]}");
    let err = json(&String::from_utf8_lossy(&body));
    assert_eq!(
        (status, err["error"]["field"].clone()),
        (400, json!("queries[1]")),
        "{err}"
    );
    let big = "how do plants make sugar ".repeat(40_000);
    let (status, res) = post(&url, &json!({"queries": [big], "topk": 2}));
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["result"][0].as_array().unwrap().len(), 2, "{res}");
    let (status, err) = post(&server.url("/queries"), &json!({"queries": ["a"], "k": 0}));
    assert_eq!(
        (status, err["error"]["field"].clone()),
        (400, json!("k")),
        "{err}"
    );
    // one index of several domains, searched as one
    assert!(domains.len() >= 2, "{domains:?}");
}

#[test]
fn tei_embed_gives_the_vectors_of_the_openai_route() {
    let server = Server::start(&["--quiet"]);
    let texts = ["how do plants make sugar", "map projection distortion"];
    let (status, tei) = post(
        &server.url("/embed"),
        &json!({"inputs": texts, "truncate": true}),
    );
    assert_eq!(status, 200, "{tei}");
    let (status, openai) = post(
        &server.url("/v1/embeddings"),
        &json!({"model": "tiny-clip-quickgelu", "input": texts}),
    );
    assert_eq!(status, 200, "{openai}");
    let vectors = tei.as_array().unwrap();
    assert_eq!(vectors.len(), 2);
    // the same float32 values (OpenAI's route writes each as its float64 value)
    let f32s = |v: &Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    for (i, v) in vectors.iter().enumerate() {
        assert_eq!(f32s(v), f32s(&openai["data"][i]["embedding"]), "input {i}");
    }
    let (status, one) = post(&server.url("/embed"), &json!({"inputs": texts[0]}));
    assert_eq!(status, 200, "{one}");
    assert_eq!(one[0], vectors[0]);
    let (status, err) = post(
        &server.url("/embed"),
        &json!({"inputs": "x", "normalize": false}),
    );
    assert_eq!(
        (status, err["error"]["field"].clone()),
        (400, json!("normalize")),
        "{err}"
    );
}

/// A knowledge base in Search-R1's layout (`{"id", "contents"}`, the title quoted on the
/// first line) beside a titled row and images, indexed with BM25 and the tiny CLIP.
fn search_r1_kb(dir: &Path) -> PathBuf {
    let images = dir.join("img");
    std::fs::create_dir_all(&images).unwrap();
    for name in ["fern.png", "volcano.png"] {
        std::fs::copy(
            repo().join("corpora/kb-example/images").join(name),
            images.join(name),
        )
        .unwrap();
    }
    let rows = [
        json!({"id": "0", "contents": "\"Fern\"\nFerns are plants that grow leaves from spores in shade.",
               "image_path": "img/fern.png"}),
        json!({"id": "1", "contents": "\"Volcano\"\nA volcano erupts lava, ash and gas from the crust.",
               "image_path": "img/volcano.png"}),
        json!({"id": "2", "title": "Tide", "text": "The tide rises and falls twice a day."}),
        json!({"id": "3", "contents": "no title line here about plants"}),
    ];
    let kb = dir.join("wiki.jsonl");
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&kb, text).unwrap();
    kb
}

#[test]
fn search_r1_corpora_asearcher_access_vrag_images_and_bing_answer_as_their_clients_read() {
    let dir = tempfile::tempdir().unwrap();
    let kb = search_r1_kb(dir.path());
    let index = dir.path().join("index");
    let clip = repo().join(CLIP);
    index_ok(&kb, &index, &["--dense", s(&clip), "-q"]);
    let server = Server::start_on(&index, &kb, &["--api-key", "k", "--quiet"]);
    let key = |url: &str| {
        format!(
            "{url}{}api_key=k",
            if url.contains('?') { '&' } else { '?' }
        )
    };
    // Search-R1: a `contents` row comes back as it is; others as "Title"\nbody
    let (status, res) = post(
        &key(&server.url("/retrieve")),
        &json!({"queries": ["fern plants leaves", "tide rises"], "topk": 4}),
    );
    assert_eq!(status, 200, "{res}");
    let docs: std::collections::BTreeMap<String, Value> = res["result"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().cloned())
        .map(|d| (d["id"].as_str().unwrap().to_string(), d))
        .collect();
    assert_eq!(
        docs["0"]["contents"],
        "\"Fern\"\nFerns are plants that grow leaves from spores in shade."
    );
    assert_eq!(
        docs["2"]["contents"],
        "\"Tide\"\nThe tide rises and falls twice a day."
    );
    assert_eq!(
        docs["3"]["contents"],
        "\"3\"\nno title line here about plants"
    );
    // ASearcher: each document's url, read back through POST /access; other URLs are null
    let url = docs["0"]["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&server.base), "{url}");
    let (status, pages) = post(
        &key(&server.url("/access")),
        &json!({"urls": [url, "https://en.wikipedia.org/wiki/Fern"]}),
    );
    assert_eq!(status, 200, "{pages}");
    let page = &pages["result"][0];
    assert_eq!(page["title"], "Fern", "{pages}");
    let contents = page["contents"].as_str().unwrap();
    assert!(
        contents.starts_with(docs["0"]["contents"].as_str().unwrap()),
        "{pages}"
    );
    assert!(
        contents.contains("/v1/wiki/image/"),
        "the page's image: {pages}"
    );
    assert_eq!(pages["result"][1], Value::Null);
    // BrowseComp-Plus: the title unquoted, the body without it
    let (status, one) = post(
        &key(&server.url("/retrieve")),
        &json!({"query": "volcano lava"}),
    );
    assert_eq!(status, 200, "{one}");
    let top = &one["result"][0];
    assert_eq!(top["docid"], "1", "{one}");
    assert_eq!(top["document"]["title"], "Volcano");
    assert_eq!(
        top["document"]["text"],
        "A volcano erupts lava, ash and gas from the crust."
    );
    // VRAG: page images per query, idx from 0, image_file a file its client opens
    let (status, _, body) = get(&key(&server.url("/search?queries=fern&queries=volcano")));
    let vrag = json(&String::from_utf8(body).unwrap());
    assert_eq!(status, 200, "{vrag}");
    assert_eq!(vrag.as_array().unwrap().len(), 2, "{vrag}");
    for (q, hits) in ["fern", "volcano"].iter().zip(vrag.as_array().unwrap()) {
        let (status, want) = post(
            &key(&server.url("/v1/search")),
            &json!({"query": q, "candidates": "images", "top_k": 10}),
        );
        assert_eq!(status, 200, "{want}");
        let hits = hits.as_array().unwrap();
        assert_eq!(hits.len(), want["hits"].as_array().unwrap().len(), "{vrag}");
        for (i, (h, w)) in hits
            .iter()
            .zip(want["hits"].as_array().unwrap())
            .enumerate()
        {
            assert_eq!(h["idx"], i);
            assert_eq!(h["id"], w["id"]);
            let file = PathBuf::from(h["image_file"].as_str().unwrap());
            assert!(file.is_absolute() && file.is_file(), "{h}");
            assert_eq!(std::fs::read(&file).unwrap(), {
                let (_, _, bytes) = get(&key(h["image_url"].as_str().unwrap()));
                bytes
            });
        }
    }
    // Bing v7: its key header, webPages.value[] from `offset`, `count` of them
    let bing = |k: &str| {
        common::http::agent()
            .get(&server.url("/v7.0/search?q=plants%20leaves&count=2&offset=1&mkt=en-US"))
            .header("Ocp-Apim-Subscription-Key", k)
            .call()
            .unwrap()
    };
    assert_eq!(bing("wrong").status().as_u16(), 401);
    let mut r = bing("k");
    assert_eq!(r.status().as_u16(), 200);
    let b = json(&r.body_mut().read_to_string().unwrap());
    let (status, want) = post(
        &key(&server.url("/v1/search")),
        &json!({"query": "plants leaves", "top_k": 3}),
    );
    assert_eq!(status, 200);
    let value = b["webPages"]["value"].as_array().unwrap();
    let want = &want["hits"].as_array().unwrap()[1..];
    assert_eq!(value.len(), want.len(), "{b}");
    for (v, w) in value.iter().zip(want) {
        let title = w.get("title").and_then(Value::as_str);
        assert_eq!(
            v["name"].as_str(),
            Some(title.unwrap_or(w["id"].as_str().unwrap()))
        );
        assert!(
            v["url"]
                .as_str()
                .unwrap()
                .ends_with(w["page_url"].as_str().unwrap())
        );
        assert!(!v["snippet"].as_str().unwrap().is_empty());
    }
    assert_eq!(b["queryContext"]["originalQuery"], "plants leaves");
}
