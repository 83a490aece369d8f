//! Key names of the most recently used queues, kept across calls. A queue's
//! names never change, and making and freeing them (nine, when this was
//! written; a call opens up to 31) for every call was 5% of a lease+ack cycle (docs/instructions.md has the history).

use std::cell::RefCell;
use std::mem::ManuallyDrop;

use super::strings::OwnedString;
use crate::store::vocabulary::{key_name, QueueKey};

/// The key names of one queue, each made on first use.
struct QueueKeyNames {
    queue: Vec<u8>,
    names: [Option<OwnedString>; QueueKey::ALL.len()],
}

impl QueueKeyNames {
    fn new(queue: &[u8]) -> Self {
        QueueKeyNames {
            queue: queue.to_vec(),
            names: std::array::from_fn(|_| None),
        }
    }

    /// Another owner of the name of `key` (made now if it is the first use).
    fn name(&mut self, key: QueueKey) -> OwnedString {
        self.names[key.index()]
            .get_or_insert_with(|| OwnedString::new(&key_name(&self.queue, key)))
            .retain()
    }
}

/// Redis counts references to a string, so a name still held by the server
/// (an open key, a pending effect) outlives its eviction here. Only names of
/// queues up to `LONGEST_QUEUE_NAME` bytes are kept, so the cache never
/// holds more than a few kilobytes outside the keyspace, whatever names
/// clients send.
struct KeyNameCache {
    /// Most recently used first.
    queues: Vec<QueueKeyNames>,
}

impl KeyNameCache {
    /// Queues whose names are kept; a lookup compares at most this many.
    const CAPACITY: usize = 8;
    const LONGEST_QUEUE_NAME: usize = 256;

    fn of_queue(&mut self, queue: &[u8]) -> &mut QueueKeyNames {
        match self.queues.iter().position(|cached| cached.queue == queue) {
            Some(found) => self.queues[..=found].rotate_right(1),
            None => {
                self.queues.truncate(Self::CAPACITY - 1);
                self.queues.insert(0, QueueKeyNames::new(queue));
            }
        }
        &mut self.queues[0]
    }
}

thread_local! {
    /// Only the main thread opens keys. `ManuallyDrop`: the names are left to
    /// the process's exit rather than freed by a thread-exit destructor that
    /// could run after the server stopped serving module calls.
    static KEY_NAMES: RefCell<ManuallyDrop<KeyNameCache>> =
        const { RefCell::new(ManuallyDrop::new(KeyNameCache { queues: Vec::new() })) };
}

/// The names of `keys` of `queue` (at their [`QueueKey::index`]), and the
/// name of its `queue` key, which notifications name whether opened or not.
pub fn names_of(
    queue: &[u8],
    keys: &[QueueKey],
) -> ([Option<OwnedString>; QueueKey::ALL.len()], OwnedString) {
    let mut names: [Option<OwnedString>; QueueKey::ALL.len()] = std::array::from_fn(|_| None);
    let queue_key = with_names(queue, |queue_names| {
        for &key in keys {
            names[key.index()] = Some(queue_names.name(key));
        }
        queue_names.name(QueueKey::Queue)
    });
    (names, queue_key)
}

/// The name of `queue`'s `queue` key alone (what a native queue opens).
pub fn queue_key_name(queue: &[u8]) -> OwnedString {
    with_names(queue, |queue_names| queue_names.name(QueueKey::Queue))
}

/// `use_names` on the cached names of `queue` (or on names made for this
/// call only, for a name too long to keep).
fn with_names<T>(queue: &[u8], use_names: impl FnOnce(&mut QueueKeyNames) -> T) -> T {
    KEY_NAMES.with_borrow_mut(|cache| {
        if queue.len() <= KeyNameCache::LONGEST_QUEUE_NAME {
            use_names(cache.of_queue(queue))
        } else {
            use_names(&mut QueueKeyNames::new(queue))
        }
    })
}
