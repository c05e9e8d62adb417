//! `leases.txt`: the lease engines on their own (FaRM §5.1). A
//! [`LeaseManager`] for CM n0 of configuration 1 with members n0, n1, n2,
//! and a [`LeaseClient`] per holder (`h=n1`, `h=n2`, or a client `h=c9`).
//! Times are local ns of each engine, given as `now=` in ms (fractions
//! allowed); every engine is driven at the same `now`.
//!
//! Commands:
//! - `renew h=H now=T`: the holder's `tick`: a Request if one is due.
//! - `cm now=T msg=... h=H [seq=S] [config=C]`: the CM receives a
//!   holder's message (`request`, `ack`, `release`); its reply goes to the
//!   holder's queue.
//! - `deliver now=T`: every queued message, both ways, until none is left;
//!   `hop now=T`: only those queued now (their answers stay queued).
//! - `drop`: lose every queued message.
//! - `state now=T`: what each side concludes at T: the CM's majority and
//!   suspects; per holder, whether it holds its lease, suspects the CM,
//!   how long the lease it granted the CM may last (as a new CM would be
//!   told), and the CM's bound on when the holder's lease surely ended.
//! - `pause h=H now=T`, `forgive h=H|cm gap=G now=T`.

use super::{transcript, Args};
use meridian_process::lease::{LeaseClient, LeaseManager, LeaseParams};
use meridian_wire::{ConfigId, LeaseHolder, LeaseMessage, NodeId};
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;

fn at(a: &Args) -> u64 {
    let t: f64 = a.get("now").parse().expect("now in ms");
    (t * 1_000_000.0).round() as u64
}

fn holder(s: &str) -> LeaseHolder {
    match s.split_at(1) {
        ("n", n) => LeaseHolder::Node(NodeId(n.parse().expect("node"))),
        ("c", c) => LeaseHolder::Client(c.parse().expect("client")),
        _ => panic!("holder {s}"),
    }
}

fn name(h: LeaseHolder) -> String {
    match h {
        LeaseHolder::Node(n) => format!("{n}"),
        LeaseHolder::Client(c) => format!("c{c}"),
    }
}

fn show(m: &LeaseMessage) -> String {
    match m {
        LeaseMessage::Request {
            config,
            holder,
            seq,
        } => format!("Request {} seq={seq} c{}", name(*holder), config.0),
        LeaseMessage::Grant { config, seq, lease } => {
            format!("Grant seq={seq} c{} lease={lease}", config.0)
        }
        LeaseMessage::GrantAck {
            config,
            holder,
            seq,
        } => format!("GrantAck {} seq={seq} c{}", name(*holder), config.0),
        LeaseMessage::Release { holder } => format!("Release {}", name(*holder)),
    }
}

fn ms(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000, ns % 1_000_000 / 1000)
}

#[test]
fn lease_transcript() {
    // 100 ms leases, 1000 ppm drift: held 99.9 ms, surely over 100.1 ms.
    let params = LeaseParams::new(100, 1000);
    let members = [NodeId(0), NodeId(1), NodeId(2)];
    let mut cm = LeaseManager::new(params, ConfigId(1), NodeId(0), &members, 0);
    let mut holders: BTreeMap<LeaseHolder, LeaseClient> = BTreeMap::new();
    for n in [1, 2] {
        let h = LeaseHolder::Node(NodeId(n));
        holders.insert(h, LeaseClient::new(params, h, ConfigId(1), NodeId(0), 0));
    }
    holders.insert(
        LeaseHolder::Client(9),
        LeaseClient::new(params, LeaseHolder::Client(9), ConfigId(1), NodeId(0), 0),
    );
    // Queued: (to the CM?, holder, message).
    let mut net: VecDeque<(bool, LeaseHolder, LeaseMessage)> = VecDeque::new();
    transcript("leases.txt", |cmd, a| {
        let mut s = String::new();
        match cmd {
            "renew" => {
                let h = holder(a.get("h"));
                let c = holders.get_mut(&h).expect("holder");
                match c.tick(at(a)) {
                    Some(m) => {
                        let _ = writeln!(s, "{} -> cm: {}", name(h), show(&m));
                        net.push_back((true, h, m));
                    }
                    None => {
                        let _ =
                            writeln!(s, "{}: not due (next {})", name(h), ms(c.next_renew_ns()));
                    }
                }
            }
            "deliver" | "hop" | "cm" => {
                if cmd == "cm" {
                    let h = holder(a.get("h"));
                    let config =
                        ConfigId(a.opt("config").map_or(1, |c| c.parse().expect("config")));
                    let seq = a.opt("seq").map_or(1, |c| c.parse().expect("seq"));
                    let m = match a.get("msg") {
                        "request" => LeaseMessage::Request {
                            config,
                            holder: h,
                            seq,
                        },
                        "ack" => LeaseMessage::GrantAck {
                            config,
                            holder: h,
                            seq,
                        },
                        "release" => LeaseMessage::Release { holder: h },
                        other => panic!("msg {other}"),
                    };
                    net.push_front((true, h, m));
                }
                let now = at(a);
                // `hop`: only what is queued now; its answers stay queued.
                let mut left = if cmd == "hop" { net.len() } else { usize::MAX };
                while let Some((to_cm, h, m)) = (left > 0).then(|| net.pop_front()).flatten() {
                    left -= 1;
                    if to_cm {
                        let _ = write!(s, "cm <- {}: {}", name(h), show(&m));
                        match cm.on_message(now, &m) {
                            Some(r) => {
                                let _ = writeln!(s, " => {}", show(&r));
                                net.push_back((false, h, r));
                            }
                            None => s.push_str(" => nothing\n"),
                        }
                        cm.check_invariants();
                    } else {
                        let c = holders.get_mut(&h).expect("holder");
                        let _ = write!(s, "{} <- cm: {}", name(h), show(&m));
                        match c.on_message(now, NodeId(0), &m) {
                            Some(r) => {
                                let _ = writeln!(s, " => {}", show(&r));
                                net.push_back((true, h, r));
                            }
                            None => s.push_str(" => nothing\n"),
                        }
                        c.check_invariants();
                    }
                }
            }
            "drop" => {
                for (to_cm, h, m) in net.drain(..) {
                    let dir = if to_cm { "-> cm" } else { "<- cm" };
                    let _ = writeln!(s, "lost {} {dir}: {}", name(h), show(&m));
                }
            }
            "state" => {
                let now = at(a);
                let suspects: Vec<String> = cm.suspects(now).into_iter().map(name).collect();
                let _ = writeln!(
                    s,
                    "cm: majority={} suspects={suspects:?}",
                    cm.holds_majority(now)
                );
                for (h, c) in &holders {
                    let _ = writeln!(
                        s,
                        "{}: holds={} cm_suspected={} cm_lease_left={} surely_expired_at={}",
                        name(*h),
                        c.holds(now),
                        c.cm_suspected(now),
                        ms(c.cm_lease_left_ns(now, NodeId(7))),
                        ms(cm.surely_expired_at(*h, now)),
                    );
                }
            }
            "pause" => {
                let h = holder(a.get("h"));
                let c = holders.get_mut(&h).expect("holder");
                c.pause_renewals(at(a));
                let _ = writeln!(s, "{}: next renewal {}", name(h), ms(c.next_renew_ns()));
            }
            "forgive" => {
                let gap = (a.get("gap").parse::<f64>().expect("gap ms") * 1e6) as u64;
                match a.get("h") {
                    "cm" => cm.forgive_stall(gap, at(a)),
                    h => holders
                        .get_mut(&holder(h))
                        .expect("holder")
                        .forgive_stall(gap, at(a)),
                }
            }
            other => panic!("unknown command {other}"),
        }
        if s.is_empty() {
            s.push_str("(no effects)\n");
        }
        s
    });
}
