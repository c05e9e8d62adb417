//! The PostgreSQL and etcd peer drivers against real servers on free
//! loopback ports: the shared closed loop runs TATP on
//! PostgreSQL and the contended RMW transaction on both, the exact audit
//! finds no lost update, and a deliberately broken driver of each (READ
//! COMMITTED; commits without compares) is caught by the same audit.
//! Skips when a server is not installed (`scripts/setup.sh` installs both
//! as root).

mod common;

use common::contended_rmw;
use meridian_bench::drive::{Mix, Shape};
use meridian_bench::etcd::EtcdPeer;
use meridian_bench::peers::Peer;
use meridian_bench::pg::PgPeer;
use meridian_workload::tatp;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Run a PostgreSQL binary, as the `postgres` user when we are root
/// (PostgreSQL refuses to run as root).
fn pg_cmd(bin: &str) -> Command {
    let path = format!("{PG_BIN}/{bin}");
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &path]);
        c
    } else {
        Command::new(path)
    }
}

/// A server process and its directory, both removed on drop (also when an
/// assertion fails).
struct Server {
    child: Option<Child>,
    /// PostgreSQL: stopped with pg_ctl instead.
    pg_dir: Option<PathBuf>,
    dir: PathBuf,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(d) = &self.pg_dir {
            let _ = pg_cmd("pg_ctl")
                .args(["-D"])
                .arg(d)
                .args(["-m", "immediate", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server on {port} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_postgres() -> Option<Server> {
    if !std::path::Path::new(PG_BIN).join("initdb").exists() {
        eprintln!("PostgreSQL 15 not installed: skipping (scripts/setup.sh installs it)");
        return None;
    }
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("meridian-pg-{}-{port}", std::process::id()));
    let data = dir.join("data");
    std::fs::create_dir_all(&dir).expect("dir");
    if is_root() {
        let ok = Command::new("chown")
            .args(["-R", "postgres"])
            .arg(&dir)
            .status()
            .expect("chown");
        assert!(ok.success());
    }
    let server = Server {
        child: None,
        pg_dir: Some(data.clone()),
        dir: dir.clone(),
        url: format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"),
    };
    let ok = pg_cmd("initdb")
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "-E", "UTF8"])
        .stdout(Stdio::null())
        .status()
        .expect("initdb");
    assert!(ok.success(), "initdb failed");
    let ok = pg_cmd("pg_ctl")
        .arg("-D")
        .arg(&data)
        .arg("-o")
        .arg(format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}",
            dir.display()
        ))
        .arg("-l")
        .arg(dir.join("pg.log"))
        .args(["-w", "start"])
        .stdout(Stdio::null())
        .status()
        .expect("pg_ctl");
    assert!(ok.success(), "pg_ctl start failed");
    wait_port(port);
    Some(server)
}

fn start_etcd() -> Option<Server> {
    if Command::new("etcd").arg("--version").output().is_err() {
        eprintln!("etcd not installed: skipping (scripts/setup.sh installs it)");
        return None;
    }
    let (port, peer_port) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("meridian-etcd-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let client_url = format!("http://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let child = Command::new("etcd")
        .args(["--name", "t", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcd");
    wait_port(port);
    Some(Server {
        child: Some(child),
        pg_dir: None,
        dir,
        url: format!("127.0.0.1:{port}"),
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn postgres_runs_tatp_and_the_contended_rmw_without_lost_updates() {
    let Some(server) = start_postgres() else {
        return;
    };
    rt().block_on(async {
        let peer = Peer::Postgres(PgPeer::new(&server.url));
        let (committed, aborts, sum) = contended_rmw(&peer).await;
        assert!(committed > 20, "{committed}");
        assert!(aborts > 0, "8 hot counters: SSI must refuse some commits");
        assert_eq!(
            sum,
            4 * committed,
            "lost or doubled updates at SERIALIZABLE"
        );

        // The broken variant: READ COMMITTED loses updates, and the same
        // audit sees it.
        let broken = Peer::Postgres(PgPeer::new(&server.url).read_committed_for_tests());
        let (committed, _, sum) = contended_rmw(&broken).await;
        assert!(
            sum < 4 * committed,
            "READ COMMITTED lost no update? {sum} vs {committed}"
        );

        // TATP (scans, inserts, deletes, the sub_nbr index) through the
        // same loop.
        let cfg = tatp::TatpConfig { subscribers: 1000 };
        let n = peer
            .load(tatp::population(&cfg, 1), |_| {})
            .await
            .expect("load");
        assert!(n > 1000);
        let ran = peer
            .run(Arc::new(Mix::Tatp(cfg)), 4, 1, 4)
            .await
            .expect("run");
        let r = &ran.result;
        assert!(r.committed > 50, "{}", r.committed);
        assert_eq!(r.extra["errors"], 0.0);
        assert_eq!(r.extra["inconsistent"], 0.0);
        assert!(
            r.latency.contains_key("GET_NEW_DESTINATION"),
            "{:?}",
            r.latency.keys()
        );
        assert!(r.successful_per_s.is_some_and(|s| s > 0.0));
        // CPU per transaction counts the postmaster and the 4 sessions'
        // backends: the sessions are closed only after the window's CPU
        // is read (a backend exits with its connection).
        assert!(
            r.extra.get("server_processes").is_some_and(|n| *n >= 5.0),
            "{:?}",
            r.extra
        );
        assert!(r
            .extra
            .get("server_cpu_us_per_tx")
            .is_some_and(|v| *v > 0.0));
    });
}

#[test]
fn etcd_runs_the_contended_rmw_without_lost_updates() {
    let Some(server) = start_etcd() else { return };
    rt().block_on(async {
        let peer = Peer::Etcd(EtcdPeer::new(&server.url));
        let (committed, aborts, sum) = contended_rmw(&peer).await;
        assert!(committed > 20, "{committed}");
        assert!(aborts > 0, "8 hot counters: some compares must fail");
        assert_eq!(sum, 4 * committed, "lost or doubled updates with compares");

        // The broken variant: commits without compares lose updates.
        let broken = Peer::Etcd(EtcdPeer::new(&server.url).without_compares_for_tests());
        let (committed, _, sum) = contended_rmw(&broken).await;
        assert!(
            sum < 4 * committed,
            "no compares lost no update? {sum} vs {committed}"
        );

        // A read-only TATP mix scans (GET_NEW_DESTINATION) at the snapshot.
        let cfg = tatp::TatpConfig { subscribers: 200 };
        peer.load(tatp::population(&cfg, 1), |_| {})
            .await
            .expect("load");
        let mut s = match &peer {
            Peer::Etcd(p) => p.session().await.expect("session"),
            _ => unreachable!(),
        };
        use meridian_bench::drive::{BenchSession, BenchTxn};
        use meridian_workload::ops::TxnOps;
        let prefix = tatp::call_forwarding_prefix(1, 1);
        let end = tatp::prefix_end(&prefix).expect("end");
        let mut t = s.begin(Shape::ReadOnly).await.expect("begin");
        let rows = t.scan(&prefix, &end, 10).await.expect("read-only scan");
        assert!(rows.iter().all(|(k, _)| k.starts_with(&prefix)));
        t.commit().await.expect("commit");
        let mut t = s.begin(Shape::ReadWrite).await.expect("begin");
        assert!(
            t.scan(&prefix, &end, 10).await.is_err(),
            "a scan in a writing transaction is refused, not weakly isolated"
        );
        t.abort().await;
    });
}
