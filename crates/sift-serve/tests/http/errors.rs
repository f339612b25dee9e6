//! Bad input of every kind answered with JSON errors naming the field, and the limits on
//! bodies, images and pixels.
use super::*;

#[test]
fn serve_refuses_bad_input_with_json_errors_naming_the_field() {
    let server = Server::start(HttpOptions {
        max_body_bytes: 200_000,
        ..options()
    });
    let search = server.url("/v1/search");
    let error = |status: u16, body: &Value, want: u16, field: Option<&str>| {
        assert_eq!(status, want, "{body}");
        assert!(body["error"]["message"].is_string(), "{body}");
        assert_eq!(body["error"]["field"].as_str(), field, "{body}");
    };
    let (st, b) = post(&search, &json!({"query": 3}));
    error(st, &b, 400, Some("query"));
    let (st, b) = post(
        &search,
        &json!({"query": "x", "domain": "biology", "top_k": 0}),
    );
    error(st, &b, 400, Some("top_k"));
    let (st, b) = post(
        &search,
        &json!({"query": "x", "domain": "biology", "top_k": "ten"}),
    );
    error(st, &b, 400, Some("top_k"));
    let (st, b) = post(&search, &json!({"query": "x", "domain": "chemistry"}));
    error(st, &b, 404, Some("domain"));
    // no domain: every domain, merged
    let (st, b) = post(&search, &json!({"query": "x"}));
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["domains"].as_array().unwrap().len(), 3, "{b}");
    let (st, b) = post(
        &search,
        &json!({"query": "x", "domain": "gis", "colour": 1}),
    );
    error(st, &b, 400, Some("colour"));
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field"),
        "{b}"
    );
    let (st, b) = post(
        &search,
        &json!({"query": "x", "domain": "gis", "retriever": "dense:nope"}),
    );
    error(st, &b, 400, Some("retriever"));
    let (st, b) = post(
        &search,
        &json!({"query": "x", "domain": "gis", "retriever": "bm25", "candidates": "images"}),
    );
    error(st, &b, 400, Some("candidates"));
    let (st, b) = post(
        &search,
        &json!({"domain": "gis", "images": [{"data": "%%%"}]}),
    );
    error(st, &b, 400, Some("images[0].data"));
    let (st, b) = post(&search, &json!({"domain": "gis", "images": [{}]}));
    error(st, &b, 400, Some("images[0]"));
    let (st, b) = post(
        &search,
        &json!({"domain": "gis", "images": [{"image_id": "../../../etc/passwd"}]}),
    );
    error(st, &b, 404, Some("images[0].image_id"));

    // a decompression bomb: a small PNG whose header claims 60,000 x 60,000 pixels
    let bomb = {
        let img = image::GrayImage::from_pixel(8, 8, image::Luma([0]));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        let mut b = out.into_inner();
        b[16..20].copy_from_slice(&60_000u32.to_be_bytes());
        b[20..24].copy_from_slice(&60_000u32.to_be_bytes());
        let crc = crc32fast::hash(&b[12..29]);
        b[29..33].copy_from_slice(&crc.to_be_bytes());
        b
    };
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bomb);
    let (st, b) = post(
        &search,
        &json!({"domain": "gis", "images": [{"data": b64}]}),
    );
    error(st, &b, 413, Some("images[0].data"));

    // an oversized body, far larger than the socket buffers: the 413 arrives after the whole
    // body was sent (the service drains it), not as a reset connection
    let big = json!({"query": "x".repeat(8_000_000), "domain": "gis"});
    let (st, body) = post_raw(&search, big.to_string().as_bytes());
    assert_eq!(st, 413);
    assert_eq!(
        json(&String::from_utf8(body).unwrap())["error"]["type"],
        "payload_too_large"
    );
    // not JSON
    let (st, body) = post_raw(&search, b"{\"query\": ");
    assert_eq!(st, 400, "{}", String::from_utf8_lossy(&body));
    let mut r = agent()
        .post(&search)
        .header("content-type", "text/plain")
        .send("query")
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    assert!(
        r.body_mut()
            .read_to_string()
            .unwrap()
            .contains("application/json")
    );

    // ids are looked up, never joined to paths: traversal in every spelling is a JSON 404
    for path in [
        "/v1/biology/doc/../../../../etc/passwd",
        "/v1/biology/doc/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/v1/biology/doc//etc/passwd",
        "/v1/biology/image/%2Fetc%2Fpasswd",
        "/v1/biology/image/../../Cargo.toml",
        "/v1/..%2f..%2fetc/doc/passwd",
        "/v1/biology/image/biology%2F..%2F..%2F..%2Fdocuments%2Fbiology.parquet",
    ] {
        let (st, ct, body) = get(&server.url(path));
        assert_eq!(st, 404, "{path}: {}", String::from_utf8_lossy(&body));
        assert!(ct.starts_with("application/json"), "{path}: {ct}");
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains("root:"), "{path}: {text}");
    }
    // query strings and paths that do not parse are JSON 400s too (schemathesis found the
    // plain-text ones)
    for path in [
        "/v1/gis/search?hits=1&hits=2&query=x",
        "/v1/gis/search?query=x&hits=many",
    ] {
        let (st, ct, body) = get(&server.url(path));
        assert_eq!(st, 400, "{path}: {}", String::from_utf8_lossy(&body));
        assert!(ct.starts_with("application/json"), "{path}: {ct}");
    }
    // unknown routes and methods
    let (st, b) = get_json(&server.url("/v2/search"));
    assert_eq!((st, b["error"]["type"].as_str()), (404, Some("not_found")));
    let (st, b) = get_json(&server.url("/v1/search"));
    assert_eq!(
        (st, b["error"]["type"].as_str()),
        (405, Some("method_not_allowed"))
    );
    // OpenAI shapes
    let emb = server.url("/v1/embeddings");
    let (st, b) = post(&emb, &json!({"model": "gpt-4", "input": "x"}));
    error(st, &b, 404, Some("model"));
    let (st, b) = post(
        &emb,
        &json!({"model": "tiny-clip-quickgelu", "input": [1, 2]}),
    );
    // the element at fault (an untagged enum named only `input`)
    error(st, &b, 400, Some("input[0]"));
    let (st, b) = post(
        &emb,
        &json!({"model": "tiny-clip-quickgelu", "input": "x", "dimensions": 7}),
    );
    error(st, &b, 400, Some("dimensions"));

    // nothing above took the service down
    let (st, _) = get_json(&server.url("/healthz"));
    assert_eq!(st, 200);
    // and nothing panicked on the service's threads
    let panics = server.panics();
    assert!(panics.is_empty(), "{panics:#?}");
}

#[test]
fn serve_answers_requests_it_cannot_read_with_json_errors() {
    let server = Server::start(options());
    let limit = Duration::from_secs(10);
    let check = |bytes: Vec<u8>, want: u16, kind: &str| {
        let reply = raw(&server, &bytes, limit);
        let (status, body) = reply.answer();
        assert_eq!(
            status,
            want,
            "{kind}: {body} ({} bytes back, closed: {}, after {:?})",
            reply.bytes.len(),
            reply.closed,
            reply.elapsed
        );
        assert_eq!(body["error"]["type"], kind, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{body}"
        );
        assert!(reply.closed, "{want}: the connection stays open");
    };
    // a URI over hyper's 65,534 bytes
    let mut long_uri = b"GET /v1/indexes?q=".to_vec();
    long_uri.extend(std::iter::repeat_n(b'a', 70_000));
    long_uri.extend_from_slice(b" HTTP/1.1\r\nHost: localhost\r\n\r\n");
    check(long_uri, 414, "uri_too_long");
    // 500 KB of headers (over hyper's 400 KiB buffer)
    let mut big = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 500_000));
    big.extend_from_slice(b"\r\n\r\n");
    check(big, 431, "headers_too_large");
    // 200 headers (over 100)
    let mut many = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n".to_vec();
    for i in 0..200 {
        many.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    check(many, 431, "headers_too_large");
    // not HTTP
    check(b"HELLO THERE\r\n\r\n".to_vec(), 400, "invalid_request");
    // MCP over HTTP with a body that is not JSON, and without accepting SSE
    let mcp = |ct: &str, accept: &str| {
        let body = r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#;
        format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: {ct}\r\n\
             Accept: {accept}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    check(
        mcp("text/plain", "application/json, text/event-stream"),
        415,
        "unsupported_media_type",
    );
    check(
        mcp("application/json", "application/json"),
        406,
        "not_acceptable",
    );
    // the service still answers
    let (st, _) = get_json(&server.url("/healthz"));
    assert_eq!(st, 200);
}

/// A PNG whose header claims `w` x `h` pixels (its data is one byte: it never decodes).
/// Requests made of such images cost nothing to send and, decoded, the service's workers.
fn png_claiming(w: u32, h: u32) -> Vec<u8> {
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut c = (data.len() as u32).to_be_bytes().to_vec();
        c.extend_from_slice(kind);
        c.extend_from_slice(data);
        let mut crc = crc32fast::Hasher::new();
        crc.update(kind);
        crc.update(data);
        c.extend_from_slice(&crc.finalize().to_be_bytes());
        c
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut png = vec![137, 80, 78, 71, 13, 10, 26, 10];
    png.extend(chunk(b"IHDR", &ihdr));
    png.extend(chunk(b"IDAT", b"x"));
    png.extend(chunk(b"IEND", b""));
    png
}

/// Issue 52, 5: `/v1/embeddings` took 256 images of up to 40 Mpx each (search takes 8): one
/// small request of cheap images that claim many pixels kept every worker decoding. Now it
/// takes `max_images` images of `max_request_pixels` in all (`sift serve --max-images`,
/// `--max-request-pixels`), both refused from the images' headers before anything is
/// decoded, and `/v1/indexes` says so.
#[test]
fn serve_embeddings_take_as_many_images_and_pixels_as_a_search() {
    let mut config = config();
    config.limits.max_request_pixels = 60_000_000;
    let server = Server::start_with(config, HttpOptions::default());
    let (status, info) = get_json(&server.url("/v1/indexes"));
    assert_eq!(status, 200);
    assert_eq!(info["max_images"], 8, "{info}");
    assert_eq!(info["max_request_pixels"], 60_000_000u64, "{info}");
    assert_eq!(info["max_image_pixels"], 40_000_000u64, "{info}");
    let url = |w, h| {
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(png_claiming(w, h))
        )
    };
    let embeddings = server.url("/v1/embeddings");
    // 9 images: refused before one is decoded
    let nine: Vec<String> = (0..9).map(|_| url(1000, 1000)).collect();
    let start = Instant::now();
    let (status, body) = post(
        &embeddings,
        &json!({"model": "tiny-clip-quickgelu", "input": nine}),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "input", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 8"),
        "{body}"
    );
    // 2 of 30 Mpx fit the budget, the third is over it: 413 naming it, from its header
    let three: Vec<String> = (0..3).map(|_| url(6000, 5000)).collect();
    let (status, body) = post(
        &embeddings,
        &json!({"model": "tiny-clip-quickgelu", "input": three}),
    );
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["field"], "input[2]", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("60000000 pixels per request"),
        "{body}"
    );
    // search's images are held to the same budget
    let images: Vec<Value> = (0..3).map(|_| json!({"data": url(6000, 5000)})).collect();
    let (status, body) = post(
        &server.url("/v1/search"),
        &json!({"query": "x", "images": images, "retriever": "dense:tiny-clip-quickgelu"}),
    );
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["field"], "images[2]", "{body}");
    assert!(start.elapsed() < Duration::from_secs(30));
}
