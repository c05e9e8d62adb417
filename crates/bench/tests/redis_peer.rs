//! The Redis peer driver against a real redis-server: its
//! optimistic transactions abort on a conflicting write, read their own
//! writes, do not abort on a finished transaction's watches, and the
//! shared YCSB closed loop runs on it. Skips when redis-server is not
//! installed (`scripts/setup.sh` installs it as root).

mod common;

use common::contended_rmw;
use meridian_bench::drive::Mix;
use meridian_bench::peers::{Peer, PeerError, RedisPeer};
use meridian_workload::ops::TxnOps;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A redis-server on a free loopback port, without persistence, killed and
/// its directory removed on drop (also when an assertion fails).
struct Server {
    child: Child,
    dir: std::path::PathBuf,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start() -> Option<Server> {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("redis-server not installed: skipping (scripts/setup.sh installs it)");
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let dir = std::env::temp_dir().join(format!("meridian-redis-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let server = Server {
        child,
        dir,
        url: format!("redis://127.0.0.1:{port}/"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(server)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn redis_transactions_abort_on_conflict_and_not_otherwise() {
    let Some(server) = start() else { return };
    rt().block_on(async {
        let peer = RedisPeer::new(&server.url).expect("url");
        let mut s1 = peer.session().await.expect("session 1");
        let mut s2 = peer.session().await.expect("session 2");
        s1.load([(b"k".to_vec(), b"0".to_vec())].into_iter())
            .await
            .expect("load");

        // A write between a read and the commit aborts the reader.
        let mut t1 = s1.begin();
        assert_eq!(t1.get(b"k").await.expect("get"), Some(b"0".to_vec()));
        let mut t2 = s2.begin();
        t2.put(b"k".to_vec(), b"2".to_vec()).await.expect("put");
        t2.commit().await.expect("a blind write commits");
        t1.put(b"k".to_vec(), b"1".to_vec()).await.expect("put");
        assert!(matches!(t1.commit().await, Err(PeerError::Conflict)));

        // Reads see the transaction's own writes; deletes too.
        let mut t = s1.begin();
        t.put(b"x".to_vec(), b"mine".to_vec()).await.expect("put");
        assert_eq!(t.get(b"x").await.expect("get"), Some(b"mine".to_vec()));
        t.delete(b"k".to_vec()).await.expect("delete");
        assert_eq!(t.get(b"k").await.expect("get"), None);
        t.commit().await.expect("commit");
        let mut t = s2.begin();
        assert_eq!(t.get(b"k").await.expect("get"), None);
        assert_eq!(t.get(b"x").await.expect("get"), Some(b"mine".to_vec()));
        t.commit().await.expect("a read-only transaction commits");

        // A finished single-read transaction's watch must not fail the
        // session's next transaction when that key changes meanwhile.
        let mut t = s1.begin();
        t.get(b"x").await.expect("get");
        t.commit().await.expect("commit");
        let mut t = s2.begin();
        t.put(b"x".to_vec(), b"theirs".to_vec()).await.expect("put");
        t.commit().await.expect("commit");
        let mut t = s1.begin();
        t.put(b"y".to_vec(), b"1".to_vec()).await.expect("put");
        t.commit()
            .await
            .expect("no spurious conflict from an old watch");

        // Redis keeps keys unordered: a scan is refused, typed.
        let mut t = s1.begin();
        assert!(matches!(
            t.scan(b"a", b"z", 10).await,
            Err(PeerError::Unsupported(_))
        ));
    });
}

#[test]
fn ycsb_runs_against_redis_with_the_shared_workload_code() {
    let Some(server) = start() else { return };
    rt().block_on(async {
        let peer = Peer::Redis(RedisPeer::new(&server.url).expect("url"));
        let cfg = meridian_workload::ycsb::YcsbConfig {
            records: 1000,
            value_bytes: 100,
            theta: 0.99,
            workload: meridian_workload::ycsb::YcsbWorkload::parse("f").expect("workload"),
        };
        let rows = meridian_workload::ycsb::population(&cfg, 1);
        assert_eq!(peer.load(rows, |_| {}).await.expect("load"), 1000);
        let mix = Mix::Ycsb {
            generator: meridian_workload::ycsb::YcsbGenerator::new(&cfg).expect("cfg"),
            value_bytes: cfg.value_bytes,
        };
        let ran = peer.run(Arc::new(mix), 4, 1, 1).await.expect("run");
        assert!(ran.result.committed > 100, "{:?}", ran.result.committed);
        // Workload F: reads and read-modify-writes (a read, then a write
        // under its watch), both committed.
        assert!(
            ran.result.latency.contains_key("read"),
            "{:?}",
            ran.result.latency.keys()
        );
        assert!(
            ran.result.latency.contains_key("rmw"),
            "{:?}",
            ran.result.latency.keys()
        );
        // CPU per transaction: this process as the client, and at least
        // the redis-server this test started (others may run beside it).
        let x = &ran.result.extra;
        assert!(
            x.get("client_cpu_us_per_tx").is_some_and(|v| *v > 0.0),
            "{x:?}"
        );
        assert!(
            x.get("server_processes").is_some_and(|n| *n >= 1.0),
            "{x:?}"
        );
        assert!(
            x.get("server_cpu_us_per_tx").is_some_and(|v| *v > 0.0),
            "{x:?}"
        );
    });
}

/// The RMW transaction on 8 hot counters, 4 sessions: conflicts happen,
/// are retried, and the exact audit finds no lost update.
#[test]
fn contended_rmw_against_redis_loses_no_update() {
    let Some(server) = start() else { return };
    rt().block_on(async {
        let peer = Peer::Redis(RedisPeer::new(&server.url).expect("url"));
        let (committed, aborts, sum) = contended_rmw(&peer).await;
        assert!(committed > 100, "{committed}");
        assert!(
            aborts > 0,
            "8 hot counters, 4 sessions: some EXEC must fail"
        );
        assert_eq!(sum, 4 * committed, "lost or doubled updates");
    });
}
