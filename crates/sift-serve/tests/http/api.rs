//! Searches over every domain, the Serper, SerpAPI and reader shapes, API keys, links and
//! security headers.
use super::*;

#[test]
fn serve_without_a_domain_merges_every_domain_and_answers_serper_serpapi_and_readers() {
    let server = Server::start(options());
    let broad = "surface area distance energy light water cell";

    // no domain: one ranking over every domain, scored as their union; a named domain
    // still restricts (scored with its own statistics, so its order may differ: the same
    // passages match)
    let (status, all) = post(
        &server.url("/v1/search"),
        &json!({"query": broad, "top_k": 40, "max_text_chars": 0}),
    );
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["domains"], json!(["biology", "gis", "physics"]));
    assert!(all.get("domain").is_none(), "{all}");
    let hits = all["hits"].as_array().unwrap();
    let seen: std::collections::BTreeSet<&str> =
        hits.iter().map(|h| h["domain"].as_str().unwrap()).collect();
    assert_eq!(seen.len(), 3, "{all}");
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let (_, gis) = post(
        &server.url("/v1/search"),
        &json!({"query": broad, "top_k": 40, "domain": "gis"}),
    );
    assert_eq!(gis["domain"], "gis");
    let gis_ids: std::collections::BTreeSet<&str> = gis["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    let merged_gis: std::collections::BTreeSet<&str> = hits
        .iter()
        .filter(|h| h["domain"] == "gis")
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(merged_gis, gis_ids);
    // dense: the merged ranking is the per-domain rankings' cosines merged
    let (_, dense) = post(
        &server.url("/v1/search"),
        &json!({"query": broad, "top_k": 5, "retriever": "dense:tiny-clip-quickgelu"}),
    );
    let mut best: Vec<(f64, String)> = Vec::new();
    for d in ["biology", "gis", "physics"] {
        let (_, one) = post(
            &server.url("/v1/search"),
            &json!({"query": broad, "top_k": 5, "domain": d, "retriever": "dense:tiny-clip-quickgelu"}),
        );
        for h in one["hits"].as_array().unwrap() {
            best.push((
                h["score"].as_f64().unwrap(),
                h["id"].as_str().unwrap().into(),
            ));
        }
    }
    best.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    let want: Vec<&str> = best.iter().take(5).map(|x| x.1.as_str()).collect();
    let got: Vec<&str> = dense["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, want);

    // Serper by GET (smolagents) equals Serper by POST; paging by num
    let (status, _, text) = get_with(
        &server.url(
            "/search?q=surface+area+distance+energy+light+water+cell&num=4&api_key=x&tbs=qdr:y",
        ),
        &[],
    );
    assert_eq!(status, 200, "{text}");
    let by_get = json(&text);
    let (_, by_post) = post(&server.url("/search"), &json!({"q": broad, "num": 4}));
    assert_eq!(by_get["organic"], by_post["organic"]);
    assert_eq!(by_get["searchParameters"]["tbs"], "qdr:y");
    let (_, page2) = post(
        &server.url("/search"),
        &json!({"q": broad, "num": 2, "extendParams": {"page": 2}}),
    );
    assert_eq!(page2["organic"][0]["position"], 3, "{page2}");
    assert_eq!(page2["organic"][0]["link"], by_post["organic"][2]["link"]);
    // a batch is answered with a list
    let (status, batch) = post(
        &server.url("/images"),
        &json!([{"q": "leaf", "num": 2}, {"q": "map", "num": 1}]),
    );
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch[0]["images"].as_array().unwrap().len(), 2);
    assert_eq!(batch[1]["images"].as_array().unwrap().len(), 1);
    for kind in ["videos", "news"] {
        let (status, res) = post(&server.url(&format!("/{kind}")), &json!({"q": "x"}));
        assert_eq!(status, 200, "{res}");
        assert_eq!(res[kind], json!([]));
    }
    // lens refuses URLs it would have to fetch
    let (status, res) = post(
        &server.url("/lens"),
        &json!({"url": "https://example.com/cat.png"}),
    );
    assert_eq!(status, 400, "{res}");
    assert_eq!(res["error"]["field"], "url");
    assert!(
        res["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fetches nothing")
    );

    // SerpAPI: its shapes, and its errors as it writes them
    let (status, res) = get_json(&server.url(&format!(
        "/search?engine=google&q={}&num=3&start=1&gl=us&hl=en&api_key=secret",
        broad.replace(' ', "+")
    )));
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["organic_results"][0]["position"], 2, "{res}");
    assert_eq!(
        res["organic_results"][0]["link"], by_post["organic"][1]["link"],
        "start skips as page does"
    );
    assert!(
        !res["search_metadata"]["json_endpoint"]
            .as_str()
            .unwrap()
            .contains("secret")
    );
    assert!(res["search_parameters"].get("api_key").is_none());
    let (status, res) = get_json(&server.url("/search.json?engine=google_images&q=leaf&num=2"));
    assert_eq!(status, 200, "{res}");
    let original = res["images_results"][0]["original"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, res) = get_json(&server.url(&format!(
        "/search.json?engine=google_lens&url={}",
        original.replace(':', "%3A").replace('/', "%2F")
    )));
    assert_eq!(status, 200, "{res}");
    assert_eq!(
        res["visual_matches"][0]["image"],
        original.as_str(),
        "{res}"
    );
    let (status, res) = get_json(&server.url("/search.json?engine=yandex&q=x"));
    assert_eq!(
        (status, res["error"].as_str()),
        (400, Some("Unsupported `yandex` search engine."))
    );
    let (status, res) = get_json(&server.url("/search.json?engine=google"));
    assert_eq!(
        (status, res["error"].as_str()),
        (400, Some("Missing query `q` parameter."))
    );
    let (status, res) = get_json(&server.url("/search.json?engine=google&q=zzyzx"));
    assert_eq!(status, 200);
    assert!(
        res["error"]
            .as_str()
            .unwrap()
            .contains("hasn't returned any results")
    );

    // readable pages: HTML by default, Markdown and text on request, the JSON API unchanged
    let link = by_post["organic"][0]["link"].as_str().unwrap().to_string();
    let (status, ct, html) = get_with(&link, &[]);
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/html"), "{ct}");
    assert!(html.contains("<title>") && html.contains("<p>"), "{html}");
    let (_, ct, md) = get_with(&link, &[("accept", "text/markdown")]);
    assert!(
        ct.starts_with("text/markdown") && md.starts_with("# "),
        "{ct}\n{md}"
    );
    let (_, ct, _) = get_with(&link, &[("accept", "text/plain")]);
    assert!(ct.starts_with("text/plain"), "{ct}");
    let doc = link.replace("/page/", "/doc/");
    let (_, ct, body) = get_with(&doc, &[]);
    assert!(ct.starts_with("application/json"), "{ct}");
    assert!(json(&body)["contents"].is_string());
    let (_, ct, _) = get_with(&doc, &[("accept", "text/html")]);
    assert!(ct.starts_with("text/html"), "{ct}");
    // an image's page shows the image
    let (_, images) = post(&server.url("/images"), &json!({"q": "leaf", "num": 1}));
    let (status, _, html) = get_with(images["images"][0]["link"].as_str().unwrap(), &[]);
    assert_eq!(status, 200);
    assert!(html.contains("<img src=\"http://"), "{html}");

    // Jina Reader: /r/{url} and {url} after the host; other sites refused
    let (status, ct, text) = get_with(&server.url(&format!("/r/{link}")), &[]);
    assert_eq!(status, 200, "{text}");
    assert!(ct.starts_with("text/plain"), "{ct}");
    assert!(
        text.starts_with("Title: ") && text.contains(&format!("URL Source: {link}")),
        "{text}"
    );
    let (status, _, same) = get_with(&server.url(&format!("/{link}")), &[]);
    assert_eq!((status, &same), (200, &text));
    let (_, _, j) = get_with(
        &server.url(&format!("/r/{link}")),
        &[("accept", "application/json")],
    );
    let j = json(&j);
    assert_eq!(j["code"], 200);
    assert!(
        j["data"]["content"].as_str().unwrap().starts_with("# "),
        "{j}"
    );
    let (status, _, body) = get_with(&server.url("/r/https://en.wikipedia.org/wiki/Map"), &[]);
    assert_eq!(status, 400, "{body}");
    assert_eq!(json(&body)["error"]["field"], "url");
    drop(server);

    // an API key: every route but /healthz wants it, in any of the harnesses' three places
    let server = Server::start(HttpOptions {
        api_key: Some("k3y".to_string()),
        ..options()
    });
    let (status, _) = post(&server.url("/search"), &json!({"q": "leaf"}));
    assert_eq!(status, 401);
    let (status, res) = get_json(&server.url("/search.json?q=leaf&api_key=wrong"));
    assert_eq!(status, 401);
    assert!(res["error"].is_string(), "{res}");
    let (status, _, _) = get_with(&server.url("/search?q=leaf&api_key=k3y"), &[]);
    assert_eq!(status, 200);
    let (status, _, _) = get_with(&server.url("/search?q=leaf"), &[("x-api-key", "k3y")]);
    assert_eq!(status, 200);
    let (status, _, _) = get_with(
        &server.url("/v1/indexes"),
        &[("authorization", "Bearer k3y")],
    );
    assert_eq!(status, 200);
    let (status, _, _) = get_with(&server.url("/healthz"), &[]);
    assert_eq!(status, 200);
}

/// Issue 52, 10 and (b): ids with `.` / `..` segments gave links that browsers and
/// `requests` normalise to another path; the dots of such segments are escaped and the
/// routes decode them back. Every answer says `nosniff`; HTML pages carry a strict CSP.
#[test]
fn serve_links_keep_dot_segments_and_answers_carry_security_headers() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = beir(
        tmp.path(),
        concat!(
            r#"{"_id": "docs/../notes/x", "text": "Laminar boundary layer flow over a flat plate."}"#,
            "\n",
            r#"{"_id": "./y", "text": "Heat transfer in supersonic flow."}"#,
            "\n"
        ),
        r#"{"_id": "q1", "text": "boundary layer"}"#,
        "query-id\tcorpus-id\tscore\nq1\tdocs/../notes/x\t1\n",
    );
    let index = tmp.path().join("idx");
    build_index(&corpus, &index, &[]);
    let server = Server::start_with(
        ServeConfig {
            corpus: Some(corpus.clone()),
            ..ServeConfig::new(&index)
        },
        HttpOptions::default(),
    );
    let (status, res) = post(
        &server.url("/v1/search"),
        &json!({"query": "boundary layer flow", "top_k": 2}),
    );
    assert_eq!(status, 200, "{res}");
    let hits = res["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{res}");
    for hit in hits {
        for key in ["page_url", "passage_url"] {
            let link = hit[key].as_str().unwrap();
            // what requests / urllib3 / a browser would drop (RFC 3986 remove_dot_segments)
            assert!(
                !link.split('/').any(|seg| seg == "." || seg == ".."),
                "{key} {link}"
            );
            let (status, ct, body) = get_with(&server.url(link), &[("accept", "text/html")]);
            assert_eq!(status, 200, "{link}: {body}");
            assert!(ct.starts_with("text/html"), "{ct}");
            assert!(body.contains(hit["text"].as_str().unwrap()), "{body}");
        }
    }
    let page = hits[0]["page_url"].as_str().unwrap();
    let headers = |path: &str| {
        let r = agent().get(&server.url(path)).call().unwrap();
        let h = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        (
            r.status().as_u16(),
            h("x-content-type-options"),
            h("content-security-policy"),
        )
    };
    let (status, nosniff, csp) = headers(page);
    assert_eq!(status, 200);
    assert_eq!(nosniff, "nosniff");
    assert!(
        csp.contains("default-src 'none'") && csp.contains("img-src 'self' data:"),
        "{csp}"
    );
    assert!(!csp.contains("script-src"), "{csp}");
    for path in ["/v1/indexes", "/no/such/route", "/healthz"] {
        let (_, nosniff, _) = headers(path);
        assert_eq!(nosniff, "nosniff", "{path}");
    }
}

/// Issue 52, 2: a reader URL with raw UTF-8 where an escaped scheme would be was cut at a
/// byte offset inside a character: the handler panicked and the client got no answer.
#[test]
fn serve_reader_urls_with_raw_utf8_get_answers() {
    let server = Server::start_with(
        ServeConfig {
            retrievers: vec!["bm25".to_string()],
            ..config()
        },
        HttpOptions::default(),
    );
    for path in [
        "/r/http%3\u{e9}xxx",
        "/r/123456\u{e9}",
        "/http%3\u{e9}xxx",
        "/r/h\u{e9}",
    ] {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        let reply = raw(&server, request.as_bytes(), Duration::from_secs(10));
        let (status, body) = reply.answer();
        assert!(status == 400 || status == 404, "{path}: {status} {body}");
    }
    let (status, _) = get_json(&server.url("/healthz"));
    assert_eq!(status, 200);
}
