//! The HTTP client calls the service tests make (ureq: statuses as values, a 60 s limit,
//! bodies up to 64 MiB), shared by the command's tests (tests/serve/) and sift-serve's
//! in-process ones (crates/sift-serve/tests/http/).
use std::time::Duration;

use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// (status, body) of a POST of `body` (raw) with a JSON content type.
pub fn post_raw(url: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut r = agent()
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = r.status().as_u16();
    let bytes = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    (status, bytes)
}

pub fn post(url: &str, body: &Value) -> (u16, Value) {
    let (status, bytes) = post_raw(url, body.to_string().as_bytes());
    (status, json(&String::from_utf8(bytes).unwrap()))
}

/// GET: (status, content type, body).
pub fn get(url: &str) -> (u16, String, Vec<u8>) {
    let mut r = agent()
        .get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    (status, ct, bytes)
}

pub fn get_json(url: &str) -> (u16, Value) {
    let (status, _, bytes) = get(url);
    (status, json(&String::from_utf8(bytes).unwrap()))
}

/// GET with headers: (status, content type, body).
pub fn get_with(url: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut req = agent().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut r = req.call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (
        r.status().as_u16(),
        ct,
        r.body_mut().read_to_string().unwrap(),
    )
}
