//! End-to-end tests of the `meridian` command against a real local
//! cluster of node processes: one-shot operations, status, bad input, and
//! the simulator sweep. The tests that drive a cluster with the bench's
//! workloads live with the bench (crates/bench/tests/cluster.rs).
//!
//! Each test picks free ports, bounds its time with a watchdog that stops the
//! cluster and fails the process, and stops the cluster on drop (also when
//! an assertion fails).

use meridian_cli::cluster::{self, LocalCluster};
use meridian_wire::{AdminRequest, AdminResponse, Request, Response};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod support;
use support::{one_cluster, test_dir, watchdog};

fn meridian(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(args)
        .output()
        .expect("run meridian");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_one_shot_operations_status_and_bad_input() {
    let _one = one_cluster();
    let dir = test_dir("cli");
    watchdog(&dir, 120);
    let c = LocalCluster::start_with_exe(&dir, Path::new(env!("CARGO_BIN_EXE_meridian")), 3, 3, 12)
        .expect("start cluster");
    let d = dir.to_str().expect("utf-8 dir");
    for (k, v) in [("apple", "red"), ("apricot", "orange")] {
        let r = meridian(&["put", "--dir", d, k, v]);
        assert!(r.0, "put {k} failed: {} {}", r.1, r.2);
    }
    let (ok, out, _) = meridian(&["get", "--dir", d, "apple"]);
    assert!(ok);
    assert_eq!(out.trim(), "red");
    let (ok, out, _) = meridian(&["scan", "--dir", d, "ap", "aq"]);
    assert!(ok);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(meridian(&["delete", "--dir", d, "apple"]).0);
    let (ok, _, err) = meridian(&["get", "--dir", d, "apple"]);
    assert!(!ok);
    assert!(err.contains("not found"), "{err}");
    // Oversized keys are refused with a clear error, and nothing is written.
    let big = "k".repeat(5000);
    let (ok, _, err) = meridian(&["put", "--dir", d, &big, "v"]);
    assert!(!ok && err.contains("exceeds the 4096-byte limit"), "{err}");
    // Status shows every node up with a clock uncertainty.
    let (ok, out, _) = meridian(&["status", "--dir", d]);
    assert!(ok);
    assert_eq!(out.matches(": up, uncertainty").count(), 3, "{out}");
    assert!(out.contains("r11") && out.contains("backups"), "{out}");
    // A malformed frame closes that connection only; the node keeps serving.
    let addr = c.config.nodes[1].addr.clone();
    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
    s.write_all(&[5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff])
        .expect("write garbage");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        cluster::request(&addr, Request::Admin(AdminRequest::Ping)).expect("ping after garbage"),
        Response::Admin(AdminResponse::Pong)
    );
    // A config that does not parse is a clear error.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "nodes = 3").expect("write bad config");
    let (ok, _, err) = meridian(&["get", "--config", bad.to_str().expect("utf-8"), "x"]);
    assert!(!ok && err.contains("does not parse"), "{err}");
    // A second start in a running cluster's directory is refused and
    // changes nothing its nodes read at a restart (the node CPU list).
    let (ok, _, err) = meridian(&["cluster", "start", "--dir", d, "--node-cpus", "0"]);
    assert!(!ok && err.contains("already running"), "{err}");
    assert!(
        !dir.join(meridian_cli::cpus::NODE_CPUS_FILE).exists(),
        "a refused start wrote the node CPU list"
    );
    drop(c);
    assert!(
        cluster::status(&dir)
            .expect("status")
            .iter()
            .all(|(_, _, pid, _)| pid.is_none()),
        "nodes still running after stop"
    );
    // A fresh cluster in the same directory starts clean: the old
    // incarnation counters and Raft state must not make its nodes
    // "restarted" members of the old cluster.
    let c = LocalCluster::start_with_exe(&dir, Path::new(env!("CARGO_BIN_EXE_meridian")), 3, 3, 12)
        .expect("start a second cluster in the same directory");
    let r = meridian(&["put", "--dir", d, "again", "yes"]);
    assert!(r.0, "put on the second cluster failed: {} {}", r.1, r.2);
    let (ok, out, _) = meridian(&["get", "--dir", d, "again"]);
    assert!(ok && out.trim() == "yes", "{out}");
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stops the cluster in its directory when dropped (also when an
/// assertion fails).
struct StopOnDrop<'a>(&'a Path);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        let _ = cluster::stop(self.0);
    }
}

/// `meridian get` of `key`, retried for up to 30 s while the cluster
/// recovers: its value, or the last error.
fn get_eventually(d: &str, key: &str) -> Result<String, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out, err) = meridian(&["get", "--dir", d, key]);
        if ok {
            return Ok(out.trim().to_string());
        }
        if err.contains("not found") || std::time::Instant::now() > deadline {
            return Err(err);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A stopped cluster starts again with its data: `cluster start` on a
/// directory that holds one restarts it from its disks, as does `cluster
/// restart` on a running one; `--fresh` wipes it.
#[test]
fn a_stopped_cluster_starts_again_with_its_data() {
    let _one = one_cluster();
    let dir = test_dir("restart");
    watchdog(&dir, 150);
    let _stop = StopOnDrop(&dir);
    let d = dir.to_str().expect("utf-8 dir");
    let (ok, out, err) = meridian(&["cluster", "start", "--dir", d]);
    assert!(ok, "start: {out}{err}");
    let r = meridian(&["put", "--dir", d, "hello", "world"]);
    assert!(r.0, "put: {} {}", r.1, r.2);
    let (ok, out, err) = meridian(&["cluster", "stop", "--dir", d]);
    assert!(ok, "stop: {out}{err}");
    let (ok, out, err) = meridian(&["cluster", "start", "--dir", d]);
    assert!(
        ok && out.contains("starting it again from its disks"),
        "{out}{err}"
    );
    assert_eq!(get_eventually(d, "hello").as_deref(), Ok("world"));
    let (ok, out, err) = meridian(&["cluster", "restart", "--dir", d]);
    assert!(ok && out.contains("restarted 3 nodes"), "{out}{err}");
    assert_eq!(get_eventually(d, "hello").as_deref(), Ok("world"));
    // A start while it runs is refused; --fresh after a stop wipes it.
    let (ok, _, err) = meridian(&["cluster", "start", "--dir", d]);
    assert!(!ok && err.contains("already running"), "{err}");
    assert!(meridian(&["cluster", "stop", "--dir", d]).0);
    let (ok, out, err) = meridian(&["cluster", "start", "--dir", d, "--fresh"]);
    assert!(ok && out.contains("started 3 nodes"), "{out}{err}");
    let gone = get_eventually(d, "hello");
    assert!(
        gone.as_ref().is_err_and(|e| e.contains("not found")),
        "{gone:?}"
    );
    drop(_stop);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `meridian sim --report-after-primary-fsync` sets the simulated nodes'
/// commit answers: swarm seed 31030 once lost a reported commit with the
/// early COMMIT-PRIMARY answer (`false`); that answer now waits for the
/// record too, so both settings pass the checker, and a bad value is
/// refused.
#[test]
fn sim_report_after_primary_fsync_is_safe_either_way() {
    let run = |rule: &str| {
        meridian(&[
            "sim",
            "--workload",
            "swarm",
            "--first",
            "31030",
            "--seeds",
            "1",
            "--report-after-primary-fsync",
            rule,
            // Its schedule is the one without single reads.
            "--single-reads",
            "false",
        ])
    };
    let (ok, out, err) = run("false");
    assert!(ok, "the early answer failed: {out}{err}");
    let (ok, out, err) = run("true");
    assert!(ok, "the default rule failed: {out}{err}");
    let (ok, _, err) = run("maybe");
    assert!(!ok && err.contains("maybe"), "a bad value was taken: {err}");
}
