//! # Network namespaces: real partitions for a local cluster (test path)
//!
//! **Problem.** FaRM §5.2's claims about partitions — a minority cannot
//! change the configuration and stops serving, the majority goes on — need
//! a network that can actually be cut between real node processes. On one
//! machine every process shares the loopback interface, which cannot be
//! cut per peer.
//!
//! **Mechanism.** A cluster started with `--netns` puts each node in a
//! network namespace of its own (`ip netns`), joined to a bridge in the
//! root namespace by a veth pair. Node `i` listens on `10.177.<o>.<i+1>`,
//! and the root namespace (where clients and the bench run) is
//! `10.177.<o>.254` on the bridge; `<o>` and the 4-hex-digit tag in every
//! interface name come from a hash of the cluster directory, so two
//! clusters do not collide. A partition is an nftables table in each
//! node's namespace that drops packets to and from the nodes on the other
//! side; healing deletes the tables. Clients keep reaching every node, so a
//! test can check that the minority refuses to serve.
//!
//! This needs root, `ip` (iproute2) and `nft` (nftables). It is a test and
//! experiment path: [`available`] says why it cannot run, and tests that
//! need it skip cleanly. Everything it creates is listed in the cluster
//! directory's `netns` file and removed by [`destroy`] (`cluster stop`).

use crate::cluster::ClusterError;
use std::path::Path;
use std::process::Command;

/// The file in the cluster directory that records the namespaces.
const FILE: &str = "netns";

/// The port every node listens on inside its namespace.
pub const PORT: u16 = 7000;

/// A cluster's namespaces: the tag in interface names and the subnet's
/// third octet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Netns {
    /// Four hex digits, from the cluster directory's path.
    pub tag: String,
    /// The subnet is `10.177.<octet>.0/24`.
    pub octet: u8,
    /// Node ids.
    pub nodes: Vec<u32>,
}

impl Netns {
    /// Namespace of node `id`.
    pub fn namespace(&self, id: u32) -> String {
        format!("mrd{}n{id}", self.tag)
    }

    fn veth(&self, id: u32) -> String {
        format!("mrd{}v{id}", self.tag)
    }

    fn bridge(&self) -> String {
        format!("mrd{}b", self.tag)
    }

    /// Address of node `id` (inside its namespace), `ip:port`.
    pub fn addr(&self, id: u32) -> String {
        format!("{}:{PORT}", self.ip(id))
    }

    fn ip(&self, id: u32) -> String {
        format!("10.177.{}.{}", self.octet, id + 1)
    }

    /// The command prefix that runs a program in node `id`'s namespace.
    pub fn exec_prefix(&self, id: u32) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.namespace(id),
        ]
    }
}

fn run(args: &[&str]) -> Result<(), ClusterError> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|source| ClusterError::Io {
            what: format!("running {}", args.join(" ")),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ClusterError::Io {
            what: format!("{}", args.join(" ")),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        })
    }
}

fn nft_script(ns: &str, script: &str) -> Result<(), ClusterError> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|source| ClusterError::Io {
            what: format!("running nft in {ns}"),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|source| ClusterError::Io {
                what: format!("writing nft rules for {ns}"),
                source,
            })?;
    }
    let out = child
        .wait_with_output()
        .map_err(|source| ClusterError::Io {
            what: format!("nft in {ns}"),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ClusterError::Io {
            what: format!("nft in {ns}"),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        })
    }
}

/// Why namespaces cannot be used here, if they cannot: not root, `ip` or
/// `nft` missing, or the kernel refuses a namespace.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("network namespaces need root".into());
    }
    for tool in ["ip", "nft"] {
        let ok = Command::new(tool)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(format!(
                "`{tool}` is not installed (apt install iproute2 nftables)"
            ));
        }
    }
    let probe = format!("mrdprobe{}", std::process::id() % 100_000);
    run(&["ip", "netns", "add", &probe]).map_err(|e| e.to_string())?;
    let nft = Command::new("ip")
        .args(["netns", "exec", &probe, "nft", "list", "tables"])
        .output()
        .map(|o| o.status.success());
    let _ = run(&["ip", "netns", "del", &probe]);
    match nft {
        Ok(true) => Ok(()),
        _ => Err("nftables does not work in a network namespace here".into()),
    }
}

/// The namespaces of the cluster in `dir`, if it was started with them.
pub fn load(dir: &Path) -> Option<Netns> {
    let text = std::fs::read_to_string(dir.join(FILE)).ok()?;
    let mut lines = text.lines();
    let tag = lines.next()?.trim().to_string();
    let octet = lines.next()?.trim().parse().ok()?;
    let nodes = lines
        .next()?
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    Some(Netns { tag, octet, nodes })
}

/// Create a namespace per node of `nodes` for the cluster in `dir` (an
/// absolute path), joined by a bridge, and record them in `dir`.
///
/// Errors: an `ip` command failed (what was created is removed again).
pub fn create(dir: &Path, nodes: &[u32]) -> Result<Netns, ClusterError> {
    let hash = dir
        .to_string_lossy()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
    let net = Netns {
        tag: format!("{:04x}", hash & 0xffff),
        octet: (hash >> 16) as u8 % 200 + 20,
        nodes: nodes.to_vec(),
    };
    // A previous cluster in this directory left its namespaces behind
    // (its stop never ran): remove them first.
    let _ = destroy_net(&net);
    std::fs::write(
        dir.join(FILE),
        format!(
            "{}\n{}\n{}\n",
            net.tag,
            net.octet,
            nodes
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    )
    .map_err(|source| ClusterError::Io {
        what: "writing the netns file".into(),
        source,
    })?;
    let made = (|| {
        let br = net.bridge();
        run(&["ip", "link", "add", "name", &br, "type", "bridge"])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("10.177.{}.254/24", net.octet),
            "dev",
            &br,
        ])?;
        run(&["ip", "link", "set", &br, "up"])?;
        for &id in nodes {
            let (ns, veth) = (net.namespace(id), net.veth(id));
            run(&["ip", "netns", "add", &ns])?;
            run(&[
                "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            run(&["ip", "link", "set", &veth, "master", &br])?;
            run(&["ip", "link", "set", &veth, "up"])?;
            run(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", net.ip(id)),
                "dev",
                "eth0",
            ])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    })();
    if let Err(e) = made {
        let _ = destroy(dir);
        return Err(e);
    }
    Ok(net)
}

fn destroy_net(net: &Netns) -> Result<(), ClusterError> {
    let mut first = Ok(());
    for &id in &net.nodes {
        // Deleting the namespace deletes its end of the veth pair, and
        // with it the host end.
        if let Err(e) = run(&["ip", "netns", "del", &net.namespace(id)]) {
            first = first.and(Err(e));
        }
    }
    if let Err(e) = run(&["ip", "link", "del", &net.bridge()]) {
        first = first.and(Err(e));
    }
    first
}

/// Remove the namespaces, veths and bridge of the cluster in `dir` (no-op
/// without them).
///
/// Errors: the first `ip` command that failed for something that existed.
pub fn destroy(dir: &Path) -> Result<(), ClusterError> {
    let Some(net) = load(dir) else {
        return Ok(());
    };
    let r = destroy_net(&net);
    let _ = std::fs::remove_file(dir.join(FILE));
    // Missing pieces (already removed) are not errors worth reporting.
    match r {
        Err(ClusterError::Io { source, .. })
            if source.to_string().contains("Cannot find")
                || source.to_string().contains("No such") =>
        {
            Ok(())
        }
        other => other,
    }
}

/// Cut `isolated` off from the other nodes (both directions); clients in
/// the root namespace still reach everyone. Replaces any earlier partition.
///
/// Errors: no namespaces in `dir`, an unknown node, or `nft` failed.
pub fn partition(dir: &Path, isolated: &[u32]) -> Result<(), ClusterError> {
    let net = load(dir).ok_or_else(|| ClusterError::Io {
        what: format!("partitioning the cluster in {}", dir.display()),
        source: std::io::Error::other("it was not started with --netns"),
    })?;
    if let Some(bad) = isolated.iter().find(|n| !net.nodes.contains(n)) {
        return Err(ClusterError::Io {
            what: "partitioning".into(),
            source: std::io::Error::other(format!("node {bad} is not in the cluster")),
        });
    }
    heal(dir)?;
    for &id in &net.nodes {
        let inside = isolated.contains(&id);
        let others: Vec<String> = net
            .nodes
            .iter()
            .filter(|n| isolated.contains(n) != inside)
            .map(|n| net.ip(*n))
            .collect();
        if others.is_empty() {
            continue;
        }
        let set = others.join(", ");
        let script = format!(
            "table inet meridian_fault {{\n\
             \tchain in {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}\n\
             \tchain out {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }}\n\
             }}\n"
        );
        nft_script(&net.namespace(id), &script)?;
    }
    Ok(())
}

/// Remove every partition of the cluster in `dir`.
///
/// Errors: no namespaces in `dir`.
pub fn heal(dir: &Path) -> Result<(), ClusterError> {
    let net = load(dir).ok_or_else(|| ClusterError::Io {
        what: format!("healing the cluster in {}", dir.display()),
        source: std::io::Error::other("it was not started with --netns"),
    })?;
    for &id in &net.nodes {
        // Absent when this node was never cut off.
        let _ = run(&[
            "ip",
            "netns",
            "exec",
            &net.namespace(id),
            "nft",
            "delete",
            "table",
            "inet",
            "meridian_fault",
        ]);
    }
    Ok(())
}
