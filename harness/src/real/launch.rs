//! How to start one service process, natively or in a container: what the provisioners
//! ([`provision`](super::provision)) describe and [`process`](super::process) and
//! [`container`](super::container) run.

use std::path::PathBuf;

/// How to start one service process; kept so that `restart` starts the same command again.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Service name for messages ("kafka-1", "postgres", ...).
    pub service: String,
    /// Program to run (in a container: its path in the image).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// File that receives stdout and stderr (appended to across restarts).
    pub log_path: PathBuf,
    /// Run as this uid/gid (PostgreSQL refuses root); `None` keeps ours (the image's
    /// root in a container).
    pub user: Option<(u32, u32)>,
    /// Run in a container of this image instead of as a child process; `None` natively.
    pub container: Option<ContainerSpec>,
}

/// What a [`Launch`] needs to run in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// `name:tag` of a local image.
    pub image: String,
    /// Host directories bind-mounted at the same path (the service's scratch directory).
    pub mounts: Vec<PathBuf>,
}
