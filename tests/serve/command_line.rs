//! `sift serve`'s flags, exit codes and signals.
use super::*;

/// The `host:port` of a server.
fn addr(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_string()
}

#[cfg(unix)]
#[test]
fn serve_stops_gracefully_on_sigterm() {
    let mut server = Server::start(&[]);
    let (st, _) = get_json(&server.url("/healthz"));
    assert_eq!(st, 200);
    // SAFETY: kill(2) with a child's pid and a valid signal number.
    let rc = unsafe { libc::kill(server.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}\n{}", server.log());
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        server.log().contains("sift serve: stopped"),
        "{}",
        server.log()
    );
}

/// Half a request head, a body shorter than its Content-Length, and a kept-alive
/// connection left idle after an answer.
const HALF_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nAccept: */";
const SHORT_BODY: &[u8] = b"POST /v1/search HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"query\": \"plants";
const KEEP_ALIVE: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";

#[cfg(unix)]
#[test]
fn serve_exits_within_the_grace_period_while_clients_hold_half_sent_requests() {
    use std::io::{Read, Write};
    // timeouts far longer than the grace period: only the grace period can end these
    let mut server = Server::start(&[
        "--header-timeout",
        "600",
        "--body-timeout",
        "600",
        "--shutdown-grace",
        "2",
    ]);
    let connect = |bytes: &[u8]| {
        let mut s = std::net::TcpStream::connect(addr(&server)).unwrap();
        s.write_all(bytes).unwrap();
        s
    };
    let half = connect(HALF_HEAD);
    let short = connect(SHORT_BODY);
    let mut idle = connect(KEEP_ALIVE);
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = idle.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    // the body's request has reached its handler (it waits for the rest of the body)
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) with a child's pid and a valid signal number.
    let rc = unsafe { libc::kill(server.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "still running {:?} after SIGTERM with a 2 s grace period:\n{}",
            start.elapsed(),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    assert!(status.success(), "{status:?}\n{}", server.log());
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "exited {took:?} after SIGTERM (grace period 2 s)\n{}",
        server.log()
    );
    std::thread::sleep(Duration::from_millis(100));
    let log = server.log();
    assert!(log.contains("closed 2 connection(s) still open"), "{log}");
    assert!(log.contains("sift serve: stopped"), "{log}");
    drop((half, short, idle));
}

#[test]
fn serve_refuses_numeric_flags_out_of_range() {
    let index = s(index()).to_string();
    let cases: &[(&str, &str)] = &[
        // Instant + Duration overflowed in every request / Duration::from_secs_f64 panicked
        ("--timeout", "18446744073709551615"),
        ("--timeout", "9223372036854775807"),
        ("--timeout", "0"),
        ("--timeout", "NaN"),
        ("--timeout", "inf"),
        ("--header-timeout", "1e30"),
        ("--body-timeout", "9223372036854775807"),
        ("--shutdown-grace", "1e20"),
        // Semaphore::new panicked
        ("--max-concurrency", "18446744073709551615"),
        ("--max-concurrency", "2305843009213693952"),
        ("--max-body-bytes", "18446744073709551615"),
        // the base64 size check overflowed
        ("--max-image-bytes", "18446744073709551615"),
        ("--max-image-pixels", "0"),
        ("--max-image-pixels", "18446744073709551615"),
        ("--max-images", "18446744073709551615"),
        ("--max-request-pixels", "0"),
        ("--max-request-pixels", "18446744073709551615"),
        ("--max-top-k", "18446744073709551615"),
        ("--text-chars", "18446744073709551615"),
        ("--ef-search", "18446744073709551615"),
        ("--max-mcp-sessions", "0"),
        ("--max-mcp-sessions", "18446744073709551615"),
    ];
    for &(flag, value) in cases {
        let stderr = fails(&[
            "serve",
            "--index",
            &index,
            "--addr",
            "127.0.0.1:0",
            flag,
            value,
        ]);
        assert!(
            stderr.contains(flag) && stderr.contains("give"),
            "{flag} {value}: {stderr}"
        );
    }
    // the ends of the ranges are taken, and requests are answered under them
    let server = Server::start(&[
        "--quiet",
        "--timeout",
        "86400",
        "--header-timeout",
        "3600",
        "--body-timeout",
        "86400",
        "--shutdown-grace",
        "0",
        "--max-concurrency",
        "1024",
        "--max-top-k",
        "1000000",
        "--ef-search",
        "100000",
        "--max-image-bytes",
        "4294967296",
        "--max-image-pixels",
        "1000000000000",
    ]);
    for retriever in ["bm25", "dense:tiny-clip-quickgelu"] {
        let (st, res) = post(
            &server.url("/v1/search"),
            &json!({"query": "how do plants make sugar", "domain": "biology",
                    "retriever": retriever, "top_k": 1000000}),
        );
        assert_eq!(st, 200, "{retriever}: {res}");
        assert!(!res["hits"].as_array().unwrap().is_empty(), "{res}");
    }
}

/// Issue 52, 14: a configured key with spaces around it was kept as it was while clients'
/// keys were trimmed (every request 401, nothing said); an empty key was taken as none.
/// Now it is trimmed with a warning, an empty one is an error, and `Bearer` is taken in any
/// case.
#[test]
fn serve_api_keys_are_trimmed_refused_when_empty_and_bearer_in_any_case() {
    let index = s(index()).to_string();
    // (before, these served with no key at all: a deadline, not a hung test)
    let refused = |key: Option<&str>, env: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sift"));
        cmd.args(["serve", "--index", &index, "--addr", "127.0.0.1:0"])
            .env_remove("SIFT_API_KEY")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(k) = key {
            cmd.args(["--api-key", k]);
        }
        if let Some(v) = env {
            cmd.env("SIFT_API_KEY", v);
        }
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("sift serve started with the API key {key:?} / {env:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for (key, env) in [(Some(""), None), (Some("   "), None), (None, Some(" \t "))] {
        let stderr = refused(key, env);
        assert!(
            stderr.contains("--api-key") && stderr.contains("SIFT_API_KEY"),
            "{key:?} {env:?}: {stderr}"
        );
    }

    let server = Server::start(&["--retriever", "bm25", "--api-key", "  s3cret \n"]);
    assert!(server.log().contains("trimmed"), "{}", server.log());
    let search = server.url("/v1/indexes");
    for (name, value) in [
        ("x-api-key", "s3cret"),
        ("authorization", "Bearer s3cret"),
        ("authorization", "bearer s3cret"),
        ("authorization", "BEARER s3cret"),
    ] {
        let (status, _, body) = get_with(&search, &[(name, value)]);
        assert_eq!(status, 200, "{name}: {value}: {body}");
    }
    for (name, value) in [
        ("x-api-key", "s3cre"),
        ("x-api-key", "s3crett"),
        ("authorization", "Basic s3cret"),
    ] {
        let (status, _, _) = get_with(&search, &[(name, value)]);
        assert_eq!(status, 401, "{name}: {value}");
    }
    let (status, _, _) = get_with(&server.url("/v1/indexes?api_key=s3cret"), &[]);
    assert_eq!(status, 200);
}

/// The files of `dir`, by name.
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// SIGTERM to `server`; its exit status once it has stopped.
#[cfg(unix)]
fn terminate(server: &mut Server) -> std::process::ExitStatus {
    // SAFETY: kill(2) with a child's pid and a valid signal number.
    let rc = unsafe { libc::kill(server.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let start = Instant::now();
    loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "still running after SIGTERM:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// ASearcher's convention: `DIR/Host<ip>_IP<port>.txt` holding `<ip>:<port>` (no newline),
/// the port bound with `:0`, the IP the one other machines reach (bound to 0.0.0.0: the
/// address of the default route, found here as the service finds it), written before the
/// listening line and gone after SIGTERM.
#[cfg(unix)]
#[test]
fn serve_address_file_names_the_listening_address_until_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    // a directory that does not exist yet
    let dir = tmp.path().join("rag-servers");
    // the route out as the service finds it (a machine without one is told the address)
    let outbound = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("203.0.113.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip().to_string());
    let corpus = sample();
    let mut args = vec![
        "--index",
        s(index()),
        "--corpus",
        s(&corpus),
        "--quiet",
        "--address-file",
        s(&dir),
    ];
    if outbound.is_err() {
        args.extend(["--advertise-host", "127.0.0.1"]);
    }
    let mut server = Server::start_at("0.0.0.0:0", &args);
    let port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    assert_ne!(port, 0);
    let host = outbound.unwrap_or_else(|_| "127.0.0.1".to_string());
    let name = format!("Host{host}_IP{port}.txt");
    // written before the listening line: there now, alone (no temporary left)
    assert_eq!(file_names(&dir), [name.as_str()], "{}", server.log());
    let address = std::fs::read_to_string(dir.join(&name)).unwrap();
    assert_eq!(address, format!("{host}:{port}"));
    assert!(
        server
            .log()
            .contains(&format!("address {address} written to")),
        "{}",
        server.log()
    );
    // ASearcher's trainer calls http://<the file's line>/retrieve
    let (status, res) = post(
        &format!("http://{address}/retrieve"),
        &json!({"queries": ["how do plants make sugar"], "topk": 2, "return_scores": true}),
    );
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["result"][0].as_array().unwrap().len(), 2, "{res}");
    let status = terminate(&mut server);
    assert!(status.success(), "{status:?}\n{}", server.log());
    assert_eq!(file_names(&dir), Vec::<String>::new());
}

#[test]
fn serve_advertise_host_is_written_and_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let index = s(index()).to_string();
    let mut server = Server::start(&[
        "--quiet",
        "--address-file",
        s(dir),
        "--advertise-host",
        "localhost",
    ]);
    let port = addr(&server).rsplit(':').next().unwrap().to_string();
    let name = format!("Hostlocalhost_IP{port}.txt");
    assert_eq!(file_names(dir), [name.as_str()]);
    let address = std::fs::read_to_string(dir.join(&name)).unwrap();
    assert_eq!(address, format!("localhost:{port}"));
    #[cfg(unix)]
    {
        assert!(terminate(&mut server).success(), "{}", server.log());
        assert_eq!(file_names(dir), Vec::<String>::new());
    }
    drop(server);
    // a host that cannot go into a file name or a URL, and the flag without a directory:
    // usage errors (exit 2)
    let usage_error = |extra: &[&str]| {
        let mut args = vec!["serve", "--index", &index, "--addr", "127.0.0.1:0"];
        args.extend(extra);
        let out = sift(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        stderr
    };
    for bad in ["a/b", "x:80", ""] {
        let stderr = usage_error(&["--address-file", s(dir), "--advertise-host", bad]);
        assert!(stderr.contains("--advertise-host"), "{bad}: {stderr}");
    }
    let stderr = usage_error(&["--advertise-host", "localhost"]);
    assert!(stderr.contains("--address-file"), "{stderr}");
    assert_eq!(file_names(dir), Vec::<String>::new());
}
