//! The lease desk (FaRM §5.1's dedicated lease thread): the lease engine
//! of one process behind its own small lock, shared by the process and its
//! lease thread, with the listener-stall accounting that keeps a starved
//! thread from being mistaken for a silent peer, and the master clock's
//! view that the CM's lease thread hands out (FaRMv2 §4.3).

use super::*;

/// What the clock master publishes for its lease thread, so that the
/// thread answers clock synchronisations without the process lock
/// (FaRMv2 §4.1: the master's answer is the sample's only server-side
/// delay, and a busy process widened every sample, so every uncertainty).
/// Published by the process after each input while it may hand out time,
/// and withdrawn, under the desk lock, the moment it may not
/// ([`LeaseDesk::withdraw_master_clock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MasterClockView {
    /// Global time minus local time, ns (`ClockSync::master_offset_ns`).
    pub offset_ns: i128,
    /// Hand out no time at or above this, global ns: the stored time bound
    /// less the followers' reserve (`ClockSync::set_time_bound`).
    pub limit_ns: u64,
}

#[derive(Debug)]
struct Desk {
    role: LeaseRole,
    /// The master clock, while this process may hand out time from it.
    clock: Option<MasterClockView>,
    /// The highest global time handed out from `clock`, ns: the process
    /// folds it into its FF value (FaRMv2 §4.3).
    clock_handed_ns: u64,
    /// The owner is a member (or a registered client) and may use leases.
    serving: bool,
    /// The members of the owner's configuration (the CM answers only them).
    members: BTreeSet<NodeId>,
    /// The latest `now` seen: the two threads read the clock at different
    /// moments, and the engines expect time not to go back.
    last_now: u64,
    /// Grants a holder received, and requests it sent.
    grants: u64,
    requests: u64,
    /// Who receives this desk's lease messages, and when it last looked.
    listener: Listener,
}

/// The lease listener of a desk: a lease thread ([`LeaseDesk::attach_listener`])
/// or, without one, the owning process itself.
#[derive(Debug, Default)]
struct Listener {
    /// A lease thread listens; else the owner's lease ticks do
    /// ([`LeaseDesk::owner_listens`]).
    thread: bool,
    /// When the listener last looked, local ns.
    last_ns: Option<u64>,
    /// Stalls forgiven, and their total and longest, ns.
    stalls: u64,
    stalled_ns: u64,
    longest_ns: u64,
}

/// Listener stalls a desk forgave ([`LeaseDesk::stalls`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerStalls {
    /// Gaps longer than [`LeaseParams::stall_ns`] between two looks.
    pub count: u64,
    /// Their total, ns.
    pub total_ns: u64,
    /// The longest, ns.
    pub longest_ns: u64,
}

/// The lease engine shared by the process that owns it and a dedicated
/// lease thread (FaRM §5.1: "lease renewal ... runs in a dedicated
/// thread ... at the highest user-space priority", so that load cannot
/// starve it).
///
/// The owning process (`NodeProcess`, `ClientProcess`) drives the slow
/// decisions on its own thread through [`LeaseDesk::with`]: suspicion,
/// reconfiguration, NEW-CONFIG as a grant. The shell's lease thread only
/// answers lease messages ([`LeaseDesk::on_message`]) and sends renewals
/// ([`LeaseDesk::renew`]), taking this small lock and never the process's.
/// The simulator calls the same two methods through the process, on one
/// thread, so the code that ships is the code it runs.
///
/// Invariant: time as the engines see it never goes back
/// (`LeaseDesk::clamp`), whichever thread calls.
#[derive(Clone, Debug)]
pub struct LeaseDesk(std::sync::Arc<std::sync::Mutex<Desk>>);

impl LeaseDesk {
    /// A desk holding `role`; the owner serves from the start if `serving`.
    pub fn new(role: LeaseRole, serving: bool) -> Self {
        LeaseDesk(std::sync::Arc::new(std::sync::Mutex::new(Desk {
            role,
            clock: None,
            clock_handed_ns: 0,
            serving,
            members: BTreeSet::new(),
            last_now: 0,
            grants: 0,
            requests: 0,
            listener: Listener::default(),
        })))
    }

    /// A look by the listener at `now` (see [`LeaseDesk::listen`]).
    fn listen_locked(d: &mut Desk, now: u64) {
        let last = d.listener.last_ns.replace(now);
        let (Some(last), Some(p)) = (last, d.role.params()) else {
            return;
        };
        let gap = now.saturating_sub(last);
        if gap > p.stall_ns() {
            d.role.forgive_stall(gap, now);
            let l = &mut d.listener;
            l.stalls += 1;
            l.stalled_ns = l.stalled_ns.saturating_add(gap);
            l.longest_ns = l.longest_ns.max(gap);
        }
    }

    /// A lease thread listens for this desk from now on (the shell calls
    /// this as it starts the thread, which then calls
    /// [`LeaseDesk::listen`] at every look); the owner's ticks no longer
    /// count as looks.
    pub fn attach_listener(&self, now: u64) {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        d.listener.thread = true;
        d.listener.last_ns = Some(now);
    }

    /// The lease thread looks for lease messages at `now` (every loop of
    /// its thread; clamped). A gap since its last look longer than
    /// [`LeaseParams::stall_ns`] was a stall of this process
    /// or machine (the listener runs at the highest priority and looks at
    /// least every renewal period), during which requests and grants may
    /// have waited unread; the role forgives it, so silence is counted
    /// only while the listener was there to hear (`forgive_stall`).
    ///
    /// FaRM §5.1 keeps leases short with a dedicated high-priority thread;
    /// on a shared virtual machine even that thread stops now and then,
    /// for longer than a lease, and every node of a cluster would then
    /// suspect every other at once. Forgiving only ever delays a
    /// suspicion, by at most the
    /// stall, and suspicion decides nothing about safety: what a holder
    /// may serve, and when a removal may commit, still follow the leases
    /// themselves (FaRM §5.2).
    pub fn listen(&self, now: u64) {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        Self::listen_locked(&mut d, now);
    }

    /// The owner's lease tick at `now`: a look, unless a lease thread
    /// listens (in the simulator, and in a process without a lease thread,
    /// the owner receives the lease messages itself).
    pub fn owner_listens(&self, now: u64) {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        if !d.listener.thread {
            Self::listen_locked(&mut d, now);
        }
    }

    /// True unless the listener has not looked for longer than a stall
    /// (it is stalled, or has not run since one): suspicion waits until it
    /// has looked, and forgiven the stall, rather than count a silence it
    /// was not there to hear.
    pub fn listener_current(&self, now: u64) -> bool {
        let d = self.lock();
        match (d.listener.last_ns, d.role.params()) {
            (Some(last), Some(p)) => now.saturating_sub(last) <= p.stall_ns(),
            _ => true,
        }
    }

    /// The stalls this desk's listener had and forgave so far.
    pub fn stalls(&self) -> ListenerStalls {
        let l = &self.lock().listener;
        ListenerStalls {
            count: l.stalls,
            total_ns: l.stalled_ns,
            longest_ns: l.longest_ns,
        }
    }

    /// The next local time the lease thread should look by: the next
    /// renewal, and at most a renewal period from `now` (so that a healthy
    /// listener's gaps stay well below [`LeaseParams::stall_ns`]).
    pub fn next_look_ns(&self, now: u64) -> u64 {
        let d = self.lock();
        let renew = match (&d.role, d.serving) {
            (LeaseRole::Member(c), true) => c.next_renew_ns(),
            _ => u64::MAX,
        };
        let period = d.role.params().map_or(u64::MAX, |p| p.renew_ns());
        renew.min(now.saturating_add(period))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Desk> {
        match self.0.lock() {
            Ok(g) => g,
            // A panic elsewhere already stops the process (invariants are
            // asserted); the state itself is plain data.
            Err(p) => p.into_inner(),
        }
    }

    /// `now`, never below a time already seen here.
    fn clamp(d: &mut Desk, now: u64) -> u64 {
        d.last_now = d.last_now.max(now);
        d.last_now
    }

    /// Run `f` on the role, at `now` (clamped: returned as the second
    /// argument to `f`).
    pub fn with<R>(&self, now: u64, f: impl FnOnce(&mut LeaseRole, u64) -> R) -> R {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        f(&mut d.role, now)
    }

    /// Read the role without a time (for queries that take none).
    pub fn read<R>(&self, f: impl FnOnce(&LeaseRole) -> R) -> R {
        f(&self.lock().role)
    }

    /// The owner may (not) use its leases: a removed or restarted node
    /// neither answers nor renews.
    pub fn set_serving(&self, serving: bool) {
        self.lock().serving = serving;
    }

    /// Publish the master clock (`Some`) or stop handing out time from it
    /// (`None`).
    pub fn set_master_clock(&self, view: Option<MasterClockView>) {
        self.lock().clock = view;
    }

    /// The highest global time handed out through
    /// [`LeaseDesk::master_time`], ns (0: none), which the process's FF
    /// value covers (`NodeProcess::ff_value`).
    pub fn master_clock_handed_ns(&self) -> u64 {
        self.lock().clock_handed_ns
    }

    /// Stop handing out time at once (the clock may be disabled, FaRMv2
    /// §4.3): nothing is handed out after this returns until a view is
    /// published again, so an FF value computed afterwards covers every
    /// time handed out.
    pub fn withdraw_master_clock(&self) {
        self.set_master_clock(None)
    }

    /// The clock master's answer to a synchronisation at local time `now`
    /// (FaRMv2 §4.1): its global time, if it may hand out time now. It may
    /// when it serves, is the CM with leases at a majority of the members
    /// (FaRM §5.1), and has published a view (it is the master, enabled,
    /// taken over) whose limit the time stays below. The time is read and
    /// recorded under the desk lock, so a withdrawal either precedes it or
    /// finds it in [`LeaseDesk::master_clock_handed_ns`].
    ///
    /// Errors: why no time is handed out, as the process would say it.
    pub fn master_time(&self, now: u64) -> Result<u64, &'static str> {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        let LeaseRole::Cm(m) = &d.role else {
            return Err("not the clock master");
        };
        if !d.serving || !m.holds_majority(now) {
            return Err("the clock master holds no lease majority now (FaRM §5.1)");
        }
        let Some(v) = d.clock else {
            return Err(
                "the clock master hands out no time now (disabled during a CM change, \
                        or not taken over yet, FaRMv2 §4.3)",
            );
        };
        let t = (now as i128 + v.offset_ns).clamp(0, u64::MAX as i128) as u64;
        if t >= v.limit_ns {
            return Err("the clock master reached its stored time bound (FaRMv2 §4.3)");
        }
        d.clock_handed_ns = d.clock_handed_ns.max(t);
        Ok(t)
    }

    /// The members of the owner's current configuration.
    pub fn set_members(&self, members: impl IntoIterator<Item = NodeId>) {
        self.lock().members = members.into_iter().collect();
    }

    /// Grants received and requests sent by a holder so far.
    pub fn counts(&self) -> (u64, u64) {
        let d = self.lock();
        (d.grants, d.requests)
    }

    /// A lease message from `from` at `now` (FaRM §5.1): the CM grants a
    /// member's or a client's request and records a `GrantAck`; a holder
    /// records a grant and acknowledges it. Messages of a non-member to
    /// the CM, and grants for another configuration, are
    /// [`LeaseOutcome::Forward`]ed to the owner.
    pub fn on_message(&self, now: u64, from: LeaseFrom, m: &LeaseMessage) -> LeaseOutcome {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        // Whoever receives lease messages is the listener.
        Self::listen_locked(&mut d, now);
        if !d.serving {
            return LeaseOutcome::Nothing;
        }
        let client = matches!(
            m,
            LeaseMessage::Request {
                holder: LeaseHolder::Client(_),
                ..
            } | LeaseMessage::GrantAck {
                holder: LeaseHolder::Client(_),
                ..
            } | LeaseMessage::Release {
                holder: LeaseHolder::Client(_)
            }
        );
        let claimed = match (m, &d.role) {
            (LeaseMessage::Grant { .. }, LeaseRole::Member(c)) => Some(c.cm()),
            _ => holder_node(m),
        };
        let sender = match from {
            LeaseFrom::Node(n) => Some(n),
            LeaseFrom::Anonymous => claimed,
        };
        let Desk {
            role,
            members,
            grants,
            ..
        } = &mut *d;
        match role {
            LeaseRole::Cm(mgr) if client => match mgr.on_message(now, m) {
                Some(msg) => LeaseOutcome::Reply {
                    to: match from {
                        LeaseFrom::Node(n) => Some(n),
                        LeaseFrom::Anonymous => None,
                    },
                    msg,
                },
                None => LeaseOutcome::Nothing,
            },
            _ if client => LeaseOutcome::Nothing,
            LeaseRole::Cm(mgr) => {
                let Some(n) = sender else {
                    return LeaseOutcome::Nothing;
                };
                if !members.contains(&n) {
                    return LeaseOutcome::Forward;
                }
                match mgr.on_message(now, m) {
                    Some(msg) => LeaseOutcome::Reply { to: Some(n), msg },
                    None => LeaseOutcome::Nothing,
                }
            }
            LeaseRole::Member(c) => {
                let Some(n) = sender else {
                    return LeaseOutcome::Nothing;
                };
                if let LeaseMessage::Grant { config, .. } = m {
                    if *config > c.config() {
                        return LeaseOutcome::Forward;
                    }
                }
                match c.on_message(now, n, m) {
                    Some(msg) => {
                        *grants += 1;
                        let to = match c.me() {
                            // The CM holds no lease at a client.
                            LeaseHolder::Client(_) => return LeaseOutcome::Nothing,
                            LeaseHolder::Node(_) => Some(n),
                        };
                        LeaseOutcome::Reply { to, msg }
                    }
                    None => LeaseOutcome::Nothing,
                }
            }
            LeaseRole::None => LeaseOutcome::Nothing,
        }
    }

    /// A holder's renewal, if one is due at `now`: the CM to send it to and
    /// the request (FaRM §5.1, every `lease / 5`).
    pub fn renew(&self, now: u64) -> Option<(NodeId, LeaseMessage)> {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        if !d.serving {
            return None;
        }
        let LeaseRole::Member(c) = &mut d.role else {
            return None;
        };
        let cm = c.cm();
        let m = c.tick(now)?;
        d.requests += 1;
        Some((cm, m))
    }

    /// When the next renewal is due (local ns), if this desk renews.
    pub fn next_renew_ns(&self) -> Option<u64> {
        let d = self.lock();
        match (&d.role, d.serving) {
            (LeaseRole::Member(c), true) => Some(c.next_renew_ns()),
            _ => None,
        }
    }

    /// Panics (release builds too) if the role's invariants are broken.
    pub fn check_invariants(&self) {
        match &self.lock().role {
            LeaseRole::Member(c) => c.check_invariants(),
            LeaseRole::Cm(m) => m.check_invariants(),
            LeaseRole::None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::testing::*;

    fn cm_desk() -> LeaseDesk {
        let m = LeaseManager::new(params(), ConfigId(1), NodeId(0), &[NodeId(0), NodeId(1)], 0);
        let d = LeaseDesk::new(LeaseRole::Cm(m), true);
        d.set_members([NodeId(0), NodeId(1)]);
        d
    }

    /// Node 1's desk, a member holding its lease at CM node 0.
    fn member_desk() -> LeaseDesk {
        let c = LeaseClient::new(
            params(),
            LeaseHolder::Node(NodeId(1)),
            ConfigId(1),
            NodeId(0),
            0,
        );
        LeaseDesk::new(LeaseRole::Member(c), true)
    }

    fn request(holder: LeaseHolder, seq: u64) -> LeaseMessage {
        LeaseMessage::Request {
            config: ConfigId(1),
            holder,
            seq,
        }
    }

    fn cm_suspects(d: &LeaseDesk, now: u64) -> Vec<LeaseHolder> {
        d.with(now, |r, now| match r {
            LeaseRole::Cm(m) => m.suspects(now),
            _ => Vec::new(),
        })
    }

    /// A stall of the CM's lease listener (its thread did not run: on a
    /// shared VM, tens of ms) is not counted as the holders' silence:
    /// suspicion waits while the listener is behind, the listener's next
    /// look forgives the gap, and a holder that stays silent is suspected
    /// a lease of listening later. Without forgiveness the look at 30 ms
    /// suspects node 1 at once.
    #[test]
    fn a_stall_of_the_cm_listener_is_not_counted_as_a_holders_silence() {
        let d = cm_desk();
        d.attach_listener(0);
        d.on_message(
            MS,
            LeaseFrom::Node(NodeId(1)),
            &request(LeaseHolder::Node(NodeId(1)), 1),
        );
        for t in [2, 4, 6] {
            d.listen(t * MS);
            assert!(d.listener_current(t * MS));
        }
        // The thread stops from 6 ms to 30 ms: meanwhile the listener is
        // not current, so the process does not suspect.
        assert!(!d.listener_current(29 * MS), "a listener 23 ms behind");
        d.listen(30 * MS);
        assert!(d.listener_current(30 * MS));
        assert_eq!(
            d.stalls(),
            ListenerStalls {
                count: 1,
                total_ns: 24 * MS,
                longest_ns: 24 * MS,
            }
        );
        assert!(cm_suspects(&d, 30 * MS).is_empty(), "the stall was counted");
        // Node 1 stays silent: suspected once a lease of listening passed
        // (its request at 1 ms, moved by the 24 ms gap: 25 + 10).
        for t in [32, 34] {
            d.listen(t * MS);
            assert!(cm_suspects(&d, t * MS).is_empty(), "{t} ms");
        }
        d.listen(35 * MS);
        assert_eq!(cm_suspects(&d, 35 * MS), vec![LeaseHolder::Node(NodeId(1))]);
    }

    /// A member's listener stall moves when it suspects the CM, not its own
    /// lease: after the stall it may not serve until it is granted again,
    /// and a CM that stays silent is suspected a lease of listening later.
    #[test]
    fn a_stall_of_a_members_listener_delays_suspecting_the_cm_not_its_lease() {
        let d = member_desk();
        d.attach_listener(0);
        let (_, req) = d.renew(MS).expect("due");
        let LeaseMessage::Request { seq, .. } = req else {
            panic!("{req:?}")
        };
        let grant = LeaseMessage::Grant {
            config: ConfigId(1),
            seq,
            lease: true,
        };
        d.on_message(2 * MS, LeaseFrom::Node(NodeId(0)), &grant);
        let state = |now: u64| {
            d.with(now, |r, now| match r {
                LeaseRole::Member(c) => (c.holds(now), c.cm_suspected(now)),
                _ => (false, false),
            })
        };
        assert_eq!(state(3 * MS), (true, false));
        // A 20 ms stall from 4 ms.
        d.listen(4 * MS);
        d.listen(24 * MS);
        // Its lease (from the request at 1 ms) ended during the stall;
        // the CM, granted at 2 ms, has had 2 ms of listening before the
        // stall and gets 8 more after it.
        assert_eq!(state(24 * MS), (false, false), "serves past its lease");
        for t in [26, 28, 30, 31] {
            d.listen(t * MS);
            assert_eq!(state(t * MS), (false, false), "{t} ms");
        }
        d.listen(32 * MS);
        assert_eq!(state(32 * MS), (false, true));
    }

    /// Without a lease thread (the simulator) the owner's lease ticks are
    /// the looks, and forgive a stall of the process; with one attached
    /// they do not count, so a stalled thread leaves the listener behind.
    #[test]
    fn the_owner_listens_only_without_a_lease_thread() {
        let d = cm_desk();
        d.owner_listens(MS);
        d.owner_listens(20 * MS);
        assert_eq!(d.stalls().count, 1, "the owner's gap is a stall");
        let t = cm_desk();
        t.attach_listener(0);
        t.owner_listens(MS);
        t.owner_listens(2 * MS);
        t.owner_listens(20 * MS);
        assert_eq!(t.stalls().count, 0);
        assert!(!t.listener_current(20 * MS), "the thread did not look");
    }

    /// The lease thread's path: the CM desk grants a member and a client
    /// alone, hands a non-member back to the node, and a desk that does not
    /// serve (a removed node) answers nothing.
    #[test]
    fn the_desk_grants_members_and_clients_and_forwards_non_members() {
        let d = cm_desk();
        let member = d.on_message(
            MS,
            LeaseFrom::Node(NodeId(1)),
            &request(LeaseHolder::Node(NodeId(1)), 1),
        );
        assert!(
            matches!(
                member,
                LeaseOutcome::Reply {
                    to: Some(NodeId(1)),
                    msg: LeaseMessage::Grant { seq: 1, .. }
                }
            ),
            "{member:?}"
        );
        let client = d.on_message(
            MS,
            LeaseFrom::Anonymous,
            &request(LeaseHolder::Client(9), 1),
        );
        assert!(
            matches!(
                client,
                LeaseOutcome::Reply {
                    to: None,
                    msg: LeaseMessage::Grant { .. }
                }
            ),
            "{client:?}"
        );
        let stranger = d.on_message(
            MS,
            LeaseFrom::Node(NodeId(4)),
            &request(LeaseHolder::Node(NodeId(4)), 1),
        );
        assert_eq!(stranger, LeaseOutcome::Forward);
        d.set_serving(false);
        let removed = d.on_message(
            MS,
            LeaseFrom::Node(NodeId(1)),
            &request(LeaseHolder::Node(NodeId(1)), 2),
        );
        assert_eq!(removed, LeaseOutcome::Nothing);
    }

    /// Renewals are due once whichever thread asks, and a holder's desk
    /// never sees time go back (two threads read the clock at different
    /// moments).
    #[test]
    fn a_renewal_is_due_once_and_time_never_goes_back() {
        let d = member_desk();
        assert!(d.renew(5 * MS).is_some());
        assert!(
            d.renew(5 * MS).is_none(),
            "a second thread at the same time renews again"
        );
        // A thread that read the clock earlier asks late: still not due.
        assert!(d.renew(MS).is_none());
        assert_eq!(d.with(MS, |_, now| now), 5 * MS, "time went back");
        // The grant for seq 1 gives the holder its lease and is acknowledged.
        let grant = LeaseMessage::Grant {
            config: ConfigId(1),
            seq: 1,
            lease: true,
        };
        let out = d.on_message(6 * MS, LeaseFrom::Node(NodeId(0)), &grant);
        assert!(
            matches!(
                out,
                LeaseOutcome::Reply {
                    to: Some(NodeId(0)),
                    msg: LeaseMessage::GrantAck { .. }
                }
            ),
            "{out:?}"
        );
        assert_eq!(d.counts(), (1, 1));
        // A grant of a newer configuration goes to the owner.
        let newer = LeaseMessage::Grant {
            config: ConfigId(2),
            seq: 1,
            lease: true,
        };
        assert_eq!(
            d.on_message(7 * MS, LeaseFrom::Node(NodeId(0)), &newer),
            LeaseOutcome::Forward
        );
        assert!(d.read(|r| matches!(r, LeaseRole::Member(c) if c.holds(7 * MS))));
    }

    /// The master's lease thread hands out time only from a published
    /// view, below its limit, as the CM holding a lease majority; a
    /// withdrawal stops it at once and reports the highest time handed
    /// out, which the process's FF value then covers (FaRMv2 §4.3).
    #[test]
    fn the_lease_thread_hands_out_master_time_only_as_published() {
        let p = params();
        let members = [NodeId(0), NodeId(1), NodeId(2)];
        let mut cm = LeaseManager::new(p, ConfigId(1), NodeId(0), &members, 0);
        cm.granted_by(NodeId(1), 0);
        let desk = LeaseDesk::new(LeaseRole::Cm(cm), true);
        assert!(desk.master_time(MS).is_err(), "no view published yet");
        let view = MasterClockView {
            offset_ns: 1_000,
            limit_ns: 5 * MS,
        };
        desk.set_master_clock(Some(view));
        assert_eq!(desk.master_clock_handed_ns(), 0);
        assert_eq!(desk.master_time(MS), Ok(MS + 1_000));
        assert_eq!(desk.master_time(2 * MS), Ok(2 * MS + 1_000));
        assert!(desk.master_time(5 * MS).is_err(), "at its time bound");
        assert_eq!(desk.master_clock_handed_ns(), 2 * MS + 1_000);
        desk.withdraw_master_clock();
        assert!(desk.master_time(5 * MS).is_err(), "withdrawn");
        // The majority lapses a lease after the last grant.
        desk.set_master_clock(Some(MasterClockView {
            limit_ns: u64::MAX,
            ..view
        }));
        assert!(desk.master_time(5 * MS).is_ok());
        assert!(desk.master_time(1_000 * MS).is_err(), "no lease majority");
        // Only a CM's desk answers, and only while it serves.
        let member = LeaseDesk::new(
            LeaseRole::Member(LeaseClient::new(
                p,
                LeaseHolder::Node(NodeId(1)),
                ConfigId(1),
                NodeId(0),
                0,
            )),
            true,
        );
        member.set_master_clock(Some(view));
        assert!(member.master_time(MS).is_err());
        let mut cm = LeaseManager::new(p, ConfigId(1), NodeId(0), &members, 0);
        cm.granted_by(NodeId(1), 0);
        let idle = LeaseDesk::new(LeaseRole::Cm(cm), false);
        idle.set_master_clock(Some(view));
        assert!(idle.master_time(MS).is_err(), "not serving");
    }
}
