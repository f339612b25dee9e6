//! `sift serve --address-file DIR`: ASearcher's convention for a trainer that finds N
//! retrieval servers. Each server writes `DIR/Host<ip>_IP<port>.txt` holding `<ip>:<port>`
//! (no newline: ASearcher's trainer reads the files' lines as they are and calls
//! `http://<line>/retrieve`), and the trainer globs `DIR/Host*_IP*.txt` (its
//! `RAG_SERVER_ADDR_DIR`), picks one and picks again after a failed call.
//!
//! The file is written once the server listens (the real port with `--addr HOST:0`),
//! through sift-core's [`write_output`] (a temporary beside it renamed into place, so a
//! reader never sees half an address), and removed when the server stops cleanly.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sift_core::{read_regular_text, write_output};

/// The host other machines reach this server at: `advertise` when given, else the address
/// the server is bound to, unless that is unspecified (`0.0.0.0`, `::`): then the address
/// this machine's traffic to other networks leaves from ([`outbound_ip`]).
pub fn advertised_host(bound: SocketAddr, advertise: Option<&str>) -> Result<String> {
    if let Some(host) = advertise {
        return Ok(host.to_string());
    }
    let ip = bound.ip();
    if !ip.is_unspecified() {
        return Ok(ip.to_string());
    }
    let ip = outbound_ip(ip.is_ipv6()).with_context(|| {
        format!(
            "finding the address other machines reach {bound} at (no route out of this \
             machine?): give it with --advertise-host"
        )
    })?;
    Ok(ip.to_string())
}

/// The source address of this machine's route to other networks: a UDP socket "connected"
/// to an address of a documentation range (TEST-NET-3, 2001:db8::/32), which goes out by
/// the default route; connecting a UDP socket sends nothing, it only picks the route.
pub fn outbound_ip(v6: bool) -> std::io::Result<IpAddr> {
    let (local, remote): (SocketAddr, SocketAddr) = if v6 {
        (
            (Ipv6Addr::UNSPECIFIED, 0).into(),
            (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), 9).into(),
        )
    } else {
        (
            (Ipv4Addr::UNSPECIFIED, 0).into(),
            (Ipv4Addr::new(203, 0, 113, 1), 9).into(),
        )
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(remote)?;
    Ok(socket.local_addr()?.ip())
}

/// A hostname or IP address fit for `--advertise-host`: it goes into a file name and a URL.
pub fn check_host(host: &str) -> Result<String, String> {
    if host.parse::<IpAddr>().is_ok() {
        return Ok(host.to_string());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.len() <= 253 && host.split('.').all(label_ok) {
        Ok(host.to_string())
    } else {
        Err(format!(
            "{host:?} is neither an IP address nor a hostname (letters, digits, '-' and '.')"
        ))
    }
}

/// An address file written for a listening server, removed when dropped (the server
/// stopped, or failed while serving) if it still holds this server's address.
pub struct AddressFile {
    path: PathBuf,
    contents: String,
}

impl AddressFile {
    /// Writes `dir/Host<host>_IP<port>.txt` holding `<host>:<port>` (an IPv6 address in
    /// brackets, as a URL writes it), creating `dir` if needed.
    pub fn write(dir: &Path, host: &str, port: u16) -> Result<AddressFile> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the address directory {}", dir.display()))?;
        let path = dir.join(format!("Host{host}_IP{port}.txt"));
        let contents = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
            _ => format!("{host}:{port}"),
        };
        write_output(&path, contents.as_bytes())
            .with_context(|| format!("writing the address file {}", path.display()))?;
        Ok(AddressFile { path, contents })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn contents(&self) -> &str {
        &self.contents
    }
}

impl Drop for AddressFile {
    fn drop(&mut self) {
        // another server may have been given the same port since (this one killed and
        // its file left): its file stays
        match read_regular_text(&self.path, 4096) {
            Ok(text) if text == self.contents => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    eprintln!(
                        "sift serve: warning: removing the address file {}: {e}",
                        self.path.display()
                    );
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_address_is_advertised_unless_unspecified_or_overridden() {
        let bound: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(advertised_host(bound, None).unwrap(), "127.0.0.1");
        assert_eq!(
            advertised_host(bound, Some("node-3.cluster")).unwrap(),
            "node-3.cluster"
        );
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        if let Ok(ip) = outbound_ip(false) {
            assert_eq!(advertised_host(any, None).unwrap(), ip.to_string());
            assert!(!ip.is_unspecified());
        }
    }

    #[test]
    fn hosts_are_ip_addresses_or_hostnames() {
        for ok in [
            "10.0.0.7",
            "::1",
            "fd00::2",
            "node-3",
            "node-3.cluster.local",
        ] {
            assert_eq!(check_host(ok).unwrap(), ok);
        }
        for bad in ["", "a/b", "a b", "-x", "x..y", "a_b", "[::1]", "x:80"] {
            assert!(check_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_file_holds_the_address_and_goes_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("addrs");
        let f = AddressFile::write(&sub, "10.1.2.3", 5005).unwrap();
        let path = sub.join("Host10.1.2.3_IP5005.txt");
        assert_eq!(f.path(), path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "10.1.2.3:5005");
        // nothing else (no temporary) is left in the directory
        assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 1);
        drop(f);
        assert!(!path.exists());

        let f = AddressFile::write(&sub, "fd00::2", 80).unwrap();
        assert_eq!(f.contents(), "[fd00::2]:80");
        // a file another server wrote over it since is left alone
        std::fs::write(f.path(), "10.9.9.9:80").unwrap();
        let path = f.path().to_path_buf();
        drop(f);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "10.9.9.9:80");
    }
}
