//! # Transaction state recovery: votes and decisions (FaRM §5.3 steps 3, 6, 7)
//!
//! **Problem.** After a configuration change, a transaction whose commit
//! spanned it may have left LOCK, COMMIT-BACKUP and COMMIT-PRIMARY records
//! on some replicas and not others, and its coordinator may be gone. The
//! survivors must decide its outcome so that a transaction any primary
//! exposed, or whose commit the coordinator reported, commits, and one that
//! was aborted stays aborted — and decide the same way again if recovery
//! itself is interrupted by another failure.
//!
//! **Algorithm.** Each replica reports its [`Evidence`]
//! ([`crate::Participant::evidence`]). The region's primary combines them
//! ([`region_vote`]): commit-primary if any replica saw COMMIT-PRIMARY or
//! COMMIT-RECOVERY; otherwise commit-backup if any saw COMMIT-BACKUP and
//! none saw an abort; otherwise lock if any holds a LOCK record and none
//! saw an abort; otherwise truncated if all truncated it, unknown if none
//! knows it, abort else. The recovery coordinator, chosen by consistent
//! hashing of the transaction id over the members
//! ([`recovery_coordinator`]), collects one vote per written region and
//! [`decide`]s: commit on any commit-primary; otherwise, once every region
//! voted, commit if at least one voted commit-backup and all others voted
//! lock, commit-backup or truncated; abort otherwise. A transaction that
//! every surviving replica truncated is not recovering (no records are
//! left to find), so recovery is never started for it; an outcome query
//! about it is answered "unknown", never "abort" (the low bound passes
//! aborted and committed transactions alike).
//!
//! **Which transactions recover** ([`is_recovering`], step 3): one that
//! started committing in an earlier configuration unless every written
//! region kept its replicas (LastReplicaChange), every read region kept its
//! primary (LastPrimaryChange), and its coordinator is still there.
//!
//! **Why it is safe** (FaRM §5.3 "Correctness"). A coordinator reports
//! commit only after every backup acknowledged COMMIT-BACKUP and one
//! primary COMMIT-PRIMARY, and it never sends ABORT once a COMMIT-BACKUP may
//! have gone out ([`crate::Transaction::abandon`]). With at most `f`
//! failures per region, some replica of every written region survives with
//! COMMIT-BACKUP, LOCK or a truncation, so every region votes commit-backup,
//! lock or truncated and at least one commit-backup or commit-primary —
//! the decision is commit. An aborted transaction has no COMMIT-BACKUP
//! anywhere (abort happens only before them) or an ABORT-RECOVERY on a
//! replica of every region voted on, so the decision is abort.
//!
//! **Invariants.** `decide` never returns a commit without a
//! commit-primary or commit-backup vote; `region_vote` is monotone in the
//! evidence (adding a replica never turns commit-primary into anything
//! else).

use meridian_wire::{ConfigId, Evidence, NodeId, RecoveryVote, RegionId, TxId};
use std::collections::BTreeMap;

/// The outcome recovery decides for a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// COMMIT-RECOVERY to every replica of every written region.
    Commit,
    /// ABORT-RECOVERY to every replica of every written region.
    Abort,
}

/// The region's vote from its replicas' evidence (FaRM §5.3 step 6).
pub fn region_vote(evidence: &[Evidence]) -> RecoveryVote {
    let saw = |e: Evidence| evidence.contains(&e);
    if saw(Evidence::CommitPrimary) {
        RecoveryVote::CommitPrimary
    } else if saw(Evidence::Aborted) {
        RecoveryVote::Abort
    } else if saw(Evidence::CommitBackup) {
        RecoveryVote::CommitBackup
    } else if saw(Evidence::Lock) {
        RecoveryVote::Lock
    } else if !evidence.is_empty() && evidence.iter().all(|e| *e == Evidence::Truncated) {
        RecoveryVote::Truncated
    } else if evidence.iter().all(|e| *e == Evidence::Nothing) {
        RecoveryVote::Unknown
    } else {
        // Some truncated it and some never saw it: truncation happens only
        // after commit, and a replica may have joined after it.
        RecoveryVote::Truncated
    }
}

/// The recovery coordinator's decision from the votes so far, over the
/// regions the transaction wrote (FaRM §5.3 step 7); `None` while it must
/// wait for more votes.
pub fn decide(written: &[RegionId], votes: &BTreeMap<RegionId, RecoveryVote>) -> Option<Decision> {
    if votes.values().any(|v| *v == RecoveryVote::CommitPrimary) {
        return Some(Decision::Commit);
    }
    if written.iter().any(|r| !votes.contains_key(r)) {
        return None;
    }
    let all = written.iter().filter_map(|r| votes.get(r));
    let mut backup = false;
    for v in all {
        match v {
            RecoveryVote::CommitBackup => backup = true,
            RecoveryVote::Lock | RecoveryVote::Truncated => {}
            _ => return Some(Decision::Abort),
        }
    }
    Some(if backup {
        Decision::Commit
    } else {
        Decision::Abort
    })
}

/// The member that coordinates the recovery of `tx` (FaRM §5.3 step 6:
/// consistent hashing, so that every primary agrees without talking):
/// rendezvous hashing, the member with the highest hash of (tx, member).
/// `None` if there are no members.
pub fn recovery_coordinator(tx: TxId, members: &[NodeId]) -> Option<NodeId> {
    members.iter().copied().max_by_key(|m| (mix(tx, *m), *m))
}

fn mix(tx: TxId, m: NodeId) -> u64 {
    // splitmix64 over the fields: deterministic across machines and builds.
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for v in [
        tx.config.0,
        tx.coordinator,
        tx.thread as u64,
        tx.local,
        m.0 as u64,
    ] {
        h ^= v;
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h = z ^ (z >> 31);
    }
    h
}

/// FaRM §5.3 step 3: is a transaction that started committing in
/// `tx.config` recovering in configuration `now`? `changes(r)` gives
/// region `r`'s (LastPrimaryChange, LastReplicaChange).
pub fn is_recovering(
    tx: TxId,
    now: ConfigId,
    written: &[RegionId],
    read: &[RegionId],
    coordinator_removed: bool,
    changes: impl Fn(RegionId) -> (ConfigId, ConfigId),
) -> bool {
    if tx.config >= now {
        return false;
    }
    coordinator_removed
        || written.iter().any(|r| changes(*r).1 > tx.config)
        || read.iter().any(|r| changes(*r).0 > tx.config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Evidence as E;
    use RecoveryVote as V;

    fn votes(v: &[(u32, V)]) -> BTreeMap<RegionId, V> {
        v.iter().map(|(r, v)| (RegionId(*r), *v)).collect()
    }

    #[test]
    fn region_votes_follow_farm_step_6() {
        assert_eq!(region_vote(&[E::Lock, E::CommitPrimary]), V::CommitPrimary);
        assert_eq!(
            region_vote(&[E::Lock, E::CommitBackup, E::Nothing]),
            V::CommitBackup
        );
        assert_eq!(
            region_vote(&[E::Lock, E::CommitBackup, E::Aborted]),
            V::Abort
        );
        assert_eq!(region_vote(&[E::Lock, E::Nothing]), V::Lock);
        assert_eq!(region_vote(&[E::Truncated, E::Truncated]), V::Truncated);
        assert_eq!(region_vote(&[E::Truncated, E::Nothing]), V::Truncated);
        assert_eq!(region_vote(&[E::Nothing, E::Nothing]), V::Unknown);
        assert_eq!(region_vote(&[E::Aborted, E::Nothing]), V::Abort);
    }

    #[test]
    fn decisions_follow_farm_step_7() {
        let w = [RegionId(1), RegionId(2)];
        // Any commit-primary commits at once.
        assert_eq!(
            decide(&w, &votes(&[(1, V::CommitPrimary)])),
            Some(Decision::Commit)
        );
        // Otherwise wait for every region.
        assert_eq!(decide(&w, &votes(&[(1, V::CommitBackup)])), None);
        assert_eq!(
            decide(&w, &votes(&[(1, V::CommitBackup), (2, V::Lock)])),
            Some(Decision::Commit)
        );
        assert_eq!(
            decide(&w, &votes(&[(1, V::CommitBackup), (2, V::Truncated)])),
            Some(Decision::Commit)
        );
        assert_eq!(
            decide(&w, &votes(&[(1, V::Lock), (2, V::Lock)])),
            Some(Decision::Abort),
            "no COMMIT-BACKUP anywhere: the coordinator had not decided"
        );
        assert_eq!(
            decide(&w, &votes(&[(1, V::CommitBackup), (2, V::Unknown)])),
            Some(Decision::Abort)
        );
        assert_eq!(
            decide(&w, &votes(&[(1, V::CommitBackup), (2, V::Abort)])),
            Some(Decision::Abort)
        );
    }

    /// FaRM's correctness argument, exhaustively for two regions of three
    /// replicas: for every commit the coordinator could have reported and
    /// every choice of at most two failed replicas per region, recovery
    /// commits; for every transaction the coordinator aborted before any
    /// COMMIT-BACKUP, recovery aborts.
    #[test]
    fn reported_commits_are_never_lost_and_aborts_never_commit() {
        // Per region: replica 0 is the primary, 1 and 2 backups. Two
        // stages: before any TRUNCATE (the coordinator truncates only once
        // every primary acknowledged COMMIT-PRIMARY), region 0's primary
        // saw COMMIT-PRIMARY (the ack the coordinator reported on), region
        // 1's at least LOCK, every backup COMMIT-BACKUP; after truncation
        // began, any replica may also have truncated.
        let before: [[&[E]; 3]; 2] = [
            [&[E::CommitPrimary], &[E::CommitBackup], &[E::CommitBackup]],
            [
                &[E::Lock, E::CommitPrimary],
                &[E::CommitBackup],
                &[E::CommitBackup],
            ],
        ];
        let after: [[&[E]; 3]; 2] = [
            [
                &[E::CommitPrimary, E::Truncated],
                &[E::CommitBackup, E::Truncated],
                &[E::CommitBackup, E::Truncated],
            ],
            [
                &[E::CommitPrimary, E::Truncated],
                &[E::CommitBackup, E::Truncated],
                &[E::CommitBackup, E::Truncated],
            ],
        ];
        for committed in [before, after] {
            for alive0 in 1u8..8 {
                for alive1 in 1u8..8 {
                    for pick in 0..(2usize.pow(6)) {
                        let mut votes_by = BTreeMap::new();
                        for (r, alive) in [(0usize, alive0), (1, alive1)] {
                            let mut ev = Vec::new();
                            for rep in 0..3 {
                                if alive & (1 << rep) != 0 {
                                    let options = committed[r][rep];
                                    let k = (pick >> (r * 3 + rep)) & 1;
                                    ev.push(options[k % options.len()]);
                                }
                            }
                            votes_by.insert(RegionId(r as u32), region_vote(&ev));
                        }
                        if votes_by.values().all(|v| *v == V::Truncated) {
                            continue; // no records left: not recovering
                        }
                        let d = decide(&[RegionId(0), RegionId(1)], &votes_by);
                        assert_eq!(d, Some(Decision::Commit), "{votes_by:?}");
                    }
                }
            }
        }
        // Aborted before any COMMIT-BACKUP: primaries hold LOCK, saw ABORT,
        // or nothing; backups saw nothing.
        for p0 in [E::Lock, E::Aborted, E::Nothing] {
            for p1 in [E::Lock, E::Aborted, E::Nothing] {
                let v = votes(&[
                    (0, region_vote(&[p0, E::Nothing, E::Nothing])),
                    (1, region_vote(&[p1, E::Nothing])),
                ]);
                assert_eq!(
                    decide(&[RegionId(0), RegionId(1)], &v),
                    Some(Decision::Abort)
                );
            }
        }
    }

    #[test]
    fn the_recovery_coordinator_is_agreed_and_spread() {
        let members: Vec<NodeId> = (0..5).map(NodeId).collect();
        let mut count = BTreeMap::new();
        for l in 0..1000 {
            let tx = TxId {
                config: ConfigId(1),
                coordinator: 7,
                thread: 0,
                local: l,
            };
            let c = recovery_coordinator(tx, &members).unwrap();
            assert_eq!(recovery_coordinator(tx, &members), Some(c));
            *count.entry(c).or_insert(0) += 1;
            // Removing another member does not move it (consistent hashing).
            let other: Vec<NodeId> = members
                .iter()
                .copied()
                .filter(|m| *m != c && m.0 != (c.0 + 1) % 5)
                .collect();
            let mut with_c = other.clone();
            with_c.push(c);
            with_c.sort();
            assert_eq!(recovery_coordinator(tx, &with_c), Some(c));
        }
        assert!(count.values().all(|&n| n > 120), "{count:?}");
        assert_eq!(
            recovery_coordinator(
                TxId {
                    config: ConfigId(1),
                    coordinator: 0,
                    thread: 0,
                    local: 0
                },
                &[]
            ),
            None
        );
    }

    #[test]
    fn recovering_transactions_are_those_spanning_a_change_they_touch() {
        let tx = TxId {
            config: ConfigId(3),
            coordinator: 1,
            thread: 0,
            local: 1,
        };
        let changes = |r: RegionId| match r.0 {
            0 => (ConfigId(1), ConfigId(4)), // a backup replaced in 4
            1 => (ConfigId(4), ConfigId(4)), // primary replaced in 4
            _ => (ConfigId(1), ConfigId(1)),
        };
        let now = ConfigId(4);
        assert!(!is_recovering(
            tx,
            ConfigId(3),
            &[RegionId(0)],
            &[],
            false,
            changes
        ));
        assert!(is_recovering(tx, now, &[RegionId(0)], &[], false, changes));
        assert!(
            !is_recovering(tx, now, &[RegionId(2)], &[RegionId(0)], false, changes),
            "a read region whose backup changed"
        );
        assert!(is_recovering(
            tx,
            now,
            &[RegionId(2)],
            &[RegionId(1)],
            false,
            changes
        ));
        assert!(is_recovering(tx, now, &[RegionId(2)], &[], true, changes));
        assert!(!is_recovering(tx, now, &[RegionId(2)], &[], false, changes));
    }
}
