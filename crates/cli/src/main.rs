//! The `meridian` command: the server and operator binary. See `meridian
//! --help`. Benchmarks are a binary of their own, `meridian-bench`
//! (crates/bench), which runs its local clusters' nodes from this one.

use clap::{Parser, Subcommand};
use meridian_cli::cluster;
use meridian_config::Configuration;
use meridian_wire::{
    AdminRequest, AdminResponse, ClientOp, ClientOpResult, ExecuteError, NodeId, Request, Response,
    ThinRequest, ThinResponse,
};
use std::path::PathBuf;
use std::process::ExitCode;

/// Every process the `meridian` binary runs (nodes, the simulator)
/// allocates through mimalloc, as `meridian-bench` does. With glibc's
/// allocator, malloc and free were about 18 % of a node's CPU under the
/// 4-key RMW (`malloc_consolidate` and `unlink_chunk` among them) and 11 %
/// of the bench client's (docs/performance-history.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "meridian",
    version,
    about = "Meridian: a distributed, main-memory, strictly serializable transactional key-value store"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node.
    Node {
        /// Configuration file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// This node's id.
        #[arg(long)]
        id: u32,
    },
    /// Manage a local cluster of node processes.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Inject faults into a local cluster (FaRM §5's experiments):
    /// `kill -9`, partitions (clusters started with `--netns`), healing,
    /// and clock offsets.
    Fault {
        #[command(subcommand)]
        cmd: FaultCmd,
    },
    /// Read a key (one-shot transaction, coordinated by a node).
    Get {
        #[command(flatten)]
        target: Target,
        /// The key (UTF-8; use --hex for bytes).
        key: String,
    },
    /// Write a key.
    Put {
        #[command(flatten)]
        target: Target,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Delete a key.
    Delete {
        #[command(flatten)]
        target: Target,
        /// The key.
        key: String,
    },
    /// Scan keys in [start, end).
    Scan {
        #[command(flatten)]
        target: Target,
        /// Start key (inclusive).
        start: String,
        /// End key (exclusive); omitted = to the end.
        end: Option<String>,
        /// Most rows.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Print the configuration, regions with replicas, and each node's clock uncertainty.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Run seeds of the deterministic simulator through the checker.
    Sim {
        /// Number of seeds.
        #[arg(long, default_value_t = 200)]
        seeds: u64,
        /// First seed.
        #[arg(long, default_value_t = 0)]
        first: u64,
        /// Workload. `swarm` runs bank, register or rows (by seed) with a
        /// random mix of faults per seed; the others run fault-free.
        #[arg(long, value_enum, default_value_t = SimWorkloadArg::Bank)]
        workload: SimWorkloadArg,
        /// Run the chosen workload with a random mix of faults per seed
        /// (`Faults::swarm`).
        #[arg(long)]
        faults: bool,
        /// The nodes' `limits.read_lock_wait_us` (how long a read that
        /// meets a lock waits at the primary; 0 = abort at once, FaRMv2
        /// §4.7). Default: the limit's default.
        #[arg(long)]
        read_lock_wait_us: Option<u64>,
        /// The nodes' `durability.report_after_primary_fsync` (`false`: a
        /// primary also answers `Installed` before the `Ack`; both wait for
        /// the record either way). Default: `true`, as the nodes'.
        #[arg(long, value_name = "BOOL")]
        report_after_primary_fsync: Option<bool>,
        /// Whether the register workload's one-read transactions run as
        /// single-read transactions (FaRM §3's lock-free read, the client
        /// library's `clock.lock_free_reads`). Default: `true`; `false`
        /// replays seeds found before single reads existed.
        #[arg(long, value_name = "BOOL")]
        single_reads: Option<bool>,
        /// Run every seed even after a failure, then list the failing and
        /// the stuck seeds (exit status 1 if any failed).
        #[arg(long)]
        keep_going: bool,
        /// Write one line per seed, `seed digest`, to this file: the
        /// digest hashes every event the run executed, in order, so two
        /// trees that behave alike give identical files.
        #[arg(long, value_name = "FILE")]
        digests: Option<std::path::PathBuf>,
    },
}

/// The simulator's workloads, for `meridian sim --workload`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum SimWorkloadArg {
    /// Bank transfers and audits (checked).
    Bank,
    /// Contended registers (checked).
    Register,
    /// Inserts, deletes, scans, long transactions (checked).
    Rows,
    /// TATP (invariants, liveness, clean end).
    Tatp,
    /// YCSB workload A (invariants, liveness, clean end).
    Ycsb,
    /// Bank, register or rows by seed, always with faults.
    Swarm,
}

#[derive(clap::Args, Clone)]
struct Target {
    /// Cluster directory (uses <dir>/cluster.toml).
    #[arg(long, default_value = ".meridian")]
    dir: PathBuf,
    /// Configuration file (overrides --dir).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Keys and values are hex.
    #[arg(long)]
    hex: bool,
}

impl Target {
    fn load(&self) -> Result<Configuration, String> {
        let path = self
            .config
            .clone()
            .unwrap_or_else(|| cluster::config_path(&self.dir));
        Configuration::load(&path).map_err(|e| {
            format!("{e} (start a cluster with `meridian cluster start` or pass --config)")
        })
    }
    fn bytes(&self, s: &str) -> Result<Vec<u8>, String> {
        if !self.hex {
            return Ok(s.as_bytes().to_vec());
        }
        if s.len() % 2 != 0 {
            return Err(format!("{s:?} is not hex (odd length)"));
        }
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("{s:?} is not hex")))
            .collect()
    }
    fn show(&self, b: &[u8]) -> String {
        if self.hex {
            b.iter().map(|x| format!("{x:02x}")).collect()
        } else {
            String::from_utf8_lossy(b).into_owned()
        }
    }
}

#[derive(Subcommand)]
enum FaultCmd {
    /// `kill -9` nodes (a crash: nothing is cleaned up).
    Kill {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
        /// Node ids (comma-separated); `cm` is the CM.
        #[arg(long, value_delimiter = ',', required = true)]
        nodes: Vec<String>,
    },
    /// Cut nodes off from the others (both directions; clients still reach
    /// every node). Needs a cluster started with `--netns`.
    Partition {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
        /// The nodes to isolate (comma-separated ids).
        #[arg(long, value_delimiter = ',', required = true)]
        isolate: Vec<u32>,
    },
    /// Remove every partition.
    Heal {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
    },
    /// Restart a node (`kill -9`, then start again; with `durability =
    /// "disk"` it recovers from its log) with its monotonic clock offset by
    /// `--offset-ms`, in a time namespace (`unshare --time`).
    ClockOffset {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
        /// The node.
        #[arg(long)]
        node: u32,
        /// Offset of its monotonic clock, ms (may be negative).
        #[arg(long, allow_hyphen_values = true)]
        offset_ms: i64,
    },
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// Start a cluster. In a directory that holds a stopped cluster, start
    /// it again from its disks, with its data and its configuration (the
    /// size flags are ignored then); `--fresh` wipes it and starts a new
    /// one with N nodes.
    Start {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
        /// Number of nodes.
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        /// Copies of each region (f + 1).
        #[arg(long, default_value_t = 3)]
        replication: usize,
        /// Regions.
        #[arg(long, default_value_t = 12)]
        regions: u32,
        /// First port (default: a free range).
        #[arg(long)]
        base_port: Option<u16>,
        /// Each node in a network namespace of its own, so that `meridian
        /// fault partition` can cut it off (root, iproute2 and nftables).
        #[arg(long)]
        netns: bool,
        /// Spare nodes: in the address book but not members, and not
        /// started; `meridian cluster join` starts them and they join the
        /// running cluster (FaRM §5.2), which moves replicas onto them.
        #[arg(long, default_value_t = 0)]
        spares: u32,
        /// Run the nodes on these CPUs (`taskset -c` syntax, e.g. `1` or
        /// `2-3`), restarts included; default: every CPU.
        #[arg(long, value_name = "LIST")]
        node_cpus: Option<String>,
        /// Wipe a cluster this directory holds and start a new one.
        #[arg(long)]
        fresh: bool,
    },
    /// Stop the cluster in the directory (if it runs) and start it again
    /// from its disks, with its data.
    Restart {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
    },
    /// Start the cluster's spare nodes (`start --spares`): each asks the CM
    /// to join, and the CM moves replicas onto it in paced
    /// make-before-break steps (FaRM §5.2, §5.4). Waits until each is a
    /// member holding replicas, printing progress.
    Join {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
        /// Give up waiting for the rebalancing after this many seconds
        /// (the nodes keep running and the moves go on).
        #[arg(long, default_value_t = 60)]
        wait_secs: u64,
    },
    /// Stop the cluster's nodes.
    Stop {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
    },
    /// Show each node's process and status.
    Status {
        /// Cluster directory.
        #[arg(long, default_value = ".meridian")]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,meridian_node=info")),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal: a node's stderr is its `node.log`.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rt_current() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Node { config, id } => {
            let cfg = Configuration::load(&config).map_err(|e| e.to_string())?;
            cfg.node(NodeId(id)).map_err(|e| e.to_string())?;
            rt_current()?
                .block_on(meridian_node::run(cfg, NodeId(id)))
                .map_err(|e| e.to_string())
        }
        Cmd::Cluster { cmd } => cluster_cmd(cmd),
        Cmd::Fault { cmd } => fault_cmd(cmd),
        Cmd::Get { target, key } => {
            let k = target.bytes(&key)?;
            match one_shot(&target, vec![ClientOp::Get(k)])?.pop() {
                Some(ClientOpResult::Value(Some(v))) => println!("{}", target.show(&v)),
                Some(ClientOpResult::Value(None)) => return Err(format!("key {key:?} not found")),
                other => return Err(format!("unexpected result {other:?}")),
            }
            Ok(())
        }
        Cmd::Put { target, key, value } => {
            let (k, v) = (target.bytes(&key)?, target.bytes(&value)?);
            one_shot(&target, vec![ClientOp::Put(k, v)])?;
            println!("OK");
            Ok(())
        }
        Cmd::Delete { target, key } => {
            let k = target.bytes(&key)?;
            one_shot(&target, vec![ClientOp::Delete(k)])?;
            println!("OK");
            Ok(())
        }
        Cmd::Scan {
            target,
            start,
            end,
            limit,
        } => {
            let s = target.bytes(&start)?;
            let e = end.map(|e| target.bytes(&e)).transpose()?;
            if let Some(ClientOpResult::Rows(rows)) = one_shot(
                &target,
                vec![ClientOp::Scan {
                    start: s,
                    end: e,
                    limit,
                }],
            )?
            .pop()
            {
                for (k, v) in rows {
                    println!("{}\t{}", target.show(&k), target.show(&v));
                }
            }
            Ok(())
        }
        Cmd::Status { target } => status(&target),
        Cmd::Sim {
            seeds,
            first,
            workload,
            faults,
            read_lock_wait_us,
            report_after_primary_fsync,
            single_reads,
            keep_going,
            digests,
        } => sim(
            seeds,
            first,
            workload,
            SimOverrides {
                faults,
                read_lock_wait_us,
                report_after_primary_fsync,
                single_reads,
                digests,
            },
            keep_going,
        ),
    }
}

/// Start the stopped cluster in `dir` again from its disks, and say so.
fn restart_existing(dir: &std::path::Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    println!(
        "{} holds a cluster: starting it again from its disks (--fresh starts a new one)",
        dir.display()
    );
    let (cfg, ids) = cluster::restart_all(dir, &exe).map_err(|e| e.to_string())?;
    println!("restarted {} nodes in {}", ids.len(), dir.display());
    for n in cfg.nodes.iter().filter(|n| ids.contains(&n.id)) {
        println!("  node {} at {}", n.id, n.addr);
    }
    Ok(())
}

fn cluster_cmd(cmd: ClusterCmd) -> Result<(), String> {
    match cmd {
        ClusterCmd::Start {
            dir,
            nodes,
            replication,
            regions,
            base_port,
            netns,
            spares,
            node_cpus,
            fresh,
        } => {
            if cluster::exists(&dir) && !fresh {
                cluster::refuse_running(&dir).map_err(|e| e.to_string())?;
                if netns {
                    return Err(format!(
                        "{} holds a cluster: --netns starts only a new one (add --fresh)",
                        dir.display()
                    ));
                }
                return restart_existing(&dir);
            }
            if spares > 0 && netns {
                return Err("--spares and --netns cannot be combined yet".into());
            }
            // Written, or a list a bench run left in `dir` removed, before
            // any node starts, and only if none runs there already.
            cluster::refuse_running(&dir).map_err(|e| e.to_string())?;
            meridian_cli::cpus::set_node_cpus(&dir, node_cpus.as_deref())
                .map_err(|e| format!("--node-cpus: {e}"))?;
            let members = nodes;
            let spare_members = |c: &mut Configuration| {
                if spares > 0 {
                    c.members = (0..members).collect();
                }
            };
            let cfg = if netns {
                meridian_cli::netns::available()?;
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                cluster::start_in_netns(&dir, &exe, nodes, replication, regions, |_| {})
            } else {
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                cluster::start_tuned(
                    &dir,
                    &exe,
                    nodes + spares,
                    replication,
                    regions,
                    base_port,
                    spare_members,
                )
            }
            .map_err(|e| e.to_string())?;
            println!(
                "started {} nodes in {} (config {})",
                cfg.members().len(),
                dir.display(),
                cluster::config_path(&dir).display()
            );
            for n in &cfg.nodes {
                let spare = if cfg.is_member(NodeId(n.id)) {
                    ""
                } else {
                    " (spare, not started: `meridian cluster join`)"
                };
                println!("  node {} at {}{spare}", n.id, n.addr);
            }
            Ok(())
        }
        ClusterCmd::Restart { dir } => {
            if !cluster::exists(&dir) {
                return Err(format!(
                    "no cluster in {} (start one with `meridian cluster start`)",
                    dir.display()
                ));
            }
            let stopped = cluster::stop(&dir).map_err(|e| e.to_string())?;
            if !stopped.is_empty() {
                println!("stopped nodes {stopped:?}");
            }
            restart_existing(&dir)
        }
        ClusterCmd::Join { dir, wait_secs } => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let started = cluster::join_spares(&dir, &exe).map_err(|e| e.to_string())?;
            if started.is_empty() {
                return Err(format!(
                    "no spare node to start in {} (start the cluster with --spares N)",
                    dir.display()
                ));
            }
            println!("started spare node(s) {started:?}; they ask the CM to join");
            let bar = indicatif::ProgressBar::new_spinner();
            let t0 = std::time::Instant::now();
            let deadline = t0 + std::time::Duration::from_secs(wait_secs);
            let (mut last_count, mut last_change) = (0, t0);
            loop {
                let events = cluster::node_events(&dir).map_err(|e| e.to_string())?;
                let moves: Vec<&String> = events
                    .iter()
                    .filter(|(_, kind, _)| kind == "Rebalance")
                    .map(|(_, _, detail)| detail)
                    .collect();
                let done = |id: u32| {
                    moves
                        .iter()
                        .filter(|d| d.contains(&format!("to: NodeId({id}), finished: true")))
                        .count()
                };
                let per_node: Vec<(u32, usize)> =
                    started.iter().map(|id| (*id, done(*id))).collect();
                if moves.len() != last_count {
                    (last_count, last_change) = (moves.len(), std::time::Instant::now());
                }
                bar.set_message(format!(
                    "{:.1} s: {} rebalancing step(s); replicas moved onto (node, count): {per_node:?}",
                    t0.elapsed().as_secs_f64(),
                    moves.len()
                ));
                bar.tick();
                // Balanced: every new node got replicas and no step started
                // for two seconds (a step follows the last one's fill and a
                // lease, well under that).
                if per_node.iter().all(|(_, n)| *n > 0)
                    && last_change.elapsed() > std::time::Duration::from_secs(2)
                {
                    bar.finish();
                    println!(
                        "joined: {} replica move(s) onto {per_node:?} in {:.1} s",
                        moves.len() / 2,
                        last_change.duration_since(t0).as_secs_f64()
                    );
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    bar.finish();
                    return Err(format!(
                        "rebalancing did not settle within {wait_secs} s ({per_node:?} moved); the nodes keep running (see their node.log)"
                    ));
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
        ClusterCmd::Stop { dir } => {
            let stopped = cluster::stop(&dir).map_err(|e| e.to_string())?;
            println!("stopped {} node(s): {:?}", stopped.len(), stopped);
            Ok(())
        }
        ClusterCmd::Status { dir } => {
            for (id, addr, pid, st) in cluster::status(&dir).map_err(|e| e.to_string())? {
                let p = pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
                match st {
                    Some(s) => println!("node {id} {addr} pid {p}: up, {} objects, {} log records, uncertainty {} µs", s.objects, s.log_records, s.uncertainty_ns as f64 / 1000.0),
                    None => println!("node {id} {addr} pid {p}: DOWN"),
                }
            }
            Ok(())
        }
    }
}

fn fault_cmd(cmd: FaultCmd) -> Result<(), String> {
    match cmd {
        FaultCmd::Kill { dir, nodes } => {
            let cfg =
                Configuration::load(&cluster::config_path(&dir)).map_err(|e| e.to_string())?;
            // The CM now: the one named by the node the configuration file
            // lists first that answers (it may have changed since start).
            let cm = current_cm(&cfg).unwrap_or(cfg.cm);
            let mut ids = Vec::new();
            for n in &nodes {
                ids.push(match n.as_str() {
                    "cm" => cm,
                    other => other
                        .parse()
                        .map_err(|_| format!("{other:?} is neither a node id nor `cm`"))?,
                });
            }
            let killed = cluster::kill_nodes(&dir, &ids).map_err(|e| e.to_string())?;
            println!("killed (kill -9) nodes {killed:?}");
            Ok(())
        }
        FaultCmd::Partition { dir, isolate } => {
            meridian_cli::netns::partition(&dir, &isolate).map_err(|e| e.to_string())?;
            println!("nodes {isolate:?} cut off from the others (heal with `meridian fault heal`)");
            Ok(())
        }
        FaultCmd::Heal { dir } => {
            meridian_cli::netns::heal(&dir).map_err(|e| e.to_string())?;
            println!("partitions removed");
            Ok(())
        }
        FaultCmd::ClockOffset {
            dir,
            node,
            offset_ms,
        } => {
            let cfg =
                Configuration::load(&cluster::config_path(&dir)).map_err(|e| e.to_string())?;
            let nd = cfg
                .node(meridian_wire::NodeId(node))
                .map_err(|e| e.to_string())?
                .data_dir
                .clone()
                .unwrap_or_else(|| dir.join(format!("node{node}")));
            std::fs::write(
                nd.join(cluster::CLOCK_OFFSET_FILE),
                format!("{}", offset_ms as f64 / 1000.0),
            )
            .map_err(|e| format!("{}: {e}", nd.display()))?;
            cluster::kill_nodes(&dir, &[node]).map_err(|e| e.to_string())?;
            // Let the kill land before the restart reuses the address.
            std::thread::sleep(std::time::Duration::from_millis(50));
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            cluster::restart_nodes_with_exe(&dir, &exe, &[node]).map_err(|e| e.to_string())?;
            println!("node {node} restarted with its monotonic clock offset by {offset_ms} ms");
            Ok(())
        }
    }
}

/// The CM as the nodes see it now (the first node that answers a status
/// request names its configuration's CM), if any answers.
fn current_cm(cfg: &Configuration) -> Option<u32> {
    cfg.nodes.iter().find_map(|n| {
        match cluster::request(&n.addr, Request::Cm(meridian_wire::CmRequest::GetConfig)) {
            Ok(Response::Cm(meridian_wire::CmResponse::Config { config_toml })) => {
                Configuration::from_toml(&config_toml).ok().map(|c| c.cm)
            }
            _ => None,
        }
    })
}

fn one_shot(target: &Target, ops: Vec<ClientOp>) -> Result<Vec<ClientOpResult>, String> {
    let cfg = target.load()?;
    for op in &ops {
        let (k, v) = match op {
            ClientOp::Get(k) | ClientOp::Delete(k) => (k, None),
            ClientOp::Put(k, v) => (k, Some(v)),
            ClientOp::Scan { start, .. } => (start, None),
        };
        if k.len() > cfg.limits.max_key_bytes {
            return Err(format!(
                "key of {} bytes exceeds the {}-byte limit",
                k.len(),
                cfg.limits.max_key_bytes
            ));
        }
        if let Some(v) = v {
            if v.len() > cfg.limits.max_value_bytes {
                return Err(format!(
                    "value of {} bytes exceeds the {}-byte limit",
                    v.len(),
                    cfg.limits.max_value_bytes
                ));
            }
        }
    }
    let mut last = String::new();
    for n in &cfg.nodes {
        match cluster::request(
            &n.addr,
            Request::Thin(ThinRequest::Execute { ops: ops.clone() }),
        ) {
            Ok(Response::Thin(ThinResponse::Executed(Ok(r)))) => return Ok(r.results),
            // Nothing took effect: another node may serve it.
            Ok(Response::Thin(ThinResponse::Executed(Err(
                e @ (ExecuteError::Busy { .. } | ExecuteError::Unavailable(_)),
            )))) => last = format!("node {}: {e}", n.id),
            Ok(Response::Thin(ThinResponse::Executed(Err(e)))) => return Err(e.to_string()),
            Ok(other) => return Err(format!("unexpected reply {other:?}")),
            Err(e) => last = format!("node {} at {}: {e}", n.id, n.addr),
        }
    }
    Err(format!("no node could run it ({last})"))
}

fn status(target: &Target) -> Result<(), String> {
    let cfg = target.load()?;
    println!(
        "configuration {} (CM and clock master: node {}), {} nodes, replication {}, {} regions",
        cfg.config_id,
        cfg.cm,
        cfg.nodes.len(),
        cfg.replication,
        cfg.region_count
    );
    println!(
        "limits: key {} B, value {} B, drift bound {} ppm",
        cfg.limits.max_key_bytes, cfg.limits.max_value_bytes, cfg.clock.drift_ppm
    );
    println!("regions:");
    for r in cfg.regions() {
        let hex = |k: &[u8]| k.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let end = r.end.as_deref().map(hex).unwrap_or_else(|| "∞".into());
        println!(
            "  {} [{}, {}) primary {} backups {:?}",
            r.id,
            hex(&r.start),
            end,
            r.primary,
            r.backups.iter().map(|b| b.to_string()).collect::<Vec<_>>()
        );
    }
    println!("nodes:");
    for n in &cfg.nodes {
        match cluster::request(&n.addr, Request::Admin(AdminRequest::Status)) {
            Ok(Response::Admin(AdminResponse::Status(s))) => println!(
                "  node {} {} ({}): up, uncertainty {:.1} µs, {} syncs, {} objects, {} log records, {} requests",
                n.id,
                n.addr,
                n.failure_domain,
                s.uncertainty_ns as f64 / 1000.0,
                s.syncs,
                s.objects,
                s.log_records,
                s.requests
            ),
            Ok(other) => println!("  node {} {}: unexpected {other:?}", n.id, n.addr),
            Err(e) => println!("  node {} {}: DOWN ({e})", n.id, n.addr),
        }
    }
    Ok(())
}

/// `meridian sim`'s settings that override each seed's `SimConfig`.
struct SimOverrides {
    /// A random mix of faults per seed for a fault-free workload.
    faults: bool,
    /// The nodes' `limits.read_lock_wait_us`.
    read_lock_wait_us: Option<u64>,
    /// The nodes' `durability.report_after_primary_fsync`.
    report_after_primary_fsync: Option<bool>,
    /// `SimConfig::single_reads`.
    single_reads: Option<bool>,
    /// Where to write each seed's history digest.
    digests: Option<std::path::PathBuf>,
}

fn sim(
    seeds: u64,
    first: u64,
    workload: SimWorkloadArg,
    overrides: SimOverrides,
    keep_going: bool,
) -> Result<(), String> {
    let SimOverrides {
        faults,
        read_lock_wait_us,
        report_after_primary_fsync,
        single_reads,
        digests,
    } = overrides;
    let mut digest_lines = String::new();
    use meridian_sim::{Faults, SimConfig};
    let mut failed: Vec<u64> = Vec::new();
    let mut stuck_seeds: Vec<u64> = Vec::new();
    // Runs that reported a lost region, and whether each then finished
    // (`true`) or ran into the time limit.
    let mut lost_seeds: Vec<(u64, bool)> = Vec::new();
    let t0 = std::time::Instant::now();
    let (mut committed, mut aborted, mut unknown, mut crashes, mut dropped, mut stuck) =
        (0, 0, 0, 0, 0, 0);
    let mut lost = 0;
    // Writes the refill fence dropped, and the runs it dropped any in.
    let (mut fenced, mut fenced_runs) = (0u64, 0u64);
    // Seeds whose copies carried keys held by lock recovery (a path of
    // the fill fence only rare schedules reach).
    let mut held_copied_seeds: Vec<u64> = Vec::new();
    let bar = indicatif::ProgressBar::new(seeds);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} seeds, {elapsed} ({eta} left)",
        )
        .map_err(|e| e.to_string())?,
    );
    for seed in first..first + seeds {
        let mut cfg = match workload {
            SimWorkloadArg::Bank => SimConfig::bank(seed),
            SimWorkloadArg::Register => SimConfig::register(seed),
            SimWorkloadArg::Rows => SimConfig::rows(seed),
            SimWorkloadArg::Tatp => SimConfig::tatp(seed),
            SimWorkloadArg::Ycsb => SimConfig::ycsb(seed),
            SimWorkloadArg::Swarm => SimConfig::swarm(seed),
        };
        if faults {
            cfg.faults = Faults::swarm(seed);
        }
        if let Some(us) = read_lock_wait_us {
            cfg.read_lock_wait_us = us;
        }
        if let Some(strict) = report_after_primary_fsync {
            cfg.report_after_primary_fsync = strict;
        }
        if let Some(on) = single_reads {
            cfg.single_reads = on;
        }
        let r = match meridian_sim::run_and_check(cfg) {
            Ok(r) => r,
            Err(e) if keep_going => {
                digest_lines.push_str(&format!("{seed} failed\n"));
                bar.suspend(|| eprintln!("{e}"));
                failed.push(seed);
                bar.inc(1);
                continue;
            }
            Err(e) => {
                bar.abandon();
                return Err(e);
            }
        };
        digest_lines.push_str(&format!("{seed} {:016x}\n", r.digest));
        committed += r.committed;
        aborted += r.aborted;
        unknown += r.unknown;
        crashes += r.crashes;
        dropped += r.dropped;
        lost += r.region_lost as u64;
        fenced += r.stale_fill_writes;
        fenced_runs += (r.stale_fill_writes > 0) as u64;
        if r.copied_recovery_holds > 0 {
            held_copied_seeds.push(seed);
        }
        if r.region_lost {
            lost_seeds.push((seed, !r.timed_out));
        }
        stuck += (r.timed_out && !r.region_lost) as u64;
        if r.timed_out && !r.region_lost {
            stuck_seeds.push(seed);
            bar.suspend(|| {
                eprintln!(
                    "seed {seed} ({}): ended by the time limit (stuck)",
                    r.faults.describe()
                );
                for line in &r.stuck {
                    eprintln!("    {line}");
                }
            });
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(path) = &digests {
        std::fs::write(path, &digest_lines)
            .map_err(|e| format!("cannot write digests to {}: {e}", path.display()))?;
    }
    println!(
        "{seeds} seeds ({workload:?}{}, first {first}) passed the checker in {:.1} s wall time: \
         {committed} committed, {aborted} aborted, {unknown} unknown; \
         {crashes} crashes, {dropped} messages dropped; {lost} runs lost a region's every \
         replica (more than f failures, beyond the fault model); {stuck} other runs ended by \
         the time limit (stuck); the refill fence dropped {fenced} stale writes in {fenced_runs} runs; \
         copies carried keys held by lock recovery in {} runs (first seeds: {:?})",
        if faults { " with faults" } else { "" },
        t0.elapsed().as_secs_f64(),
        held_copied_seeds.len(),
        &held_copied_seeds[..held_copied_seeds.len().min(20)]
    );
    if keep_going {
        println!("failed seeds: {failed:?}; stuck seeds: {stuck_seeds:?}");
        let (lost_done, lost_limit): (Vec<_>, Vec<_>) = lost_seeds.iter().partition(|l| l.1);
        let seeds_of = |v: &[&(u64, bool)]| v.iter().map(|l| l.0).collect::<Vec<_>>();
        println!(
            "seeds that lost a region and finished: {:?}; lost a region and ran into the time limit: {:?}",
            seeds_of(&lost_done),
            seeds_of(&lost_limit)
        );
        if !failed.is_empty() {
            return Err(format!(
                "{} of {seeds} seeds failed: {failed:?}",
                failed.len()
            ));
        }
    }
    Ok(())
}
