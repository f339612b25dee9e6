//! MCP over standard input and output (`sift serve --mcp-stdio`).
use super::*;

#[test]
fn mcp_over_stdio_lists_the_tools_and_searches() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let index = index().to_path_buf();
        let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sift")).configure(|c| {
            c.args([
                "serve",
                "--index",
                s(&index),
                "--corpus",
                s(&sample()),
                "--mcp-stdio",
            ]);
        });
        let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
        let tools = client.list_all_tools().await.unwrap();
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort_unstable();
        for want in [
            "search",
            "get_document",
            "image_search",
            "reverse_image_search",
            "crop_search",
            "list_indexes",
            "fuse_search_results",
            "eval_hits",
            "local_text_search",
            "local_text_to_image_search",
            "local_image_search",
        ] {
            assert!(names.contains(&want), "no tool {want}: {names:?}");
        }
        let args: serde_json::Map<String, Value> = serde_json::from_value(
            json!({"query": "how do plants make sugar", "index_name": "biology", "k": 3}),
        )
        .unwrap();
        let res = client
            .call_tool(CallToolRequestParams::new("search").with_arguments(args))
            .await
            .unwrap();
        assert_ne!(res.is_error, Some(true), "{res:?}");
        let hits = res.structured_content.expect("structured result")["hits"].clone();
        assert_eq!(hits.as_array().unwrap().len(), 3);
        let cli = json(&ok(&[
            "search",
            "--index",
            s(&index),
            "--domain",
            "biology",
            "--query",
            "how do plants make sugar",
            "--top-k",
            "3",
            "--json",
        ]));
        assert_eq!(hits[0]["id"], cli["hits"][0]["id"]);
        // BrowseComp-Plus's fields beside Sift's; no ignored arguments named
        for h in hits.as_array().unwrap() {
            assert_eq!(h["docid"], h["id"], "{h}");
            assert_eq!(h["snippet"], h["text"], "{h}");
        }
        // an argument the tool does not know is ignored and named, as FastMCP's tools do
        let args: serde_json::Map<String, Value> = serde_json::from_value(
            json!({"query": "how do plants make sugar", "index_name": "biology", "k": 3,
                   "snippet_max_tokens": 512}),
        )
        .unwrap();
        let res = client
            .call_tool(CallToolRequestParams::new("search").with_arguments(args))
            .await
            .unwrap();
        assert_ne!(res.is_error, Some(true), "{res:?}");
        let answer = res.structured_content.expect("structured result");
        assert_eq!(answer["hits"], hits);
        assert_eq!(answer["ignored_arguments"], json!(["snippet_max_tokens"]));
        // BrowseComp-Plus's get_document(docid): its docid and text, pyserini's index ignored
        let docid = hits[0]["id"].as_str().unwrap();
        let args: serde_json::Map<String, Value> =
            serde_json::from_value(json!({"docid": docid, "index": "msmarco"})).unwrap();
        let res = client
            .call_tool(CallToolRequestParams::new("get_document").with_arguments(args))
            .await
            .unwrap();
        let doc = res.structured_content.expect("structured result");
        assert_eq!(doc["docid"], docid, "{doc}");
        assert_eq!(doc["text"], doc["contents"], "{doc}");
        assert!(!doc["text"].as_str().unwrap().is_empty(), "{doc}");
        assert_eq!(doc["ignored_arguments"], json!(["index"]), "{doc}");
        // a tool error is an error result, not a dead server
        let args: serde_json::Map<String, Value> =
            serde_json::from_value(json!({"docid": "nope", "domain": "biology"})).unwrap();
        let res = client
            .call_tool(CallToolRequestParams::new("get_document").with_arguments(args))
            .await;
        match res {
            Ok(r) => assert_eq!(r.is_error, Some(true), "{r:?}"),
            Err(e) => assert!(e.to_string().contains("nope"), "{e}"),
        }
        client.cancel().await.unwrap();
    });
}

#[test]
fn mcp_over_stdio_answers_bad_lines_with_json_rpc_errors_and_keeps_going() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sift"))
        .args([
            "serve",
            "--index",
            s(index()),
            "--corpus",
            s(&sample()),
            "--mcp-stdio",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines: &[&[u8]] = &[
        b"this is not json\n",
        br#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}"#,
        b"\n",
        br#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#,
        b"\n{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"tools/call\"\n",
        br#"{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "search", "arguments": "how do plants make sugar"}}"#,
        b"\n",
        br#"{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "search", "arguments": ["plants"]}}"#,
        b"\n\xff\xfe\xfd\n",
        br#"{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "how do plants make sugar", "domain": "biology", "top_k": 2}}}"#,
        b"\n",
    ];
    for l in lines {
        stdin.write_all(l).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(json)
        .collect();
    let by_id = |id: Value| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer with id {id}: {answers:?}"))
    };
    let parse_errors: Vec<&Value> = answers
        .iter()
        .filter(|a| a["error"]["code"] == -32700)
        .collect();
    // "this is not json", the cut-off tools/call, the bytes that are not UTF-8
    assert_eq!(parse_errors.len(), 3, "{answers:?}");
    for e in parse_errors {
        assert_eq!(e["id"], Value::Null, "{e}");
        assert_eq!(e["jsonrpc"], "2.0", "{e}");
    }
    assert!(by_id(json!(1))["result"]["serverInfo"].is_object());
    for id in [3, 4] {
        let e = by_id(json!(id));
        assert_eq!(e["error"]["code"], -32602, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("arguments"),
            "{e}"
        );
    }
    let hits = &by_id(json!(5))["result"]["structuredContent"]["hits"];
    assert_eq!(hits.as_array().map(Vec::len), Some(2), "{answers:?}");
}
