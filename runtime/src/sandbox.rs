//! Work that runs code from a file (a model's chat template) on its own
//! thread, under a memory budget and a deadline, so that no template can
//! take the process down with it.
//!
//! Why a thread and an allocator: a Jinja template is a program. The
//! interpreter's fuel bounds its instructions, not its memory: one
//! instruction can double a list or a string, so forty loop iterations ask
//! for terabytes, and Rust aborts the whole process when an allocation
//! fails. No hook inside the interpreter sees a value's size before it is
//! allocated, but the allocator does. [`BudgetAlloc`] (this crate's global
//! allocator, a thin layer over the system's) charges every allocation made
//! on a thread that runs under a [`Budget`] to that budget, before it is
//! made. An allocation that would pass the budget (or any allocation after
//! the deadline) is never made: the thread reports it and sleeps for good,
//! holding at most its budget, and the caller gets an error at once
//! ([`run_bounded`]). A thread can be parked, not killed, so each owner
//! (a tokenizer) counts its stuck threads and refuses new work past
//! [`MAX_STUCK`]: the memory they hold stays bounded by `MAX_STUCK`
//! budgets.
//!
//! Threads without a budget pay one thread-local load per allocation.
//!
//! The limit this leaves: work that loops without allocating (a builtin
//! filter iterating a huge lazy sequence) is only stopped at the deadline
//! by its caller; the thread spins until its next allocation, where it
//! parks. Counted as stuck, it blocks new work past `MAX_STUCK` as above.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Threads of one owner left parked or running past their deadline before
/// the owner refuses new work: each holds at most its budget.
pub const MAX_STUCK: usize = 2;

/// How often the caller looks at a running thread's budget.
const POLL: Duration = Duration::from_millis(2);

/// What one bounded run may use.
#[derive(Debug)]
pub struct Budget {
    /// Bytes allocated on the thread and not yet freed there (it can go
    /// below zero: the thread frees what it was handed).
    used: AtomicIsize,
    limit: isize,
    /// The thread asked for more than `limit`, and parked.
    over: AtomicBool,
    /// The caller gave up (deadline): the thread's next allocation parks it.
    cancelled: AtomicBool,
    /// The largest `used` seen, for reports and tests.
    peak: AtomicIsize,
}

impl Budget {
    fn new(limit_bytes: usize) -> Self {
        Budget {
            used: AtomicIsize::new(0),
            limit: limit_bytes.min(isize::MAX as usize) as isize,
            over: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            peak: AtomicIsize::new(0),
        }
    }

    /// Charges `bytes`; false when that would pass the limit or the run
    /// was cancelled (nothing is charged then).
    fn charge(&self, bytes: usize) -> bool {
        // A panicking thread is never parked: the panic machinery holds
        // process-wide locks (the hook, stderr, the backtrace's) while it
        // allocates, and parking there would stop every other thread that
        // writes to stderr. What it allocates is bounded by the panic
        // message and one backtrace.
        if std::thread::panicking() {
            return true;
        }
        if self.cancelled.load(Ordering::Relaxed) {
            return false;
        }
        let bytes = bytes.min(isize::MAX as usize) as isize;
        let now = self.used.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
        if now > self.limit {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            self.over.store(true, Ordering::SeqCst);
            return false;
        }
        self.peak.fetch_max(now, Ordering::Relaxed);
        true
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes.min(isize::MAX as usize) as isize, Ordering::Relaxed);
    }
}

thread_local! {
    /// The budget of the run on this thread; null outside [`run_bounded`].
    /// Const-initialized and without a destructor, so reading it never
    /// allocates and never fails, even while a thread starts or ends.
    static CURRENT: Cell<*const Budget> = const { Cell::new(std::ptr::null()) };
}

/// The budget this thread's allocations are charged to, if any.
fn current() -> Option<&'static Budget> {
    let p = CURRENT.with(|c| c.get());
    // SAFETY: a non-null pointer was set by `run_bounded` from an `Arc`
    // that the same thread keeps alive for as long as the pointer is set
    // (it is cleared before that `Arc` is dropped, and a parked thread
    // never drops it).
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Called instead of an allocation the budget refused: the thread must not
/// allocate, return or unwind (an allocator may not unwind, and returning
/// null aborts the process), so it sleeps for the rest of the process's
/// life. `std::thread::sleep` is a plain system call and allocates nothing.
fn park_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The process's allocator: the system's, with each allocation on a
/// thread under a [`Budget`] charged to it first.
pub struct BudgetAlloc;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the budget only decides whether the call is made at all (a
// refused one never returns).
unsafe impl GlobalAlloc for BudgetAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(b) = current()
            && !b.charge(layout.size())
        {
            park_forever();
        }
        // SAFETY: forwarded unchanged (the caller's contract).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if let Some(b) = current()
            && !b.charge(layout.size())
        {
            park_forever();
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(b) = current() {
            b.release(layout.size());
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Some(b) = current() {
            if new_size > layout.size() {
                if !b.charge(new_size - layout.size()) {
                    park_forever();
                }
            } else {
                b.release(layout.size() - new_size);
            }
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: BudgetAlloc = BudgetAlloc;

/// Why a bounded run gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    #[error("it needed more than its memory budget of {limit_bytes} bytes")]
    Memory { limit_bytes: usize },
    #[error("it ran past its deadline of {} ms", .limit.as_millis())]
    Time { limit: Duration },
    #[error(
        "{stuck} earlier runs of it are still stopped past their budget (at most {MAX_STUCK} are kept); \
         restart the process to free them, and fix the file it comes from"
    )]
    TooManyStuck { stuck: usize },
    #[error("it panicked: {0}")]
    Panicked(String),
    #[error("its thread could not start: {0}")]
    Spawn(String),
}

/// Stuck threads of one owner (share it between the runs of one template).
#[derive(Debug, Default, Clone)]
pub struct StuckCount(Arc<AtomicUsize>);

impl StuckCount {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a finished run measured.
#[derive(Debug, Clone, Copy)]
pub struct Used {
    /// The most bytes the run held at once (net of what it freed).
    pub peak_bytes: usize,
}

/// Runs `work` on a new thread whose allocations are charged to a budget of
/// `limit_bytes`, and waits at most `deadline` for it. Past either bound
/// the caller gets an error at once while the thread stays parked (memory)
/// or is parked at its next allocation (time); `stuck` counts such threads
/// and, at [`MAX_STUCK`], this refuses without starting one.
pub fn run_bounded<T: Send + 'static>(
    limit_bytes: usize,
    deadline: Duration,
    stuck: &StuckCount,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<(T, Used), BoundError> {
    let n = stuck.get();
    if n >= MAX_STUCK {
        return Err(BoundError::TooManyStuck { stuck: n });
    }
    let budget = Arc::new(Budget::new(limit_bytes));
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::thread::Result<T>>(1);
    // Who got there first: the thread finishing (DONE) or the caller giving
    // up (ABANDONED). Whoever loses knows the other's side happened, so
    // each stuck thread is counted exactly once and uncounted exactly once.
    let race = Arc::new(AtomicU8::new(RUNNING));
    let (b, late, race_t) = (budget.clone(), stuck.clone(), race.clone());
    std::thread::Builder::new()
        .name("bounded".into())
        .spawn(move || {
            CURRENT.with(|c| c.set(Arc::as_ptr(&b)));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            // Whatever `work` returned is freed by the caller, not charged here.
            CURRENT.with(|c| c.set(std::ptr::null()));
            if race_t.compare_exchange(RUNNING, DONE, Ordering::SeqCst, Ordering::SeqCst).is_err() {
                // The caller gave up and counted this thread as stuck; it finished after all.
                late.0.fetch_sub(1, Ordering::SeqCst);
            }
            let _ = tx.send(r);
            drop(b);
        })
        .map_err(|e| BoundError::Spawn(e.to_string()))?;
    let t0 = Instant::now();
    let outcome = |r: std::thread::Result<T>| match r {
        Ok(v) => Ok((v, Used { peak_bytes: budget.peak.load(Ordering::Relaxed).max(0) as usize })),
        Err(panic) => Err(BoundError::Panicked(
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into()),
        )),
    };
    loop {
        match rx.recv_timeout(POLL) {
            Ok(r) => return outcome(r),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(BoundError::Panicked("the thread ended without a result".into()));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        let over = budget.over.load(Ordering::SeqCst);
        if over || t0.elapsed() >= deadline {
            budget.cancelled.store(true, Ordering::SeqCst);
            // Counted before the race is settled, so the thread's late
            // `fetch_sub` can never run ahead of it.
            stuck.0.fetch_add(1, Ordering::SeqCst);
            if race.compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst).is_err() {
                stuck.0.fetch_sub(1, Ordering::SeqCst);
                // It finished just now (a run that finished was never over
                // its budget): its result is in the channel or on its way.
                return match rx.recv() {
                    Ok(r) => outcome(r),
                    Err(_) => Err(BoundError::Panicked("the thread ended without a result".into())),
                };
            }
            return Err(if over { BoundError::Memory { limit_bytes } } else { BoundError::Time { limit: deadline } });
        }
    }
}

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_within_its_budget_returns_its_result_and_peak() {
        let stuck = StuckCount::default();
        let (v, used) = run_bounded(1 << 20, Duration::from_secs(10), &stuck, || {
            vec![7u8; 100_000].iter().map(|&x| x as u64).sum::<u64>()
        })
        .unwrap();
        assert_eq!(v, 700_000);
        assert!(used.peak_bytes >= 100_000 && used.peak_bytes < 1 << 20, "{used:?}");
        assert_eq!(stuck.get(), 0);
    }

    #[test]
    fn an_allocation_past_the_budget_is_never_made_and_the_caller_is_told_at_once() {
        let stuck = StuckCount::default();
        let t0 = Instant::now();
        // 2^40 bytes: made, this would abort the process.
        let e = run_bounded(1 << 20, Duration::from_secs(30), &stuck, || vec![0u8; 1 << 40].len()).unwrap_err();
        assert_eq!(e, BoundError::Memory { limit_bytes: 1 << 20 });
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(stuck.get(), 1);
    }

    #[test]
    fn doubling_in_a_loop_stops_at_the_budget() {
        let stuck = StuckCount::default();
        let e = run_bounded(8 << 20, Duration::from_secs(30), &stuck, || {
            let mut v = vec![1u64];
            for _ in 0..40 {
                let w = v.clone();
                v.extend(w);
            }
            v.len()
        })
        .unwrap_err();
        assert!(matches!(e, BoundError::Memory { .. }), "{e:?}");
    }

    #[test]
    fn work_past_its_deadline_is_abandoned_and_refused_past_the_stuck_limit() {
        let stuck = StuckCount::default();
        for i in 0..MAX_STUCK {
            let e = run_bounded(1 << 20, Duration::from_millis(20), &stuck, || {
                // Allocates now and then, so it parks once cancelled.
                loop {
                    std::hint::black_box(vec![0u8; 16]);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .unwrap_err();
            assert!(matches!(e, BoundError::Time { .. }), "{e:?}");
            assert_eq!(stuck.get(), i + 1);
        }
        let e = run_bounded(1 << 20, Duration::from_secs(1), &stuck, || 1).unwrap_err();
        assert_eq!(e, BoundError::TooManyStuck { stuck: MAX_STUCK });
        // Another owner is not affected.
        assert_eq!(run_bounded(1 << 20, Duration::from_secs(10), &StuckCount::default(), || 1).unwrap().0, 1);
    }

    #[test]
    fn a_panic_is_an_error_not_a_crash() {
        let e = run_bounded(1 << 20, Duration::from_secs(10), &StuckCount::default(), || -> u32 { panic!("boom") })
            .unwrap_err();
        assert_eq!(e, BoundError::Panicked("boom".into()));
    }
}
