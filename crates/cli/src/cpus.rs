//! # CPU sets for the bench: clients on some cores, servers on others
//!
//! **Problem.** On a small machine the bench client and the servers it
//! drives share every core, so each round trip also waits for the
//! scheduler to move threads between cores that are busy with the other
//! side. In a real deployment clients and servers run on different
//! machines. These options let a run separate them, for Meridian and the
//! peers alike. On a 2-core machine (docs/performance-history.md) the split made YCSB-B steadier, not faster: the
//! client on core 0 and the three nodes on core 1 gave 59–70k tx/s over
//! nine runs (mean 62.8k), sharing both cores 55–75k over nine (mean
//! 62.3k): one core then carries all three nodes. Redis (its server on
//! core 1) was within noise too. The default stays every CPU for every process.
//!
//! **What this module does.** [`parse`] reads a CPU list in `taskset -c`'s
//! syntax (`0`, `1-3`, `0,2-3`); [`pin_process`] restricts the calling
//! thread, and so every thread it starts afterwards (a tokio runtime's
//! workers, the client's ticker and clock threads), to a list; the local
//! cluster starts its nodes under `taskset -c` when its directory holds a
//! [`NODE_CPUS_FILE`] ([`set_node_cpus`]), restarts included. Peers are
//! pinned by `scripts/peers.sh` (`PEER_CPUS`).

use std::path::Path;

/// In a local cluster's directory: the CPU list (`taskset -c` syntax) its
/// nodes are started on, from their next (re)start.
pub const NODE_CPUS_FILE: &str = "node-cpus";

/// Highest CPU number accepted (the kernel's `CPU_SETSIZE` − 1).
pub const MAX_CPU: usize = 1023;

/// The CPUs of `list`, ascending, without repeats.
///
/// Errors: an empty list, a part that is not `N` or `N-M` with `N ≤ M`, or
/// a CPU above [`MAX_CPU`], each with the offending text.
pub fn parse(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        let num = |s: &str| -> Result<usize, String> {
            let n: usize = s
                .parse()
                .map_err(|_| format!("CPU list {list:?}: {s:?} is not a CPU number"))?;
            if n > MAX_CPU {
                return Err(format!("CPU list {list:?}: CPU {n} is above {MAX_CPU}"));
            }
            Ok(n)
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a.trim())?, num(b.trim())?),
            None => {
                let n = num(part)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(format!("CPU list {list:?}: range {part:?} runs backwards"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The list in `taskset -c` syntax, one number per CPU (`0,2,3`).
pub fn format(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Restrict the calling thread to `cpus`; threads it starts afterwards
/// inherit the set. Call it before starting the runtime.
///
/// Errors: the kernel's (`EINVAL` when none of `cpus` is online).
pub fn pin_process(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within
    // it for numbers below CPU_SETSIZE (`parse` bounds them); the call
    // reads `size_of::<cpu_set_t>()` bytes of `set`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c <= MAX_CPU) {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Start the local cluster's nodes in `dir` on `cpus` from their next
/// (re)start, or on every CPU (`None`). The list is checked first.
///
/// Errors: a bad list, or the file cannot be written or removed.
pub fn set_node_cpus(dir: &Path, cpus: Option<&str>) -> Result<(), String> {
    let path = dir.join(NODE_CPUS_FILE);
    match cpus {
        Some(list) => {
            let cpus = parse(list)?;
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            std::fs::write(&path, format(&cpus)).map_err(|e| format!("{}: {e}", path.display()))
        }
        None => match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        },
    }
}

/// The node CPU list stored in `dir`, if any (and well formed).
pub fn node_cpus(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(NODE_CPUS_FILE)).ok()?;
    parse(text.trim()).ok().map(|c| format(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_taskset_reads_them_and_bad_ones_are_refused() {
        assert_eq!(parse("1").unwrap(), vec![1]);
        assert_eq!(parse("0,2-3").unwrap(), vec![0, 2, 3]);
        assert_eq!(parse(" 3 , 1-2,2").unwrap(), vec![1, 2, 3]);
        assert_eq!(format(&parse("4-6,0").unwrap()), "0,4,5,6");
        for bad in ["", "a", "1-", "3-1", "1,,2", "1024", "-1"] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    /// Pinning takes: a thread pinned to CPU 0 reads back exactly {0}, and
    /// a thread it starts inherits that; a CPU that does not exist is
    /// refused by the kernel.
    #[test]
    fn a_pinned_thread_and_its_children_run_only_there() {
        fn mine() -> Vec<usize> {
            // SAFETY: a zeroed cpu_set_t is valid; the call writes at most
            // its size; CPU_ISSET reads within it.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(
                    libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                    0
                );
                (0..=MAX_CPU)
                    .filter(|&c| libc::CPU_ISSET(c, &set))
                    .collect()
            }
        }
        let got = std::thread::spawn(|| {
            pin_process(&[0]).unwrap();
            let child = std::thread::spawn(mine).join().unwrap();
            (mine(), child)
        })
        .join()
        .unwrap();
        assert_eq!(got, (vec![0], vec![0]));
        let refused = std::thread::spawn(|| pin_process(&[MAX_CPU]))
            .join()
            .unwrap();
        assert!(refused.is_err(), "CPU {MAX_CPU} is not on this machine");
    }

    #[test]
    fn the_node_cpu_file_is_written_checked_and_removed() {
        let dir = std::env::temp_dir().join(format!("meridian-cpus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(node_cpus(&dir), None);
        set_node_cpus(&dir, Some("1-2")).unwrap();
        assert_eq!(node_cpus(&dir).as_deref(), Some("1,2"));
        assert!(set_node_cpus(&dir, Some("x")).is_err());
        assert_eq!(
            node_cpus(&dir).as_deref(),
            Some("1,2"),
            "a bad list changes nothing"
        );
        set_node_cpus(&dir, None).unwrap();
        assert_eq!(node_cpus(&dir), None);
        set_node_cpus(&dir, None).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
