//! Local clusters: `meridian cluster start|stop|status`, and the clusters
//! `meridian-bench` starts for a run.
//!
//! A cluster lives in a directory: `cluster.toml` (the configuration) and
//! one `node<i>/` per node holding `node.log` and `pid`. Nodes are started as
//! separate processes of the `meridian` binary in their own process group,
//! so they outlive the command that started them and a `kill -9` of one is a
//! real crash. The `meridian` command passes its own executable; other
//! callers (the bench, tests) find it with [`server_exe`].

use meridian_config::Configuration;
use meridian_wire::{AdminRequest, AdminResponse, NodeId, Request, Response};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Cluster management errors.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// File system or process error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Configuration problem.
    #[error(transparent)]
    Config(#[from] meridian_config::ConfigError),
    /// A node did not come up.
    #[error("node {node} did not answer within {secs} s; see {log}")]
    NotReady {
        /// The node.
        node: u32,
        /// Seconds waited.
        secs: u64,
        /// Its log file.
        log: String,
    },
    /// A cluster is already running in this directory.
    #[error("a cluster is already running in {0} (stop it first)")]
    AlreadyRunning(String),
    /// The cluster in this directory keeps no data on disk
    /// (`durability.mode = "memory"`), so it cannot start again with it.
    #[error(
        "the cluster in {0} runs in memory and kept no data to restart from; \
         start a new one with --fresh"
    )]
    NothingToRestart(String),
    /// The `meridian` binary that nodes run from is not there.
    #[error(
        "the server binary {path} is missing: build it with `{build}` \
         (or set {SERVER_BIN_ENV} to a `meridian` binary)"
    )]
    NoServerBinary {
        /// Where it was looked for.
        path: String,
        /// The command that builds it there.
        build: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let what = what.into();
    move |source| ClusterError::Io { what, source }
}

/// The environment variable naming the `meridian` binary that
/// [`server_exe`] returns, instead of the one next to the running
/// executable.
pub const SERVER_BIN_ENV: &str = "MERIDIAN_BIN";

/// The `meridian` server binary that local clusters run their nodes from,
/// for callers that are not that binary (`meridian-bench`, tests):
/// `$MERIDIAN_BIN` if set, else [`server_exe_near`] the running
/// executable.
///
/// Errors: the binary is not there ([`ClusterError::NoServerBinary`],
/// naming the cargo command that builds it).
pub fn server_exe() -> Result<PathBuf, ClusterError> {
    if let Some(p) = std::env::var_os(SERVER_BIN_ENV) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(ClusterError::NoServerBinary {
                path: format!("{} (from {SERVER_BIN_ENV})", p.display()),
                build: "cargo build --release -p meridian-cli".into(),
            });
        }
        return Ok(p);
    }
    let exe = std::env::current_exe().map_err(io("finding the running executable"))?;
    server_exe_near(&exe)
}

/// The `meridian` binary in the directory of the executable `exe`: cargo
/// puts `meridian` and `meridian-bench` side by side in `target/<profile>/`,
/// though each package builds only its own (`cargo build --release -p
/// meridian-cli -p meridian-bench` builds both).
///
/// Errors: it is not there ([`ClusterError::NoServerBinary`], naming the
/// cargo command that builds it: a debug build for `target/debug`, else a
/// release build).
pub fn server_exe_near(exe: &Path) -> Result<PathBuf, ClusterError> {
    let dir = exe.parent().unwrap_or(Path::new("."));
    let server = dir.join("meridian");
    if server.is_file() {
        return Ok(server);
    }
    // A debug build's bench looks in target/debug; anything else is told
    // the release build, which is what the README runs.
    let build = if dir.file_name().is_some_and(|n| n == "debug") {
        "cargo build -p meridian-cli"
    } else {
        "cargo build --release -p meridian-cli"
    };
    Err(ClusterError::NoServerBinary {
        path: server.display().to_string(),
        build: build.into(),
    })
}

/// In a node's directory: a monotonic clock offset, seconds, that the node
/// runs with from its next (re)start (`meridian fault clock-offset`).
pub const CLOCK_OFFSET_FILE: &str = "clock-offset";

/// Path of the configuration file of the cluster in `dir`.
pub fn config_path(dir: &Path) -> PathBuf {
    dir.join("cluster.toml")
}

fn node_dir(cfg: &Configuration, dir: &Path, id: u32) -> PathBuf {
    cfg.nodes
        .iter()
        .find(|n| n.id == id)
        .and_then(|n| n.data_dir.clone())
        .unwrap_or_else(|| dir.join(format!("node{id}")))
}

/// `kill -9` nodes `ids` of the cluster in `dir` (a real crash: no
/// cleanup runs). Returns the ids killed.
///
/// Errors: the configuration cannot be read, a node is unknown, or it has
/// no live process.
pub fn kill_nodes(dir: &Path, ids: &[u32]) -> Result<Vec<u32>, ClusterError> {
    let cfg = Configuration::load(&config_path(dir))?;
    let mut killed = Vec::new();
    for &id in ids {
        cfg.node(NodeId(id))?;
        let pid_file = node_dir(&cfg, dir, id).join("pid");
        let pid = read_pid(&pid_file)
            .filter(|p| alive(*p))
            .ok_or_else(|| ClusterError::Io {
                what: format!("node {id}"),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no live process"),
            })?;
        // SAFETY: sending a signal to a pid has no memory effects here.
        if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
            return Err(ClusterError::Io {
                what: format!("kill -9 of node {id} (pid {pid})"),
                source: std::io::Error::last_os_error(),
            });
        }
        killed.push(id);
    }
    Ok(killed)
}

/// Start nodes `ids` of the cluster in `dir` again after a crash, keeping
/// their data directories (with `durability = "disk"` they restore from
/// their write-ahead log and checkpoint), and wait until they answer. The
/// nodes run from [`server_exe`].
///
/// Errors: the binary is missing, the configuration cannot be read, a node
/// is unknown or still running, or it does not answer within 10 s.
pub fn restart_nodes(dir: &Path, ids: &[u32]) -> Result<(), ClusterError> {
    restart_nodes_with_exe(dir, &server_exe()?, ids)
}

/// [`restart_nodes`] with an explicit `meridian` executable.
///
/// Errors: as [`restart_nodes`].
pub fn restart_nodes_with_exe(dir: &Path, exe: &Path, ids: &[u32]) -> Result<(), ClusterError> {
    let cfg = &Configuration::load(&config_path(dir))?;
    for &id in ids {
        let n = cfg.node(NodeId(id))?.clone();
        let nd = node_dir(cfg, dir, id);
        if read_pid(&nd.join("pid")).is_some_and(alive) {
            return Err(ClusterError::Io {
                what: format!("restarting node {id}"),
                source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "still running"),
            });
        }
        spawn_node(exe, dir, &nd, id, false)?;
        if wait_ready(&n.addr, Duration::from_secs(10)).is_err() {
            return Err(ClusterError::NotReady {
                node: id,
                secs: 10,
                log: nd.join("node.log").display().to_string(),
            });
        }
    }
    Ok(())
}

/// Whether `dir` holds a cluster: its `cluster.toml`.
pub fn exists(dir: &Path) -> bool {
    config_path(dir).exists()
}

/// Start the stopped (or crashed) cluster in `dir` again from its disks:
/// every node of its address book that ran before (a member of its first
/// configuration, or a node with an incarnation file: a spare that joined)
/// restores from its write-ahead log and checkpoint, and the restored CM
/// renews the configuration (FaRM §5.2). Returns the configuration file
/// and the nodes started.
///
/// Errors: [`ClusterError::AlreadyRunning`] if a node of it runs,
/// [`ClusterError::NothingToRestart`] for a memory-mode cluster, and as
/// [`restart_nodes`].
pub fn restart_all(dir: &Path, exe: &Path) -> Result<(Configuration, Vec<u32>), ClusterError> {
    refuse_running(dir)?;
    let cfg = Configuration::load(&config_path(dir))?;
    if cfg.durability.mode == meridian_config::DurabilityMode::Memory {
        return Err(ClusterError::NothingToRestart(dir.display().to_string()));
    }
    let ids: Vec<u32> = cfg
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|id| {
            cfg.is_member(NodeId(*id)) || node_dir(&cfg, dir, *id).join("incarnation").exists()
        })
        .collect();
    restart_nodes_with_exe(dir, exe, &ids)?;
    Ok((cfg, ids))
}

/// Start the spare nodes of the cluster in `dir`: nodes in its address
/// book that are not members of its first configuration and do not run
/// (`cluster start --spares`). Each starts outside the configuration and
/// asks the CM to join (FaRM §5.2); the CM adds it and then moves replicas
/// onto it, one paced make-before-break step at a time (§5.4). The nodes
/// run from the `meridian` binary `exe`. Returns the ids started.
///
/// Errors: as [`restart_nodes_with_exe`]; none to start is not an error
/// (empty).
pub fn join_spares(dir: &Path, exe: &Path) -> Result<Vec<u32>, ClusterError> {
    let cfg = Configuration::load(&config_path(dir))?;
    let spares: Vec<u32> = cfg
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|id| !cfg.is_member(NodeId(*id)))
        .filter(|id| !read_pid(&node_dir(&cfg, dir, *id).join("pid")).is_some_and(alive))
        .collect();
    restart_nodes_with_exe(dir, exe, &spares)?;
    Ok(spares)
}

/// The milestones every node of the cluster in `dir` recorded in its
/// `events.jsonl`, as (node, event kind, detail), in file order per node
/// and nodes ascending. Torn lines (a node killed mid-write) are skipped.
///
/// Errors: the configuration cannot be read.
pub fn node_events(dir: &Path) -> Result<Vec<(u32, String, String)>, ClusterError> {
    let cfg = Configuration::load(&config_path(dir))?;
    let mut out = Vec::new();
    for n in &cfg.nodes {
        let Ok(text) = std::fs::read_to_string(node_dir(&cfg, dir, n.id).join("events.jsonl"))
        else {
            continue;
        };
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let Some(kind) = v["event"].as_str() {
                let detail = v["detail"].as_str().unwrap_or("").to_string();
                out.push((n.id, kind.to_string(), detail));
            }
        }
    }
    Ok(out)
}

/// What the nodes' `read_ts` waits did between `start_ns` and `end_ns`
/// (system-wide monotonic clock, as the bench's run and the nodes'
/// `stats.jsonl` are stamped): per node, the last counters written at or
/// before `end_ns` less the last written at or before `start_ns` (zero if
/// none), summed over the nodes. The nodes write every
/// `meridian_node::STATS_INTERVAL_MS` (1 s), so the window is that coarse
/// at each end: read fractions and means, not rates. `None` if no node
/// wrote any.
///
/// Errors: the configuration cannot be read.
pub fn read_holds(
    dir: &Path,
    start_ns: u64,
    end_ns: u64,
) -> Result<Option<meridian_process::node::ReadHoldStats>, ClusterError> {
    use meridian_process::node::ReadHoldStats;
    let cfg = Configuration::load(&config_path(dir))?;
    let mut sum = ReadHoldStats::default();
    let mut any = false;
    for n in &cfg.nodes {
        let Ok(text) = std::fs::read_to_string(node_dir(&cfg, dir, n.id).join("stats.jsonl"))
        else {
            continue;
        };
        let (mut before, mut through) = (ReadHoldStats::default(), None);
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let (Some(t), Ok(h)) = (
                v["mono_ns"].as_u64(),
                serde_json::from_value::<ReadHoldStats>(v["read_holds"].clone()),
            ) else {
                continue;
            };
            if t <= start_ns {
                before = h;
            }
            if t <= end_ns {
                through = Some(h);
            }
        }
        let Some(h) = through else { continue };
        any = true;
        sum.add_window(&h, &before);
    }
    Ok(any.then_some(sum))
}

/// Start `meridian node` for node `id` of the cluster in `dir`, its output
/// appended to (`fresh`: written over) `node.log` in `nd`, and record its
/// pid there.
fn spawn_node(
    exe: &Path,
    dir: &Path,
    nd: &Path,
    id: u32,
    fresh: bool,
) -> Result<std::process::Child, ClusterError> {
    let io = |what: String| move |source| ClusterError::Io { what, source };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(!fresh)
        .truncate(fresh)
        .open(nd.join("node.log"))
        .map_err(io("opening node.log".into()))?;
    let log2 = log
        .try_clone()
        .map_err(io("cloning the log handle".into()))?;
    use std::os::unix::process::CommandExt;
    // The node's network namespace (`--netns`), and a monotonic clock
    // offset (`meridian fault clock-offset`: a time namespace); with
    // `--kill-child` a `kill -9` of `unshare` kills the node too.
    let mut prefix: Vec<String> = crate::netns::load(dir)
        .map(|n| n.exec_prefix(id))
        .unwrap_or_default();
    if let Some(secs) = std::fs::read_to_string(nd.join(CLOCK_OFFSET_FILE))
        .ok()
        .and_then(|t| t.trim().parse::<f64>().ok())
    {
        prefix.extend([
            "unshare".into(),
            "--time".into(),
            "--fork".into(),
            "--kill-child".into(),
            format!("--monotonic={secs}"),
            "--boottime=0".into(),
        ]);
    }
    // The nodes' CPUs (`--node-cpus`): `taskset` sets them and execs the
    // node, so the pid stays the node's.
    if let Some(cpus) = crate::cpus::node_cpus(dir) {
        prefix.extend(["taskset".into(), "-c".into(), cpus]);
    }
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let child = cmd
        .arg("node")
        .arg("--config")
        .arg(config_path(dir))
        .arg("--id")
        .arg(id.to_string())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(io(format!("starting node {id}")))?;
    std::fs::write(nd.join("pid"), child.id().to_string())
        .map_err(io("writing pid file".into()))?;
    Ok(child)
}

/// Is process `pid` alive?
pub fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence/permission.
    let exists = pid > 0 && unsafe { libc::kill(pid, 0) } == 0;
    // A killed child not yet reaped by its parent is a zombie: dead.
    exists
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            != Some(true)
}

/// Pids of the cluster's live node processes (from each node's `pid`
/// file), by node id; nodes that are down are left out.
///
/// Errors: the cluster's configuration cannot be read.
pub fn node_pids(dir: &Path) -> Result<Vec<u32>, ClusterError> {
    let cfg = Configuration::load(&config_path(dir))?;
    Ok(cfg
        .nodes
        .iter()
        .filter_map(|n| read_pid(&node_dir(&cfg, dir, n.id).join("pid")))
        .filter(|p| alive(*p))
        .filter_map(|p| u32::try_from(p).ok())
        .collect())
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Find a free base port with `n` consecutive free ports on 127.0.0.1.
///
/// Racy (another process may take a port between this check and the
/// node's bind); [`start`] uses OS-assigned ports instead when no base port
/// is given.
pub fn free_base_port(n: u16) -> u16 {
    let start = 20000 + (std::process::id() % 20000) as u16;
    let mut base = start;
    loop {
        let ok = (0..n).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if ok {
            return base;
        }
        base = if base > 60000 { 20000 } else { base + n + 7 };
    }
}

/// `n` distinct ports the OS assigned on 127.0.0.1, with their listeners
/// still open: the caller holds them until its nodes are about to bind, so
/// two clusters started at once (tests run in parallel) cannot pick the
/// same port, as two processes with neighbouring pids could with
/// [`free_base_port`].
///
/// Errors: the bind error.
pub fn os_ports(n: usize) -> Result<Vec<(u16, std::net::TcpListener)>, std::io::Error> {
    (0..n)
        .map(|_| {
            let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
            Ok((l.local_addr()?.port(), l))
        })
        .collect()
}

/// Write a configuration for `nodes` local nodes and start them from
/// [`server_exe`].
///
/// Errors: [`ClusterError`] if the binary is missing, a cluster already
/// runs in `dir`, a process cannot be started, or a node does not answer
/// within 10 s.
pub fn start(
    dir: &Path,
    nodes: u32,
    replication: usize,
    regions: u32,
    base_port: Option<u16>,
) -> Result<Configuration, ClusterError> {
    start_with_exe(dir, &server_exe()?, nodes, replication, regions, base_port)
}

/// As [`start`], running node processes from the `meridian` binary `exe`.
///
/// Errors: as [`start`].
pub fn start_with_exe(
    dir: &Path,
    exe: &Path,
    nodes: u32,
    replication: usize,
    regions: u32,
    base_port: Option<u16>,
) -> Result<Configuration, ClusterError> {
    start_tuned(dir, exe, nodes, replication, regions, base_port, |_| {})
}

/// As [`start_with_exe`], with `tune` applied to the configuration before
/// it is written (lease length and the like, for experiments).
///
/// Errors: as [`start`], or [`ClusterError::Config`] if the tuned
/// configuration is invalid.
pub fn start_tuned(
    dir: &Path,
    exe: &Path,
    nodes: u32,
    replication: usize,
    regions: u32,
    base_port: Option<u16>,
    tune: impl FnOnce(&mut Configuration),
) -> Result<Configuration, ClusterError> {
    start_inner(
        dir,
        exe,
        nodes,
        replication,
        regions,
        base_port,
        false,
        tune,
    )
}

/// As [`start_tuned`], each node in a network namespace of its own
/// ([`crate::netns`]), so that `meridian fault partition` can cut it off.
///
/// Errors: as [`start`], or the namespaces cannot be made (see
/// [`crate::netns::available`]).
pub fn start_in_netns(
    dir: &Path,
    exe: &Path,
    nodes: u32,
    replication: usize,
    regions: u32,
    tune: impl FnOnce(&mut Configuration),
) -> Result<Configuration, ClusterError> {
    start_inner(dir, exe, nodes, replication, regions, None, true, tune)
}

/// Refuse with [`ClusterError::AlreadyRunning`] if a node of the local
/// cluster in `dir` (per its stored configuration and pid files) is alive.
/// Callers that change files the nodes read at (re)start, such as the
/// node CPU list, check this first, so a refused second start changes
/// nothing of a running cluster.
pub fn refuse_running(dir: &Path) -> Result<(), ClusterError> {
    let Ok(old) = Configuration::load(&config_path(dir)) else {
        return Ok(());
    };
    for n in &old.nodes {
        if read_pid(&node_dir(&old, dir, n.id).join("pid")).is_some_and(alive) {
            return Err(ClusterError::AlreadyRunning(dir.display().to_string()));
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn start_inner(
    dir: &Path,
    exe: &Path,
    nodes: u32,
    replication: usize,
    regions: u32,
    base_port: Option<u16>,
    netns: bool,
    tune: impl FnOnce(&mut Configuration),
) -> Result<Configuration, ClusterError> {
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(io("resolving the cluster directory"))?;
    refuse_running(&dir)?;
    // Leftovers of a cluster that ran here before: its namespaces.
    crate::netns::destroy(&dir)?;
    let (mut cfg, held) = match base_port {
        _ if netns => {
            let ids: Vec<u32> = (0..nodes).collect();
            let net = crate::netns::create(&dir, &ids)?;
            let mut cfg = Configuration::local(nodes, 0, replication, regions, &dir);
            for n in cfg.nodes.iter_mut() {
                n.addr = net.addr(n.id);
            }
            (cfg, Vec::new())
        }
        Some(base) => (
            Configuration::local(nodes, base, replication, regions, &dir),
            Vec::new(),
        ),
        None => {
            let held = os_ports(nodes as usize).map_err(io("picking free ports"))?;
            let mut cfg = Configuration::local(nodes, 0, replication, regions, &dir);
            for (n, (port, _)) in cfg.nodes.iter_mut().zip(&held) {
                n.addr = format!("127.0.0.1:{port}");
            }
            (cfg, held)
        }
    };
    tune(&mut cfg);
    // A tuning that breaks the configuration (`--clock`, `--limit`) is an
    // error, not a panic.
    cfg.validate_all()?;
    cfg.check_invariants();
    std::fs::write(config_path(&dir), cfg.to_toml()?).map_err(io("writing cluster.toml"))?;
    // Release the held ports just before the nodes bind them.
    drop(held);
    // Node directories a larger earlier cluster left here would count as
    // this cluster's (their milestones in `events.jsonl` read as lease
    // false positives of this run): remove them.
    let ours: std::collections::BTreeSet<std::path::PathBuf> = cfg
        .nodes
        .iter()
        .map(|n| node_dir(&cfg, &dir, n.id))
        .collect();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let is_node_dir = name
                .strip_prefix("node")
                .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
            if is_node_dir && e.path().is_dir() && !ours.contains(&e.path()) {
                std::fs::remove_dir_all(e.path())
                    .map_err(io(format!("removing {}", e.path().display())))?;
            }
        }
    }
    let mut children = Vec::new();
    for n in &cfg.nodes {
        let nd = node_dir(&cfg, &dir, n.id);
        std::fs::create_dir_all(&nd).map_err(io(format!("creating {}", nd.display())))?;
        // A fresh configuration is a fresh cluster: state a previous
        // cluster in this directory left (its incarnation counter, Raft
        // state and milestones) would make the node a restarted member of
        // that old cluster.
        for stale in [
            "incarnation",
            "coordination.state",
            "events.jsonl",
            CLOCK_OFFSET_FILE,
        ] {
            match std::fs::remove_file(nd.join(stale)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(format!("removing {stale} in {}", nd.display()))(e)),
            }
        }
        // Spares (in the address book, not members) start later, with
        // [`join_spares`].
        if cfg.is_member(NodeId(n.id)) {
            let child = spawn_node(&exe, &dir, &nd, n.id, true)?;
            children.push(child);
        }
    }
    let members = cfg.nodes.iter().filter(|n| cfg.is_member(NodeId(n.id)));
    for (n, child) in members.zip(&mut children) {
        let not_ready = || ClusterError::NotReady {
            node: n.id,
            secs: 10,
            log: node_dir(&cfg, &dir, n.id)
                .join("node.log")
                .display()
                .to_string(),
        };
        // A node that exited (it could not bind its port, say) must not
        // pass for ready because something else answers at its address.
        if wait_ready(&n.addr, Duration::from_secs(10)).is_err()
            || !matches!(child.try_wait(), Ok(None))
        {
            // Stop what this call started: no orphan nodes.
            let _ = stop(&dir);
            return Err(not_ready());
        }
    }
    Ok(cfg)
}

/// Block until `addr` answers a Ping, or `timeout` passes.
///
/// Errors: the last connection error.
pub fn wait_ready(addr: &str, timeout: Duration) -> Result<(), std::io::Error> {
    let deadline = Instant::now() + timeout;
    loop {
        match ping(addr) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One synchronous request (blocking std socket); for status and readiness.
///
/// Errors: I/O or decoding errors.
pub fn request(addr: &str, req: Request) -> Result<Response, std::io::Error> {
    use std::io::{Read, Write};
    let sock: std::net::SocketAddr = addr.parse().map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}"))
    })?;
    let mut s = std::net::TcpStream::connect_timeout(&sock, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut buf = Vec::new();
    meridian_wire::encode_frame(
        &meridian_wire::Frame::Request {
            config: meridian_wire::ConfigId(0),
            id: 1,
            truncate: Default::default(),
            req,
        },
        &mut buf,
    )
    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    s.write_all(&buf)?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((f, _)) = meridian_wire::decode_frame(&got)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?
        {
            return match f {
                meridian_wire::Frame::Response { resp, .. } => Ok(resp),
                other => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unexpected frame {other:?}"),
                )),
            };
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        got.extend_from_slice(&chunk[..n]);
    }
}

fn ping(addr: &str) -> Result<(), std::io::Error> {
    match request(addr, Request::Admin(AdminRequest::Ping))? {
        Response::Admin(AdminResponse::Pong) => Ok(()),
        other => Err(std::io::Error::other(format!("unexpected {other:?}"))),
    }
}

/// Stop every node of the cluster in `dir`: SIGTERM, then SIGKILL after 5 s.
/// Returns the ids of nodes that were running.
///
/// Errors: [`ClusterError`] if the configuration cannot be read.
pub fn stop(dir: &Path) -> Result<Vec<u32>, ClusterError> {
    let cfg = Configuration::load(&config_path(dir))?;
    let mut stopped = Vec::new();
    for n in &cfg.nodes {
        let pidf = node_dir(&cfg, dir, n.id).join("pid");
        let Some(pid) = read_pid(&pidf) else { continue };
        if alive(pid) {
            // SAFETY: sending a signal to a pid we started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while alive(pid) && Instant::now() < deadline {
                reap(pid);
                std::thread::sleep(Duration::from_millis(20));
            }
            if alive(pid) {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            reap(pid);
            stopped.push(n.id);
        }
        let _ = std::fs::remove_file(&pidf);
    }
    crate::netns::destroy(dir)?;
    Ok(stopped)
}

fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: non-blocking wait on a child pid (no-op if not our child).
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
}

/// Status of each node: (id, addr, pid if alive, node status if reachable).
pub fn status(
    dir: &Path,
) -> Result<Vec<(u32, String, Option<i32>, Option<meridian_wire::NodeStatus>)>, ClusterError> {
    let cfg = Configuration::load(&config_path(dir))?;
    Ok(cfg
        .nodes
        .iter()
        .map(|n| {
            let pid = read_pid(&node_dir(&cfg, dir, n.id).join("pid")).filter(|p| alive(*p));
            let st = match request(&n.addr, Request::Admin(AdminRequest::Status)) {
                Ok(Response::Admin(AdminResponse::Status(s))) => Some(s),
                _ => None,
            };
            (n.id, n.addr.clone(), pid, st)
        })
        .collect())
}

/// A cluster started for the lifetime of a value: stopped on drop (also on
/// panic), used by benchmarks and tests.
pub struct LocalCluster {
    /// Its directory.
    pub dir: PathBuf,
    /// Its configuration.
    pub config: Configuration,
}

impl LocalCluster {
    /// Start `nodes` nodes in `dir` from [`server_exe`].
    ///
    /// Errors: as [`start`].
    pub fn start(
        dir: &Path,
        nodes: u32,
        replication: usize,
        regions: u32,
    ) -> Result<Self, ClusterError> {
        let config = start(dir, nodes, replication, regions, None)?;
        Ok(LocalCluster {
            dir: dir.to_path_buf(),
            config,
        })
    }

    /// Start `nodes` nodes in `dir` from [`server_exe`], with `tune`
    /// applied to the configuration (the bench's `--lease-ms`,
    /// `--durability`).
    ///
    /// Errors: as [`start`] and [`start_tuned`].
    pub fn start_tuned(
        dir: &Path,
        nodes: u32,
        replication: usize,
        regions: u32,
        tune: impl FnOnce(&mut Configuration),
    ) -> Result<Self, ClusterError> {
        let config = start_tuned(dir, &server_exe()?, nodes, replication, regions, None, tune)?;
        Ok(LocalCluster {
            dir: dir.to_path_buf(),
            config,
        })
    }

    /// Start `nodes` nodes in `dir` from the binary `exe`, each in a
    /// network namespace of its own (see [`crate::netns`]).
    ///
    /// Errors: as [`start_in_netns`].
    pub fn start_in_netns(
        dir: &Path,
        exe: &Path,
        nodes: u32,
        replication: usize,
        regions: u32,
        tune: impl FnOnce(&mut Configuration),
    ) -> Result<Self, ClusterError> {
        let config = start_in_netns(dir, exe, nodes, replication, regions, tune)?;
        Ok(LocalCluster {
            dir: dir.to_path_buf(),
            config,
        })
    }

    /// Start `nodes` nodes in `dir` from the binary `exe` (for tests).
    ///
    /// Errors: as [`start`].
    pub fn start_with_exe(
        dir: &Path,
        exe: &Path,
        nodes: u32,
        replication: usize,
        regions: u32,
    ) -> Result<Self, ClusterError> {
        let config = start_with_exe(dir, exe, nodes, replication, regions, None)?;
        Ok(LocalCluster {
            dir: dir.to_path_buf(),
            config,
        })
    }

    /// The configuration the cluster was started with.
    pub fn config(&self) -> &Configuration {
        &self.config
    }

    /// The CM's address.
    pub fn cm_addr(&self) -> String {
        self.config
            .node(NodeId(self.config.cm))
            .map(|n| n.addr.clone())
            .unwrap_or_default()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if let Err(e) = stop(&self.dir) {
            eprintln!("stopping the local cluster in {}: {e}", self.dir.display());
        }
    }
}
