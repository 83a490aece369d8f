//! Key names of the most recently used queues, kept across calls. A queue's
//! names never change, and making and freeing them (nine, when this was
//! written; a call opens up to 31) for every call was 5% of a lease+ack cycle (docs/instructions.md has the history).

use std::cell::{OnceCell, RefCell};
use std::mem::ManuallyDrop;
use std::rc::Rc;

use super::strings::OwnedString;
use crate::store::vocabulary::{key_name, QueueKey};

/// The key names of one queue, each made on first use, shared by the cache
/// and the calls using them: a call holds the table (one count), not each
/// name (a reference taken and given back per key was 3% of a lease+ack
/// cycle on the keys layout).
pub struct QueueKeyNames {
    queue: Vec<u8>,
    names: [OnceCell<OwnedString>; QueueKey::ALL.len()],
}

impl QueueKeyNames {
    fn new(queue: &[u8]) -> Self {
        QueueKeyNames {
            queue: queue.to_vec(),
            names: std::array::from_fn(|_| OnceCell::new()),
        }
    }

    /// The name of `key`: `vtrr:<queue>:<suffix>`.
    pub fn name(&self, key: QueueKey) -> &OwnedString {
        self.names[key.index()].get_or_init(|| OwnedString::new(&key_name(&self.queue, key)))
    }
}

/// A table evicted here lives on while a call holds it, and Redis counts
/// references to a string, so a name still held by the server (an open key,
/// a pending effect) outlives both. Only names of
/// queues up to `LONGEST_QUEUE_NAME` bytes are kept, so the cache never
/// holds more than a few kilobytes outside the keyspace, whatever names
/// clients send.
struct KeyNameCache {
    /// Most recently used first.
    queues: Vec<Rc<QueueKeyNames>>,
}

impl KeyNameCache {
    /// Queues whose names are kept; a lookup compares at most this many.
    const CAPACITY: usize = 8;
    const LONGEST_QUEUE_NAME: usize = 256;

    fn of_queue(&mut self, queue: &[u8]) -> Rc<QueueKeyNames> {
        match self.queues.iter().position(|cached| cached.queue == queue) {
            Some(found) => self.queues[..=found].rotate_right(1),
            None => {
                self.queues.truncate(Self::CAPACITY - 1);
                self.queues.insert(0, Rc::new(QueueKeyNames::new(queue)));
            }
        }
        Rc::clone(&self.queues[0])
    }
}

thread_local! {
    /// Only the main thread opens keys. `ManuallyDrop`: the names are left to
    /// the process's exit rather than freed by a thread-exit destructor that
    /// could run after the server stopped serving module calls.
    static KEY_NAMES: RefCell<ManuallyDrop<KeyNameCache>> =
        const { RefCell::new(ManuallyDrop::new(KeyNameCache { queues: Vec::new() })) };
}

/// The key names of `queue`.
pub fn names_of(queue: &[u8]) -> Rc<QueueKeyNames> {
    if queue.len() > KeyNameCache::LONGEST_QUEUE_NAME {
        return Rc::new(QueueKeyNames::new(queue));
    }
    KEY_NAMES.with_borrow_mut(|cache| cache.of_queue(queue))
}

/// The name of `queue`'s `queue` key alone (what a native queue opens).
pub fn queue_key_name(queue: &[u8]) -> OwnedString {
    names_of(queue).name(QueueKey::Queue).retain()
}
