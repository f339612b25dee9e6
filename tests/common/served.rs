//! `sift serve` as a child process for tests that start it with their own arguments.
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A `sift serve` with these arguments (no index unless given), killed when dropped.
pub struct Served {
    child: std::process::Child,
    base: String,
}

impl Served {
    pub fn start(args: &[&str]) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sift"))
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sift serve starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut log = String::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("sift serve: listening on ") {
                    let _ = tx.send(Ok(addr.to_string()));
                }
                log.push_str(&line);
                log.push('\n');
            }
            let _ = tx.send(Err(log));
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(base)) => Served { child, base },
            Ok(Err(log)) => panic!("sift serve stopped:\n{log}"),
            Err(_) => panic!("sift serve did not start"),
        }
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        let mut r = agent
            .post(&format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .send(body.to_string().as_bytes())
            .unwrap();
        let status = r.status().as_u16();
        (status, super::json(&r.body_mut().read_to_string().unwrap()))
    }

    pub fn get(&self, path: &str) -> Value {
        let mut r = ureq::get(&format!("{}{path}", self.base)).call().unwrap();
        super::json(&r.body_mut().read_to_string().unwrap())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
