//! # CPU per transaction, for every target
//!
//! **Problem.** On this shared 2-core machine a throughput figure mixes
//! what a system costs with how its latency chains fall on two busy cores,
//! and it moves by 10–40 % between runs. What each transaction costs in CPU
//! is steadier, and it is the figure a capacity plan needs.
//!
//! **What it measures.** Over a measured window (the closed loop of
//! [`crate::drive::run_sessions`]), the CPU time, user plus system, of
//! - the bench client: this process, every thread (the closed loop, the
//!   client library or the peer's driver, their I/O threads);
//! - the servers: Meridian's node processes (by pid, from the local
//!   cluster's directory; a cluster elsewhere counts none), or every process on this machine named like the
//!   peer's server (`redis-server`, `postgres`, `etcd`).
//!
//! Both come from `/proc/<pid>/stat` (`utime` + `stime`, in clock ticks of
//! `sysconf(_SC_CLK_TCK)`, 10 ms at 100 Hz: a 15 s window at one core is
//! 1,500 ticks). A server process that exits inside the window is not
//! counted; one that starts inside it is counted whole. A peer on another
//! machine counts as no server process (reported as 0 processes).

use std::collections::BTreeMap;
use std::time::Instant;

/// Which processes are the servers of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Servers {
    /// The live nodes of the local cluster in this directory, read again at
    /// each end of the window (a node restarted inside it counts whole).
    ClusterDir(std::path::PathBuf),
    /// These pids.
    Pids(Vec<u32>),
    /// Every process whose name (`/proc/<pid>/comm`) is this.
    Named(&'static str),
    /// None known (a cluster elsewhere): only the client is measured.
    Unknown,
}

/// CPU used over one window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuUse {
    /// Wall-clock seconds of the window.
    pub wall_s: f64,
    /// CPU seconds of this process (the bench client).
    pub client_s: f64,
    /// CPU seconds of the server processes together.
    pub servers_s: f64,
    /// Server processes measured (alive at both ends of the window, or
    /// started inside it).
    pub server_processes: usize,
}

impl CpuUse {
    /// Client CPU per transaction, µs (`None` if nothing committed).
    pub fn client_us_per(&self, committed: u64) -> Option<f64> {
        (committed > 0).then(|| self.client_s * 1e6 / committed as f64)
    }

    /// Server CPU per transaction, µs (`None` if nothing committed or no
    /// server process was measured).
    pub fn servers_us_per(&self, committed: u64) -> Option<f64> {
        (committed > 0 && self.server_processes > 0)
            .then(|| self.servers_s * 1e6 / committed as f64)
    }
}

/// CPU counters at the start of a window.
#[derive(Clone, Debug)]
pub struct CpuSample {
    at: Instant,
    client_ticks: u64,
    servers: BTreeMap<u32, u64>,
}

impl CpuSample {
    /// Read the counters now.
    pub fn take(servers: &Servers) -> Self {
        CpuSample {
            at: Instant::now(),
            client_ticks: process_ticks("self").unwrap_or(0),
            servers: server_ticks(servers),
        }
    }

    /// CPU used since this sample, by this process and by `servers` (the
    /// same selection as at [`CpuSample::take`]).
    pub fn since(&self, servers: &Servers) -> CpuUse {
        let hz = clock_ticks_per_s();
        let now = server_ticks(servers);
        let mut server_ticks_used = 0u64;
        for (pid, t) in &now {
            server_ticks_used += t.saturating_sub(self.servers.get(pid).copied().unwrap_or(0));
        }
        let client = process_ticks("self").unwrap_or(self.client_ticks);
        CpuUse {
            wall_s: self.at.elapsed().as_secs_f64(),
            client_s: client.saturating_sub(self.client_ticks) as f64 / hz,
            servers_s: server_ticks_used as f64 / hz,
            server_processes: now.len(),
        }
    }
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions; it returns -1 on error.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// `utime + stime` of `/proc/<pid>/stat` (`pid` may be `self`), in clock
/// ticks; `None` if the process is gone or the file does not parse.
fn process_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ticks(&stat)
}

/// The CPU ticks of one `/proc/<pid>/stat` line. The name (field 2) is in
/// parentheses and may itself hold spaces or parentheses, so the fields are
/// counted from the last `)`: `utime` and `stime` are fields 14 and 15.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is f[n - 3].
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn server_ticks(servers: &Servers) -> BTreeMap<u32, u64> {
    let pids: Vec<u32> = match servers {
        Servers::ClusterDir(d) => meridian_cli::cluster::node_pids(d).unwrap_or_default(),
        Servers::Pids(p) => p.clone(),
        Servers::Named(name) => pids_named(name),
        Servers::Unknown => Vec::new(),
    };
    pids.into_iter()
        .filter_map(|p| Some((p, process_ticks(&p.to_string())?)))
        .collect()
}

/// Pids of the processes named `name` (`/proc/<pid>/comm`, which the
/// kernel truncates to 15 bytes), ascending.
fn pids_named(name: &str) -> Vec<u32> {
    let want = &name.as_bytes()[..name.len().min(15)];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/comm"))
                .map(|c| c.strip_suffix(b"\n").unwrap_or(&c) == want)
                .unwrap_or(false)
        })
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_count_from_the_last_parenthesis() {
        // A name with a space and a parenthesis, utime 1234, stime 56.
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 3 0 1 2 3";
        assert_eq!(parse_stat_ticks(line), Some(1290));
        assert_eq!(parse_stat_ticks("4242 (x) S 1 2"), None);
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn a_window_counts_the_clients_and_the_servers_cpu() {
        let mut busy = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spawn a busy shell");
        let servers = Servers::Pids(vec![busy.id(), u32::MAX]);
        let s = CpuSample::take(&servers);
        // Burn this process's CPU for 300 ms while the shell spins.
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let u = s.since(&servers);
        let _ = busy.kill();
        let _ = busy.wait();
        // The missing pid is skipped; the shell and this thread each got
        // some CPU (two cores, shared with whatever else runs: loose bounds).
        assert_eq!(u.server_processes, 1);
        assert!(u.client_s >= 0.05, "client {u:?}");
        assert!(u.servers_s >= 0.02, "servers {u:?}");
        assert!(u.client_s <= u.wall_s * 2.0 + 0.02, "{u:?}");
        assert_eq!(u.client_us_per(0), None);
        assert!(u.client_us_per(1000).is_some_and(|v| v > 0.0));
        assert_eq!(CpuUse::default().servers_us_per(10), None);
    }

    #[test]
    fn processes_are_found_by_name() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let found = pids_named("sleep");
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&child.id()), "{found:?}");
        assert!(pids_named("no-such-process-name").is_empty());
    }
}
