//! Precise waits for the uncertainty wait.
//!
//! tokio's timer wheel has millisecond resolution, but uncertainty waits are
//! tens of microseconds. A dedicated waiter thread (with its timer slack set
//! to 1 ns) keeps the pending deadlines in a heap, sleeps on a condition
//! variable until the earliest one, and wakes the tasks whose deadline has
//! passed. Tasks never spin.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

struct Waiter {
    heap: Mutex<BinaryHeap<Reverse<(u64, u64, WakerBox)>>>,
    cv: Condvar,
}

struct WakerBox(Waker);
impl PartialEq for WakerBox {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for WakerBox {}
impl PartialOrd for WakerBox {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for WakerBox {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

fn waiter() -> &'static Waiter {
    static W: OnceLock<&'static Waiter> = OnceLock::new();
    W.get_or_init(|| {
        let w: &'static Waiter = Box::leak(Box::new(Waiter {
            heap: Mutex::new(BinaryHeap::new()),
            cv: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("meridian-waiter".into())
            .spawn(move || {
                // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
                unsafe {
                    libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
                }
                let mut heap = match w.heap.lock() {
                    Ok(h) => h,
                    Err(p) => p.into_inner(),
                };
                loop {
                    let now = crate::mono_ns();
                    while let Some(Reverse((at, _, _))) = heap.peek() {
                        if *at > now {
                            break;
                        }
                        if let Some(Reverse((_, _, wb))) = heap.pop() {
                            wb.0.wake();
                        }
                    }
                    let timeout = heap
                        .peek()
                        .map(|Reverse((at, _, _))| Duration::from_nanos(at - now))
                        .unwrap_or(Duration::from_millis(100));
                    heap = match w.cv.wait_timeout(heap, timeout) {
                        Ok((h, _)) => h,
                        Err(p) => p.into_inner().0,
                    };
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the waiter thread: {e}; uncertainty waits will poll");
        }
        w
    })
}

/// Wait until the local monotonic clock reaches `deadline_ns`.
pub fn wait_until(deadline_ns: u64) -> WaitUntil {
    WaitUntil { deadline_ns }
}

/// Future returned by [`wait_until`].
pub struct WaitUntil {
    deadline_ns: u64,
}

impl Future for WaitUntil {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if crate::mono_ns() >= self.deadline_ns {
            return Poll::Ready(());
        }
        let w = waiter();
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut heap = match w.heap.lock() {
            Ok(h) => h,
            Err(p) => p.into_inner(),
        };
        // The waiter thread sleeps until the earliest deadline: wake it
        // only if this one is earlier (each wake-up is a context switch).
        let earliest = heap
            .peek()
            .is_none_or(|Reverse((at, _, _))| self.deadline_ns < *at);
        heap.push(Reverse((
            self.deadline_ns,
            seq,
            WakerBox(cx.waker().clone()),
        )));
        drop(heap);
        if earliest {
            w.cv.notify_one();
        }
        Poll::Pending
    }
}
