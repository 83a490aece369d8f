//! A partition's record, the queue's typed value for one partition: how
//! many of its items are in each state, its controls (cap, share, pause),
//! its parking, wait and totals. The core decides with it
//! (`core::partitions`); a store keeps it as it likes. Its text form is the
//! keys layout's field of `vtrr:<name>:partitions` (and what `VTRR.INSPECT`
//! shows of a native queue).

/// Whether a partition's items queued before it came under control are
/// still being moved from `queue` to `held` (see `admission::park_queued`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Parking {
    #[default]
    Done,
    /// Some may still be in `queue` (served there at their own times while
    /// the partition may be served).
    Underway,
    /// Underway, and it was resumed (or its cap raised) meanwhile: its
    /// backlog rejoins the current virtual time once all of it is held.
    RejoinOwed,
}

/// What a partition (or, summed, the queue) was served, counted as it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// Items accepted by ENQUEUE or DEFER.
    pub enqueued: u64,
    pub leased: u64,
    pub acked: u64,
    pub nacked: u64,
    /// Items dead-lettered, whichever way.
    pub dead: u64,
    /// Leases that ran out before their item was settled.
    pub expired: u64,
}

impl Totals {
    pub const FIELDS: [&'static str; 6] =
        ["enqueued", "leased", "acked", "nacked", "dead", "expired"];

    /// The counters in [`Totals::FIELDS`] order.
    pub fn values(&self) -> [u64; 6] {
        [
            self.enqueued,
            self.leased,
            self.acked,
            self.nacked,
            self.dead,
            self.expired,
        ]
    }

    pub fn from_values([enqueued, leased, acked, nacked, dead, expired]: [u64; 6]) -> Self {
        Totals {
            enqueued,
            leased,
            acked,
            nacked,
            dead,
            expired,
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Totals::default()
    }
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
    /// Added to the virtual times stored in `held` (a rejoin raises it).
    pub offset: i64,
    /// The weights of its queued items cancelled (`dead::cancel`); given
    /// back to its virtual time when it has nothing queued.
    pub gap: u64,
    /// Virtual time charged (reported cost over declared weight, see
    /// `core::charge`) and not yet applied to its queued items: they are
    /// being parked, and move once all of them are held.
    pub owed: i64,
    /// Its rate limit (`VTRR.LIMIT ... RATE`): a token bucket that each
    /// lease spends its item's weight from (see `core::throttle`).
    pub rate: Option<Rate>,
    /// The bucket, in token-milliseconds (a token is `rate.per_ms` of them,
    /// so a refill of `amount` tokens per `per_ms` adds `amount` per
    /// millisecond, in integers): below 0 after a lease heavier than what
    /// was left.
    pub bucket: i64,
    /// When the bucket was last refilled (Unix ms); None: full, as of any
    /// time (a rate just set, by a command without a clock).
    pub refilled_at: Option<i64>,
    pub parking: Parking,
    /// The id this partition has in `queue` while under control.
    pub head: Option<Vec<u8>>,
    /// Since when its line has waited (Unix ms): it had items queued and
    /// none leased since. None with nothing queued, or not yet known (a
    /// record of an earlier version, a RECOUNT) until a call with a clock
    /// changes the partition.
    pub waiting_since: Option<i64>,
    /// The wait its place in `rank_waiting` was written for: kept while
    /// the line's wait restarts less than the ranking's grain later (see
    /// `ranks`), so a line leased many times a second rewrites its place
    /// once per grain, whenever the run's clock crosses what.
    pub ranked_since: Option<i64>,
    /// What it was served while it had a record (a blank record goes, its
    /// totals with it: they live on in the queue's).
    pub totals: Totals,
    /// The queued count its place in `rank_queued` was written for (0: not
    /// there); kept within 1/16 of `queued` (see `ranks`).
    pub ranked_queued: u64,
    /// What it has at priority levels other than 0 (see `core::levels`),
    /// in descending level order: the counts, offsets and charges owed that
    /// `queued`, `offset` and `owed` keep for level 0.
    pub levels: Vec<LevelState>,
    /// Most items it may have waiting (queued or delayed): an ENQUEUE or
    /// DEFER past it is refused whole (`VTRR.LIMIT ... MAX-QUEUED`; None:
    /// the queue's default, if any).
    pub max_queued: Option<u64>,
}

/// A partition's items at one priority level other than 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelState {
    pub level: i8,
    /// Of its queued items (in `queued`), those at this level.
    pub queued: u64,
    /// Added to the relative times of its held items at this level.
    pub offset: i64,
    /// Virtual time charged at this level and not yet applied.
    pub owed: i64,
}

impl LevelState {
    fn is_blank(&self) -> bool {
        self.queued == 0 && self.offset == 0 && self.owed == 0
    }
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
            owed: 0,
            rate: None,
            bucket: 0,
            refilled_at: None,
            parking: Parking::Done,
            head: None,
            waiting_since: None,
            ranked_since: None,
            totals: Totals::default(),
            ranked_queued: 0,
            levels: Vec::new(),
            max_queued: None,
        }
    }
}

/// Marks the fields that follow the parking in records since the rankings:
/// not a number, so an earlier version refuses such a record rather than
/// misreads it (where earlier versions kept a shift bound, always `0`).
const SINCE_RANKINGS: &[u8] = b"t";

/// Marks records since waits rank by age (`ranked_since` after the wait):
/// a version that knows only `t` refuses them rather than read the
/// ranked wait as the first total.
const SINCE_AGED_WAITS: &[u8] = b"u";

/// Marks records that carry a charge owed, a rate limit or a bucket (after the
/// ranked queued count): written only then, so a queue without either keeps
/// `u` records, and a version that knows only `u` refuses a `w` one.
const SINCE_COSTS: &[u8] = b"w";

/// Marks records with priority levels: the fields of `w`, then `<count>`
/// and `<level> <queued> <offset> <owed>` for each level (before the head).
const SINCE_LEVELS: &[u8] = b"x";

/// Marks records with their own MAX-QUEUED: the fields of `x` (levels
/// written even when there are none), then `<max-queued>` before the head.
/// Written only then, so a version that knows only `x` refuses just those
/// records.
const SINCE_BACKLOG_LIMITS: &[u8] = b"y";

/// A partition's rate limit: `amount` weight units per `per_ms`
/// milliseconds, at most `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub amount: u64,
    pub per_ms: u64,
    pub burst: u64,
}

impl Record {
    /// `<queued> <held> <leased> <delayed> <dead>`, then, only when any
    /// differs from its default, `<cap|-> <share> <paused> <carry> <offset>
    /// <gap> <parking> u <waiting-since|-> <ranked-since|-> <enqueued>
    /// <leased> <acked> <nacked> <dead> <expired> <ranked-queued>[ <head
    /// id>]` (the head id, any bytes, comes last); with a charge owed or a
    /// rate or a bucket not full, `w` in place of `u` and `<owed> <rate|-> <per-ms> <burst>
    /// <bucket> <refilled-at>` after `<ranked-queued>`. The first rankings wrote
    /// `t` and no `ranked-since`; earlier versions `0` for `t` and nothing
    /// up to the head.
    /// Written on every change of a partition's counts, so it is short in
    /// the common case and formatted without `format!`.
    pub fn format(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        let mut digits = itoa::Buffer::new();
        let push = |out: &mut Vec<u8>, number: &str| {
            out.extend_from_slice(number.as_bytes());
            out.push(b' ');
        };
        for count in [self.queued, self.held, self.leased, self.delayed, self.dead] {
            push(&mut out, digits.format(count));
        }
        if self.has_settings()
            || self.carry != 0
            || self.offset != 0
            || self.gap != 0
            || self.owed != 0
            || self.refilled_at.is_some()
            || self.parking != Parking::Done
            || self.head.is_some()
            || self.waiting_since.is_some()
            || !self.totals.is_zero()
            || self.ranked_queued != 0
            || !self.levels.is_empty()
        {
            match self.cap {
                Some(cap) => push(&mut out, digits.format(cap)),
                None => push(&mut out, "-"),
            }
            push(&mut out, digits.format(self.share));
            push(&mut out, digits.format(u8::from(self.paused)));
            push(&mut out, digits.format(self.carry));
            push(&mut out, digits.format(self.offset));
            push(&mut out, digits.format(self.gap));
            let parking = match self.parking {
                Parking::Done => 0u8,
                Parking::Underway => 1,
                Parking::RejoinOwed => 2,
            };
            push(&mut out, digits.format(parking));
            // A bucket not full is kept under the default rate too.
            let backlog_limit = self.max_queued.is_some();
            let levels = backlog_limit || !self.levels.is_empty();
            let costs =
                levels || self.owed != 0 || self.rate.is_some() || self.refilled_at.is_some();
            out.extend_from_slice(match (backlog_limit, levels, costs) {
                (true, _, _) => SINCE_BACKLOG_LIMITS,
                (false, true, _) => SINCE_LEVELS,
                (false, false, true) => SINCE_COSTS,
                (false, false, false) => SINCE_AGED_WAITS,
            });
            out.push(b' ');
            for since in [self.waiting_since, self.ranked_since] {
                match since {
                    Some(since) => push(&mut out, digits.format(since)),
                    None => push(&mut out, "-"),
                }
            }
            for count in self.totals.values() {
                push(&mut out, digits.format(count));
            }
            push(&mut out, digits.format(self.ranked_queued));
            if costs {
                push(&mut out, digits.format(self.owed));
                match self.rate {
                    Some(rate) => {
                        for n in [rate.amount, rate.per_ms, rate.burst] {
                            push(&mut out, digits.format(n));
                        }
                    }
                    None => out.extend_from_slice(b"- 0 0 "),
                }
                push(&mut out, digits.format(self.bucket));
                match self.refilled_at {
                    Some(at) => push(&mut out, digits.format(at)),
                    None => push(&mut out, "-"),
                }
            }
            if levels {
                push(&mut out, digits.format(self.levels.len()));
                for level in &self.levels {
                    push(&mut out, digits.format(level.level));
                    push(&mut out, digits.format(level.queued));
                    push(&mut out, digits.format(level.offset));
                    push(&mut out, digits.format(level.owed));
                }
            }
            if let Some(max_queued) = self.max_queued {
                push(&mut out, digits.format(max_queued));
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
        let mut fields = Fields(raw);
        // Read on every change of a partition: digits by hand, not through
        // `str::parse`, which checks UTF-8 and signs each time.
        fn number<T: TryFrom<i128>>(raw: Option<&[u8]>) -> Option<T> {
            let raw = raw?;
            let (negative, digits) = match raw.split_first()? {
                (b'-', rest) => (true, rest),
                _ => (false, raw),
            };
            if digits.is_empty() || digits.len() > 20 {
                return None;
            }
            let mut value: i128 = 0;
            for &digit in digits {
                if !digit.is_ascii_digit() {
                    return None;
                }
                value = value * 10 + i128::from(digit - b'0');
            }
            T::try_from(if negative { -value } else { value }).ok()
        }
        let mut record = Record {
            queued: number(fields.next())?,
            held: number(fields.next())?,
            leased: number(fields.next())?,
            delayed: number(fields.next())?,
            dead: number(fields.next())?,
            ..Record::default()
        };
        let Some(cap) = fields.next() else {
            return Some(record); // the short form: settings at their defaults
        };
        record.cap = match cap {
            b"-" => None,
            raw => Some(number(Some(raw))?),
        };
        record.share = number::<u64>(fields.next())?.max(1);
        record.paused = match fields.next()? {
            b"0" => false,
            b"1" => true,
            _ => return None,
        };
        record.carry = number(fields.next())?;
        record.offset = number(fields.next())?;
        record.gap = number(fields.next())?;
        let parking: i64 = number(fields.next())?;
        let slot = fields.next()?;
        let known = [
            SINCE_BACKLOG_LIMITS,
            SINCE_LEVELS,
            SINCE_COSTS,
            SINCE_AGED_WAITS,
            SINCE_RANKINGS,
        ];
        if known.contains(&slot) {
            let levels = slot == SINCE_LEVELS || slot == SINCE_BACKLOG_LIMITS;
            record.parking = match parking {
                0 => Parking::Done,
                1 => Parking::Underway,
                2 => Parking::RejoinOwed,
                _ => return None,
            };
            let mut since = || match fields.next()? {
                b"-" => Some(None),
                raw => Some(Some(number(Some(raw))?)),
            };
            record.waiting_since = since()?;
            // A record of the first rankings ranked its wait as it was (to
            // the grain): its place stands for its wait until it moves.
            record.ranked_since = if slot != SINCE_RANKINGS {
                since()?
            } else {
                record.waiting_since
            };
            let mut totals = [0u64; 6];
            for total in &mut totals {
                *total = number(fields.next())?;
            }
            record.totals = Totals::from_values(totals);
            record.ranked_queued = number(fields.next())?;
            if slot == SINCE_COSTS || levels {
                record.owed = number(fields.next())?;
                let amount = fields.next()?;
                let (per_ms, burst) = (number(fields.next())?, number(fields.next())?);
                record.rate = match amount {
                    b"-" => None,
                    // Zero in any of them would divide by zero: unreadable.
                    raw => Some(Rate {
                        amount: number(Some(raw)).filter(|&n: &u64| n > 0)?,
                        per_ms: Some(per_ms).filter(|&n: &u64| n > 0)?,
                        burst: Some(burst).filter(|&n: &u64| n > 0)?,
                    }),
                };
                record.bucket = number(fields.next())?;
                record.refilled_at = match fields.next()? {
                    b"-" => None,
                    raw => Some(number(Some(raw))?),
                };
            }
            if levels {
                let count: usize = number(fields.next())?;
                // At most one entry per level: a count past that is garbage.
                if count > 256 {
                    return None;
                }
                for _ in 0..count {
                    let level = LevelState {
                        level: number(fields.next())?,
                        queued: number(fields.next())?,
                        offset: number(fields.next())?,
                        owed: number(fields.next())?,
                    };
                    let in_order = record
                        .levels
                        .last()
                        .is_none_or(|last| last.level > level.level);
                    if level.level == 0 || !in_order {
                        return None;
                    }
                    record.levels.push(level);
                }
            }
            if slot == SINCE_BACKLOG_LIMITS {
                record.max_queued = Some(number(fields.next()).filter(|&n: &u64| n > 0)?);
            }
        } else {
            let earlier_shift_bound: i64 = number(Some(slot))?;
            record.parking = match (parking, earlier_shift_bound) {
                (0, 0) => Parking::Done,
                (1, 0) => Parking::Underway,
                (2, 0) => Parking::RejoinOwed,
                // Written by an earlier version, with a shift its items
                // still in `queue` owed (its held items already had theirs):
                // they are served at their own times, as that version's
                // LEASE would have served them had it not shifted them.
                // Nothing is listed in `parking` for it.
                (shift, _) if shift > 2 || earlier_shift_bound != 0 => Parking::Done,
                _ => return None,
            };
        }
        record.head = fields.rest().map(<[u8]>::to_vec);
        Some(record)
    }

    pub fn has_settings(&self) -> bool {
        self.cap.is_some()
            || self.share != 1
            || self.paused
            || self.rate.is_some()
            || self.max_queued.is_some()
    }

    /// Its state at `level` (other than 0), if it has any.
    pub fn at_level(&self, level: i8) -> Option<&LevelState> {
        self.levels.iter().find(|state| state.level == level)
    }

    /// Its state at `level` (other than 0), added blank when missing.
    pub fn at_level_mut(&mut self, level: i8) -> &mut LevelState {
        debug_assert!(level != 0, "level 0 lives in the record's own fields");
        let at = match self.levels.iter().position(|state| state.level <= level) {
            Some(at) if self.levels[at].level == level => return &mut self.levels[at],
            Some(at) => at,
            None => self.levels.len(),
        };
        let blank = LevelState {
            level,
            queued: 0,
            offset: 0,
            owed: 0,
        };
        self.levels.insert(at, blank);
        &mut self.levels[at]
    }

    /// Drops the levels left with nothing.
    pub fn forget_blank_levels(&mut self) {
        self.levels.retain(|state| !state.is_blank());
    }
}

/// A record's space-separated fields, then the rest as it is (a head id
/// may hold spaces).
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.0.is_empty() {
            return None;
        }
        let (field, rest) = match self.0.iter().position(|b| *b == b' ') {
            Some(at) => (&self.0[..at], &self.0[at + 1..]),
            None => (self.0, &b""[..]),
        };
        self.0 = rest;
        Some(field)
    }

    fn rest(self) -> Option<&'a [u8]> {
        (!self.0.is_empty()).then_some(self.0)
    }
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
            owed: -11,
            rate: Some(Rate {
                amount: 3,
                per_ms: 250,
                burst: 9,
            }),
            bucket: -40,
            refilled_at: Some(1_700_000_000_200),
            parking: Parking::RejoinOwed,
            head: Some(b"id with spaces \x00 and bytes".to_vec()),
            waiting_since: Some(1_700_000_000_123),
            ranked_since: Some(1_700_000_000_100),
            totals: Totals::from_values([1, 2, 3, 4, 5, 6]),
            ranked_queued: 7,
            levels: vec![
                LevelState {
                    level: 100,
                    queued: 2,
                    offset: -3,
                    owed: 0,
                },
                LevelState {
                    level: -4,
                    queued: 0,
                    offset: 0,
                    owed: 8,
                },
            ],
            max_queued: Some(500),
        };
        assert_eq!(Record::parse(&record.format()), Some(record));
        let prioritised = Record {
            queued: 1,
            levels: vec![LevelState {
                level: 5,
                queued: 1,
                offset: 0,
                owed: 0,
            }],
            ..Record::default()
        };
        assert_eq!(
            prioritised.format(),
            b"1 0 0 0 0 - 1 0 0 0 0 0 x - - 0 0 0 0 0 0 0 0 - 0 0 0 - 1 5 1 0 0"
        );
        assert_eq!(Record::parse(&prioritised.format()), Some(prioritised));
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
        let owing = Record {
            queued: 1,
            owed: 4,
            ..Record::default()
        };
        assert_eq!(
            owing.format(),
            b"1 0 0 0 0 - 1 0 0 0 0 0 w - - 0 0 0 0 0 0 0 4 - 0 0 0 -"
        );
        assert_eq!(Record::parse(&owing.format()), Some(owing));
        let throttled = Record {
            queued: 2,
            rate: Some(Rate {
                amount: 5,
                per_ms: 1000,
                burst: 10,
            }),
            bucket: -250,
            refilled_at: Some(1_700_000_000_000),
            head: Some(b"h 1".to_vec()),
            ..Record::default()
        };
        assert_eq!(
            throttled.format(),
            b"2 0 0 0 0 - 1 0 0 0 0 0 w - - 0 0 0 0 0 0 0 0 5 1000 10 -250 1700000000000 h 1"
        );
        assert_eq!(Record::parse(&throttled.format()), Some(throttled));
        let bounded = Record {
            queued: 2,
            max_queued: Some(100),
            head: Some(b"h".to_vec()),
            ..Record::default()
        };
        assert_eq!(
            bounded.format(),
            b"2 0 0 0 0 - 1 0 0 0 0 0 y - - 0 0 0 0 0 0 0 0 - 0 0 0 - 0 100 h"
        );
        assert_eq!(Record::parse(&bounded.format()), Some(bounded));
        // A MAX-QUEUED of 0 is no record this module writes: unreadable.
        assert_eq!(
            Record::parse(b"2 0 0 0 0 - 1 0 0 0 0 0 y - - 0 0 0 0 0 0 0 0 - 0 0 0 - 0 0"),
            None
        );
    }

    #[test]
    fn a_record_of_an_earlier_version_with_a_pending_shift_reads_as_done() {
        let record = Record::parse(b"3 0 0 0 0 - 1 0 0 0 0 4 17").unwrap();
        assert_eq!(record.parking, Parking::Done);
        assert_eq!(record.head, None);
        let record = Record::parse(b"3 0 0 0 0 - 1 0 0 0 0 0 0 x").unwrap();
        assert_eq!(record.parking, Parking::Done);
        assert_eq!(record.head, Some(b"x".to_vec()));
    }

    #[test]
    fn a_record_of_the_first_rankings_ranks_its_wait_as_it_is() {
        let record =
            Record::parse(b"3 0 0 0 0 - 1 0 0 0 0 0 t 1700000000123 1 2 3 4 5 6 3 h").unwrap();
        assert_eq!(record.waiting_since, Some(1_700_000_000_123));
        assert_eq!(record.ranked_since, record.waiting_since);
        assert_eq!(record.totals, Totals::from_values([1, 2, 3, 4, 5, 6]));
        assert_eq!(
            (record.ranked_queued, record.head),
            (3, Some(b"h".to_vec()))
        );
        let waiting = Record::parse(b"3 0 0 0 0 - 1 0 0 0 0 0 t - 0 0 0 0 0 0 3").unwrap();
        assert_eq!((waiting.waiting_since, waiting.ranked_since), (None, None));
    }

    #[test]
    fn garbage_does_not_parse() {
        for raw in [
            &b""[..],
            b"1 2 3",
            b"1 0 0 0 0 - 1 2 0 0",
            b"x 0 0 0 0 - 1 0 0 0",
            // Levels out of order, level 0 among them, a count past the end.
            b"1 0 0 0 0 - 1 0 0 0 0 0 x - - 0 0 0 0 0 0 0 0 - 0 0 0 - 2 1 0 0 0 5 1 0 0",
            b"1 0 0 0 0 - 1 0 0 0 0 0 x - - 0 0 0 0 0 0 0 0 - 0 0 0 - 1 0 1 0 0",
            b"1 0 0 0 0 - 1 0 0 0 0 0 x - - 0 0 0 0 0 0 0 0 - 0 0 0 - 2 5 1 0 0",
        ] {
            assert_eq!(Record::parse(raw), None, "{raw:?}");
        }
    }
}
