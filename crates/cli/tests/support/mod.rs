//! Shared by the tests that run a real local cluster, meridian-cli's and
//! meridian-bench's (which includes this file by path): one cluster at a
//! time, a fresh directory per test, and a watchdog.

use meridian_cli::cluster;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One local cluster at a time: on this 2-core machine, several clusters
/// at once starve each other's lease renewals (50 ms leases) and cause
/// false suspicions that are not what these tests are about.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Hold this while a test's cluster runs (see [`ONE_CLUSTER`]).
pub fn one_cluster() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// A test's directory under the system's temporary directory, named
/// after the test and this process, emptied.
pub fn test_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("meridian-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Stop the cluster and fail if the test runs longer than `secs`.
pub fn watchdog(dir: &Path, secs: u64) {
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        eprintln!("watchdog: test exceeded {secs} s; stopping the cluster");
        let _ = cluster::stop(&dir);
        std::process::exit(101);
    });
}
