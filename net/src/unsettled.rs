//! [`Unsettled`]: the lanes that may hold sent data `quiet` must confirm, so that a quiet
//! visits those and passes the idle peers by without reading them.
//!
//! A lane is listed when data is sent through it, and stays listed until a visit finds it
//! settled (every write sent confirmed, no failure kept): a quiet that comes while another's
//! confirmation is still on its way must wait for it too. Data can only make a lane
//! unsettled again, so listing at each send is enough.
//!
//! # Listing against delisting
//! A visit takes a lane off the list only once it has read it settled. A send counts its
//! data in the lane, then lists it; a visit clears the lane's flag, then reads the lane.
//! Both put a sequentially consistent fence between their write and their read, so at least
//! one of them sees the other's: either the visit reads the new data and keeps the lane, or
//! the send reads the flag cleared and lists the lane again.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// The lanes, by index, that may have something to settle.
#[derive(Debug)]
pub struct Unsettled {
    /// Whether each lane is on the list, readable without the lock.
    listed: Vec<AtomicBool>,
    /// The listed lanes.
    lanes: Mutex<Vec<usize>>,
}

impl Unsettled {
    /// An empty list for lanes `0..n`.
    pub fn new(n: usize) -> Unsettled {
        Unsettled {
            listed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            lanes: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists lane `i`, once the lane has counted the data just sent through it. Costs no lock
    /// when the lane is listed already.
    pub fn list(&self, i: usize) {
        fence(Ordering::SeqCst);
        if self.listed[i].load(Ordering::Relaxed) {
            return;
        }
        let mut lanes = self.lock();
        if !self.listed[i].swap(true, Ordering::SeqCst) {
            lanes.push(i);
        }
    }

    /// Visits the listed lanes: takes off those `settled` reads as settled, and returns the
    /// others, to be settled outside the list's lock (settling posts to the provider; quiets
    /// of several threads, and the sends that list a lane, wait for the lock only while the
    /// lanes are read).
    pub fn visit(&self, settled: impl Fn(usize) -> bool) -> Vec<usize> {
        let mut lanes = self.lock();
        lanes.retain(|&i| {
            self.listed[i].store(false, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if settled(i) {
                return false;
            }
            self.listed[i].store(true, Ordering::SeqCst);
            true
        });
        lanes.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn only_lanes_sent_through_are_visited_and_they_stay_until_settled() {
        let list = Unsettled::new(8);
        assert!(list.visit(|_| false).is_empty());
        list.list(3);
        list.list(6);
        list.list(3);
        assert_eq!(list.visit(|_| false), vec![3, 6]);
        assert_eq!(list.visit(|i| i == 6), vec![3]);
        assert_eq!(list.visit(|_| true), Vec::<usize>::new());
        assert_eq!(list.visit(|_| false), Vec::<usize>::new());
        list.list(6);
        assert_eq!(list.visit(|_| false), vec![6]);
    }

    /// A sender counts data and lists the lane while a visitor keeps settling what it finds:
    /// each piece of data sent must be settled by a later visit, never passed by because a
    /// visit delisted its lane meanwhile.
    #[test]
    fn data_sent_while_a_visit_delists_its_lane_is_never_passed_by() {
        let list = Arc::new(Unsettled::new(1));
        let data = Arc::new(AtomicU64::new(0));
        let settled = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let visitor = {
            let (list, data, settled, done) =
                (list.clone(), data.clone(), settled.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    // A lane's marks are read with acquire loads, as `Lane::is_settled` does.
                    let settled_now =
                        |_| data.load(Ordering::Acquire) <= settled.load(Ordering::Acquire);
                    for _ in list.visit(settled_now) {
                        settled.fetch_max(data.load(Ordering::Acquire), Ordering::AcqRel);
                    }
                }
            })
        };
        for k in 1..=20_000 {
            // A release store, as a lane counts its data.
            data.store(k, Ordering::Release);
            list.list(0);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while settled.load(Ordering::SeqCst) < k {
                assert!(
                    std::time::Instant::now() < deadline,
                    "data {k} passed by: its lane was delisted unsettled"
                );
                std::thread::yield_now();
            }
        }
        done.store(true, Ordering::SeqCst);
        visitor.join().expect("visitor");
    }
}
