//! A damaged checkpoint's length prefixes must not make the decoder
//! reserve memory for what they claim (found by the `wal_reader` fuzz
//! target, docs/internals/fuzzing.md): imbl's `OrdMap` decoder reserved a
//! `Vec` of the claimed number of objects (a claim above `isize::MAX`
//! bytes panicked with "capacity overflow", a smaller one asked for
//! gigabytes), and smallvec's reserved the claimed number of versions.
//! A node decoding such a checkpoint at start panicked or aborted instead
//! of reporting it damaged.
//!
//! Its own test binary: the global allocator here records the largest
//! single allocation.

use meridian_storage::RegionStore;
use meridian_wire::Timestamp;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, recording the largest allocation asked for.
struct Tracking;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

#[test]
fn damaged_length_prefixes_are_errors_without_reserving_what_they_claim() {
    let key = b"k".to_vec();
    let mut store = RegionStore::new(8);
    store.apply_backup(&key, Timestamp(5), Some(b"v".to_vec()));
    let good = bincode::serialize(&store).expect("a store encodes");
    // The encoding is unchanged: it decodes back to the same store.
    let back: RegionStore = bincode::deserialize(&good).expect("it decodes");
    assert_eq!(back, store);

    // The map of objects comes first: its length, then the one key (a
    // length and its bytes), the object's lock (`None`, one byte), and its
    // versions' length.
    let versions_len_at = 8 + 8 + key.len() + 1;
    assert_eq!(
        good[versions_len_at..versions_len_at + 8],
        1u64.to_le_bytes()
    );
    for (at, claim) in [(0, 1u64 << 60), (0, 1 << 26), (versions_len_at, 1 << 26)] {
        let mut bad = good.clone();
        bad[at..at + 8].copy_from_slice(&claim.to_le_bytes());
        LARGEST.store(0, Ordering::Relaxed);
        let r: Result<RegionStore, _> = bincode::deserialize(&bad);
        let largest = LARGEST.load(Ordering::Relaxed);
        assert!(r.is_err(), "a claim of {claim} at byte {at} decoded");
        assert!(
            largest < 1 << 20,
            "a claim of {claim} at byte {at} reserved {largest} bytes"
        );
    }
}
