//! End-to-end tests against a real local cluster of node processes,
//! driven by the bench: the `meridian-bench` binary, or the library's
//! workload drivers (`meridian_bench::run`).
//!
//! The nodes run from the `meridian` server binary next to
//! `meridian-bench` in the target directory. Cargo builds it for these
//! tests only when meridian-cli is tested in the same command (`cargo test
//! --workspace`, or `cargo test -p meridian-cli -p meridian-bench`);
//! otherwise build it first (`cargo build --release -p meridian-cli`) or
//! point `MERIDIAN_BIN` at one.
//!
//! Each test picks free ports, bounds its time with a watchdog that stops the
//! cluster and fails the process, and stops the cluster on drop (also when
//! an assertion fails).

use meridian_cli::cluster::{self, LocalCluster};
use meridian_wire::{Request, Response};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[path = "../../cli/tests/support/mod.rs"]
mod support;
use support::{one_cluster, test_dir, watchdog};

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The `meridian` binary the clusters' nodes run from (see the module
/// documentation).
fn server() -> PathBuf {
    let near = || cluster::server_exe_near(Path::new(env!("CARGO_BIN_EXE_meridian-bench")));
    match std::env::var_os(cluster::SERVER_BIN_ENV) {
        Some(_) => cluster::server_exe(),
        None => near(),
    }
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Read every key of `keys` in one transaction (retried by `Session::run`).
async fn read_all(
    s: &mut meridian_client::Session,
    keys: &[Vec<u8>],
) -> Result<Vec<Option<Vec<u8>>>, meridian_client::TxnError> {
    s.run(meridian_client::TxnOptions::default(), |tx| {
        let keys = keys.to_vec();
        Box::pin(async move {
            let mut rows = Vec::new();
            for k in keys {
                rows.push(tx.get(&k).await?);
            }
            Ok(rows)
        })
    })
    .await
}

#[test]
fn bank_on_a_real_cluster_passes_audits_and_the_checker() {
    let _one = one_cluster();
    let dir = test_dir("bank");
    watchdog(&dir, 180);
    let c = LocalCluster::start_with_exe(&dir, &server(), 3, 3, 12).expect("start cluster");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let out = rt.block_on(async {
        let client = meridian_client::Client::connect(&c.cm_addr())
            .await
            .expect("connect");
        let cfg = meridian_workload::bank::BankConfig {
            accounts: 16,
            initial_balance: 1000,
            audit_percent: 20,
        };
        meridian_bench::run::bank(&client, cfg, 8, 5)
            .await
            .expect("bank run")
    });
    assert!(
        out.failures.is_empty(),
        "audit failures: {:?}",
        out.failures
    );
    assert!(out.audits > 10, "too few audits: {}", out.audits);
    assert!(
        out.result.committed > 100,
        "too few commits: {}",
        out.result.committed
    );
    let report = meridian_checker::check(&out.history);
    assert!(report.is_ok(), "{report}");
    // The history exports as EDN, one op per line, invoke + completion per transaction.
    let edn = meridian_checker::to_edn(&out.history);
    assert_eq!(edn.lines().count(), 2 * out.history.len());
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Run `meridian-bench <args> --dir <dir>/cluster --json <json>` for at most
/// 120 s; on failure, panic with the bench's output and every node log's
/// tail. The cluster is stopped in every case.
fn run_bench(dir: &Path, args: &[&str], json: &Path) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_meridian-bench"))
        .env(cluster::SERVER_BIN_ENV, server())
        .args(args)
        .arg("--dir")
        .arg(dir.join("cluster"))
        .arg("--json")
        .arg(json)
        .stdout(std::fs::File::create(dir.join("bench.out")).expect("stdout file"))
        .stderr(std::fs::File::create(dir.join("bench.err")).expect("stderr file"))
        .spawn()
        .expect("spawn bench");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = cluster::stop(&dir.join("cluster"));
            panic!("{args:?} exceeded 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        // Say why: the bench's own output and the tail of every node log.
        let mut why = String::new();
        for name in ["bench.out", "bench.err"] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            why.push_str(&format!("--- {name}\n{}\n", tail(&text, 40)));
        }
        if let Ok(entries) = std::fs::read_dir(dir.join("cluster")) {
            let mut logs: Vec<_> = entries
                .flatten()
                .map(|e| e.path().join("node.log"))
                .collect();
            logs.sort();
            for log in logs.iter().filter(|p| p.exists()) {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                why.push_str(&format!("--- {}\n{}\n", log.display(), tail(&text, 20)));
            }
        }
        let _ = cluster::stop(&dir.join("cluster"));
        panic!("{args:?} failed ({status}):\n{why}");
    }
    let _ = cluster::stop(&dir.join("cluster"));
}

/// FaRM §5 on real processes: `kill -9` of a non-CM node of a 5-node
/// cluster in the middle of the bank workload. The cluster reconfigures
/// (the embedded Raft group takes the configuration CAS), the bench's
/// audits and the checker pass (no lost or phantom commit), throughput
/// comes back, and the timeline carries the milestones.
#[test]
fn kill_9_of_a_node_during_bank_reconfigures_and_passes_the_checker() {
    let _one = one_cluster();
    let dir = test_dir("kill");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let json = dir.join("bank.json");
    let tl = dir.join("timeline");
    let tl_arg = tl.display().to_string();
    run_bench(
        &dir,
        &[
            "bank",
            "--nodes",
            "5",
            "--duration",
            "5",
            "--durability",
            "memory",
            "--kill",
            "3",
            "--kill-at",
            "2",
            "--baseline",
            "0",
            "--clients",
            "8",
            "--timeline",
            &tl_arg,
        ],
        &json,
    );
    let text = std::fs::read_to_string(&json).expect("results json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    let extra = &v["extra"];
    assert_eq!(extra["checker_ok"].as_f64(), Some(1.0), "{text}");
    assert_eq!(extra["audit_failures"].as_f64(), Some(0.0), "{text}");
    assert!(
        extra["config_commit_ms"].as_f64().is_some(),
        "no new configuration: {text}"
    );
    assert!(
        extra["recovery_ms"].as_f64().is_some(),
        "throughput never came back: {text}"
    );
    let timeline: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tl.with_extension("json")).expect("timeline"),
    )
    .expect("timeline json");
    let markers = timeline["markers"].as_array().expect("markers");
    for kind in ["Suspect", "ConfigCas", "Committed"] {
        assert!(
            markers.iter().any(|m| m["event"] == kind),
            "no {kind} marker in the timeline: {markers:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// FaRM §5.2 and §5.4 on real processes: a spare node in the address book
/// is started during the bank workload, joins the running cluster, and the
/// CM moves replicas onto it in paced make-before-break steps; a `kill -9`
/// of an original node afterwards loses no region (every region kept
/// f + 1 complete replicas through the moves), and the checker passes.
#[test]
fn a_spare_node_joins_a_running_cluster_and_replicas_move_onto_it() {
    let _one = one_cluster();
    let dir = test_dir("join");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let json = dir.join("bank.json");
    run_bench(
        &dir,
        &[
            "bank",
            "--nodes",
            "4",
            "--spares",
            "1",
            "--join-at",
            "1",
            "--kill",
            "1",
            "--kill-at",
            "5",
            "--duration",
            "7",
            "--durability",
            "memory",
            "--baseline",
            "0",
            "--clients",
            "8",
        ],
        &json,
    );
    let text = std::fs::read_to_string(&json).expect("results json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    let extra = &v["extra"];
    assert_eq!(extra["checker_ok"].as_f64(), Some(1.0), "{text}");
    assert_eq!(extra["audit_failures"].as_f64(), Some(0.0), "{text}");
    assert_eq!(extra["regions_lost"].as_f64(), Some(0.0), "{text}");
    let steps = extra["rebalance_steps"].as_f64().unwrap_or(0.0);
    assert!(steps >= 2.0, "{steps} rebalancing steps: {text}");
    assert!(
        extra["config_commit_ms"].as_f64().is_some(),
        "the kill was not handled: {text}"
    );
    // The spare filled replicas.
    let events = cluster::node_events(&dir.join("cluster")).expect("events");
    assert!(
        events
            .iter()
            .any(|(node, kind, _)| *node == 4 && kind == "DataRecovered"),
        "node 4 never filled a replica: {events:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_tatp_main_job_runs_and_reports() {
    let _one = one_cluster();
    let dir = test_dir("tatp");
    let json = dir.join("tatp.json");
    std::fs::create_dir_all(&dir).expect("mkdir");
    run_bench(
        &dir,
        &[
            "tatp",
            "--subscribers",
            "2000",
            "--duration",
            "2",
            "--warmup",
            "1",
            "--baseline",
            "1",
            "--clients",
            "8",
        ],
        &json,
    );
    let text = std::fs::read_to_string(&json).expect("results json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    assert!(v["committed"].as_u64().unwrap_or(0) > 100, "{text}");
    assert!(v["ratio_to_rpc"].as_f64().unwrap_or(0.0) > 0.0, "{text}");
    // CPU per transaction and per null round trip: the bench process and
    // the cluster's three nodes, found by their pid files.
    let x = &v["extra"];
    assert_eq!(x["server_processes"].as_f64(), Some(3.0), "{text}");
    for k in [
        "client_cpu_us_per_tx",
        "server_cpu_us_per_tx",
        "rpc_client_cpu_us_per_rt",
        "rpc_server_cpu_us_per_rt",
    ] {
        assert!(x[k].as_f64().unwrap_or(0.0) > 0.0, "no {k} in {text}");
    }
    for kind in [
        "GET_SUBSCRIBER_DATA",
        "UPDATE_LOCATION",
        "GET_NEW_DESTINATION",
    ] {
        assert!(
            v["latency"][kind]["committed"].as_u64().unwrap_or(0) > 0,
            "no {kind} in {text}"
        );
    }
    // The bench stopped the cluster it started.
    assert!(cluster::status(&dir.join("cluster"))
        .expect("status")
        .iter()
        .all(|(_, _, pid, _)| pid.is_none()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The 4-key read-modify-write on 8 hot counters, its reads
/// issued together (`get_many`): conflicts abort and are retried, and the
/// bench's exact audit (counters sum to 4 × commits, else the command
/// fails) finds no lost or doubled update.
#[test]
fn bench_rmw_on_hot_counters_loses_no_update() {
    let _one = one_cluster();
    let dir = test_dir("rmw");
    let json = dir.join("rmw.json");
    std::fs::create_dir_all(&dir).expect("mkdir");
    run_bench(
        &dir,
        &[
            "rmw",
            "--records",
            "8",
            "--duration",
            "2",
            "--warmup",
            "1",
            "--baseline",
            "0",
            "--clients",
            "4",
            "--durability",
            "memory",
        ],
        &json,
    );
    let text = std::fs::read_to_string(&json).expect("results json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    let committed = v["committed"].as_u64().unwrap_or(0);
    assert!(committed > 50, "{text}");
    assert!(
        v["aborts"].as_u64().unwrap_or(0) > 0,
        "no conflict on 8 hot counters: {text}"
    );
    // The counters hold the warm-up's increments too (it commits on the
    // same store before the measured run).
    let warmed = v["extra"]["warmup_committed"].as_f64().unwrap_or(0.0);
    assert!(warmed > 0.0, "the warm-up committed nothing: {text}");
    assert_eq!(
        v["extra"]["audit_sum"].as_f64(),
        Some(4.0 * (committed as f64 + warmed)),
        "{text}"
    );
    // The abort breakdown accounts for every abort, by Meridian's causes
    // (a read that met a lock, a failed LOCK, a failed VALIDATE).
    let by = v["aborts_by_cause"]["rmw"]
        .as_object()
        .expect("aborts by cause of the rmw transaction");
    let total: u64 = by.values().filter_map(|n| n.as_u64()).sum();
    assert_eq!(Some(total), v["aborts"].as_u64(), "{text}");
    for cause in by.keys() {
        assert!(
            cause.starts_with("read-")
                || cause.starts_with("lock-")
                || cause.starts_with("validate-"),
            "unexpected abort cause {cause}: {text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// TPC-C's full mix on one warehouse: every transaction type
/// commits, NEW_ORDERs are counted as tpmC with the spec's rollbacks, and
/// the spec's consistency conditions and both secondary indexes hold over
/// the whole store afterwards (the command fails otherwise).
#[test]
fn bench_tpcc_runs_the_full_mix_and_stays_consistent() {
    let _one = one_cluster();
    let dir = test_dir("tpcc");
    let json = dir.join("tpcc.json");
    std::fs::create_dir_all(&dir).expect("mkdir");
    run_bench(
        &dir,
        &[
            "tpcc",
            "--warehouses",
            "1",
            "--duration",
            "3",
            "--warmup",
            "0",
            "--baseline",
            "0",
            "--clients",
            "4",
            "--durability",
            "memory",
        ],
        &json,
    );
    let text = std::fs::read_to_string(&json).expect("results json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    for kind in [
        "NEW_ORDER",
        "PAYMENT",
        "ORDER_STATUS",
        "DELIVERY",
        "STOCK_LEVEL",
    ] {
        assert!(
            v["latency"][kind]["committed"].as_u64().unwrap_or(0) > 0,
            "no {kind} in {text}"
        );
    }
    assert!(v["extra"]["tpmC"].as_f64().unwrap_or(0.0) > 0.0, "{text}");
    assert!(
        v["extra"]["checked_rows"].as_f64().unwrap_or(0.0) > 600_000.0,
        "{text}"
    );
    assert_eq!(v["extra"]["inconsistent"].as_f64(), Some(0.0), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Disk durability: `kill -9` of every node during
/// bank, then a restart of every node from its write-ahead log. Every
/// acknowledged commit is present: each account holds the last
/// acknowledged write to it (or a later one whose outcome the client never
/// learned), and the money adds up.
#[test]
fn kill_9_of_every_node_then_a_restart_from_disk_loses_no_acknowledged_commit() {
    use meridian_checker::Outcome;
    let _one = one_cluster();
    let dir = test_dir("powercut");
    watchdog(&dir, 240);
    let exe = &server();
    let c = LocalCluster::start_with_exe(&dir, exe, 3, 3, 12).expect("start cluster");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cfg = meridian_workload::bank::BankConfig {
        accounts: 16,
        initial_balance: 1000,
        audit_percent: 20,
    };
    let out = rt.block_on(async {
        let client = meridian_client::Client::connect(&c.cm_addr())
            .await
            .expect("connect");
        meridian_bench::run::bank(&client, cfg.clone(), 8, 3)
            .await
            .expect("bank run")
    });
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    // The power cut: every node at once, no cleanup.
    cluster::kill_nodes(&dir, &[0, 1, 2]).expect("kill -9");
    std::thread::sleep(Duration::from_millis(300));
    cluster::restart_nodes_with_exe(&dir, exe, &[0, 1, 2]).expect("restart");
    // Acknowledged writes per account, newest last; writes of unknown outcome.
    let mut acked: std::collections::BTreeMap<Vec<u8>, Vec<(u64, u64)>> = Default::default();
    let mut unknown = std::collections::BTreeSet::new();
    let mut acknowledged_commits = 0u64;
    for t in &out.history.txns {
        match t.outcome {
            Outcome::Committed if !t.writes.is_empty() => {
                acknowledged_commits += 1;
                for (k, id) in &t.writes {
                    acked
                        .entry(k.clone())
                        .or_default()
                        .push((t.write_ts.unwrap_or(0), *id));
                }
            }
            Outcome::Unknown => unknown.extend(t.writes.iter().map(|(_, id)| *id)),
            _ => {}
        }
    }
    for v in acked.values_mut() {
        v.sort();
    }
    let rows = rt.block_on(async {
        let client = meridian_client::Client::connect(&c.cm_addr())
            .await
            .expect("connect after restart");
        let mut s = client.session();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let keys: Vec<Vec<u8>> = (0..cfg.accounts)
                .map(meridian_workload::bank::account_key)
                .collect();
            match read_all(&mut s, &keys).await {
                Ok(rows) => break keys.into_iter().zip(rows).collect::<Vec<_>>(),
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("not serving yet: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("the restarted cluster never served: {e}"),
            }
        }
    });
    let mut total = 0i64;
    let mut lost = Vec::new();
    for (k, v) in &rows {
        let v = v.as_ref().expect("every account exists");
        let id = meridian_workload::bank::write_id(v).expect("a write id");
        total += meridian_workload::bank::balance(v).expect("a balance");
        let last = acked.get(k).and_then(|w| w.last()).map(|(_, id)| *id);
        if last.is_some_and(|l| l != id && !unknown.contains(&id)) {
            lost.push((k.clone(), last, id));
        }
    }
    eprintln!(
        "{acknowledged_commits} acknowledged commits, {} accounts checked, {} lost",
        rows.len(),
        lost.len()
    );
    assert!(
        acknowledged_commits > 50,
        "too few commits: {acknowledged_commits}"
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert_eq!(
        total,
        i64::from(cfg.accounts) * cfg.initial_balance,
        "money created or lost"
    );
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Client leases on real processes: a client process (`meridian-bench
/// bank`, 8 sessions of transfers) is killed with `kill -9` in the middle
/// of its commits. Its lease at the CM expires, the CM suspects it
/// (`ClientSuspect` in the CM's `events.jsonl`) and renews the
/// configuration, and recovery decides each of its transactions the same
/// way everywhere: every account can be written again within about one
/// lease, and the money still adds up (a transfer half applied would
/// change the total). Without client leases the locks stay held forever.
#[test]
fn kill_9_of_a_client_mid_commit_releases_its_locks_and_decides_its_commits() {
    let _one = one_cluster();
    let dir = test_dir("client-kill");
    watchdog(&dir, 240);
    let exe = &server();
    let c = LocalCluster::start_with_exe(&dir, exe, 3, 3, 12).expect("start cluster");
    let accounts = 16u32;
    let mut child = Command::new(env!("CARGO_BIN_EXE_meridian-bench"))
        .args(["bank", "--cm", &c.cm_addr(), "--duration", "60"])
        .args(["--baseline", "0", "--clients", "8"])
        .args(["--accounts", &accounts.to_string()])
        .arg("--dir")
        .arg(&dir)
        .arg("--json")
        .arg(dir.join("child.json"))
        .stdout(std::fs::File::create(dir.join("child.out")).expect("stdout file"))
        .stderr(std::fs::File::create(dir.join("child.err")).expect("stderr file"))
        .spawn()
        .expect("spawn the client process");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let keys: Vec<Vec<u8>> = (0..accounts)
        .map(meridian_workload::bank::account_key)
        .collect();
    let (release_ms, blocked, total, killed_ns) = rt.block_on(async {
        let client = meridian_client::Client::connect(&c.cm_addr())
            .await
            .expect("connect");
        let mut s = client.session();
        // Wait for the child's accounts, then let its transfers run.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let found = read_all(&mut s, &keys).await;
            if found.is_ok_and(|rows| rows.iter().all(Option::is_some)) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the client process never loaded its accounts"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        child.kill().expect("kill -9 the client process");
        let _ = child.wait();
        let killed = std::time::Instant::now();
        let killed_ns = meridian_client::mono_ns();
        // Rewrite every account with its own value: a key still locked by
        // the dead client aborts the attempt (retried with back-off).
        let mut blocked = 0;
        for k in &keys {
            let attempts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let (k2, a) = (k.clone(), attempts.clone());
                let r = s
                    .run(meridian_client::TxnOptions::default(), |tx| {
                        let (k, a) = (k2.clone(), a.clone());
                        Box::pin(async move {
                            a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let v = tx.get(&k).await?.expect("account exists");
                            tx.put(k, v).await?;
                            Ok(())
                        })
                    })
                    .await;
                if r.is_ok() {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "account {k:?} stayed locked 30 s after the client died: {r:?}"
                );
            }
            blocked += u32::from(attempts.load(std::sync::atomic::Ordering::SeqCst) > 1);
        }
        let release_ms = killed.elapsed().as_secs_f64() * 1e3;
        let total: i64 = read_all(&mut s, &keys)
            .await
            .expect("audit")
            .iter()
            .map(|v| {
                let v = v.as_ref().expect("account exists");
                meridian_workload::bank::balance(v).expect("a balance")
            })
            .sum();
        (release_ms, blocked, total, killed_ns)
    });
    // The CM suspects the dead client a lease after its last renewal: wait
    // for it (the accounts may all be free before that, when the client
    // held no lock at the kill).
    let lease_ms = c.config().lease.lease_ms;
    let deadline = std::time::Instant::now() + Duration::from_millis(20 * lease_ms + 2000);
    while std::time::Instant::now() < deadline {
        let any = std::fs::read_dir(&dir)
            .expect("cluster dir")
            .flatten()
            .any(|e| {
                std::fs::read_to_string(e.path().join("events.jsonl"))
                    .unwrap_or_default()
                    .contains("ClientSuspect")
            });
        if any {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The milestones after the kill, from the nodes' events (same
    // monotonic clock).
    let mut suspected = 0;
    let mut milestones = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(&dir).expect("cluster dir").flatten() {
        let text = std::fs::read_to_string(e.path().join("events.jsonl")).unwrap_or_default();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let (Some(kind), Some(t)) = (v["event"].as_str(), v["mono_ns"].as_u64()) else {
                continue;
            };
            suspected += usize::from(kind == "ClientSuspect");
            if t > killed_ns {
                let ms = (t - killed_ns) as f64 / 1e6;
                let m = milestones.entry(kind.to_string()).or_insert(ms);
                *m = m.min(ms);
            }
        }
    }
    eprintln!("milestones after the kill, ms: {milestones:?}");
    eprintln!(
        "client killed mid-run: every account writable again {release_ms:.1} ms after the kill \
         (lease {} ms; {blocked} of {accounts} accounts were held at first); {suspected} client \
         suspicion(s); total {total}",
        c.config().lease.lease_ms
    );
    assert!(suspected >= 1, "the CM never suspected the dead client");
    assert_eq!(total, i64::from(accounts) * 1000, "money created or lost");
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A partition on real processes: five nodes, each in a network
/// namespace of its own (`--netns`), run the checked bank; nodes 3 and 4
/// are cut off from the other three with nftables (`meridian fault
/// partition`) for 3 s, then healed. The minority refuses to serve, the
/// majority reconfigures and goes on committing, and after healing the
/// history passes the checker and the money adds up. Skips (passing) where
/// namespaces are unavailable: not root, or no iproute2/nftables.
#[test]
fn a_partition_of_2_of_5_nodes_stops_the_minority_while_the_majority_goes_on() {
    use meridian_checker::Outcome;
    use meridian_wire::{ClientOp, ThinRequest, ThinResponse};
    if let Err(why) = meridian_cli::netns::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let _one = one_cluster();
    let dir = test_dir("partition");
    watchdog(&dir, 240);
    let exe = &server();
    let c = LocalCluster::start_in_netns(&dir, exe, 5, 3, 12, |cfg| {
        cfg.durability.mode = meridian_config::DurabilityMode::Memory;
    })
    .expect("start a cluster in network namespaces");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cfg = meridian_workload::bank::BankConfig {
        accounts: 16,
        initial_balance: 1000,
        audit_percent: 20,
    };
    let minority_addr = c
        .config()
        .node(meridian_wire::NodeId(3))
        .expect("node 3")
        .addr
        .clone();
    let (out, cut_ns, heal_ns, minority) = rt.block_on(async {
        let client = meridian_client::Client::connect(&c.cm_addr())
            .await
            .expect("connect");
        let (cl, bank_cfg) = (client.clone(), cfg.clone());
        let bank =
            tokio::spawn(async move { meridian_bench::run::bank(&cl, bank_cfg, 8, 9).await });
        tokio::time::sleep(Duration::from_secs(2)).await;
        meridian_cli::netns::partition(&dir, &[3, 4]).expect("partition");
        let cut_ns = meridian_client::mono_ns();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // The minority, asked directly, must not serve.
        let key = meridian_workload::bank::account_key(0);
        let minority = tokio::task::spawn_blocking(move || {
            cluster::request(
                &minority_addr,
                Request::Thin(ThinRequest::Execute {
                    ops: vec![ClientOp::Get(key)],
                }),
            )
        })
        .await
        .expect("join");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        meridian_cli::netns::heal(&dir).expect("heal");
        let heal_ns = meridian_client::mono_ns();
        let out = bank.await.expect("bank task").expect("bank run");
        client.close().await;
        (out, cut_ns, heal_ns, minority)
    });
    eprintln!("the minority's answer: {minority:?}");
    assert!(
        !matches!(minority, Ok(Response::Thin(ThinResponse::Executed(Ok(_))))),
        "a node cut off with the minority served a read"
    );
    let committed_in = |from: u64, to: u64| {
        out.history
            .txns
            .iter()
            .filter(|t| {
                t.outcome == Outcome::Committed && t.invoke_ns >= from && t.complete_ns <= to
            })
            .count()
    };
    let during = committed_in(cut_ns + 500_000_000, heal_ns);
    let after = committed_in(heal_ns, u64::MAX);
    let report = meridian_checker::check(&out.history);
    eprintln!(
        "partition of nodes 3, 4 of 5: {during} commits while cut off (from 0.5 s after the cut), \
         {after} after healing; checker: {report}"
    );
    assert!(out.failures.is_empty(), "audits: {:?}", out.failures);
    assert!(report.is_ok(), "{report}");
    assert!(
        during > 0,
        "the majority did not go on during the partition"
    );
    assert!(after > 0, "nothing committed after healing");
    let mut events = String::new();
    for n in 0..5 {
        events.push_str(
            &std::fs::read_to_string(dir.join(format!("node{n}/events.jsonl"))).unwrap_or_default(),
        );
    }
    assert!(
        events.contains("ConfigCas"),
        "the majority never reconfigured"
    );
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The number after "through record " in the last line of `log` that
/// contains `marker`.
fn through_record(log: &str, marker: &str) -> Option<u64> {
    let line = log.lines().rev().find(|l| l.contains(marker))?;
    let rest = &line[line.find("through record ")? + "through record ".len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A clean stop (`meridian cluster stop`: SIGTERM) makes every log record
/// durable, also those no reply waited for and that the log would only
/// have fsynced after `limits.log_idle_sync_us` (here an hour): GC and
/// truncation records. The node says through which record its log is
/// durable when it stops, and the restarted node must restore through at
/// least that record. Without the flush at SIGTERM the queued records are
/// lost, as in a crash, and the restore ends short of it.
#[test]
fn a_sigterm_stop_makes_the_records_no_reply_waited_for_durable() {
    let _one = one_cluster();
    let dir = test_dir("sigterm");
    watchdog(&dir, 120);
    let exe = &server();
    let cfg = cluster::start_tuned(&dir, exe, 1, 1, 4, None, |c| {
        c.durability.mode = meridian_config::DurabilityMode::Disk;
        c.limits.log_idle_sync_us = 3_600_000_000;
    })
    .expect("start a one-node cluster");
    // Stops the node whichever way the test ends.
    struct StopOnDrop(PathBuf);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            let _ = cluster::stop(&self.0);
        }
    }
    let _stop = StopOnDrop(dir.clone());
    let cm = cfg
        .node(meridian_wire::NodeId(cfg.cm))
        .map(|n| n.addr.clone())
        .expect("the CM's address");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let bank = meridian_workload::bank::BankConfig {
        accounts: 8,
        initial_balance: 100,
        audit_percent: 20,
    };
    let out = rt.block_on(async {
        let client = meridian_client::Client::connect(&cm)
            .await
            .expect("connect");
        meridian_bench::run::bank(&client, bank, 2, 2)
            .await
            .expect("bank run")
    });
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    // GC records (every `gc_interval_us`) queue up with no one asking.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(cluster::stop(&dir).expect("stop"), vec![0]);
    let log_path = dir.join("node0").join("node.log");
    let log = std::fs::read_to_string(&log_path).expect("node.log");
    let stopped = through_record(&log, "stopping (SIGTERM)")
        .unwrap_or_else(|| panic!("no durable-through line at the stop:\n{}", tail(&log, 20)));
    cluster::restart_nodes_with_exe(&dir, exe, &[0]).expect("restart");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let restored = loop {
        let log = std::fs::read_to_string(&log_path).expect("node.log");
        if let Some(r) = through_record(&log, "restoring from disk") {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the restarted node never restored:\n{}",
            tail(&log, 20)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("stopped durable through record {stopped}, restored through {restored}");
    assert!(stopped > 0, "no record was logged");
    assert!(
        restored >= stopped,
        "records lost at a clean stop: durable through {stopped} claimed, {restored} restored"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
