//! The wait queue between the HTTP handlers and the engine thread: first
//! in, first out (requests run in arrival order, so no client can starve
//! another), bounded (a full queue refuses at once instead of growing), and
//! closable (shutdown hands back whatever still waits).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Why [`Queue::push`] refused an item (handed back to the caller).
#[derive(Debug, PartialEq, Eq)]
pub enum PushError<T> {
    /// `capacity` items are already waiting.
    Full(T),
    /// The queue was closed (the server is shutting down).
    Closed(T),
}

struct State<T> {
    items: VecDeque<T>,
    closed: bool,
}

/// A bounded multi-producer, single-consumer FIFO queue.
pub struct Queue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    capacity: usize,
}

impl<T> Queue<T> {
    /// A queue holding at most `capacity` waiting items (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Queue { state: Mutex::new(State { items: VecDeque::new(), closed: false }), ready: Condvar::new(), capacity }
    }

    /// A panic elsewhere while holding the lock leaves the queue itself
    /// consistent (every method mutates it in one step), so keep going.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends `item`; returns how many items wait ahead of it.
    pub fn push(&self, item: T) -> Result<usize, PushError<T>> {
        let mut s = self.lock();
        if s.closed {
            return Err(PushError::Closed(item));
        }
        if s.items.len() >= self.capacity {
            return Err(PushError::Full(item));
        }
        s.items.push_back(item);
        let ahead = s.items.len() - 1;
        drop(s);
        self.ready.notify_one();
        Ok(ahead)
    }

    /// The oldest item, waiting for one; `None` once the queue is closed.
    pub fn pop(&self) -> Option<T> {
        let mut s = self.lock();
        loop {
            if s.closed {
                return None;
            }
            if let Some(item) = s.items.pop_front() {
                return Some(item);
            }
            s = self.ready.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The oldest item if one waits, without waiting; `Err(())` once the
    /// queue is closed.
    #[allow(clippy::result_unit_err)]
    pub fn try_pop(&self) -> Result<Option<T>, ()> {
        let mut s = self.lock();
        if s.closed {
            return Err(());
        }
        Ok(s.items.pop_front())
    }

    /// Items waiting now.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses every later push, wakes the consumer (whose `pop` then returns
    /// `None`) and hands back the items that were still waiting.
    pub fn close(&self) -> Vec<T> {
        let mut s = self.lock();
        s.closed = true;
        let left = s.items.drain(..).collect();
        drop(s);
        self.ready.notify_all();
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn items_come_out_in_arrival_order() {
        let q = Queue::new(8);
        for i in 0..5 {
            assert_eq!(q.push(i), Ok(i));
        }
        assert_eq!((0..5).map(|_| q.pop().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_full_queue_refuses_and_hands_the_item_back() {
        let q = Queue::new(2);
        q.push("a").unwrap();
        q.push("b").unwrap();
        assert_eq!(q.push("c"), Err(PushError::Full("c")));
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.push("c"), Ok(1));
    }

    #[test]
    fn close_returns_waiting_items_and_wakes_the_consumer() {
        let q = Arc::new(Queue::<u32>::new(4));
        let consumer = {
            let q = q.clone();
            std::thread::spawn(move || q.pop())
        };
        // The consumer either got 7 or is woken by close.
        q.push(7).unwrap();
        let got = consumer.join().unwrap();
        assert_eq!(got, Some(7));
        let consumer = {
            let q = q.clone();
            std::thread::spawn(move || q.pop())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(q.close().is_empty());
        assert_eq!(consumer.join().unwrap(), None);
        assert_eq!(q.push(1), Err(PushError::Closed(1)));
    }

    #[test]
    fn many_producers_lose_nothing() {
        let q = Arc::new(Queue::new(10_000));
        let producers: Vec<_> = (0..8)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        q.push(p * 1000 + i).unwrap();
                    }
                })
            })
            .collect();
        for t in producers {
            t.join().unwrap();
        }
        let mut got: Vec<_> = (0..4000).map(|_| q.pop().unwrap()).collect();
        // Each producer's items stay in its own order.
        for p in 0..8 {
            let mine: Vec<_> = got.iter().copied().filter(|x| x / 1000 == p).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 4000);
        assert!(q.is_empty());
    }
}
