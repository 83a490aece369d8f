//! One partition's record in `partitions`: how many of its items are
//! queued (of which held), leased, delayed and dead, and its cap, share and
//! pause. How the record decides what enters `queue` is `admission.rs`.

use super::levels::Level;
use super::types::Anomaly;
use crate::store::{HashKey, Store};

/// `policy` fields of the tenant controls.
pub const DEFAULT_CONCURRENCY_FIELD: &str = "default-concurrency";
pub const DEFAULT_RATE_FIELD: &str = "default-rate";
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

use super::outcomes::Keeping;
use super::queue_limits::QueueLimits;
pub use crate::store::record::{Parking, Record, Totals};
use crate::store::Rate;

/// What a partition without its own settings has (`VTRR.POLICY`
/// DEFAULT-CONCURRENCY and DEFAULT-RATE), and the queue's own limits
/// (CONCURRENCY and RATE): the policy's limits, read once per call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Defaults {
    pub cap: Option<u64>,
    pub rate: Option<Rate>,
    pub queue: QueueLimits,
    /// What the queue keeps of finished jobs (`outcomes`).
    pub keeping: Keeping,
}

#[cfg(test)]
impl Defaults {
    /// A default cap and no default rate.
    pub fn of_cap(cap: Option<u64>) -> Defaults {
        Defaults {
            cap,
            ..Defaults::default()
        }
    }
}

impl Record {
    /// Nothing counted and nothing set: the record can go.
    pub(super) fn is_blank(&self) -> bool {
        self.queued == 0
            && self.held == 0
            && self.leased == 0
            && self.delayed == 0
            && self.dead == 0
            && !self.has_settings()
            && self.head.is_none()
            && self.gap == 0
            && self.parking == Parking::Done
            && self.refilled_at.is_none()
            && self.levels.is_empty()
    }

    /// Its queued items at `level`.
    pub fn queued_at(&self, level: Level) -> u64 {
        match level {
            0 => {
                let others: u64 = self.levels.iter().map(|state| state.queued).sum();
                self.queued.saturating_sub(others)
            }
            _ => self.at_level(level).map_or(0, |state| state.queued),
        }
    }

    /// What the relative times of its held items at `level` are added to.
    pub fn offset_at(&self, level: Level) -> i64 {
        match level {
            0 => self.offset,
            _ => self.at_level(level).map_or(0, |state| state.offset),
        }
    }

    pub fn offset_at_mut(&mut self, level: Level) -> &mut i64 {
        match level {
            0 => &mut self.offset,
            _ => &mut self.at_level_mut(level).offset,
        }
    }

    /// Virtual time charged at `level` and owed until its parking ends.
    pub fn owed_at_mut(&mut self, level: Level) -> &mut i64 {
        match level {
            0 => &mut self.owed,
            _ => &mut self.at_level_mut(level).owed,
        }
    }

    /// The levels it has queued items or state at, highest first (0 among
    /// them when it has items there or any state of its own).
    pub fn levels_in_use(&self) -> Vec<Level> {
        let mut levels: Vec<Level> = self.levels.iter().map(|state| state.level).collect();
        let at = levels
            .iter()
            .position(|&level| level < 0)
            .unwrap_or(levels.len());
        levels.insert(at, 0);
        levels
    }

    /// One of its queued items, at `level`, enters `queue` or `held`.
    pub fn enter_queued(&mut self, level: Level) {
        self.queued += 1;
        if level != 0 {
            self.at_level_mut(level).queued += 1;
        }
    }

    /// One of its queued items, at `level`, leaves the queue.
    pub fn leave_queued(&mut self, level: Level) {
        self.leave(State::Queued);
        if level != 0 {
            let state = self.at_level_mut(level);
            state.queued = state.queued.saturating_sub(1);
            self.forget_blank_levels();
        }
    }

    /// The cap in force: the partition's own, else the queue's default.
    pub fn cap_in_force(&self, defaults: Defaults) -> Option<u64> {
        self.cap.or(defaults.cap)
    }

    /// The rate in force: the partition's own, else the queue's default.
    pub fn rate_in_force(&self, defaults: Defaults) -> Option<Rate> {
        self.rate.or(defaults.rate)
    }

    /// Whether one more of its items may be leased now (its bucket as last
    /// refilled: LEASE and the due step refill it first). While a parking
    /// is under way its items are served at their own times as usual; once
    /// a rejoin is owed, not until the whole backlog has rejoined.
    pub fn servable(&self, defaults: Defaults) -> bool {
        !self.paused
            && self.parking != Parking::RejoinOwed
            && self.has_token(defaults)
            && self
                .cap_in_force(defaults)
                .is_none_or(|cap| self.leased < cap)
    }

    /// Whether its items go through `held` (one head at a time in `queue`).
    pub fn controlled(&self, defaults: Defaults) -> bool {
        self.paused
            || self.cap_in_force(defaults).is_some()
            || self.held > 0
            || self.head.is_some()
            || self.parking != Parking::Done
            || self.owed != 0
            || self.rate_in_force(defaults).is_some()
    }

    /// Its queued items still in `queue`, its head aside.
    pub fn in_queue(&self) -> u64 {
        self.queued
            .saturating_sub(self.held)
            .saturating_sub(u64::from(self.head.is_some()))
    }

    /// One of its items leaves `state` (entering `queue` is
    /// `admission::enter_queue`, which also places it; a queued item leaves
    /// by [`Record::leave_queued`], which counts its level).
    pub fn leave(&mut self, state: State) {
        let count = self.count_mut(state);
        *count = count.saturating_sub(1);
    }

    /// One of its items enters `state`, other than queued (leased and dead
    /// items are counted in its totals too).
    pub fn arrive(&mut self, state: State) {
        debug_assert!(state != State::Queued, "queued items enter by enter_queue");
        *self.count_mut(state) += 1;
        match state {
            State::Leased => self.totals.leased += 1,
            State::Dead => self.totals.dead += 1,
            State::Queued | State::Delayed => {}
        }
    }

    fn count_mut(&mut self, state: State) -> &mut u64 {
        match state {
            State::Queued => &mut self.queued,
            State::Leased => &mut self.leased,
            State::Delayed => &mut self.delayed,
            State::Dead => &mut self.dead,
        }
    }
}

/// What a partition had stored before a call changed its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stored {
    Nothing,
    /// Bytes that do not read as a record (another client wrote them).
    Unreadable,
    Record,
}

/// Reads a partition's record (none yet: a blank one) and what was
/// stored. An unreadable record starts blank and is reported.
pub(super) fn read(
    store: &mut impl Store,
    name: &[u8],
    anomalies: &mut Vec<Anomaly>,
) -> (Stored, Record) {
    match store.record(name) {
        None => (Stored::Nothing, Record::default()),
        Some(Ok(record)) => (Stored::Record, record),
        Some(Err(_)) => {
            report_unreadable(name, anomalies);
            (Stored::Unreadable, Record::default())
        }
    }
}

/// A stored record's text (a page of `partitions`), or (unreadable,
/// reported) a blank one.
pub(super) fn parse_or_report(name: &[u8], raw: &[u8], anomalies: &mut Vec<Anomaly>) -> Record {
    Record::parse(raw).unwrap_or_else(|| {
        report_unreadable(name, anomalies);
        Record::default()
    })
}

fn report_unreadable(name: &[u8], anomalies: &mut Vec<Anomaly>) {
    anomalies.push(Anomaly::PartitionRecordUnreadable {
        partition: name.to_vec(),
    });
}

/// Writes `record` when it differs from the record `opened` as `stored`;
/// deletes it once blank.
pub(super) fn write(
    store: &mut impl Store,
    name: &[u8],
    (stored, opened): (Stored, &Record),
    record: &Record,
) {
    if record.is_blank() {
        if stored != Stored::Nothing {
            store.hdel(HashKey::Partitions, name);
        }
        return;
    }
    if stored != Stored::Record || opened != record {
        store.set_record(name, record);
    }
}

/// The queue's defaults and own options (`policy` fields
/// `default-concurrency`, `default-rate` and `queue-options`); an
/// unreadable value reads as none and is reported. A queue without a
/// policy pays one look.
pub fn read_defaults(store: &mut impl Store, anomalies: &mut Vec<Anomaly>) -> Defaults {
    if store.hlen(HashKey::Policy) == 0 {
        return Defaults::default();
    }
    let (queue, keeping) =
        read_policy_field(store, QUEUE_OPTIONS_FIELD, parse_queue_options, anomalies)
            .unwrap_or_default();
    Defaults {
        cap: read_policy_field(
            store,
            DEFAULT_CONCURRENCY_FIELD,
            |text| text.parse().ok(),
            anomalies,
        ),
        rate: read_policy_field(store, DEFAULT_RATE_FIELD, parse_rate, anomalies),
        queue,
        keeping,
    }
}

/// Whether the queue keeps outcomes (RESULT-TTL or DEDUP-MS), read as
/// [`read_defaults`] reads it: by the keys layout before it opens the keys
/// of finished jobs, which a call touches only on a queue that keeps them
/// (an unreadable policy keeps none, for the call as for this).
pub fn keeps_outcomes(store: &mut impl Store) -> bool {
    store.hlen(HashKey::Policy) > 0
        && read_policy_field(
            store,
            QUEUE_OPTIONS_FIELD,
            parse_queue_options,
            &mut Vec::new(),
        )
        .is_some_and(|(_, keeping)| keeping.keeps_any())
}

/// A `policy` field as `parse` reads it; one that does not read is
/// reported, and reads as none.
pub(super) fn read_policy_field<T>(
    store: &mut impl Store,
    field: &'static str,
    parse: impl Fn(&str) -> Option<T>,
    anomalies: &mut Vec<Anomaly>,
) -> Option<T> {
    let raw = store.hget(HashKey::Policy, field.as_bytes())?;
    let value = std::str::from_utf8(&raw).ok().and_then(parse);
    if value.is_none() {
        anomalies.push(Anomaly::PolicyUnreadable { field });
    }
    value
}

/// Writes a `policy` field, or (None) deletes it.
pub(super) fn write_policy_field(store: &mut impl Store, field: &str, value: Option<&[u8]>) {
    match value {
        Some(text) => store.hset(HashKey::Policy, field.as_bytes(), text),
        None => store.hdel(HashKey::Policy, field.as_bytes()),
    }
}

/// The `policy` field of the queue's own options (CONCURRENCY, RATE,
/// RESULT-TTL, DEDUP-MS): one field, so a queue with a policy reads them
/// with one lookup per call, whether it uses them or not.
pub const QUEUE_OPTIONS_FIELD: &str = "queue-options";

/// The queue's own options as `queue-options` keeps them: `<concurrency>
/// <rate> <per-ms> <burst> <result-ttl-ms> <dedup-ms>`, `-` for none (a
/// rate's three together); None when all are none (no field).
pub(super) fn format_queue_options(queue: QueueLimits, keeping: Keeping) -> Option<String> {
    if queue.is_none() && keeping == Keeping::default() {
        return None;
    }
    let number = |n: Option<i64>| n.map_or("-".to_string(), |n| n.to_string());
    let rate = queue.rate.map_or("- - -".to_string(), format_rate);
    Some(format!(
        "{} {rate} {} {}",
        number(queue.cap.map(|n| n as i64)),
        number(keeping.result_ttl_ms),
        number(keeping.dedup_ms)
    ))
}

fn parse_queue_options(text: &str) -> Option<(QueueLimits, Keeping)> {
    let words: Vec<&str> = text.split(' ').collect();
    let [cap, amount, per_ms, burst, result_ttl, dedup] = words[..] else {
        return None;
    };
    fn positive<T: std::str::FromStr + PartialOrd + Default>(word: &str) -> Option<Option<T>> {
        match word {
            "-" => Some(None),
            word => word.parse().ok().filter(|n| *n > T::default()).map(Some),
        }
    }
    let rate = match amount {
        "-" => None,
        _ => Some(parse_rate(&format!("{amount} {per_ms} {burst}"))?),
    };
    let queue = QueueLimits {
        cap: positive(cap)?,
        rate,
    };
    let keeping = Keeping {
        result_ttl_ms: positive(result_ttl)?,
        dedup_ms: positive(dedup)?,
    };
    Some((queue, keeping))
}

/// A default rate as `policy` keeps it: `<amount> <per-ms> <burst>`.
pub(super) fn format_rate(rate: Rate) -> String {
    format!("{} {} {}", rate.amount, rate.per_ms, rate.burst)
}

fn parse_rate(text: &str) -> Option<Rate> {
    let mut numbers = text
        .split(' ')
        .map(|n| n.parse::<u64>().ok().filter(|&n| n > 0));
    let rate = Rate {
        amount: numbers.next()??,
        per_ms: numbers.next()??,
        burst: numbers.next()??,
    };
    numbers.next().is_none().then_some(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_options_read_back_as_written_and_none_writes_no_field() {
        let queue = QueueLimits {
            cap: Some(7),
            rate: Some(Rate {
                amount: 3,
                per_ms: 1000,
                burst: 9,
            }),
        };
        let keeping = Keeping {
            result_ttl_ms: None,
            dedup_ms: Some(60_000),
        };
        let text = format_queue_options(queue, keeping).unwrap();
        assert_eq!(text, "7 3 1000 9 - 60000");
        assert_eq!(parse_queue_options(&text), Some((queue, keeping)));
        let capped = QueueLimits {
            cap: Some(2),
            rate: None,
        };
        let text = format_queue_options(capped, Keeping::default()).unwrap();
        assert_eq!(
            parse_queue_options(&text),
            Some((capped, Keeping::default()))
        );
        assert_eq!(
            format_queue_options(QueueLimits::default(), Keeping::default()),
            None
        );
        for unreadable in [
            "",
            "7",
            "0 - - - - -",
            "1 2 0 3 - -",
            "1 - - - x -",
            "- - - - - - -",
        ] {
            assert_eq!(parse_queue_options(unreadable), None, "{unreadable:?}");
        }
    }

    #[test]
    fn servable_follows_pause_own_cap_then_default() {
        let mut record = Record {
            leased: 2,
            ..Record::default()
        };
        assert!(record.servable(Defaults::of_cap(None)));
        assert!(!record.servable(Defaults::of_cap(Some(2))));
        record.cap = Some(3);
        assert!(
            record.servable(Defaults::of_cap(Some(2))),
            "own cap wins over the default"
        );
        record.paused = true;
        assert!(!record.servable(Defaults::of_cap(None)));
        record.paused = false;
        record.parking = Parking::Underway;
        assert!(
            record.servable(Defaults::of_cap(None)),
            "served at its own times while parking"
        );
        record.parking = Parking::RejoinOwed;
        assert!(
            !record.servable(Defaults::of_cap(None)),
            "held back until it has rejoined"
        );
    }
}
