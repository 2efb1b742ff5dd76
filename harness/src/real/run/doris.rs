//! Pipelines `routine-load` and `doris-sink` in a real run: not run yet, always skipped
//! with a reason that names the first thing missing.
//!
//! Real Doris comes only as the upstream images (`apache/doris`: the all-in-one image the
//! Doris connectors' own e2e tests use, `DorisContainerServiceImpl.DORIS_DOCKER_IMAGE =
//! apache/doris:doris-all-in-one-2.1.0` in apache/doris-kafka-connector; no Debian
//! package or Maven artifact carries the BE). So the probe asks, in order:
//! 1. does a Docker daemon answer ([`docker_available`])?
//! 2. is the image present locally (`docker image inspect`; this machine's kind reaches no
//!    registry to pull it)? The image is [`DEFAULT_DORIS_IMAGE`] unless
//!    `EOSIM_DORIS_IMAGE` names another.
//! 3. with both, the run is still skipped: eosim's runner for real Doris (Stream Load over
//!    HTTP, `CREATE ROUTINE LOAD` / `SHOW ROUTINE LOAD` over MySQL, a BE restart through
//!    the container) is not built, and the reason says so instead of passing.

use crate::real::backend::{docker_available, BackendUnavailable};
use std::process::Command;

/// The image probed by default.
pub const DEFAULT_DORIS_IMAGE: &str = "apache/doris:doris-all-in-one-2.1.0";

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DorisProbe {
    /// No Docker daemon answers; the message says why.
    NoDocker(String),
    /// The daemon answers but the image is not present locally.
    NoImage {
        /// The image asked for.
        image: String,
        /// docker's own error line.
        detail: String,
    },
    /// Docker and the image are here.
    Ready {
        /// The image found.
        image: String,
    },
}

/// Probes Docker and the Doris image on this machine.
pub fn probe() -> DorisProbe {
    if let Err(BackendUnavailable::NoDocker(why)) = docker_available() {
        return DorisProbe::NoDocker(why);
    }
    let image = std::env::var("EOSIM_DORIS_IMAGE").unwrap_or_else(|_| DEFAULT_DORIS_IMAGE.into());
    match Command::new("docker")
        .args(["image", "inspect", &image])
        .output()
    {
        Ok(out) if out.status.success() => DorisProbe::Ready { image },
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let detail = stderr
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output");
            DorisProbe::NoImage {
                image,
                detail: detail.trim().to_string(),
            }
        }
        Err(e) => DorisProbe::NoImage {
            image,
            detail: format!("cannot run docker: {e}"),
        },
    }
}

/// The skip reason for `pipeline` (`routine-load` or `doris-sink`) given what the probe
/// found: always `Some`, naming the first thing missing.
pub fn skip_reason(pipeline: &str, found: &DorisProbe) -> String {
    match found {
        DorisProbe::NoDocker(why) => format!(
            "skipped: pipeline {pipeline} needs real Doris, which comes only as the upstream \
             image {DEFAULT_DORIS_IMAGE} through Docker, and no Docker daemon answers (docker info failed: {why})"
        ),
        DorisProbe::NoImage { image, detail } => format!(
            "skipped: pipeline {pipeline} needs the Doris image {image}, which is not present \
             locally (docker image inspect: {detail}); pull or load it (docker load), or name \
             another with EOSIM_DORIS_IMAGE"
        ),
        DorisProbe::Ready { image } => format!(
            "skipped: pipeline {pipeline}: Docker and {image} are here, but eosim's runner for \
             real Doris (Stream Load, Routine Load, BE restarts in the container) is not built \
             yet; the pipeline runs in simulation only"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_probe_outcome_names_what_is_missing_and_never_passes() {
        let no_docker = skip_reason("routine-load", &DorisProbe::NoDocker("exit 1".into()));
        assert!(no_docker.starts_with("skipped:") && no_docker.contains("no Docker daemon"));
        let no_image = DorisProbe::NoImage {
            image: "apache/doris:x".into(),
            detail: "No such image".into(),
        };
        let no_image = skip_reason("doris-sink", &no_image);
        assert!(no_image.contains("apache/doris:x") && no_image.contains("No such image"));
        let ready = skip_reason("doris-sink", &DorisProbe::Ready { image: "i".into() });
        assert!(
            ready.starts_with("skipped:") && ready.contains("not built"),
            "{ready}"
        );
    }

    #[test]
    fn the_probe_on_this_machine_gives_a_skip_reason() {
        let reason = skip_reason("routine-load", &probe());
        assert!(
            reason.starts_with("skipped: pipeline routine-load"),
            "{reason}"
        );
    }
}
