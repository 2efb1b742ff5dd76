//! The Docker daemon as this process reaches it: one client for the calls testcontainers
//! does not make (SIGKILL, pause, exec, listing), and an API-version adapter so that
//! testcontainers works against older daemons.
//!
//! # Why an adapter
//! testcontainers-rs 0.28 connects with bollard's `API_DEFAULT_VERSION` (1.53,
//! `src/core/client/bollard_client.rs`) and never calls bollard's `negotiate_version`
//! (bollard PR #27), so every request is `/v1.53/...`. A daemon older than Docker 29
//! answers each with `client version 1.53 is too new. Maximum supported API version is
//! 1.41` (Debian 12's `docker.io` 20.10 serves 1.41; the check is moby's
//! `api/server/middleware/version.go`). Where the daemon is older, the first connection starts a
//! Unix-socket proxy in this process that forwards every byte and rewrites the version in
//! each request path (`/v1.53/` to `/v1.41/`, the same length, so no body or
//! `Content-Length` changes), and points `DOCKER_HOST` at it. The daemon ignores the
//! request fields it does not know; the ones eosim's containers use (image, command,
//! user, mounts, host network, labels) all exist in 1.41. Where the daemon serves the
//! client's version, nothing sits in between.
//!
//! `DOCKER_HOST` (a `unix://` path) names the daemon; default `/var/run/docker.sock`.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::OnceLock;
use testcontainers::bollard;

/// A connection to the daemon at the version it serves, with the runtime its calls run on.
pub(crate) struct Docker {
    pub(crate) client: bollard::Docker,
    runtime: tokio::runtime::Runtime,
}

/// The adapter's directory, when one runs: a scratch directory (`eosim-run-<pid>-docker-*`),
/// removed by [`close_adapter`], by the teardown on a signal, or (a SIGKILLed run's) by the
/// next run's sweep ([`crate::real::scratch`]).
static ADAPTER_DIR: std::sync::Mutex<Option<tempfile::TempDir>> = std::sync::Mutex::new(None);

/// Removes the adapter's socket directory (the adapter stops answering new connections):
/// for the end of a command, after its last container is gone.
pub fn close_adapter() {
    if let Ok(mut dir) = ADAPTER_DIR.lock() {
        drop(dir.take());
    }
}

impl Docker {
    /// Runs one bollard call to completion.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }
}

static DOCKER: OnceLock<Result<Docker, String>> = OnceLock::new();

/// The daemon's socket: `DOCKER_HOST` when it is a `unix://` path, else the default.
fn daemon_socket() -> Result<PathBuf, String> {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => {
            host.strip_prefix("unix://")
                .map(PathBuf::from)
                .ok_or_else(|| {
                    format!("DOCKER_HOST={host}: the testcontainers backend needs a unix:// socket")
                })
        }
        _ => Ok(PathBuf::from("/var/run/docker.sock")),
    }
}

/// The process's connection to the daemon, made on first use (and the adapter started
/// when the daemon is older than testcontainers' client; see the module doc).
///
/// # Errors
/// Why the daemon cannot be reached, naming its socket.
pub(crate) fn docker() -> Result<&'static Docker, String> {
    DOCKER.get_or_init(connect).as_ref().map_err(Clone::clone)
}

fn connect() -> Result<Docker, String> {
    let socket = daemon_socket()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("docker: runtime: {e}"))?;
    let wanted = bollard::API_DEFAULT_VERSION;
    let client = bollard::Docker::connect_with_unix(&socket.display().to_string(), 120, wanted)
        .map_err(|e| format!("docker at {}: {e}", socket.display()))?;
    let client = runtime
        .block_on(client.negotiate_version())
        .map_err(|e| format!("docker at {}: {e}", socket.display()))?;
    let served = client.client_version();
    if served < *wanted {
        let dir = crate::real::scratch::scratch_dir("docker")?;
        let path = dir.path().join("docker.sock");
        start_adapter(
            &path,
            socket,
            format!("/v{}.{}/", wanted.major_version, wanted.minor_version),
            format!("/v{}.{}/", served.major_version, served.minor_version),
        )?;
        // SAFETY: set_var races with concurrent getenv in other threads. It runs once, in
        // the first call that reaches the daemon, before testcontainers' first request
        // (which reads DOCKER_HOST); eosim reads no environment concurrently with that
        // call (the real tier provisions its services from one thread).
        unsafe { std::env::set_var("DOCKER_HOST", format!("unix://{}", path.display())) };
        if let Ok(mut slot) = ADAPTER_DIR.lock() {
            *slot = Some(dir);
        }
    }
    Ok(Docker { client, runtime })
}

/// Listens on `path` and forwards each connection to `daemon`, rewriting `from` to `to`
/// in what the client sends (`from` and `to` have the same length).
fn start_adapter(
    path: &std::path::Path,
    daemon: PathBuf,
    from: String,
    to: String,
) -> Result<(), String> {
    assert_eq!(from.len(), to.len(), "the adapter rewrites in place");
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)
        .map_err(|e| format!("docker API adapter at {}: {e}", path.display()))?;
    let rewrite = (from.into_bytes(), to.into_bytes());
    std::thread::Builder::new()
        .name("docker-api-adapter".into())
        .spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(upstream) = UnixStream::connect(&daemon) else {
                    continue;
                };
                let (Ok(client_back), Ok(upstream_back)) =
                    (client.try_clone(), upstream.try_clone())
                else {
                    continue;
                };
                let rewrite = rewrite.clone();
                std::thread::spawn(move || pump(client, upstream, Some(&rewrite)));
                std::thread::spawn(move || pump(upstream_back, client_back, None));
            }
        })
        .map_err(|e| format!("docker API adapter: {e}"))?;
    Ok(())
}

/// Copies `from` to `to` until EOF, replacing every `rewrite.0` by `rewrite.1`; a tail
/// that may be the start of a match waits for the next read.
fn pump(mut from: UnixStream, mut to: UnixStream, rewrite: Option<&(Vec<u8>, Vec<u8>)>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        let ready = match rewrite {
            None => pending.len(),
            Some((a, b)) => replace_all(&mut pending, a, b),
        };
        if to.write_all(&pending[..ready]).is_err() {
            break;
        }
        pending.drain(..ready);
    }
    let _ = to.write_all(&pending);
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Replaces each `a` in `bytes` by `b` (same length) in place; returns how many leading
/// bytes are final: all but a tail that is a proper prefix of `a`.
fn replace_all(bytes: &mut [u8], a: &[u8], b: &[u8]) -> usize {
    let mut i = 0;
    while i + a.len() <= bytes.len() {
        if &bytes[i..i + a.len()] == a {
            bytes[i..i + a.len()].copy_from_slice(b);
            i += a.len();
        } else {
            i += 1;
        }
    }
    let held = (1..a.len())
        .rev()
        .find(|&k| k <= bytes.len() && bytes[bytes.len() - k..] == a[..k])
        .unwrap_or(0);
    bytes.len() - held
}

#[cfg(test)]
mod tests {
    use super::replace_all;

    #[test]
    fn the_adapter_rewrites_versions_and_holds_back_only_a_possible_match() {
        let mut req = b"GET /v1.53/containers/json HTTP/1.1\r\n\r\n".to_vec();
        let ready = replace_all(&mut req, b"/v1.53/", b"/v1.41/");
        assert_eq!(ready, req.len(), "a complete request is sent at once");
        assert!(req.starts_with(b"GET /v1.41/containers/json"));

        // A read that ends inside the version: the tail waits for the next read.
        let mut split = b"POST /v1.5".to_vec();
        let ready = replace_all(&mut split, b"/v1.53/", b"/v1.41/");
        assert_eq!(&split[..ready], b"POST ");
        let mut joined = b"/v1.53/exec HTTP/1.1".to_vec();
        replace_all(&mut joined, b"/v1.53/", b"/v1.41/");
        assert!(joined.starts_with(b"/v1.41/exec"));
    }
}
