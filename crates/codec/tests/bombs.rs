//! Decompression bombs cost a receiver no more memory than the block it
//! expects (issue 23): a small zstd or LZ4 input that would expand past
//! the expected length is refused before anything is allocated, or
//! decoded into no more than that length. Measured with a counting
//! allocator, per thread, so other tests running beside do not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use codec::{Codec, Coder};

struct Counting;

thread_local! {
    /// Bytes this thread holds now, and the most it held since reset.
    static HELD: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

fn note(grow: usize, shrink: usize) {
    // `try_with`: the slot is gone while the thread itself is torn down.
    let _ = HELD.try_with(|h| {
        let (now, peak) = h.get();
        let now = (now + grow).saturating_sub(shrink);
        h.set((now, peak.max(now)));
    });
}

// SAFETY: every call is passed to the system allocator unchanged; only
// counts are kept beside.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size(), 0);
        // SAFETY: the caller's layout, as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(0, layout.size());
        // SAFETY: allocated above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        note(new, layout.size());
        // SAFETY: allocated above with this layout.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The most this thread held at once while running `f`, beyond what it
/// held before.
fn peak_of(f: impl FnOnce()) -> usize {
    let before = HELD.with(|h| {
        let (now, _) = h.get();
        h.set((now, now));
        now
    });
    f();
    HELD.with(|h| h.get().1.saturating_sub(before))
}

const MIB: usize = 1 << 20;

#[test]
fn bombs_allocate_nothing_near_what_they_claim() {
    // The count sees what this thread allocates.
    let seen = peak_of(|| drop(std::hint::black_box(vec![1u8; MIB])));
    assert!(seen >= MIB, "{seen}");
    let mut c = Coder::new();
    let mut out = Vec::new();
    // The decompression context is made once per thread, then reused.
    let warm = {
        let mut z = Vec::new();
        c.compress(Codec::Zstd(3), b"warm", &mut z);
        z
    };
    c.decompress(Codec::Zstd(3), &warm, 4, &mut out).unwrap();

    // A zstd frame of 1 GiB of zeros is about 32 KiB.
    let zstd_bomb = {
        let mut z = Vec::new();
        c.compress(Codec::Zstd(3), &vec![0u8; 1 << 30], &mut z);
        z
    };
    assert!(zstd_bomb.len() < 64 << 10, "{}", zstd_bomb.len());
    let lz4_bomb = {
        let mut z = Vec::new();
        c.compress(Codec::Lz4, &vec![0u8; 64 * MIB], &mut z);
        z
    };

    // Expected: a 1 MiB block. Refused on the frame's declared size, or
    // on what 16 bytes of LZ4 could reach, before any allocation.
    let peak = peak_of(|| {
        assert!(c
            .decompress(Codec::Zstd(3), &zstd_bomb, MIB, &mut out)
            .is_err());
        assert!(c
            .decompress(Codec::Lz4, &lz4_bomb[..16], MIB, &mut out)
            .is_err());
    });
    assert!(peak < 64 << 10, "refusals allocated {peak} bytes");

    // LZ4 that could expand that far is decoded into the 1 MiB and no
    // more; a claim of the whole 1 GiB is past every bound.
    let peak = peak_of(|| {
        assert!(c.decompress(Codec::Lz4, &lz4_bomb, MIB, &mut out).is_err());
        assert!(c
            .decompress(Codec::Zstd(3), &zstd_bomb, 1 << 30, &mut out)
            .is_err());
    });
    assert!(peak <= MIB + (64 << 10), "decoding allocated {peak} bytes");
}
