//! Each client's share of the waiting room: a client (one IP address) may
//! have at most `--max-waiting-per-client` requests between their parsed
//! body and the engine (waiting for a turn to tokenize, tokenizing, or
//! waiting in the queue), so one client sending many requests at once
//! cannot fill the queue and turn every other client away. A request stops
//! counting when the engine takes it up; running requests are bounded by
//! the engine itself (one at a time).
//!
//! Behind a reverse proxy every request comes from the proxy's address:
//! set `--max-waiting-per-client` to `--max-queue` there.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Waiting requests per client address.
#[derive(Debug)]
pub struct ClientShares {
    max_per_client: usize,
    /// Only addresses with at least one waiting request: the map holds at
    /// most as many entries as requests wait.
    waiting: Mutex<HashMap<IpAddr, usize>>,
}

/// One waiting request of one client; dropping it (the engine took the
/// request up, or it was refused or abandoned) gives the place back.
#[derive(Debug)]
pub struct Place {
    shares: Arc<ClientShares>,
    client: IpAddr,
}

impl ClientShares {
    pub fn new(max_per_client: usize) -> Arc<Self> {
        Arc::new(ClientShares { max_per_client: max_per_client.max(1), waiting: Mutex::new(HashMap::new()) })
    }

    pub fn max_per_client(&self) -> usize {
        self.max_per_client
    }

    /// A place for one more request of `client`, or `Err(waiting)` when it
    /// already has its share waiting.
    pub fn take(self: &Arc<Self>, client: IpAddr) -> Result<Place, usize> {
        let mut m = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(client).or_insert(0);
        if *n >= self.max_per_client {
            return Err(*n);
        }
        *n += 1;
        Ok(Place { shares: self.clone(), client })
    }

    /// Requests `client` has waiting now.
    pub fn waiting(&self, client: IpAddr) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).get(&client).copied().unwrap_or(0)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut m = self.shares.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_past_its_share_is_refused_while_another_client_gets_in() {
        let s = ClientShares::new(2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let p1 = s.take(a).unwrap();
        let _p2 = s.take(a).unwrap();
        assert_eq!(s.take(a).unwrap_err(), 2);
        let _q = s.take(b).unwrap();
        drop(p1);
        assert_eq!(s.waiting(a), 1);
        let _p3 = s.take(a).unwrap();
        assert_eq!(s.take(a).unwrap_err(), 2);
    }

    #[test]
    fn the_map_forgets_a_client_with_nothing_waiting() {
        let s = ClientShares::new(1);
        let a: IpAddr = "::1".parse().unwrap();
        drop(s.take(a).unwrap());
        assert!(s.waiting.lock().unwrap().is_empty());
    }
}
