//! The testcontainers backend: each service process a Docker container of a locally built
//! image ([`images`]), started through the `testcontainers` crate, on the host's network
//! (so every port stays on loopback, as in a native run), its scratch directory
//! bind-mounted at the same path.
//!
//! The provisioning code is the native backend's: a [`Launch`] with a [`ContainerSpec`]
//! runs its command in a container instead of a child process ([`ContainerProcess`]), and
//! [`ServiceProcess`](super::process::ServiceProcess) turns its faults into the
//! container's:
//!
//! | fault | native | container |
//! |---|---|---|
//! | crash | SIGKILL to the process tree | `docker kill -s KILL` (every process of the container) |
//! | restart | the same command again | `docker start` of the same container |
//! | pause | SIGSTOP to the tree | `docker pause` (cgroup freezer) |
//! | graceful stop | the service's signal, SIGKILL after a grace | the same, through `docker kill -s` |
//! | partition, clog, messages | nftables over the processes' cgroups | the same: the container joins its node's cgroup |
//!
//! A setup step (`initdb`, `kafka-storage format`) runs as a one-shot container of the
//! same image ([`run_to_completion`]).
//!
//! # Cleanup
//! Every container is labelled `eosim.owner=<pid>` and named
//! `eosim-<pid>-<service>-<n>`. It is removed when its handle drops; on Ctrl-C / SIGTERM
//! the process teardown removes every live one ([`remove_all_live`]); a watchdog `sh`
//! per container removes it when eosim is SIGKILLed; and the next run removes any whose
//! owner is gone ([`sweep_leftovers`]).
//!
//! # Network faults
//! As natively ([`crate::real::net`]): in a network-faulted run each container's first
//! process joins its node's cgroup v2 before it execs the service (the run's cgroup tree is
//! bind-mounted at its own path), so nftables tells the containers apart by their sockets'
//! cgroups as it tells child processes apart; the container starts as root for that and
//! drops to the service's user with `setpriv`.

pub mod docker_api;

pub use docker_api::close_adapter;
pub mod images;

pub use super::launch::ContainerSpec;
use super::launch::Launch;
use super::ProvisionError;
use docker_api::docker;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use testcontainers::bollard::exec::{CreateExecOptions, StartExecResults};
use testcontainers::bollard::query_parameters::{
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers::core::{Mount, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{Container, GenericImage, ImageExt};

pub use images::{ServiceImage, CONTAINER_UID};

/// Where a run's services run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Runtime {
    /// Child processes of eosim (`--backend native`).
    #[default]
    Native,
    /// Containers of the local images (`--backend testcontainers`).
    Containers,
}

impl Runtime {
    /// The container spec for `service` with `mounts` bind-mounted at their own paths;
    /// `None` natively.
    ///
    /// # Errors
    /// [`ProvisionError::Image`] when the image is missing or stale, or the daemon does not
    /// answer.
    pub fn spec(
        self,
        service: ServiceImage,
        mounts: &[PathBuf],
    ) -> Result<Option<ContainerSpec>, ProvisionError> {
        match self {
            Runtime::Native => Ok(None),
            Runtime::Containers => {
                let image = images::check_image(service, &images::kafka_lib_dir()).map_err(
                    |(image, reason)| ProvisionError::Image {
                        service: service.name().into(),
                        image,
                        reason,
                    },
                )?;
                Ok(Some(ContainerSpec {
                    image,
                    mounts: mounts.to_vec(),
                }))
            }
        }
    }
}

/// Containers this process created and has not removed: name → image.
static LIVE: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
static SERIAL: AtomicU32 = AtomicU32::new(0);

/// The label that names a container's owner pid.
const OWNER_LABEL: &str = "eosim.owner";

fn spawn_error(launch: &Launch, reason: impl std::fmt::Display) -> ProvisionError {
    ProvisionError::Spawn {
        service: launch.service.clone(),
        program: launch.program.clone(),
        reason: reason.to_string(),
    }
}

/// The container's command: `launch`'s program and arguments, their output appended to
/// `launch.log_path` (bind-mounted) as a native run's is. The container starts as root;
/// with `$EOSIM_CGROUP` set (a network-faulted run) its first process joins that cgroup
/// before it execs the service, so every socket the service opens is in its node's cgroup
/// as natively ([`crate::real::net::cgroup::join_in_child`]); then it drops to
/// `launch.user` with `setpriv` (util-linux), as the native backend does after the join.
fn command(launch: &Launch) -> Vec<String> {
    let drop_to = match launch.user {
        Some((uid, gid)) => format!("setpriv --reuid={uid} --regid={gid} --clear-groups "),
        None => String::new(),
    };
    let script = format!(
        r#"if [ -n "$EOSIM_CGROUP" ]; then echo 0 > "$EOSIM_CGROUP/cgroup.procs" || exit 111; fi; exec {drop_to}"$0" "$@" >>"$EOSIM_LOG" 2>&1"#
    );
    let mut cmd = vec![
        "sh".to_string(),
        "-c".into(),
        script,
        launch.program.display().to_string(),
    ];
    cmd.extend(launch.args.iter().cloned());
    cmd
}

/// One service's container, running or stopped, removed on drop.
pub struct ContainerProcess {
    container: Option<Container<GenericImage>>,
    name: String,
    watchdog: Option<Child>,
}

impl std::fmt::Debug for ContainerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerProcess")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ContainerProcess {
    /// Creates and starts `launch`'s container from `spec`.
    ///
    /// # Errors
    /// [`ProvisionError::Spawn`] with the daemon's reason.
    pub fn start(launch: &Launch, spec: &ContainerSpec) -> Result<Self, ProvisionError> {
        docker().map_err(|e| spawn_error(launch, e))?;
        // The log exists before the first start, as natively (the container's root shell
        // appends to it, before the service drops to its user).
        std::fs::File::options()
            .create(true)
            .append(true)
            .open(&launch.log_path)
            .map_err(|e| ProvisionError::io(&launch.service, &launch.log_path, e))?;
        let (image, tag) = spec
            .image
            .rsplit_once(':')
            .unwrap_or((&spec.image, "latest"));
        let name = format!(
            "eosim-{}-{}-{}",
            std::process::id(),
            launch.service,
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let mut request = GenericImage::new(image, tag)
            .with_wait_for(WaitFor::Nothing)
            .with_container_name(&name)
            .with_network("host")
            .with_label(OWNER_LABEL, std::process::id().to_string())
            .with_cmd(command(launch))
            .with_working_dir(launch.cwd.display().to_string())
            .with_env_var("EOSIM_LOG", launch.log_path.display().to_string());
        for (k, v) in &launch.env {
            request = request.with_env_var(k, v);
        }
        for m in &spec.mounts {
            let path = m.display().to_string();
            request = request.with_mount(Mount::bind_mount(path.clone(), path));
        }
        // A network-faulted run: the node's cgroup, and the run's cgroup tree mounted at its
        // own path so that the first process can join it.
        let cgroup =
            crate::real::net::placement(&launch.service).map_err(|e| spawn_error(launch, e))?;
        if let Some(dir) = &cgroup {
            let tree = dir.parent().unwrap_or(dir).display().to_string();
            request = request
                .with_mount(Mount::bind_mount(tree.clone(), tree))
                .with_env_var("EOSIM_CGROUP", dir.display().to_string());
        }
        let container = request.start().map_err(|e| spawn_error(launch, e))?;
        if let Ok(mut live) = LIVE.lock() {
            live.insert(name.clone(), spec.image.clone());
        }
        let watchdog = watch(&name);
        Ok(Self {
            container: Some(container),
            name,
            watchdog,
        })
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn state(&self) -> Option<testcontainers::bollard::models::ContainerState> {
        let d = docker().ok()?;
        d.block_on(d.client.inspect_container(&self.name, None))
            .ok()?
            .state
    }

    /// Whether it runs (a paused container runs).
    pub fn is_running(&self) -> bool {
        self.state().and_then(|s| s.running).unwrap_or(false)
    }

    /// `exit code N` once it has exited.
    pub fn exit_status(&self) -> Option<String> {
        let state = self.state()?;
        if state.running.unwrap_or(false) {
            return None;
        }
        Some(format!("exit code {}", state.exit_code.unwrap_or(-1)))
    }

    /// The host pid of the container's first process while it runs.
    pub fn pid(&self) -> Option<i32> {
        let state = self.state()?;
        let pid = state.pid? as i32;
        (state.running.unwrap_or(false) && pid > 0).then_some(pid)
    }

    /// Sends `signal` (a number, as `docker kill -s 9`) to the container's first process.
    pub fn signal(&self, signal: i32) {
        if let Ok(d) = docker() {
            let options = KillContainerOptionsBuilder::default()
                .signal(&signal.to_string())
                .build();
            let _ = d.block_on(d.client.kill_container(&self.name, Some(options)));
        }
    }

    /// SIGKILL to every process of the container; returns once it is stopped (at most
    /// 10 s). A paused container is unpaused first (the daemon refuses to kill a paused
    /// one), so it runs for the moment between the two calls, where a native kill of a
    /// stopped process group acts at once.
    pub fn kill(&mut self) {
        self.resume();
        self.signal(libc::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `docker start` of the same container.
    ///
    /// # Errors
    /// [`ProvisionError::StillRunning`] if it runs; the daemon's reason otherwise.
    pub fn restart(&mut self, launch: &Launch) -> Result<(), ProvisionError> {
        if self.is_running() {
            return Err(ProvisionError::StillRunning {
                service: launch.service.clone(),
            });
        }
        let container = self
            .container
            .as_ref()
            .ok_or_else(|| spawn_error(launch, "the container was removed"))?;
        container.start().map_err(|e| spawn_error(launch, e))
    }

    /// `docker pause`: every process frozen, sockets open.
    pub fn pause(&self) {
        if let Ok(d) = docker() {
            let _ = d.block_on(d.client.pause_container(&self.name));
        }
    }

    /// `docker unpause` (nothing when it is not paused).
    pub fn resume(&self) {
        if let Ok(d) = docker() {
            if self.state().and_then(|s| s.paused).unwrap_or(false) {
                let _ = d.block_on(d.client.unpause_container(&self.name));
            }
        }
    }

    /// Runs `argv` in the running container; its exit code and output.
    ///
    /// # Errors
    /// The daemon's reason.
    pub fn exec(&self, argv: &[String]) -> Result<(i64, String), String> {
        exec(&self.name, argv)
    }
}

impl Drop for ContainerProcess {
    fn drop(&mut self) {
        self.resume();
        // testcontainers removes the container (`docker rm -f -v`) when its handle drops.
        drop(self.container.take());
        if let Ok(mut live) = LIVE.lock() {
            live.remove(&self.name);
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// Runs `argv` in container `name`; its exit code and output (stdout and stderr).
///
/// # Errors
/// The daemon's reason.
pub fn exec(name: &str, argv: &[String]) -> Result<(i64, String), String> {
    let d = docker()?;
    d.block_on(async {
        let created = d
            .client
            .create_exec(
                name,
                CreateExecOptions {
                    cmd: Some(argv.to_vec()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| format!("exec in {name}: {e}"))?;
        let mut text = String::new();
        if let StartExecResults::Attached { mut output, .. } = d
            .client
            .start_exec(&created.id, None)
            .await
            .map_err(|e| format!("exec in {name}: {e}"))?
        {
            while let Some(Ok(chunk)) = output.next().await {
                text.push_str(&chunk.to_string());
            }
        }
        let code = d
            .client
            .inspect_exec(&created.id)
            .await
            .map_err(|e| format!("exec in {name}: {e}"))?
            .exit_code
            .unwrap_or(-1);
        Ok((code, text))
    })
}

/// Runs `launch` (a setup step: `initdb`, `kafka-storage format`) as a one-shot container
/// of `spec`'s image to completion, at most 300 s; returns its exit status (`exit code N`),
/// `None` when it was still running and was killed.
///
/// # Errors
/// [`ProvisionError::Spawn`] when it cannot be started.
pub fn run_to_completion(
    launch: &Launch,
    spec: &ContainerSpec,
) -> Result<Option<String>, ProvisionError> {
    let mut c = ContainerProcess::start(launch, spec)?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while c.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = c.exit_status();
    if status.is_none() {
        c.kill();
    }
    Ok(status)
}

/// The images of the containers that run now, each with its image id (`sha256:…`, 12
/// hex digits): what a run's notes say it ran.
pub fn live_images() -> Vec<String> {
    let images: BTreeSet<String> = LIVE
        .lock()
        .map(|l| l.values().cloned().collect())
        .unwrap_or_default();
    let Ok(d) = docker() else {
        return images.into_iter().collect();
    };
    images
        .into_iter()
        .map(|tag| {
            let id = d
                .block_on(d.client.inspect_image(&tag))
                .ok()
                .and_then(|i| i.id)
                .unwrap_or_default();
            let short = id.trim_start_matches("sha256:").get(..12).unwrap_or("?");
            format!("{tag} ({short})")
        })
        .collect()
}

/// Removes every container this process created (the Ctrl-C teardown); returns how many.
pub fn remove_all_live() -> usize {
    let names: Vec<String> = match LIVE.lock() {
        Ok(mut live) => std::mem::take(&mut *live).into_keys().collect(),
        Err(_) => return 0,
    };
    for name in &names {
        remove(name);
    }
    names.len()
}

fn remove(name: &str) {
    if let Ok(d) = docker() {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        let _ = d.block_on(d.client.remove_container(name, Some(options)));
    }
}

/// Removes the containers of eosim processes that are gone (a SIGKILLed run's); returns
/// their names.
///
/// # Errors
/// The daemon's reason.
pub fn sweep_leftovers() -> Result<Vec<String>, String> {
    let d = docker()?;
    let filters = HashMap::from([("label", vec![OWNER_LABEL])]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let listed = d
        .block_on(d.client.list_containers(Some(options)))
        .map_err(|e| format!("docker ps: {e}"))?;
    let mut removed = Vec::new();
    for c in listed {
        let owner: Option<i32> = c
            .labels
            .as_ref()
            .and_then(|l| l.get(OWNER_LABEL))
            .and_then(|p| p.parse().ok());
        let Some(owner) = owner else { continue };
        // SAFETY: kill with signal 0 only checks that the pid exists.
        let alive = owner > 0 && unsafe { libc::kill(owner, 0) } == 0;
        if !alive {
            if let Some(name) = c.names.and_then(|n| n.into_iter().next()) {
                let name = name.trim_start_matches('/').to_string();
                remove(&name);
                removed.push(name);
            }
        }
    }
    Ok(removed)
}

/// A `sh` that waits for this process to go and then removes container `name` with the
/// docker CLI (negotiates its API version itself); `None` without `sh`.
fn watch(name: &str) -> Option<Child> {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; docker rm -f -v {name} \
         >/dev/null 2>&1",
        parent = std::process::id()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_container_command_runs_the_program_with_its_output_in_the_log() {
        let launch = Launch {
            service: "postgres".into(),
            program: "/usr/lib/postgresql/15/bin/postgres".into(),
            args: vec!["-D".into(), "/tmp/x y".into()],
            env: Vec::new(),
            cwd: "/tmp".into(),
            log_path: "/tmp/postgres.log".into(),
            user: None,
            container: None,
        };
        let cmd = command(&launch);
        assert_eq!(&cmd[..2], ["sh", "-c"]);
        assert!(
            cmd[2].ends_with(r#"exec "$0" "$@" >>"$EOSIM_LOG" 2>&1"#),
            "{}",
            cmd[2]
        );
        assert_eq!(
            &cmd[3..],
            ["/usr/lib/postgresql/15/bin/postgres", "-D", "/tmp/x y"],
            "arguments are passed as they are, never through a shell's word splitting"
        );
        let as_user = command(&Launch {
            user: Some((2001, 2001)),
            ..launch
        });
        assert!(
            as_user[2].contains("exec setpriv --reuid=2001 --regid=2001 --clear-groups \"$0\""),
            "the service drops to its user after joining its cgroup: {}",
            as_user[2]
        );
    }
}
