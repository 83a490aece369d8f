//! Per-partition counts and tenant controls, one record per partition in
//! `partitions`: how many of its items are queued (of which held), leased,
//! delayed and dead, and its cap, share and pause.
//!
//! The rule that keeps LEASE from walking over items it may not serve: a
//! partition under control (a cap, the queue's default cap, a pause, or
//! items still held) keeps at most one item, its *head*, in `queue`, and
//! only while it may be served; the rest wait in `held` (see `held.rs`).
//! Every change of a partition's counts or settings ends in [`settle`],
//! which promotes the next held item when the partition may be served and
//! has no head. A partition that was never under control keeps all its
//! items in `queue`, exactly as the Lua scripts do.

use super::held;
use super::Anomaly;
use crate::store::{HashKey, Store};

/// `policy` fields of the tenant controls.
pub const DEFAULT_CONCURRENCY_FIELD: &str = "default-concurrency";
pub const PAUSED_COUNT_FIELD: &str = "paused-partitions";
pub const CAPPED_COUNT_FIELD: &str = "capped-partitions";

/// An item's state, as the partition counts know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Queued,
    Leased,
    Delayed,
    Dead,
}

/// One partition's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Items waiting to be leased: in `queue` or in `held`.
    pub queued: u64,
    /// Of those, the ones in `held`.
    pub held: u64,
    pub leased: u64,
    pub delayed: u64,
    pub dead: u64,
    /// Most items leased at once (None: the queue's default).
    pub cap: Option<u64>,
    /// Service ratio: a partition with share s gets s times the weight of a
    /// share-1 partition while both are backlogged.
    pub share: u64,
    pub paused: bool,
    /// Weight not yet turned into virtual time (below `share`): the exact
    /// remainder of weight/share, so shares lose nothing to rounding.
    pub carry: u64,
    /// Added to the virtual times stored in `held` (RESUME raises it).
    pub offset: i64,
    /// The weights of its queued items cancelled (`dead::cancel`); given
    /// back to its virtual time when it has nothing queued (see `settle`).
    pub gap: u64,
    /// Virtual time its items queued before a RESUME (or a raised cap) owe:
    /// the held ones moved by `offset` at once; one still in `queue` below
    /// `shift_below` moves when a LEASE reaches it (see `lease`).
    pub pending_shift: i64,
    pub shift_below: i64,
    /// The id this partition has in `queue` while under control.
    pub head: Option<Vec<u8>>,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            queued: 0,
            held: 0,
            leased: 0,
            delayed: 0,
            dead: 0,
            cap: None,
            share: 1,
            paused: false,
            carry: 0,
            offset: 0,
            gap: 0,
            pending_shift: 0,
            shift_below: 0,
            head: None,
        }
    }
}

impl Record {
    /// `<queued> <held> <leased> <delayed> <dead>`, then, only when any
    /// differs from its default, `<cap|-> <share> <paused> <carry> <offset>
    /// <gap> <pending shift> <shift below>[ <head id>]` (the head id, any
    /// bytes, comes last). Written on every change of a partition's
    /// counts, so it is short in the common case and formatted by hand.
    fn format(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        for count in [self.queued, self.held, self.leased, self.delayed, self.dead] {
            push_number(&mut out, i128::from(count));
        }
        if self.has_settings()
            || self.carry != 0
            || self.offset != 0
            || self.gap != 0
            || self.pending_shift != 0
            || self.shift_below != 0
            || self.head.is_some()
        {
            match self.cap {
                Some(cap) => push_number(&mut out, i128::from(cap)),
                None => out.extend_from_slice(b"- "),
            }
            for number in [
                i128::from(self.share),
                i128::from(u8::from(self.paused)),
                i128::from(self.carry),
                i128::from(self.offset),
                i128::from(self.gap),
                i128::from(self.pending_shift),
                i128::from(self.shift_below),
            ] {
                push_number(&mut out, number);
            }
            if let Some(head) = &self.head {
                out.extend_from_slice(head);
                return out;
            }
        }
        out.pop(); // the last separator
        out
    }

    pub fn parse(raw: &[u8]) -> Option<Record> {
        let mut parts = raw.splitn(14, |b| *b == b' ');
        let mut next = || parts.next();
        fn number<T: std::str::FromStr>(raw: Option<&[u8]>) -> Option<T> {
            std::str::from_utf8(raw?).ok()?.parse().ok()
        }
        let mut record = Record {
            queued: number(next())?,
            held: number(next())?,
            leased: number(next())?,
            delayed: number(next())?,
            dead: number(next())?,
            ..Record::default()
        };
        let Some(cap) = next() else {
            return Some(record); // the short form: settings at their defaults
        };
        record.cap = match cap {
            b"-" => None,
            raw => Some(number(Some(raw))?),
        };
        record.share = number::<u64>(next())?.max(1);
        record.paused = match next()? {
            b"0" => false,
            b"1" => true,
            _ => return None,
        };
        record.carry = number(next())?;
        record.offset = number(next())?;
        record.gap = number(next())?;
        record.pending_shift = number(next())?;
        record.shift_below = number(next())?;
        record.head = next().map(<[u8]>::to_vec);
        Some(record)
    }

    /// Nothing counted and nothing set: the record can go.
    fn is_blank(&self) -> bool {
        self.queued == 0
            && self.held == 0
            && self.leased == 0
            && self.delayed == 0
            && self.dead == 0
            && !self.has_settings()
            && self.head.is_none()
            && self.gap == 0
            && self.pending_shift == 0
    }

    pub fn has_settings(&self) -> bool {
        self.cap.is_some() || self.share != 1 || self.paused
    }

    /// The cap in force: the partition's own, else the queue's default.
    pub fn cap_in_force(&self, default_cap: Option<u64>) -> Option<u64> {
        self.cap.or(default_cap)
    }

    /// Whether one more of its items may be leased now.
    pub fn servable(&self, default_cap: Option<u64>) -> bool {
        !self.paused
            && self
                .cap_in_force(default_cap)
                .is_none_or(|cap| self.leased < cap)
    }

    /// Whether its items go through `held` (one head at a time in `queue`).
    pub fn controlled(&self, default_cap: Option<u64>) -> bool {
        self.paused
            || self.cap_in_force(default_cap).is_some()
            || self.held > 0
            || self.head.is_some()
    }

    /// Its queued items in `queue` that are not its head: queued before it
    /// came under control.
    pub fn in_queue_unheaded(&self) -> u64 {
        self.queued
            .saturating_sub(self.held)
            .saturating_sub(u64::from(self.head.is_some()))
    }

    /// The virtual time an item popped from `queue` at `score` is owed:
    /// later by the pending shift when it was queued before a rejoin.
    pub fn owed_shift(&self, id_is_head: bool, score: i64) -> Option<i64> {
        (self.pending_shift > 0 && !id_is_head && score < self.shift_below)
            .then_some(self.pending_shift)
    }

    pub fn count_mut(&mut self, state: State) -> &mut u64 {
        match state {
            State::Queued => &mut self.queued,
            State::Leased => &mut self.leased,
            State::Delayed => &mut self.delayed,
            State::Dead => &mut self.dead,
        }
    }
}

/// Appends `number` in decimal and a space.
fn push_number(out: &mut Vec<u8>, number: i128) {
    if number < 0 {
        out.push(b'-');
    }
    let mut digits = [0u8; 40];
    let mut at = digits.len();
    let mut rest = number.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.push(b' ');
}

/// A partition's record, read for a change and written back by [`close`].
pub struct Partition {
    pub name: Vec<u8>,
    stored: Option<Vec<u8>>,
    pub record: Record,
}

/// Reads a partition's record (none yet: a blank one). An unreadable record
/// (written by another client) starts blank and is reported.
pub fn open(store: &mut impl Store, name: &[u8], anomalies: &mut Vec<Anomaly>) -> Partition {
    let stored = store.hget(HashKey::Partitions, name);
    let record = match stored.as_deref() {
        None => Record::default(),
        Some(raw) => Record::parse(raw).unwrap_or_else(|| {
            anomalies.push(Anomaly::PartitionRecordUnreadable {
                partition: name.to_vec(),
            });
            Record::default()
        }),
    };
    Partition {
        name: name.to_vec(),
        stored,
        record,
    }
}

/// Writes the record back when it changed; deletes it once blank.
pub fn close(store: &mut impl Store, mut partition: Partition) {
    if partition.record.held == 0 {
        // The offset only means something for held items.
        partition.record.offset = 0;
    }
    if partition.record.is_blank() {
        if partition.stored.is_some() {
            store.hdel(HashKey::Partitions, &partition.name);
        }
        return;
    }
    let formatted = partition.record.format();
    if partition.stored.as_deref() != Some(formatted.as_slice()) {
        store.hset(HashKey::Partitions, &partition.name, &formatted);
    }
}

/// Restores the rules of this module: a partition that may be served and
/// has held items has its head in `queue` (a recorded head that is no
/// longer queued, because a Lua script leased it, is forgotten first); a
/// partition with nothing queued owes no cancelled items' cost.
pub fn settle(store: &mut impl Store, partition: &mut Partition, default_cap: Option<u64>) {
    if partition.record.queued == 0 && partition.record.gap > 0 {
        give_back_gap(store, partition);
    }
    if partition.record.pending_shift > 0 && partition.record.in_queue_unheaded() == 0 {
        partition.record.pending_shift = 0;
        partition.record.shift_below = 0;
    }
    if let Some(head) = &partition.record.head {
        if store.zscore(crate::store::ZsetKey::Queue, head).is_none() {
            partition.record.head = None;
        }
    }
    if partition.record.held > 0
        && partition.record.head.is_none()
        && partition.record.servable(default_cap)
    {
        held::promote(store, partition);
    }
}

/// Moves the partition's next virtual time back by its gap: it re-enters
/// as if the cancelled items had never been queued.
fn give_back_gap(store: &mut impl Store, partition: &mut Partition) {
    let gap = i64::try_from(std::mem::take(&mut partition.record.gap)).unwrap_or(i64::MAX);
    // None: the partition has no next virtual time to move back.
    move_virtual_time(store, &partition.name, gap.saturating_neg(), None);
}

/// Moves `partition`'s next virtual time by `by`, within 0 and
/// `MAX_VIRTUAL_TIME`, and returns it. A partition that has none starts
/// from `missing_as`, or, with None, is left without one.
pub fn move_virtual_time(
    store: &mut impl Store,
    partition: &[u8],
    by: i64,
    missing_as: Option<i64>,
) -> Option<i64> {
    let next = store
        .hget(HashKey::PartitionVirtualTime, partition)
        .and_then(|raw| super::parse_virtual_time(&raw))
        .or(missing_as)?;
    let moved = next.saturating_add(by).clamp(0, super::MAX_VIRTUAL_TIME);
    store.hset(
        HashKey::PartitionVirtualTime,
        partition,
        moved.to_string().as_bytes(),
    );
    Some(moved)
}

/// Where an item entering the queue at `score` goes: `queue` (as the head,
/// when its partition is under control) or `held`. Counts it queued.
pub fn enter_queue(
    store: &mut impl Store,
    partition: &mut Partition,
    id: &[u8],
    score: i64,
    default_cap: Option<u64>,
) {
    partition.record.queued += 1;
    let record = &partition.record;
    if !record.controlled(default_cap) {
        store.zadd(crate::store::ZsetKey::Queue, id, score as f64);
    } else if record.head.is_none() && record.held == 0 && record.servable(default_cap) {
        store.zadd(crate::store::ZsetKey::Queue, id, score as f64);
        partition.record.head = Some(id.to_vec());
    } else {
        held::park(store, partition, id, score);
        settle(store, partition, default_cap);
    }
}

/// One item of `name` leaves `from` and enters `to` (None: leaves the
/// queue's life). Not for entering the queue: that is [`enter_queue`].
pub fn shift(
    store: &mut impl Store,
    name: &[u8],
    from: Option<State>,
    to: Option<State>,
    default_cap: Option<u64>,
    anomalies: &mut Vec<Anomaly>,
) {
    let mut partition = open(store, name, anomalies);
    if let Some(from) = from {
        let count = partition.record.count_mut(from);
        *count = count.saturating_sub(1);
    }
    if let Some(to) = to {
        *partition.record.count_mut(to) += 1;
    }
    settle(store, &mut partition, default_cap);
    close(store, partition);
}

/// The queue's default cap (`policy` field `default-concurrency`); an
/// unreadable value reads as none and is reported.
pub fn read_default_cap(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Option<u64> {
    let raw = store.hget(HashKey::Policy, DEFAULT_CONCURRENCY_FIELD.as_bytes())?;
    let cap = std::str::from_utf8(&raw).ok().and_then(|s| s.parse().ok());
    if cap.is_none() {
        anomalies.push(Anomaly::PolicyUnreadable {
            field: DEFAULT_CONCURRENCY_FIELD,
        });
    }
    cap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_formatting_with_any_head_id() {
        let record = Record {
            queued: 7,
            held: 3,
            leased: 2,
            delayed: 1,
            dead: 4,
            cap: Some(2),
            share: 3,
            paused: true,
            carry: 2,
            offset: -5,
            gap: 9,
            pending_shift: 4,
            shift_below: -2,
            head: Some(b"id with spaces \x00 and bytes".to_vec()),
        };
        assert_eq!(Record::parse(&record.format()), Some(record));
        let plain = Record {
            queued: 3,
            leased: 12,
            ..Record::default()
        };
        assert_eq!(plain.format(), b"3 0 12 0 0");
        assert_eq!(Record::parse(&plain.format()), Some(plain));
        let negative = Record {
            offset: -7,
            ..Record::default()
        };
        assert_eq!(Record::parse(&negative.format()), Some(negative));
    }

    #[test]
    fn servable_follows_pause_own_cap_then_default() {
        let mut record = Record {
            leased: 2,
            ..Record::default()
        };
        assert!(record.servable(None));
        assert!(!record.servable(Some(2)));
        record.cap = Some(3);
        assert!(record.servable(Some(2)), "own cap wins over the default");
        record.paused = true;
        assert!(!record.servable(None));
    }

    #[test]
    fn garbage_does_not_parse() {
        for raw in [
            &b""[..],
            b"1 2 3",
            b"1 0 0 0 0 - 1 2 0 0",
            b"x 0 0 0 0 - 1 0 0 0",
        ] {
            assert_eq!(Record::parse(raw), None, "{raw:?}");
        }
    }
}
