//! MCP over streamable HTTP: the session cap, invalid params, body limits.
use super::*;

/// An MCP `initialize` POST over HTTP: (status, session id, body).
fn mcp_initialize(server: &Server) -> (u16, Option<String>, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let mut r = agent()
        .post(&server.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .send(body.to_string().as_bytes())
        .unwrap();
    let status = r.status().as_u16();
    let session = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let text = r.body_mut().read_to_string().unwrap_or_default();
    (status, session, text)
}

#[test]
fn serve_caps_mcp_sessions_over_http() {
    let server = Server::start(HttpOptions {
        max_mcp_sessions: 2,
        ..options()
    });
    let (st, first, text) = mcp_initialize(&server);
    assert_eq!(st, 200, "{text}");
    let first = first.expect("a session id");
    let (st, second, text) = mcp_initialize(&server);
    assert_eq!(st, 200, "{text}");
    assert!(second.is_some());
    // a third is refused, with the service's JSON error
    let (st, none, text) = mcp_initialize(&server);
    assert_eq!(st, 503, "{text}");
    assert!(none.is_none());
    let body = json(&text);
    assert_eq!(body["error"]["type"], "overloaded", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--max-mcp-sessions 2"), "{message}");
    // over HTTP too, arguments that are not an object are invalid params (-32602)
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "search", "arguments": "plants"}});
    let mut r = agent()
        .post(&server.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &first)
        .send(call.to_string().as_bytes())
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let answer = json(&r.body_mut().read_to_string().unwrap());
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    // closing one makes room
    let r = agent()
        .delete(&server.url("/mcp"))
        .header("mcp-session-id", &first)
        .call()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let (st, again, text) = mcp_initialize(&server);
    assert_eq!(st, 200, "{text}");
    assert!(again.is_some());
}

/// Issue 52 (c): MCP over HTTP refused bodies over rmcp's own 4 MiB while every other
/// endpoint took `max_body_bytes` (`--max-body-bytes`, 32 MiB): one limit now.
#[test]
fn serve_mcp_takes_bodies_up_to_max_body_bytes() {
    let server = Server::start_with(
        ServeConfig {
            retrievers: vec!["bm25".to_string()],
            ..config()
        },
        HttpOptions {
            max_body_bytes: 8_000_000,
            ..HttpOptions::default()
        },
    );
    let body = |name_bytes: usize| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "n".repeat(name_bytes), "version": "1"}}})
        .to_string()
    };
    let send = |text: String| {
        let mut r = agent()
            .post(&server.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .send(text.as_bytes())
            .unwrap();
        let status = r.status().as_u16();
        (status, r.body_mut().read_to_string().unwrap_or_default())
    };
    let (status, text) = send(body(5 << 20));
    assert_eq!(status, 200, "{}", &text[..text.len().min(500)]);
    let (status, text) = send(body(9_000_000));
    assert_eq!(status, 413, "{}", &text[..text.len().min(500)]);
}
