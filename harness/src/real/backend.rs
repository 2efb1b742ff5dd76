//! Which provisioning backend runs the real tier: `native` (eosim starts the services
//! itself), `testcontainers` (containers, needs a Docker daemon) or `external` (a user's
//! own services by URL).
//!
//! ## Default values
//! [`Backend::detect`] picks `testcontainers` where `docker info` succeeds, `native`
//! otherwise. A run asked for `testcontainers` where no daemon answers is reported as
//! skipped with [`BackendUnavailable`]'s message, never as passed.

use std::process::Command;

/// A provisioning backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Child processes on loopback ports in a temporary directory (see
    /// [`provision`](super::provision)).
    Native,
    /// The same services as containers through testcontainers.
    Testcontainers,
    /// The user's own services, by URL.
    External,
}

/// Why a backend cannot run here; its `Display` is the line a report shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendUnavailable {
    /// No Docker daemon answers.
    #[error("skipped: no Docker daemon answers (docker info failed: {0})")]
    NoDocker(String),
}

impl Backend {
    /// The default backend on this machine: testcontainers where a Docker daemon answers,
    /// native otherwise.
    pub fn detect() -> Backend {
        match docker_available() {
            Ok(()) => Backend::Testcontainers,
            Err(_) => Backend::Native,
        }
    }

    /// Whether this backend can run here.
    ///
    /// # Errors
    /// [`BackendUnavailable::NoDocker`] for testcontainers without a daemon.
    pub fn check_available(self) -> Result<(), BackendUnavailable> {
        match self {
            Backend::Testcontainers => docker_available(),
            Backend::Native | Backend::External => Ok(()),
        }
    }

    /// The name used on the command line (`--backend native`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::Testcontainers => "testcontainers",
            Backend::External => "external",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "native" => Ok(Backend::Native),
            "testcontainers" => Ok(Backend::Testcontainers),
            "external" => Ok(Backend::External),
            other => Err(format!(
                "unknown backend {other:?}: expected native, testcontainers or external"
            )),
        }
    }
}

/// Runs `docker info` and says whether a daemon answered.
///
/// # Errors
/// [`BackendUnavailable::NoDocker`] with the first line of docker's own error, or the
/// reason docker could not be run at all.
pub fn docker_available() -> Result<(), BackendUnavailable> {
    let out = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .map_err(|e| BackendUnavailable::NoDocker(format!("cannot run docker: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output");
    Err(BackendUnavailable::NoDocker(format!(
        "{}: {}",
        out.status,
        line.trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_round_trip() {
        for b in [Backend::Native, Backend::Testcontainers, Backend::External] {
            assert_eq!(b.name().parse::<Backend>(), Ok(b));
        }
        assert!("docker".parse::<Backend>().is_err());
    }

    #[test]
    fn missing_docker_message_says_skipped() {
        let e = BackendUnavailable::NoDocker("exit status: 1: Cannot connect".into());
        assert!(e
            .to_string()
            .starts_with("skipped: no Docker daemon answers (docker info failed:"));
    }
}
