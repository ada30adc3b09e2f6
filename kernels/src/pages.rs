//! Where the repacked weights live: one anonymous mapping per model (a
//! [`WeightArena`]) with transparent huge pages advised, so that a decode
//! step's stream over the weights walks 2 MiB pages instead of 4 KiB ones.
//!
//! # Why
//!
//! A decode step reads every weight once, front to back: a gigabyte for a
//! 1.5B model, 256 Ki pages of 4 KiB. Each new page is a TLB miss (the
//! second-level TLB of a Zen 4 core covers 12 MiB of 4 KiB pages) and the
//! hardware prefetchers stop at every 4 KiB boundary. On the Zen 4 host a
//! one-row pass over a 1.5B's K-quant matrices streamed 19.9 GB/s (16-bit
//! activations) and 18.9 (8-bit) from 4 KiB pages and 24.9 / 22.6 from huge
//! pages, against a plain 4 KiB-page read of 23.9–25.1 (`cargo run
//! --release -p kernels --example int8_stream -- 100 28 avx512vnni q4k`;
//! docs/performance.md, "Huge pages for the weights").
//!
//! # How
//!
//! The arena maps its size rounded up to 2 MiB, plus 2 MiB so that its
//! start can sit on a 2 MiB boundary, and advises `MADV_HUGEPAGE` on that
//! aligned range before anything touches it: the repacking threads' first
//! writes then fault in huge pages where the kernel has them (Linux's
//! `transparent_hugepage` setting `always` or `madvise`; under `never` the
//! advice is accepted and changes nothing). Matrices take consecutive
//! 4 KiB-aligned regions ([`WeightArena::take`]); a matrix that does not
//! fit gets its own memory. The mapping is zeroed by the kernel, which the
//! repacking relies on (padding rows stay zero).
//!
//! `DRAFTWISE_HUGE_PAGES=0` (or `off`, `false`, `no`) advises
//! `MADV_NOHUGEPAGE` instead: 4 KiB pages whatever the system setting, the
//! control for measurements. Off Linux, and where the mapping fails, the
//! arena is ordinary zeroed heap memory. Which pages a model actually got is
//! read back from `/proc/self/smaps` ([`WeightArena::huge_bytes`]), so an
//! event can say what ran rather than what was asked.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A transparent huge page on x86_64 and aarch64 Linux (4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Alignment of every region [`WeightArena::take`] hands out: a base page,
/// so no two matrices share a page (and every region is 64-byte aligned, as
/// the kernels' tiles need).
const REGION_ALIGN: usize = 4096;

/// Whether arenas advise huge pages (the default): `DRAFTWISE_HUGE_PAGES=0`
/// (or `false`, `off`, `no`) says 4 KiB pages instead. Read once.
pub fn huge_pages_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| enabled_from(std::env::var("DRAFTWISE_HUGE_PAGES").ok().as_deref()))
}

fn enabled_from(v: Option<&str>) -> bool {
    !matches!(v.map(|s| s.trim().to_ascii_lowercase()).as_deref(), Some("0" | "false" | "off" | "no"))
}

/// How an arena's memory was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// An anonymous mapping advised `MADV_HUGEPAGE`.
    HugeAdvised,
    /// An anonymous mapping advised `MADV_NOHUGEPAGE` (`DRAFTWISE_HUGE_PAGES=0`).
    SmallPages,
    /// Ordinary 4 KiB pages nobody advised: zeroed heap memory (not Linux,
    /// an empty arena, the mapping failed), or a mapping whose advice the
    /// kernel refused (one built without transparent huge pages).
    Heap,
}

impl Backing {
    /// The word events use: `huge-advised`, `4k`, `heap`.
    pub fn name(self) -> &'static str {
        match self {
            Self::HugeAdvised => "huge-advised",
            Self::SmallPages => "4k",
            Self::Heap => "heap",
        }
    }
}

/// One zeroed region of memory that a model's repacked matrices are carved
/// from (module docs). Regions are handed out once each, never reused;
/// the memory is released when the arena and every matrix in it are gone
/// (matrices hold an `Arc` of their arena).
pub struct WeightArena {
    /// Start of the usable, 2 MiB-aligned range (heap: 4 KiB-aligned).
    base: *mut u8,
    /// Usable bytes from `base`.
    len: usize,
    /// Bytes handed out so far.
    next: AtomicUsize,
    backing: Backing,
    /// What to release: the whole mapping (start, length), or the heap
    /// layout.
    release: Release,
}

enum Release {
    #[cfg(target_os = "linux")]
    Map(*mut libc::c_void, usize),
    Heap(Option<std::alloc::Layout>),
}

// SAFETY: the arena owns its memory; `take` hands each byte range out at
// most once (an atomic bump), so no two owners alias a writable region, and
// the arena itself never reads or writes it.
unsafe impl Send for WeightArena {}
// SAFETY: as above; `&WeightArena` only bumps the atomic counter.
unsafe impl Sync for WeightArena {}

impl std::fmt::Debug for WeightArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightArena")
            .field("len", &self.len)
            .field("used", &self.used())
            .field("backing", &self.backing)
            .finish()
    }
}

impl WeightArena {
    /// An arena of at least `bytes` zeroed bytes, huge pages advised unless
    /// `DRAFTWISE_HUGE_PAGES=0` (module docs).
    ///
    /// # Panics
    /// If the heap fallback cannot allocate (`handle_alloc_error`), as a
    /// `Vec` of that size would.
    pub fn new(bytes: usize) -> Self {
        Self::with_advice(bytes, huge_pages_enabled())
    }

    /// As [`Self::new`], with the advice given rather than read from the
    /// environment.
    pub fn with_advice(bytes: usize, huge: bool) -> Self {
        let len = bytes.next_multiple_of(HUGE_PAGE);
        #[cfg(target_os = "linux")]
        if len > 0
            && let Some(arena) = Self::map(len, huge)
        {
            return arena;
        }
        Self::heap(len.max(bytes))
    }

    #[cfg(target_os = "linux")]
    fn map(len: usize, huge: bool) -> Option<Self> {
        let total = len.checked_add(HUGE_PAGE)?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // named.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let base = (p as usize).next_multiple_of(HUGE_PAGE) as *mut u8;
        let advice = if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        // SAFETY: [base, base + len) lies inside the mapping (base is at
        // most HUGE_PAGE − 4096 past its start, which is total − len).
        let advised = unsafe { libc::madvise(base.cast(), len, advice) } == 0;
        let backing = match (advised, huge) {
            (true, true) => Backing::HugeAdvised,
            (true, false) => Backing::SmallPages,
            // The advice was refused (a kernel without THP): ordinary pages
            // of a mapping, which is what the heap would give.
            (false, _) => Backing::Heap,
        };
        Some(WeightArena { base, len, next: AtomicUsize::new(0), backing, release: Release::Map(p, total) })
    }

    fn heap(len: usize) -> Self {
        if len == 0 {
            return WeightArena {
                // Aligned like every region, and never dereferenced (no
                // region of an empty arena has a byte).
                base: std::ptr::without_provenance_mut(REGION_ALIGN),
                len: 0,
                next: AtomicUsize::new(0),
                backing: Backing::Heap,
                release: Release::Heap(None),
            };
        }
        let layout =
            std::alloc::Layout::from_size_align(len, REGION_ALIGN).expect("an arena's size fits the address space");
        // SAFETY: a nonzero size; a null result is handled.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        WeightArena {
            base: p,
            len,
            next: AtomicUsize::new(0),
            backing: Backing::Heap,
            release: Release::Heap(Some(layout)),
        }
    }

    /// A fresh region of `bytes` zeroed bytes, 4 KiB-aligned, or `None` when
    /// the arena has no room left. Each region is handed out once.
    pub fn take(&self, bytes: usize) -> Option<Region> {
        let need = bytes.checked_next_multiple_of(REGION_ALIGN)?;
        let mut at = self.next.load(Ordering::Relaxed);
        loop {
            let end = at.checked_add(need).filter(|&e| e <= self.len)?;
            match self.next.compare_exchange_weak(at, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(Region { offset: at, len: bytes }),
                Err(now) => at = now,
            }
        }
    }

    /// The bytes of `region`, which this arena handed out.
    ///
    /// # Safety
    /// `region` came from this arena's [`Self::take`], and no `&mut` to it
    /// is live.
    pub unsafe fn bytes(&self, region: &Region) -> &[u8] {
        self.check(region);
        // SAFETY: inside the arena (take checked it); zeroed or written
        // memory is initialized; the caller rules out a live `&mut`.
        unsafe { std::slice::from_raw_parts(self.base.add(region.offset), region.len) }
    }

    /// The bytes of `region`, writable.
    ///
    /// # Safety
    /// `region` came from this arena's [`Self::take`], and no other
    /// reference to it is live (its owner writes it once, before sharing).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, region: &Region) -> &mut [u8] {
        self.check(region);
        // SAFETY: as `bytes`; the region is handed out once, and the caller
        // rules out any other reference to it.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(region.offset), region.len) }
    }

    /// Panics unless `region` lies inside the arena (a region of another
    /// arena could claim more than this one has).
    fn check(&self, region: &Region) {
        assert!(region.offset <= self.len && region.len <= self.len - region.offset, "a region outside its arena");
    }

    /// Usable bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes handed out so far (regions rounded up to 4 KiB).
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Relaxed)
    }

    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Bytes of this arena that sit on huge pages now, from
    /// `/proc/self/smaps` (`AnonHugePages` of the mappings that overlap
    /// it); `None` off Linux, for a heap arena, or when the file cannot be
    /// read or has no such line.
    pub fn huge_bytes(&self) -> Option<u64> {
        match self.release {
            #[cfg(target_os = "linux")]
            Release::Map(..) => {
                let text = read_capped("/proc/self/smaps", SMAPS_CAP)?;
                anon_huge_in(&text, self.base as usize, self.base as usize + self.len)
            }
            Release::Heap(_) => None,
        }
    }
}

impl Drop for WeightArena {
    fn drop(&mut self) {
        match self.release {
            #[cfg(target_os = "linux")]
            Release::Map(p, total) => {
                // SAFETY: the mapping this arena made; every region's owner
                // holds an `Arc` of the arena, so none is alive.
                unsafe { libc::munmap(p, total) };
            }
            Release::Heap(Some(layout)) => {
                // SAFETY: allocated in `heap` with this layout.
                unsafe { std::alloc::dealloc(self.base, layout) };
            }
            Release::Heap(None) => {}
        }
    }
}

/// A region of a [`WeightArena`]: `len` bytes at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    offset: usize,
    len: usize,
}

impl Region {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// `/proc/self/smaps` of a process with a few thousand mappings is a few
/// MiB; more than this is not read.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const SMAPS_CAP: u64 = 32 << 20;

#[cfg(target_os = "linux")]
fn read_capped(path: &str, cap: u64) -> Option<String> {
    use std::io::Read;
    // Bytes, not a String: a mapped file's path need not be UTF-8.
    let mut b = Vec::new();
    std::fs::File::open(path).ok()?.take(cap).read_to_end(&mut b).ok()?;
    Some(String::from_utf8_lossy(&b).into_owned())
}

/// Sums the `AnonHugePages` of the mappings in `smaps` text that overlap
/// `[lo, hi)` (a mapping header is `start-end perms ...` in hex), in bytes;
/// `None` if no overlapping mapping was found or one had no such line. A
/// huge page counts whole: an arena's last one, partly used, can add up to
/// 2 MiB beyond its matrices' bytes.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn anon_huge_in(smaps: &str, lo: usize, hi: usize) -> Option<u64> {
    let mut total = 0u64;
    let mut inside = false;
    let (mut found, mut counted) = (0usize, 0usize);
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            inside = a < hi && lo < b;
            found += usize::from(inside);
            continue;
        }
        if inside && let Some(rest) = line.strip_prefix("AnonHugePages:") {
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            total = total.saturating_add(kb.saturating_mul(1024));
            counted += 1;
        }
    }
    (found > 0 && counted == found).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_are_on_unless_switched_off() {
        assert!(enabled_from(None) && enabled_from(Some("1")) && enabled_from(Some("")));
        assert!(!enabled_from(Some("0")) && !enabled_from(Some(" Off ")) && !enabled_from(Some("no")));
    }

    #[test]
    fn regions_are_disjoint_aligned_zeroed_and_bounded() {
        for huge in [true, false] {
            let arena = WeightArena::with_advice(5 << 20, huge);
            assert!(arena.len() >= 5 << 20);
            let a = arena.take(3 << 20).expect("room");
            let b = arena.take(1000).expect("room");
            // SAFETY: regions of this arena, written and read one at a time.
            unsafe {
                let (pa, pb) = (arena.bytes(&a).as_ptr() as usize, arena.bytes(&b).as_ptr() as usize);
                assert_eq!((pa % 4096, pb % 4096), (0, 0));
                assert!(pb >= pa + (3 << 20), "regions overlap");
                assert!(arena.bytes(&a).iter().all(|&x| x == 0) && arena.bytes(&b).iter().all(|&x| x == 0));
                arena.bytes_mut(&b).fill(7);
                assert!(arena.bytes(&a).iter().all(|&x| x == 0), "a write to b reached a");
            }
            assert!(arena.take(arena.len()).is_none(), "an arena hands out no more than it has");
            #[cfg(target_os = "linux")]
            if matches!(arena.release, Release::Map(..)) {
                assert_eq!(arena.base as usize % HUGE_PAGE, 0, "a mapped arena starts on a huge page");
            }
        }
        let empty = WeightArena::with_advice(0, true);
        assert!(empty.is_empty() && empty.take(1).is_none());
        let none = empty.take(0).expect("an empty region fits");
        // SAFETY: a region of this arena.
        assert_eq!(unsafe { empty.bytes(&none) }.as_ptr() as usize % 64, 0, "aligned like every region");
        let arena = WeightArena::with_advice(1 << 20, true);
        assert!(arena.take(usize::MAX - 100).is_none(), "a size that overflows is refused, not wrapped");
    }

    #[test]
    fn smaps_sums_the_mappings_that_overlap_the_range_only() {
        let smaps = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
AnonHugePages:      2048 kB
7f0000400000-7f0000600000 rw-p 00000000 00:00 0
AnonHugePages:      2048 kB
7f0000600000-7f0000800000 rw-p 00000000 00:00 0
AnonHugePages:       512 kB
";
        let r = |lo: usize, hi: usize| anon_huge_in(smaps, lo, hi);
        assert_eq!(r(0x7f00_0000_0000, 0x7f00_0060_0000), Some(4096 * 1024));
        assert_eq!(r(0x7f00_0040_0000, 0x7f00_0040_1000), Some(2048 * 1024));
        assert_eq!(r(0x1000, 0x2000), None, "no mapping overlaps");
        assert_eq!(
            anon_huge_in("7f0000000000-7f0000400000 rw-p 0 0 0\nSize: 4 kB\n", 0x7f00_0000_0000, 0x7f00_0000_1000),
            None
        );
        assert_eq!(
            anon_huge_in(
                "7f0000000000-7f0000400000 rw-p\nAnonHugePages: lots kB\n",
                0x7f00_0000_0000,
                0x7f00_0000_1000
            ),
            None
        );
    }

    #[test]
    #[should_panic(expected = "a region outside its arena")]
    fn a_region_of_a_bigger_arena_is_refused() {
        let (big, small) = (WeightArena::with_advice(8 << 20, false), WeightArena::with_advice(1, false));
        let r = big.take(6 << 20).expect("room");
        // SAFETY: the bounds check runs before any slice is made.
        let _ = unsafe { small.bytes(&r) };
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_mapped_arena_reports_its_pages() {
        let arena = WeightArena::with_advice(4 << 20, false);
        let r = arena.take(4 << 20).expect("room");
        // SAFETY: the only reference to the region.
        unsafe { arena.bytes_mut(&r).fill(1) };
        if arena.backing() == Backing::SmallPages {
            assert_eq!(arena.huge_bytes(), Some(0), "MADV_NOHUGEPAGE memory on huge pages");
        }
    }
}
