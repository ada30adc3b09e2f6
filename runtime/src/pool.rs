//! A thread pool fit for a small model's forward pass.
//!
//! A decode step of SmolLM2-135M runs about 150 parallel sections (a few
//! per layer), each a few to a few hundred microseconds of work, so a
//! dispatch must cost about a microsecond, not the tens that a general
//! work-stealing scheduler spends waking threads and splitting ranges.
//!
//! [`Pool::for_each`] hands one job (a closure over chunk indices) to every
//! participant at once: the calling thread plus `threads − 1` workers. The
//! workers spin on a generation counter for [`SPIN`] rounds after each job
//! (the next section usually follows within microseconds), then park; a
//! dispatch unparks only workers that went to sleep. Participants claim
//! chunk indices from one atomic counter, and the caller returns as soon as
//! every chunk is *finished*, not when every worker has checked in: on a
//! host with more runnable threads than cores, a worker that the scheduler
//! has not run yet costs nothing (the caller takes its chunks), where a
//! barrier over all workers would wait out its time slice at every section.
//! A worker that wakes after the job closed leaves without touching it (it
//! announces itself in `active` before reading the job; the caller closes
//! the job, then waits for `active` to drain — a Dekker handshake).
//!
//! Which thread runs a chunk never changes what it computes: callers split
//! work over independent outputs (matrix rows, attention heads), never a
//! reduction, so results do not depend on the thread count.
//!
//! [`Pool::install`] makes a pool the current one for the calling thread;
//! [`current`] is what the forward pass uses (the process-wide default pool
//! when none is installed). A pool busy with another caller's job runs a
//! second caller's chunks on that caller alone: concurrent users (tests)
//! never wait on each other and never deadlock.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle, Thread};

/// Spin rounds (each one `spin_loop` hint and an atomic load) a worker waits
/// for the next job before parking: a few tens of microseconds, longer than
/// the gaps between the sections of one forward pass, far shorter than the
/// gap between requests.
const SPIN: usize = 1 << 12;

/// The job being run: a type-erased `&(dyn Fn(usize) + Sync)` and its chunk count.
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    n: usize,
}

// SAFETY: the pointee is `Sync` and outlives every use: `for_each` does not
// return before every worker has finished with the job.
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

struct Shared {
    /// `generation << 1 | open`: bumped (and opened) once per job, closed
    /// when every chunk of it has finished.
    state: AtomicUsize,
    job: Mutex<Option<Job>>,
    /// Next unclaimed chunk of the current job.
    next: AtomicUsize,
    /// Chunks of the current job finished, by anyone.
    finished: AtomicUsize,
    /// Workers inside the current job (they may still read it).
    active: AtomicUsize,
    /// A chunk panicked on a worker; the caller re-raises.
    panicked: AtomicBool,
    /// Per worker: parked (or about to park) and needing an unpark.
    sleeping: Vec<AtomicBool>,
    shutdown: AtomicBool,
}

/// A fixed set of worker threads running one job at a time.
pub struct Pool {
    threads: usize,
    shared: Arc<Shared>,
    handles: Vec<Thread>,
    joins: Vec<JoinHandle<()>>,
    /// Held by the caller for the length of a job.
    busy: Mutex<()>,
}

/// Why a pool could not start.
#[derive(Debug, thiserror::Error)]
#[error("could not start worker thread {index} of {threads}: {source}")]
pub struct PoolError {
    pub index: usize,
    pub threads: usize,
    pub source: std::io::Error,
}

thread_local! {
    /// The pool installed on this thread, innermost last.
    static CURRENT: RefCell<Vec<Arc<Pool>>> = const { RefCell::new(Vec::new()) };
    /// Set on worker threads: a job that itself calls `for_each` runs inline.
    static IS_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Pool {
    /// A pool of `threads` participants (the caller and `threads − 1`
    /// workers named `draftwise-1`, `draftwise-2`, ...).
    pub fn new(threads: usize) -> Result<Arc<Self>, PoolError> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            state: AtomicUsize::new(0),
            job: Mutex::new(None),
            next: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleeping: (1..threads).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
        });
        let mut joins = Vec::with_capacity(threads - 1);
        for index in 1..threads {
            let sh = Arc::clone(&shared);
            let j = thread::Builder::new()
                .name(format!("draftwise-{index}"))
                .spawn(move || worker(sh, index - 1))
                .map_err(|source| PoolError { index, threads, source })?;
            joins.push(j);
        }
        let handles = joins.iter().map(|j| j.thread().clone()).collect();
        Ok(Arc::new(Pool { threads, shared, handles, joins, busy: Mutex::new(()) }))
    }

    /// Participants per job, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f(0), f(1), ..., f(n − 1)`, each exactly once, spread over the
    /// pool's threads; returns when all are done. Chunks run in no
    /// particular order and concurrently: `f` must only touch state that
    /// chunk owns.
    ///
    /// # Panics
    /// Re-raises a panic of any chunk (after the others finished).
    pub fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n == 0 {
            return;
        }
        let guard = if self.threads == 1 || n == 1 || IS_WORKER.get() { None } else { self.busy.try_lock().ok() };
        let Some(_guard) = guard else {
            // One participant (or the pool is busy with another caller):
            // run every chunk here.
            (0..n).for_each(f);
            return;
        };
        let sh = &*self.shared;
        // SAFETY of the lifetime erasure: this function does not return
        // before the job is closed and `active` is zero, and a worker reads
        // the pointer only after counting itself active and seeing the job
        // still open (see `worker`).
        let f_static: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
        *sh.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(Job { f: f_static, n });
        sh.next.store(0, Ordering::Relaxed);
        sh.finished.store(0, Ordering::Relaxed);
        let generation = (sh.state.load(Ordering::Relaxed) >> 1) + 1;
        sh.state.store(generation << 1 | 1, Ordering::SeqCst);
        for (i, s) in sh.sleeping.iter().enumerate() {
            if s.swap(false, Ordering::SeqCst) {
                self.handles[i].unpark();
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| run_chunks(sh, f, n)));
        if mine.is_err() || sh.panicked.load(Ordering::Relaxed) {
            // A chunk panicked, here or on a worker (which then stops
            // claiming): the chunks nobody claimed yet are counted without
            // running, so the wait below ends and the panic is re-raised
            // (every participant panicking would otherwise leave some
            // unclaimed, and this thread spinning on them for ever).
            skip_unclaimed(sh, n);
        }
        wait_until(|| sh.finished.load(Ordering::Acquire) >= n);
        sh.state.store(generation << 1, Ordering::SeqCst);
        wait_until(|| sh.active.load(Ordering::SeqCst) == 0);
        *sh.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if sh.panicked.swap(false, Ordering::Relaxed) {
            panic!("a pool worker panicked while running a chunk");
        }
    }

    /// Runs `f` on the calling thread with this pool as [`current`].
    pub fn install<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        struct Pop;
        impl Drop for Pop {
            fn drop(&mut self) {
                CURRENT.with(|c| c.borrow_mut().pop());
            }
        }
        CURRENT.with(|c| c.borrow_mut().push(Arc::clone(self)));
        let _pop = Pop;
        f()
    }
}

/// Spins, then yields, until `done()`.
fn wait_until(done: impl Fn() -> bool) {
    let mut spins = 0usize;
    while !done() {
        spins += 1;
        if spins < SPIN {
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
    }
}

/// Claims and runs chunks of the current job until none are left, counting
/// each finished (a panicking chunk counts too, so the caller never waits
/// for it).
fn run_chunks(sh: &Shared, f: &(dyn Fn(usize) + Sync), n: usize) {
    struct Finish<'a>(&'a AtomicUsize);
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Release);
        }
    }
    loop {
        let c = sh.next.fetch_add(1, Ordering::Relaxed);
        if c >= n {
            break;
        }
        let _finish = Finish(&sh.finished);
        f(c);
    }
}

/// Claims every chunk not claimed yet and counts it finished without running it.
fn skip_unclaimed(sh: &Shared, n: usize) {
    while sh.next.fetch_add(1, Ordering::Relaxed) < n {
        sh.finished.fetch_add(1, Ordering::Release);
    }
}

fn worker(sh: Arc<Shared>, slot: usize) {
    IS_WORKER.set(true);
    let mut seen = 0usize;
    loop {
        // Wait for a generation not yet seen: spin, then park.
        let mut spins = 0usize;
        let state = loop {
            let st = sh.state.load(Ordering::Acquire);
            if st >> 1 != seen || sh.shutdown.load(Ordering::Acquire) {
                break st;
            }
            spins += 1;
            if spins < SPIN {
                std::hint::spin_loop();
                continue;
            }
            sh.sleeping[slot].store(true, Ordering::SeqCst);
            if sh.state.load(Ordering::SeqCst) >> 1 != seen || sh.shutdown.load(Ordering::SeqCst) {
                sh.sleeping[slot].store(false, Ordering::SeqCst);
                continue;
            }
            thread::park();
            sh.sleeping[slot].store(false, Ordering::SeqCst);
            spins = 0;
        };
        if sh.shutdown.load(Ordering::Acquire) {
            return;
        }
        seen = state >> 1;
        if state & 1 == 0 {
            continue; // Closed before this worker got to it.
        }
        sh.active.fetch_add(1, Ordering::SeqCst);
        if sh.state.load(Ordering::SeqCst) == state {
            let job = *sh.job.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(job) = job {
                // SAFETY: the job is open and this worker is counted in
                // `active`, so the caller keeps the closure alive until this
                // worker leaves (see `for_each`).
                let f = unsafe { &*job.f };
                if catch_unwind(AssertUnwindSafe(|| run_chunks(&sh, f, job.n))).is_err() {
                    sh.panicked.store(true, Ordering::Relaxed);
                }
            }
        }
        sh.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for h in &self.handles {
            h.unpark();
        }
        for j in self.joins.drain(..) {
            let _ = j.join();
        }
    }
}

/// The pool installed on this thread by [`Pool::install`], or else the
/// process-wide default pool (one participant per available CPU).
pub fn current() -> Arc<Pool> {
    if let Some(p) = CURRENT.with(|c| c.borrow().last().cloned()) {
        return p;
    }
    static DEFAULT: OnceLock<Arc<Pool>> = OnceLock::new();
    Arc::clone(DEFAULT.get_or_init(|| {
        let n = thread::available_parallelism().map_or(1, |n| n.get());
        Pool::new(n).unwrap_or_else(|_| Pool::new(1).expect("a one-thread pool starts no thread"))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_chunk_runs_exactly_once_at_every_thread_count() {
        for threads in 1..=4 {
            let pool = Pool::new(threads).unwrap();
            for n in [0, 1, 2, 3, 7, 64, 1000] {
                let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                pool.for_each(n, &|c| {
                    hits[c].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "threads {threads} n {n}");
            }
        }
    }

    #[test]
    fn many_back_to_back_jobs_and_a_pause_long_enough_to_park() {
        let pool = Pool::new(3).unwrap();
        let total = AtomicU64::new(0);
        for round in 0..2000u64 {
            pool.for_each(5, &|c| {
                total.fetch_add(round * 5 + c as u64, Ordering::Relaxed);
            });
            if round == 1000 {
                thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        let n = 2000 * 5;
        assert_eq!(total.load(Ordering::Relaxed), (n * (n - 1) / 2) as u64);
    }

    #[test]
    fn a_panicking_chunk_is_re_raised_and_the_pool_keeps_working() {
        let pool = Pool::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.for_each(16, &|c| {
                if c == 11 {
                    panic!("chunk 11");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicU64::new(0);
        pool.for_each(16, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 16);
    }

    /// Every participant panicking (each on the first chunk it claims)
    /// leaves chunks nobody claimed: the call must still return, re-raising
    /// the panic, and the pool keep working (it used to spin for ever).
    #[test]
    fn chunks_left_unclaimed_by_panicking_participants_do_not_hang_the_caller() {
        let pool = Pool::new(2).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = Arc::clone(&pool);
        thread::spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(|| {
                p.for_each(64, &|_| {
                    thread::sleep(std::time::Duration::from_millis(20));
                    panic!("every chunk");
                })
            }));
            let _ = tx.send(r.is_err());
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(got, Ok(true), "for_each did not return within 20 s");
        let count = AtomicU64::new(0);
        pool.for_each(16, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 16);
    }

    #[test]
    fn install_makes_the_pool_current_and_concurrent_callers_do_not_block() {
        let pool = Pool::new(2).unwrap();
        pool.install(|| assert!(Arc::ptr_eq(&current(), &pool)));
        let p2 = Arc::clone(&pool);
        let t = thread::spawn(move || {
            for _ in 0..200 {
                let c = AtomicU64::new(0);
                p2.for_each(8, &|_| {
                    c.fetch_add(1, Ordering::Relaxed);
                });
                assert_eq!(c.load(Ordering::Relaxed), 8);
            }
        });
        for _ in 0..200 {
            let c = AtomicU64::new(0);
            pool.for_each(8, &|_| {
                c.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(c.load(Ordering::Relaxed), 8);
        }
        t.join().unwrap();
    }
}
