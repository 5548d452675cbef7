//! What redb's appenders know of the chains they append to, so that each append is sealed on its
//! appender's own thread and the committer, the one thread every append waits for, only checks
//! that it links and writes it (`super::trace` describes the whole protocol).
//!
//! A [`Slot`] per session holds the head after every append of it queued so far (when that is
//! known), how many of its appends the committer has not answered yet, and the request ids of
//! its queued resolves. An appender holds its slot's lock from reading the head until its append
//! is on the queue, so a session's appends reach the committer in the order they were sealed.
//!
//! Slots no append holds are forgotten once there are many: their heads are all in the
//! database, where the next append of the session reads its head again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::chain::HeadRecord;

/// Sessions with slots before the first sweep for slots nobody holds.
const SWEEP_FLOOR: usize = 4096;

/// Every session's slot.
#[derive(Default)]
pub(crate) struct Heads {
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    by_session: HashMap<String, Arc<Slot>>,
    /// Sweep when this many sessions have slots: twice what the last sweep kept, so sweeping
    /// costs a constant per slot made.
    sweep_at: usize,
}

/// One session's slot (see the module documentation).
#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<SlotState>,
}

/// What a slot knows, read and changed under its lock.
#[derive(Default)]
pub(crate) struct SlotState {
    /// The head after every append queued so far; `None` when it must be read from the
    /// database again (a new slot, or an append the committer refused after it was sealed).
    pub head: Option<HeadRecord>,
    /// Appends queued and not answered yet.
    pub in_flight: usize,
    /// Request ids of resolves queued and not answered yet.
    pub requests: Vec<String>,
}

impl Heads {
    /// `session_id`'s slot, made if it has none.
    pub(crate) fn slot(&self, session_id: &str) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.by_session.get(session_id) {
            return slot.clone();
        }
        if slots.by_session.len() >= slots.sweep_at.max(SWEEP_FLOOR) {
            // A slot only this map holds has no appender sealing and no append queued.
            slots
                .by_session
                .retain(|_, slot| Arc::strong_count(slot) > 1);
            slots.sweep_at = slots.by_session.len() * 2;
        }
        let slot = Arc::new(Slot::default());
        slots.by_session.insert(session_id.to_owned(), slot.clone());
        slot
    }

    /// `session_id`'s slot if it has one.
    #[cfg(test)]
    fn existing(&self, session_id: &str) -> Option<Arc<Slot>> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.by_session.get(session_id).cloned()
    }

    /// How many sessions have slots (for tests of the sweep).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_session
            .len()
    }
}

impl Slot {
    /// Locks the slot. A thread that panicked holding it left nothing half-done that the next
    /// holder could misread (the head is replaced whole), so a poisoned lock is used as it is.
    pub(crate) fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_keeps_its_slot_and_unheld_slots_are_swept() {
        let heads = Heads::default();
        let held = heads.slot("held");
        assert!(Arc::ptr_eq(&held, &heads.slot("held")));
        for i in 1..SWEEP_FLOOR {
            drop(heads.slot(&format!("s{i}")));
        }
        assert_eq!(heads.len(), SWEEP_FLOOR);
        // The next new session sweeps every slot nobody holds.
        let _new = heads.slot("new");
        assert_eq!(heads.len(), 2);
        assert!(Arc::ptr_eq(&held, &heads.slot("held")));
        assert!(heads.existing("s1").is_none());
    }
}
