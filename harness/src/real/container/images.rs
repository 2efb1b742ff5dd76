//! The images of the testcontainers backend, built here from Debian's packages: no
//! container registry is needed (nor reachable on eosim's CI machines).
//!
//! | image | from | holds |
//! |---|---|---|
//! | `eosim/debian:bookworm` | `debootstrap --variant=minbase bookworm`, `docker import` | the base of the others |
//! | `eosim/kafka:bookworm` | `real/images/kafka.Dockerfile` | OpenJDK 17, the Kafka jars of `real/kafka/lib` in `/opt/kafka/libs` |
//! | `eosim/postgres:bookworm` | `real/images/postgres.Dockerfile` | PostgreSQL 15, user `eosim` (uid [`CONTAINER_UID`]) |
//! | `eosim/clickhouse:bookworm` | `real/images/clickhouse.Dockerfile` | ClickHouse 18.16 |
//! | `eosim/zookeeper:bookworm` | `real/images/zookeeper.Dockerfile` | ZooKeeper 3.8, OpenJDK 17 |
//!
//! Each service image carries a label `eosim.recipe`: a SHA-256 of its Dockerfile, build
//! arguments and (Kafka) jar names. [`build_all`] skips an image whose label is current, so a
//! second `eosim images` costs a few `docker image inspect`s; a run refuses an image whose
//! label is stale or missing, naming `eosim images` ([`check_image`]). The services run the
//! same programs at the same paths as the native backend's, so one provisioning code path
//! serves both (`real::provision`).
//!
//! Upstream images (`apache/kafka`, `postgres`, `clickhouse/clickhouse-server`) are not
//! used: their entrypoints configure the servers their own way, and no registry is
//! reachable here. `EOSIM_IMAGE_<SERVICE>` (e.g. `EOSIM_IMAGE_POSTGRES=my/pg:15`) runs
//! another image in place of one of these; it must hold the same programs at the same
//! paths, and is used without a recipe check.

use super::docker_api::docker;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The uid the `eosim` user has in the images (PostgreSQL refuses to run as root).
pub const CONTAINER_UID: u32 = 2001;

/// The base image every service image starts from.
pub const BASE_IMAGE: &str = "eosim/debian:bookworm";

/// Where the Kafka jars are in `eosim/kafka`.
pub const KAFKA_LIBS: &str = "/opt/kafka/libs";

/// The host's Kafka jars: `EOSIM_KAFKA_LIB`, else `real/kafka/lib` of this repository
/// (`.ci/install-real-services` fetches them): the native backend's classpath and the
/// `eosim/kafka` image's build context.
pub fn kafka_lib_dir() -> PathBuf {
    std::env::var_os("EOSIM_KAFKA_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../real/kafka/lib"))
}

/// The label that holds an image's recipe hash.
const RECIPE_LABEL: &str = "eosim.recipe";

/// A service that runs in a container of its own image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceImage {
    /// Apache Kafka brokers and controllers (KRaft).
    Kafka,
    /// PostgreSQL 15.
    Postgres,
    /// ClickHouse 18.16.
    ClickHouse,
    /// ZooKeeper 3.8.
    ZooKeeper,
}

impl ServiceImage {
    /// Every service image, in build order.
    pub const ALL: [ServiceImage; 4] = [
        ServiceImage::Kafka,
        ServiceImage::Postgres,
        ServiceImage::ClickHouse,
        ServiceImage::ZooKeeper,
    ];

    /// The lower-case name (`kafka`), as in the Dockerfile's and the tag's.
    pub fn name(self) -> &'static str {
        match self {
            ServiceImage::Kafka => "kafka",
            ServiceImage::Postgres => "postgres",
            ServiceImage::ClickHouse => "clickhouse",
            ServiceImage::ZooKeeper => "zookeeper",
        }
    }

    /// The image a run uses: `EOSIM_IMAGE_<NAME>`, else `eosim/<name>:bookworm`.
    pub fn tag(self) -> String {
        std::env::var(self.override_var()).unwrap_or_else(|_| self.own_tag())
    }

    fn own_tag(self) -> String {
        format!("eosim/{}:bookworm", self.name())
    }

    fn override_var(self) -> String {
        format!("EOSIM_IMAGE_{}", self.name().to_uppercase())
    }

    fn dockerfile(self) -> &'static str {
        match self {
            ServiceImage::Kafka => include_str!("../../../../real/images/kafka.Dockerfile"),
            ServiceImage::Postgres => include_str!("../../../../real/images/postgres.Dockerfile"),
            ServiceImage::ClickHouse => {
                include_str!("../../../../real/images/clickhouse.Dockerfile")
            }
            ServiceImage::ZooKeeper => {
                include_str!("../../../../real/images/zookeeper.Dockerfile")
            }
        }
    }

    fn build_args(self) -> Vec<(String, String)> {
        match self {
            ServiceImage::Postgres => vec![("EOSIM_UID".into(), CONTAINER_UID.to_string())],
            _ => Vec::new(),
        }
    }

    /// The build context: the Kafka jars for Kafka, an empty directory otherwise.
    fn context(self, kafka_lib: &Path, empty: &Path) -> PathBuf {
        match self {
            ServiceImage::Kafka => kafka_lib.to_path_buf(),
            _ => empty.to_path_buf(),
        }
    }

    /// The recipe hash: Dockerfile, build arguments and the context's file names.
    fn recipe(self, kafka_lib: &Path) -> Result<String, String> {
        let mut h = Sha256::new();
        h.update(self.dockerfile());
        for (k, v) in self.build_args() {
            h.update(format!("{k}={v}\n"));
        }
        if self == ServiceImage::Kafka {
            let mut names: Vec<String> = std::fs::read_dir(kafka_lib)
                .map_err(|e| {
                    format!(
                        "{}: {e} (run .ci/install-real-services for the Kafka jars)",
                        kafka_lib.display()
                    )
                })?
                .filter_map(|e| Some(e.ok()?.file_name().to_str()?.to_string()))
                .collect();
            names.sort();
            h.update(names.join("\n"));
        }
        Ok(hex::encode(&h.finalize()[..8]))
    }
}

/// The `eosim.recipe` label of `tag`, `None` when there is no such image.
fn recipe_label(tag: &str) -> Result<Option<String>, String> {
    let d = docker()?;
    match d.block_on(d.client.inspect_image(tag)) {
        Ok(image) => Ok(image
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get(RECIPE_LABEL).cloned())
            .or(Some(String::new()))),
        Err(testcontainers::bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }) => Ok(None),
        Err(e) => Err(format!("docker image inspect {tag}: {e}")),
    }
}

/// Checks that the image `service` runs from is there and current; returns its tag.
///
/// # Errors
/// `(tag, why)`: missing or stale, naming `eosim images`; or the daemon's error.
pub fn check_image(service: ServiceImage, kafka_lib: &Path) -> Result<String, (String, String)> {
    let tag = service.tag();
    let label = recipe_label(&tag).map_err(|e| (tag.clone(), e))?;
    if std::env::var_os(service.override_var()).is_some() {
        return match label {
            Some(_) => Ok(tag),
            None => Err((
                tag,
                format!("(from {}) is not there", service.override_var()),
            )),
        };
    }
    let wanted = service.recipe(kafka_lib).map_err(|e| (tag.clone(), e))?;
    match label {
        Some(have) if have == wanted => Ok(tag),
        Some(_) => Err((
            tag,
            "is stale (its recipe changed): run `eosim images` (or `cargo xtask images`) to \
             rebuild it"
                .into(),
        )),
        None => Err((
            tag,
            "is not built: run `eosim images` (or `cargo xtask images`) first".into(),
        )),
    }
}

/// What [`build_all`] did with one image.
#[derive(Debug, Clone)]
pub struct Built {
    /// The image's tag.
    pub tag: String,
    /// `false` when it was current and left alone.
    pub built: bool,
    /// Wall time, in seconds.
    pub seconds: f64,
}

/// Builds the base image (when missing, or always with `force`) and every service image
/// whose recipe changed; prints each step. Needs root for `debootstrap`, the `docker` CLI
/// and a daemon.
///
/// # Errors
/// The failing step with its output's last lines.
pub fn build_all(kafka_lib: &Path, force: bool) -> Result<Vec<Built>, String> {
    let mut out = Vec::new();
    let t0 = Instant::now();
    let base_built = if force || recipe_label(BASE_IMAGE)?.is_none() {
        build_base()?;
        true
    } else {
        false
    };
    out.push(Built {
        tag: BASE_IMAGE.into(),
        built: base_built,
        seconds: t0.elapsed().as_secs_f64(),
    });
    // The Dockerfiles go here, beside the empty context of the images that copy nothing.
    let work = tempfile::tempdir().map_err(|e| format!("build context: {e}"))?;
    let empty_context = work.path().join("context");
    std::fs::create_dir_all(&empty_context).map_err(|e| format!("build context: {e}"))?;
    for service in ServiceImage::ALL {
        let t0 = Instant::now();
        let tag = service.own_tag();
        let recipe = service.recipe(kafka_lib)?;
        let current = !force && !base_built && recipe_label(&tag)?.as_deref() == Some(&recipe);
        if !current {
            eprintln!("eosim images: building {tag}");
            let mut cmd = Command::new("docker");
            cmd.args(["build", "--network", "host", "--quiet", "-t", &tag])
                .args(["--label", &format!("{RECIPE_LABEL}={recipe}")]);
            for (k, v) in service.build_args() {
                cmd.args(["--build-arg", &format!("{k}={v}")]);
            }
            let dockerfile = work.path().join(format!("{}.Dockerfile", service.name()));
            std::fs::write(&dockerfile, service.dockerfile())
                .map_err(|e| format!("{}: {e}", dockerfile.display()))?;
            cmd.arg("-f")
                .arg(&dockerfile)
                .arg(service.context(kafka_lib, &empty_context));
            run(&format!("docker build {tag}"), &mut cmd)?;
        }
        out.push(Built {
            tag,
            built: !current,
            seconds: t0.elapsed().as_secs_f64(),
        });
    }
    Ok(out)
}

/// `debootstrap --variant=minbase bookworm` into a temporary directory, a `policy-rc.d`
/// that keeps packages from starting their services during the builds (as Debian's own
/// images do), then `docker import` as [`BASE_IMAGE`].
fn build_base() -> Result<(), String> {
    let root = tempfile::tempdir().map_err(|e| format!("root filesystem: {e}"))?;
    let mirror = std::env::var("EOSIM_DEBIAN_MIRROR")
        .unwrap_or_else(|_| "http://deb.debian.org/debian".into());
    eprintln!("eosim images: debootstrap bookworm from {mirror}");
    run(
        "debootstrap",
        Command::new("debootstrap")
            .args(["--variant=minbase", "bookworm"])
            .arg(root.path())
            .arg(&mirror),
    )?;
    let policy = root.path().join("usr/sbin/policy-rc.d");
    std::fs::write(&policy, "#!/bin/sh\nexit 101\n")
        .map_err(|e| format!("{}: {e}", policy.display()))?;
    std::fs::set_permissions(&policy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", policy.display()))?;
    eprintln!("eosim images: docker import {BASE_IMAGE}");
    let tar = Command::new("tar")
        .arg("-C")
        .arg(root.path())
        .args(["-c", "."])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("tar: {e}"))?;
    let stdout = tar.stdout.ok_or("tar: no stdout")?;
    run(
        "docker import",
        Command::new("docker")
            .args(["import", "-", BASE_IMAGE])
            .stdin(stdout),
    )
}

/// Runs `cmd`; its error names `step` and the last lines of its output.
fn run(step: &str, cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{step}: cannot run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    Err(format!(
        "{step} failed ({}): {}",
        out.status,
        lines[lines.len().saturating_sub(5)..].join(" | ")
    ))
}
