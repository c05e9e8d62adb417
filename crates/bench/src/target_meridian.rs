//! The benchmarks against Meridian (`--target meridian`, the default): a
//! local cluster started for the run, or the running one `--cm` names;
//! each workload loaded, warmed up and run, with the faults of `--kill`
//! and the checked bank alongside; then the figures the run's nodes
//! recorded, the null-RPC baseline, and the results file.

use super::*;
use meridian_bench::run::{BankOutcome, BenchResult, Ran};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Run benchmark `b` with `opts` on Meridian, then print its result and
/// write it as JSON (`--json`, or `bench-results/<bench>.json`).
///
/// Errors: a bad option, a cluster that fails to start, a failed run,
/// audit or check, or the results file.
pub(super) fn bench_meridian(b: BenchCmd, opts: BenchOpts) -> Result<(), String> {
    let local = start_local_cluster(&opts)?;
    let cm = match (&opts.cm, &local) {
        (Some(a), _) => a.clone(),
        (None, Some(c)) => c.cm_addr(),
        (None, None) => return Err("no cluster".into()),
    };
    let rt = bench_runtime(opts.client_threads, opts.client_cpus.as_deref())?;
    let result = rt.block_on(run_on_meridian(b, &opts, &cm))?;
    if let Some(r) = result {
        write_result(&r, opts.json.as_ref(), || {
            PathBuf::from(format!("bench-results/{}.json", r.bench))
        })?;
    }
    Ok(())
}

/// The local cluster of `opts` (`--nodes`, `--spares`, `--lease-ms`,
/// `--limit`, `--clock`, `--durability`, `--node-cpus`) started in
/// `--dir`; none with `--cm`, whose cluster runs already.
///
/// Errors: `--node-cpus` with `--cm`, a cluster already running in the
/// directory, a bad `--limit` or `--clock` (refused before anything
/// starts), or a cluster that fails to start.
fn start_local_cluster(opts: &BenchOpts) -> Result<Option<cluster::LocalCluster>, String> {
    match &opts.cm {
        Some(_) if opts.node_cpus.is_some() => {
            return Err(
                "--node-cpus starts a local cluster's nodes; with --cm the cluster runs already"
                    .into(),
            )
        }
        Some(_) => return Ok(None),
        None => {}
    }
    let replication = opts.nodes.clamp(1, 3) as usize;
    // The nodes' CPUs (`--node-cpus`), or every CPU: written (or a
    // stale list removed) before the nodes start, and only if
    // no cluster runs in the directory already.
    cluster::refuse_running(&opts.dir).map_err(|e| e.to_string())?;
    meridian_cli::cpus::set_node_cpus(&opts.dir, opts.node_cpus.as_deref())
        .map_err(|e| format!("--node-cpus: {e}"))?;
    eprintln!(
        "starting a local {}-node cluster ({replication}-way replication) in {}{}",
        opts.nodes,
        opts.dir.display(),
        opts.node_cpus
            .as_deref()
            .map(|c| format!(", nodes on CPUs {c}"))
            .unwrap_or_default()
    );
    // Refuse a bad `--limit` before anything starts.
    let mut checked = meridian_config::Limits::default();
    for spec in &opts.limits {
        checked.set_from_spec(spec).map_err(|e| e.to_string())?;
    }
    let mut checked_clock = meridian_config::ClockConfig::default();
    for spec in &opts.clock {
        checked_clock
            .set_from_spec(spec)
            .map_err(|e| e.to_string())?;
    }
    let cluster = cluster::LocalCluster::start_tuned(
        &opts.dir,
        opts.nodes + opts.spares,
        replication,
        12,
        |c| tune_local_cluster(c, opts),
    )
    .map_err(|e| e.to_string())?;
    Ok(Some(cluster))
}

/// Apply `opts` to the local cluster's configuration `c`: the spares out
/// of the members, the lease, the limits and clock settings (checked
/// already), and the durability.
fn tune_local_cluster(c: &mut meridian_config::Configuration, opts: &BenchOpts) {
    if opts.spares > 0 {
        c.members = (0..opts.nodes).collect();
    }
    if let Some(l) = opts.lease_ms {
        c.lease.lease_ms = l;
    }
    for spec in &opts.limits {
        // Checked above: the same specs parse here.
        if let Err(e) = c.limits.set_from_spec(spec) {
            eprintln!("{e}");
        }
    }
    for spec in &opts.clock {
        // Checked above: the same specs parse here.
        if let Err(e) = c.clock.set_from_spec(spec) {
            eprintln!("{e}");
        }
    }
    match opts.durability {
        Some(DurabilityArg::Memory) => c.durability.mode = meridian_config::DurabilityMode::Memory,
        Some(DurabilityArg::Disk) => c.durability.mode = meridian_config::DurabilityMode::Disk,
        None => {}
    }
}

/// Run benchmark `b` against the cluster whose CM is at `cm`, and gather
/// its result; none for `rpc`, which prints its own.
///
/// Errors: the client cannot connect, or the run, an audit or a check
/// failed.
async fn run_on_meridian(
    b: BenchCmd,
    opts: &BenchOpts,
    cm: &str,
) -> Result<Option<BenchResult>, String> {
    let client = meridian_client::Client::connect(cm)
        .await
        .map_err(|e| e.to_string())?;
    let fault_ns = Arc::new(AtomicU64::new(0));
    let warmed = !matches!(b, BenchCmd::Bank { .. } | BenchCmd::Rpc { .. });
    // The nodes whose CPU per transaction the result reports: the
    // cluster in `--dir` (the local one, or the one `--cm` names).
    let servers = meridian_bench::cpu::Servers::ClusterDir(opts.dir.clone());
    let (ran, bank) = match b {
        BenchCmd::Tatp { subscribers, .. } => {
            run_tatp(&client, opts, subscribers, &fault_ns, &servers).await?
        }
        BenchCmd::Ycsb {
            workload,
            records,
            theta,
            value_bytes,
            ..
        } => {
            let cfg = ycsb_config(&workload, records, theta, value_bytes)?;
            run_ycsb(&client, opts, cfg, &fault_ns, &servers).await?
        }
        BenchCmd::Rmw { .. } | BenchCmd::Tpcc { .. } => {
            run_audited(&client, opts, &b, &fault_ns, &servers).await?
        }
        BenchCmd::Failover { .. } | BenchCmd::Sweep { .. } => {
            return Err("failover and sweep are run by bench_cmd".into())
        }
        BenchCmd::Rpc { .. } => {
            run_rpc(&client, opts, &servers).await;
            client.close().await;
            return Ok(None);
        }
        BenchCmd::Bank { accounts, .. } => run_bank(&client, opts, accounts, &fault_ns).await?,
    };
    let fault = fault_ns.load(Ordering::SeqCst);
    let r = gather_result(&client, opts, &ran, bank, fault, warmed, &servers).await?;
    // Release the client's lease: otherwise the CM suspects this
    // process a lease after it exits and renews the configuration.
    client.close().await;
    Ok(Some(r))
}

/// The bank's configuration with `accounts` accounts.
fn bank_config(accounts: u32) -> meridian_workload::bank::BankConfig {
    meridian_workload::bank::BankConfig {
        accounts,
        initial_balance: 1000,
        audit_percent: 20,
    }
}

/// The checked bank alongside another workload (`--bank-sessions`, for
/// `secs`): zero lost commits, by the checker and the audits. None
/// without bank sessions.
async fn bank_alongside(
    client: meridian_client::Client,
    sessions: usize,
    secs: u64,
) -> Result<Option<BankOutcome>, String> {
    if sessions == 0 {
        return Ok(None);
    }
    meridian_bench::run::bank(&client, bank_config(64), sessions, secs)
        .await
        .map(Some)
        .map_err(|e| format!("bank alongside: {e}"))
}

/// `tatp`: TATP loaded, warmed up and run with the bank alongside and the
/// faults of `--kill`. The result carries the memory per stored row: the
/// nodes' resident memory grown by the load, against the rows' raw key +
/// value bytes.
async fn run_tatp(
    client: &meridian_client::Client,
    opts: &BenchOpts,
    subscribers: u64,
    fault_ns: &Arc<AtomicU64>,
    servers: &meridian_bench::cpu::Servers,
) -> Result<(Ran, Option<BankOutcome>), String> {
    let cfg = meridian_workload::tatp::TatpConfig { subscribers };
    eprintln!("loading TATP with {subscribers} subscribers");
    let rss_before = nodes_rss_bytes(&opts.dir);
    let raw = Arc::new(AtomicU64::new(0));
    let counted = {
        let raw = raw.clone();
        meridian_workload::tatp::population(&cfg, 1).inspect(move |(k, v)| {
            raw.fetch_add((k.len() + v.len()) as u64, Ordering::Relaxed);
        })
    };
    let n = meridian_bench::run::load(
        client,
        counted,
        meridian_workload::tatp::population_count_hint(&cfg),
        64,
        8,
    )
    .await
    .map_err(|e| e.to_string())?;
    eprintln!("loaded {n} rows");
    let memory = match (rss_before, nodes_rss_bytes(&opts.dir)) {
        (Some(a), Some(b)) if n > 0 => {
            let copies = n * client.config().replication.max(1) as u64;
            let raw = raw.load(Ordering::Relaxed) as f64 / n as f64;
            let per_copy = b.saturating_sub(a) as f64 / copies as f64;
            eprintln!(
                "memory: {per_copy:.0} B resident per stored row copy ({copies} copies), raw row {raw:.1} B ({:.1}x)",
                per_copy / raw
            );
            Some((per_copy, raw))
        }
        _ => None,
    };
    meridian_bench::run::warm_up(
        client,
        Arc::new(meridian_bench::drive::Mix::Tatp(cfg)),
        opts.clients,
        opts.warmup,
    )
    .await;
    let killer = start_killer(opts, client.config().cm, fault_ns.clone())?;
    let (mut ran, bank) = tokio::join!(
        meridian_bench::run::tatp(client, cfg, opts.clients, opts.duration, servers),
        bank_alongside(client.clone(), opts.bank_sessions, opts.duration)
    );
    if let Some((per_copy, raw)) = memory {
        ran.result
            .extra
            .insert("rss_bytes_per_row_copy".into(), per_copy);
        ran.result.extra.insert("raw_bytes_per_row".into(), raw);
    }
    finish_killer(killer).await?;
    Ok((ran, bank?))
}

/// `ycsb`: the YCSB workload of `cfg` loaded, warmed up and run with the
/// bank alongside and the faults of `--kill`.
async fn run_ycsb(
    client: &meridian_client::Client,
    opts: &BenchOpts,
    cfg: meridian_workload::ycsb::YcsbConfig,
    fault_ns: &Arc<AtomicU64>,
    servers: &meridian_bench::cpu::Servers,
) -> Result<(Ran, Option<BankOutcome>), String> {
    let records = cfg.records;
    eprintln!(
        "loading YCSB with {records} records of {} B",
        cfg.value_bytes
    );
    let n = meridian_bench::run::load(
        client,
        meridian_workload::ycsb::population(&cfg, 1),
        records,
        32,
        8,
    )
    .await
    .map_err(|e| e.to_string())?;
    eprintln!("loaded {n} rows");
    meridian_bench::run::warm_up(
        client,
        Arc::new(meridian_bench::run::ycsb_mix(&cfg)?),
        opts.clients,
        opts.warmup,
    )
    .await;
    let killer = start_killer(opts, client.config().cm, fault_ns.clone())?;
    let (ran, bank) = tokio::join!(
        meridian_bench::run::ycsb(client, cfg, opts.clients, opts.duration, servers),
        bank_alongside(client.clone(), opts.bank_sessions, opts.duration)
    );
    finish_killer(killer).await?;
    Ok((ran?, bank?))
}

/// `rmw` and `tpcc`: the workload of `b` loaded, warmed up and run with
/// the bank alongside and the faults of `--kill`, then checked over the
/// whole store (the RMW audit; TPC-C's consistency conditions unless
/// `--no-check`).
async fn run_audited(
    client: &meridian_client::Client,
    opts: &BenchOpts,
    b: &BenchCmd,
    fault_ns: &Arc<AtomicU64>,
    servers: &meridian_bench::cpu::Servers,
) -> Result<(Ran, Option<BankOutcome>), String> {
    use meridian_bench::drive::Mix;
    let (mix, rows, hint) = bench_workload(b)?;
    let name = mix.name();
    eprintln!("loading {name} ({hint} rows)");
    meridian_bench::run::load(client, rows, hint, 64, 8)
        .await
        .map_err(|e| e.to_string())?;
    let warmed_commits =
        meridian_bench::run::warm_up(client, mix.clone(), opts.clients, opts.warmup).await;
    let killer = start_killer(opts, client.config().cm, fault_ns.clone())?;
    let (mut ran, bank) = tokio::join!(
        meridian_bench::run::meridian(
            client,
            &name,
            mix.clone(),
            opts.clients,
            opts.duration,
            0x4d57,
            servers,
        ),
        bank_alongside(client.clone(), opts.bank_sessions, opts.duration)
    );
    finish_killer(killer).await?;
    // The workload's own check over the whole store.
    match (&*mix, b) {
        (Mix::Rmw(cfg), _) => {
            let sum = meridian_bench::drive::audit_rmw(&mut client.session(), cfg).await?;
            rmw_audit_figures(&mut ran.result, cfg, sum, warmed_commits)?;
        }
        (
            Mix::Tpcc(cfg),
            BenchCmd::Tpcc {
                no_check: false, ..
            },
        ) => {
            let check = meridian_bench::drive::check_tpcc(&mut client.session(), cfg, |_| {}).await;
            tpcc_check_figures(&mut ran.result, check)?;
        }
        _ => {}
    }
    Ok((ran, bank?))
}

/// `rpc`: closed-loop null round trips, printed with their CPU cost.
async fn run_rpc(
    client: &meridian_client::Client,
    opts: &BenchOpts,
    servers: &meridian_bench::cpu::Servers,
) {
    let run =
        meridian_bench::run::rpc_with_cpu(client, opts.clients, opts.duration, true, servers).await;
    println!(
        "null RPC: {:.0} round trips/s with {} sessions",
        run.per_s, opts.clients
    );
    if let (Some(c), Some(n)) = (run.client_us_per_rt, run.servers_us_per_rt) {
        println!(
            "cpu per round trip: client {c:.2} µs ({:.2} cores), servers {n:.2} µs ({:.2} cores)",
            run.cpu.client_s / run.cpu.wall_s,
            run.cpu.servers_s / run.cpu.wall_s
        );
    }
}

/// `bank`: the checked bank with `accounts` accounts and the faults of
/// `--kill`; its commits' completion times make the run's timeline.
async fn run_bank(
    client: &meridian_client::Client,
    opts: &BenchOpts,
    accounts: u32,
    fault_ns: &Arc<AtomicU64>,
) -> Result<(Ran, Option<BankOutcome>), String> {
    let killer = start_killer(opts, client.config().cm, fault_ns.clone())?;
    let out = meridian_bench::run::bank(client, bank_config(accounts), opts.clients, opts.duration)
        .await
        .map_err(|e| e.to_string())?;
    finish_killer(killer).await?;
    let (committed, start_ns, end_ns) = bank_commits(&out.history);
    let ran = Ran {
        result: out.result.clone(),
        commits_ns: committed,
        start_ns,
        end_ns,
    };
    Ok((ran, Some(out)))
}

/// The result of run `ran` with what the nodes recorded around it: the
/// warm-up, the read holds, the lease events, the fault timeline (with
/// `--timeline`, or after a fault at `fault` ns), the bank's checks, and
/// the null-RPC baseline (`--baseline`).
///
/// Errors: the timeline, or the bank's checker or audits, failed.
async fn gather_result(
    client: &meridian_client::Client,
    opts: &BenchOpts,
    ran: &Ran,
    bank: Option<BankOutcome>,
    fault: u64,
    warmed: bool,
    servers: &meridian_bench::cpu::Servers,
) -> Result<BenchResult, String> {
    let mut r = ran.result.clone();
    if warmed {
        r.extra.insert("warmup_s".into(), opts.warmup as f64);
    }
    add_read_holds(&mut r, &opts.dir, ran.start_ns, ran.end_ns);
    // Lease false positives (FaRM Figure 16): suspicions and new
    // configurations the nodes recorded, whether or not a fault was
    // injected on purpose; those of the load phase count too, since
    // a reconfiguration then can leave the measured run on a
    // different placement.
    count_events(&opts.dir, (ran.start_ns, ran.end_ns)).report(
        &mut r,
        !opts.kill.is_empty(),
        opts.spares > 0,
    );
    if opts.timeline.is_some() || fault > 0 {
        let tl = fault_timeline(ran, opts, fault)?;
        timeline_figures(&tl, &mut r);
    }
    if let Some(out) = bank {
        check_bank(&out, opts, &mut r)?;
    }
    if opts.baseline > 0 {
        let run =
            meridian_bench::run::rpc_with_cpu(client, opts.clients, opts.baseline, true, servers)
                .await;
        r.rpc_baseline_per_s = Some(run.per_s);
        r.ratio_to_rpc = Some(r.committed_per_s / run.per_s);
        // The same CPU figures per null round trip, to set a
        // transaction's CPU against.
        if let Some(c) = run.client_us_per_rt {
            r.extra.insert("rpc_client_cpu_us_per_rt".into(), c);
        }
        if let Some(n) = run.servers_us_per_rt {
            r.extra.insert("rpc_server_cpu_us_per_rt".into(), n);
        }
    }
    Ok(r)
}
