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

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits registered in any order (later deadlines first, which do not
    /// wake the waiter thread, and earlier ones, which do) all end, none
    /// before its deadline.
    #[test]
    fn waits_end_at_their_deadlines_in_any_registration_order() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let now = crate::mono_ns();
            // Increasing then decreasing deadlines, 200 µs .. 5 ms ahead.
            let mut deadlines: Vec<u64> = (0..50).map(|i| now + 200_000 + i * 100_000).collect();
            deadlines.extend((0..50).rev().map(|i| now + 250_000 + i * 90_000));
            let tasks: Vec<_> = deadlines
                .iter()
                .map(|&d| {
                    tokio::spawn(async move {
                        wait_until(d).await;
                        crate::mono_ns()
                    })
                })
                .collect();
            for (t, d) in tasks.into_iter().zip(deadlines) {
                let woke = tokio::time::timeout(std::time::Duration::from_secs(5), t)
                    .await
                    .expect("a wait never ended")
                    .expect("task");
                assert!(woke >= d, "woke {} ns early", d - woke);
            }
            // A wait 1 ms ahead registered after one 1 s ahead must wake
            // the waiter thread (asleep until the later one): it ends
            // long before the later deadline.
            let start = crate::mono_ns();
            let far = tokio::spawn(wait_until(start + 1_000_000_000));
            tokio::task::yield_now().await;
            // Past the idle waiter's 100 ms poll: it now sleeps until `far`.
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
            wait_until(crate::mono_ns() + 1_000_000).await;
            let took_ms = (crate::mono_ns() - start) / 1_000_000;
            assert!(took_ms < 500, "an earlier deadline waited {took_ms} ms");
            far.abort();
        });
    }
}
