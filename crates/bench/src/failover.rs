//! `meridian-bench failover` and the fault runs of the other benchmarks:
//! killing nodes on a schedule, the failure timeline (FaRM Figure 9), the
//! lease events around it, the checked bank beside the load, and the
//! nodes' read-hold counters.

use super::*;

/// `meridian-bench failover`: run every scenario `runs` times, then summarise.
///
/// Errors: a run that fails (its checker among them), or I/O on `out`.
#[allow(clippy::too_many_arguments)]
pub(super) fn failover(
    runs: u32,
    scenarios: &[String],
    nodes: u32,
    subscribers: u64,
    duration: u64,
    clients: usize,
    bank_sessions: usize,
    durability: DurabilityArg,
    out: &std::path::Path,
    lease_ms: Option<u64>,
) -> Result<(), String> {
    let mut summary = serde_json::Map::new();
    let mut table = Vec::new();
    for sc in scenarios {
        let kill: Vec<String> = match sc.as_str() {
            "non-cm" => vec![(nodes - 1).to_string()],
            "cm" => vec!["cm".into()],
            "cm+1" => vec!["cm".into(), (nodes - 1).to_string()],
            other => return Err(format!("unknown scenario {other:?} (non-cm, cm, cm+1)")),
        };
        let mut per_run: Vec<serde_json::Value> = Vec::new();
        for i in 0..runs {
            eprintln!("== failover {sc}: run {} of {runs}", i + 1);
            let dir = out.join(sc);
            let json = dir.join(format!("run-{i}.json"));
            let cluster = std::env::temp_dir()
                .join(format!("meridian-failover-{}-{sc}-{i}", std::process::id()));
            let _ = std::fs::remove_dir_all(&cluster);
            let opts = BenchOpts {
                cm: None,
                duration,
                warmup: 0,
                clients,
                baseline: 0,
                json: Some(json.clone()),
                dir: cluster.clone(),
                nodes,
                kill: kill.clone(),
                kill_at: Some(duration as f64 / 2.0),
                spares: 0,
                join_at: None,
                lease_ms,
                limits: Vec::new(),
                clock: Vec::new(),
                timeline: Some(dir.join(format!("timeline-{i}"))),
                durability: Some(durability),
                bank_sessions,
                edn: None,
                target: TargetArg::Meridian,
                peer_url: None,
                client_threads: 1,
                client_cpus: None,
                node_cpus: None,
            };
            let r = bench_cmd(BenchCmd::Tatp { opts, subscribers });
            let _ = std::fs::remove_dir_all(&cluster);
            r?;
            let text =
                std::fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            per_run.push(v["extra"].clone());
        }
        let mut med = serde_json::Map::new();
        let mut row = vec![sc.clone()];
        for f in FAILOVER_FIGURES {
            let mut xs: Vec<f64> = per_run.iter().filter_map(|e| e[f].as_f64()).collect();
            xs.sort_by(f64::total_cmp);
            let m = (!xs.is_empty()).then(|| {
                let n = xs.len();
                if n % 2 == 1 {
                    xs[n / 2]
                } else {
                    (xs[n / 2 - 1] + xs[n / 2]) / 2.0
                }
            });
            med.insert(
                f.into(),
                serde_json::json!({ "median": m, "runs": xs.len(), "min": xs.first(), "max": xs.last() }),
            );
            row.push(match m {
                Some(m) => format!("{m:.1} ({}/{runs})", xs.len()),
                None => format!("- (0/{runs})"),
            });
        }
        summary.insert(sc.clone(), serde_json::Value::Object(med));
        table.push(row);
    }
    println!("\nfailover medians over {runs} runs, ms after the kill (runs that reached the figure / runs):");
    println!("scenario | {}", FAILOVER_FIGURES.join(" | "));
    for row in &table {
        println!("{}", row.join(" | "));
    }
    let path = out.join("summary.json");
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let text = serde_json::to_string_pretty(&serde_json::Value::Object(summary))
        .map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("summary written to {}", path.display());
    Ok(())
}

/// Suspicions and configuration commits (counted once per configuration)
/// in the `events.jsonl` files of the cluster in `dir`.
pub(super) fn count_events(dir: &std::path::Path, window: (u64, u64)) -> LeaseEvents {
    let mut n = LeaseEvents::default();
    let mut configs = std::collections::BTreeSet::new();
    let mut configs_in_window = std::collections::BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return n;
    };
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path().join("events.jsonl")) else {
            continue;
        };
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let at = v["mono_ns"].as_u64().unwrap_or(0);
            let inside = (window.0..=window.1).contains(&at);
            match v["event"].as_str() {
                Some("Suspect") => {
                    n.suspicions += 1;
                    n.suspicions_in_window += u64::from(inside);
                }
                Some("LeaseStall") => {
                    let gap_ns = v["gap_ns"].as_u64().unwrap_or(0);
                    n.stalls += 1;
                    n.stalls_in_window += u64::from(inside);
                    n.longest_stall_ns = n.longest_stall_ns.max(gap_ns);
                }
                Some("Committed") => {
                    let id = v["detail"].as_str().unwrap_or("").to_string();
                    if inside {
                        configs_in_window.insert(id.clone());
                    }
                    configs.insert(id);
                }
                _ => {}
            }
        }
    }
    n.configs = configs.len() as u64;
    n.configs_in_window = configs_in_window.len() as u64;
    n
}

/// Suspicions and configuration commits the nodes recorded in their
/// `events.jsonl` ([`count_events`]): over the whole run (loading
/// included), and within the measured window.
#[derive(Debug, Default, PartialEq)]
pub(super) struct LeaseEvents {
    pub(super) suspicions: u64,
    pub(super) configs: u64,
    pub(super) suspicions_in_window: u64,
    pub(super) configs_in_window: u64,
    /// Lease thread stalls the nodes forgave (`LeaseStall` events), how
    /// many in the window, and the longest, ns.
    pub(super) stalls: u64,
    pub(super) stalls_in_window: u64,
    pub(super) longest_stall_ns: u64,
}

impl LeaseEvents {
    /// Into the result's extras, and a line for the reader when any
    /// suspicion happened without an injected fault (FaRM Figure 16's
    /// lease false positives). Configuration commits count joins and
    /// rebalancing steps too, which are not false positives.
    pub(super) fn report(
        &self,
        r: &mut meridian_bench::run::BenchResult,
        injected: bool,
        spares: bool,
    ) {
        r.extra.insert("suspicions".into(), self.suspicions as f64);
        r.extra.insert("config_commits".into(), self.configs as f64);
        r.extra.insert(
            "suspicions_in_window".into(),
            self.suspicions_in_window as f64,
        );
        r.extra.insert(
            "config_commits_in_window".into(),
            self.configs_in_window as f64,
        );
        r.extra
            .insert("lease_thread_stalls".into(), self.stalls as f64);
        r.extra.insert(
            "lease_thread_longest_stall_ms".into(),
            self.longest_stall_ns as f64 / 1e6,
        );
        if self.stalls > 0 {
            println!(
                "lease thread stalls: {} (longest {:.1} ms), {} in the measured window; suspicion did not count them",
                self.stalls,
                self.longest_stall_ns as f64 / 1e6,
                self.stalls_in_window,
            );
        }
        if !injected && self.suspicions > 0 {
            println!(
                "lease false positives: {} suspicion(s) and {} configuration commit(s){} without an injected fault, {} and {} of them in the measured window",
                self.suspicions,
                self.configs,
                if spares { " (joins and rebalancing included)" } else { "" },
                self.suspicions_in_window,
                self.configs_in_window,
            );
        }
    }
}

/// The committed transactions' completion times of a bank history, and
/// the history's first invocation and last completion, monotonic ns.
pub(super) fn bank_commits(history: &meridian_checker::History) -> (Vec<u64>, u64, u64) {
    use meridian_checker::Outcome;
    let committed: Vec<u64> = history
        .txns
        .iter()
        .filter(|t| t.outcome == Outcome::Committed)
        .map(|t| t.complete_ns)
        .collect();
    let start = history.txns.iter().map(|t| t.invoke_ns).min().unwrap_or(0);
    let end = history
        .txns
        .iter()
        .map(|t| t.complete_ns)
        .max()
        .unwrap_or(start);
    (committed, start, end)
}

/// A `--kill` (or `--spares`) run in progress: the task that starts the
/// spares at `--join-at`, then kills the victims at `--kill-at` (it records
/// the kill's monotonic time in `fault_ns`) and returns whom it killed.
pub(super) type Killer = tokio::task::JoinHandle<Result<Vec<u32>, String>>;

/// Start the `--kill` / `--spares` task, if any: node ids, with `cm`
/// standing for the CM (`cm` here, the node the client registered with).
///
/// Errors: an entry that is neither a node id nor `cm`.
pub(super) fn start_killer(
    opts: &BenchOpts,
    cm: u32,
    fault_ns: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Result<Option<Killer>, String> {
    if opts.kill.is_empty() && opts.spares == 0 {
        return Ok(None);
    }
    let mut victims = Vec::new();
    for v in &opts.kill {
        let id = match v.as_str() {
            "cm" => cm,
            other => other
                .parse()
                .map_err(|_| format!("--kill: {other:?} is neither a node id nor `cm`"))?,
        };
        if !victims.contains(&id) {
            victims.push(id);
        }
    }
    let at = opts.kill_at.unwrap_or(opts.duration as f64 / 2.0);
    let join_at = (opts.spares > 0).then(|| opts.join_at.unwrap_or(0.0));
    let dir = opts.dir.clone();
    Ok(Some(tokio::spawn(async move {
        let t0 = tokio::time::Instant::now();
        if let Some(j) = join_at {
            tokio::time::sleep_until(t0 + std::time::Duration::from_secs_f64(j)).await;
            let d = dir.clone();
            let joined = tokio::task::spawn_blocking(move || {
                cluster::join_spares(&d, &cluster::server_exe()?)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
            println!(
                "started spare node(s) {joined:?} at {:.1} s; they join and replicas move onto them",
                t0.elapsed().as_secs_f64()
            );
        }
        if victims.is_empty() {
            return Ok(victims);
        }
        tokio::time::sleep_until(t0 + std::time::Duration::from_secs_f64(at)).await;
        fault_ns.store(
            meridian_client::mono_ns(),
            std::sync::atomic::Ordering::SeqCst,
        );
        cluster::kill_nodes(&dir, &victims).map_err(|e| e.to_string())
    })))
}

/// Wait for the `--kill` task and report whom it killed.
///
/// Errors: the kill failed (no live process, or the signal failed).
pub(super) async fn finish_killer(killer: Option<Killer>) -> Result<(), String> {
    if let Some(k) = killer {
        let killed = k.await.map_err(|e| e.to_string())??;
        if !killed.is_empty() {
            println!("killed (kill -9) nodes {killed:?}");
        }
    }
    Ok(())
}

/// The run's 1 ms commit timeline, with the fault at `fault_ns`
/// (monotonic; 0 = none) and the cluster's node milestones; written as
/// JSON and PNG when `--timeline` is given.
pub(super) fn fault_timeline(
    ran: &meridian_bench::run::Ran,
    opts: &BenchOpts,
    fault_ns: u64,
) -> Result<meridian_bench::timeline::Timeline, String> {
    let mut tl = meridian_bench::timeline::Timeline::from_commits(
        ran.start_ns,
        ran.end_ns,
        ran.commits_ns.iter().copied(),
    );
    if fault_ns > ran.start_ns {
        tl.fault_ms = Some((fault_ns - ran.start_ns) as f64 / 1e6);
        tl.fault = Some(format!(
            "kill -9 of {} during {}",
            opts.kill.join(", "),
            ran.result.bench
        ));
    }
    tl.add_node_events(&opts.dir)
        .map_err(|e| format!("reading node events in {}: {e}", opts.dir.display()))?;
    if let Some(prefix) = &opts.timeline {
        if let Some(parent) = prefix.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let json = prefix.with_extension("json");
        tl.write_json(&json)
            .map_err(|e| format!("{}: {e}", json.display()))?;
        let png = prefix.with_extension("png");
        match tl.plot_png(&png, Some(500.0)) {
            Ok(()) => println!(
                "timeline written to {} and {}",
                json.display(),
                png.display()
            ),
            Err(e) => println!(
                "timeline written to {}; the plot failed: {e}",
                json.display()
            ),
        }
    }
    if let Some(r) = tl.recovery_ms(0.8, 1000.0, 10.0) {
        println!("throughput back to 80% of its pre-fault level {r:.1} ms after the fault");
    } else if tl.fault_ms.is_some() {
        println!("throughput did not come back to 80% of its pre-fault level");
    }
    if let Some(d) = tl.clock_disabled_ms() {
        println!("clocks disabled for at most {d:.1} ms (FaRMv2 §4.3)");
    }
    for m in tl
        .markers
        .iter()
        .filter(|m| tl.fault_ms.is_some_and(|f| m.t_ms >= f))
        .take(16)
    {
        println!(
            "  +{:.1} ms node {}: {}",
            m.t_ms - tl.fault_ms.unwrap_or(0.0),
            m.node,
            m.detail
        );
    }
    Ok(tl)
}

/// The failover figures of `tl` (ms after the fault) into `r.extra`.
pub(super) fn timeline_figures(
    tl: &meridian_bench::timeline::Timeline,
    r: &mut meridian_bench::run::BenchResult,
) {
    if let Some(ms) = tl.recovery_ms(0.8, 1000.0, 10.0) {
        r.extra.insert("recovery_ms".into(), ms);
    }
    // First suspicion, CAS and commit; the last node to report its
    // regions active, and its new replicas filled (back to f+1 replicas).
    for (name, kind, last) in [
        ("suspect_ms", "Suspect", false),
        ("config_cas_ms", "ConfigCas", false),
        ("config_commit_ms", "Committed", false),
        ("regions_active_ms", "RegionsActive", true),
        ("data_recovered_ms", "DataRecovered", true),
    ] {
        let t = if last {
            tl.last_after_fault(kind)
        } else {
            tl.first_after_fault(kind)
        };
        if let (Some(t), Some(f)) = (t, tl.fault_ms) {
            r.extra.insert(name.into(), t - f);
        }
    }
    if let Some(d) = tl.clock_disabled_ms() {
        r.extra.insert("clock_disabled_ms".into(), d);
    }
    // Rebalancing steps (each move is two: add the new replica, drop the
    // old one once filled) and whether any region was lost.
    let count = |kind: &str| tl.markers.iter().filter(|m| m.event == kind).count() as f64;
    r.extra.insert("rebalance_steps".into(), count("Rebalance"));
    r.extra.insert("regions_lost".into(), count("RegionLost"));
}

/// Check the bank history (the checker and the audits), write it as EDN
/// with `--edn`, and record the figures in `r.extra`.
///
/// Errors: the check failed, or the EDN file cannot be written.
pub(super) fn check_bank(
    out: &meridian_bench::run::BankOutcome,
    opts: &BenchOpts,
    r: &mut meridian_bench::run::BenchResult,
) -> Result<(), String> {
    let t0 = std::time::Instant::now();
    let report = meridian_checker::check(&out.history);
    let committed = out
        .history
        .txns
        .iter()
        .filter(|t| t.outcome == meridian_checker::Outcome::Committed)
        .count();
    println!(
        "bank: {committed} committed, {} audits committed, {} with a wrong total",
        out.audits,
        out.failures.len()
    );
    println!("checker ({:.1} s): {report}", t0.elapsed().as_secs_f64());
    if let Some(p) = &opts.edn {
        let f = std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let mut w = std::io::BufWriter::new(f);
        meridian_checker::write_edn(&out.history, &mut w).map_err(|e| e.to_string())?;
        println!("history written to {}", p.display());
    }
    r.extra.insert("bank_committed".into(), committed as f64);
    r.extra.insert("audits".into(), out.audits as f64);
    r.extra
        .insert("audit_failures".into(), out.failures.len() as f64);
    r.extra
        .insert("checker_ok".into(), report.is_ok() as u8 as f64);
    if !report.is_ok() || !out.failures.is_empty() {
        print_result(r);
        return Err(format!(
            "bank check FAILED: {report}; audits: {:?}",
            out.failures.iter().take(5).collect::<Vec<_>>()
        ));
    }
    Ok(())
}

/// The nodes' `read_ts` waits over the measured window, into `r`'s
/// extras (`node_reads_*`; see `cluster::read_holds`).
pub(super) fn add_read_holds(
    r: &mut meridian_bench::run::BenchResult,
    dir: &std::path::Path,
    start_ns: u64,
    end_ns: u64,
) {
    match cluster::read_holds(dir, start_ns, end_ns) {
        Ok(Some(h)) => {
            let e = &mut r.extra;
            e.insert("node_reads_at_once".into(), h.served_at_once as f64);
            e.insert("node_reads_held".into(), h.held as f64);
            e.insert(
                "node_read_hold_mean_us".into(),
                h.held_ns as f64 / 1000.0 / h.held.max(1) as f64,
            );
            e.insert("node_reads_held_long".into(), h.held_long as f64);
            e.insert("node_reads_refused".into(), h.refused as f64);
            e.insert("node_reads_lock_waited".into(), h.lock_waited as f64);
            e.insert(
                "node_read_lock_wait_mean_us".into(),
                h.lock_wait_ns as f64 / 1000.0 / h.lock_waited.max(1) as f64,
            );
            e.insert(
                "node_reads_lock_wait_expired".into(),
                h.lock_wait_expired as f64,
            );
            e.insert(
                "node_blind_locks_waited".into(),
                h.blind_locks_waited as f64,
            );
            e.insert(
                "node_blind_lock_wait_mean_us".into(),
                h.blind_lock_wait_ns as f64 / 1000.0 / h.blind_locks_waited.max(1) as f64,
            );
            e.insert(
                "node_blind_lock_wait_expired".into(),
                h.blind_lock_wait_expired as f64,
            );
            e.insert(
                "node_write_ts_at_once".into(),
                h.write_ts_served_at_once as f64,
            );
            e.insert("node_write_ts_held".into(), h.write_ts_held as f64);
            e.insert(
                "node_write_ts_hold_mean_us".into(),
                h.write_ts_held_ns as f64 / 1000.0 / h.write_ts_held.max(1) as f64,
            );
            e.insert("node_write_ts_not_held".into(), h.write_ts_not_held as f64);
        }
        Ok(None) => {}
        Err(e) => eprintln!("the nodes' read counters cannot be read: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Suspicions and configuration commits are counted over the whole
    /// run and within the measured window; a configuration committed at
    /// several nodes counts once.
    #[test]
    fn lease_events_are_counted_in_and_out_of_the_window() {
        let dir = std::env::temp_dir().join(format!("meridian-events-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (node, lines) in [
            (
                "node0",
                vec![
                    r#"{"detail":"Suspect([NodeId(1)])","event":"Suspect","mono_ns":100,"node":0}"#,
                    r#"{"detail":"Committed(ConfigId(2))","event":"Committed","mono_ns":150,"node":0}"#,
                    r#"{"detail":"Suspect([NodeId(2)])","event":"Suspect","mono_ns":1500,"node":0}"#,
                    r#"{"detail":"Committed(ConfigId(3))","event":"Committed","mono_ns":1600,"node":0}"#,
                    "not json",
                ],
            ),
            (
                "node1",
                vec![
                    r#"{"detail":"Committed(ConfigId(2))","event":"Committed","mono_ns":160,"node":1}"#,
                    r#"{"detail":"Applied(ConfigId(3))","event":"Applied","mono_ns":1590,"node":1}"#,
                    r#"{"detail":"stalled","event":"LeaseStall","gap_ns":75000000,"mono_ns":120,"node":1}"#,
                    r#"{"detail":"stalled","event":"LeaseStall","gap_ns":31000000,"mono_ns":1700,"node":1}"#,
                ],
            ),
        ] {
            std::fs::create_dir_all(dir.join(node)).expect("dir");
            std::fs::write(dir.join(node).join("events.jsonl"), lines.join("\n")).expect("write");
        }
        let n = count_events(&dir, (1000, 2000));
        assert_eq!(
            n,
            LeaseEvents {
                suspicions: 2,
                configs: 2,
                suspicions_in_window: 1,
                configs_in_window: 1,
                stalls: 2,
                stalls_in_window: 1,
                longest_stall_ns: 75_000_000,
            }
        );
        assert_eq!(
            count_events(&dir.join("absent"), (0, 1)),
            LeaseEvents::default()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
