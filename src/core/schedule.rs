//! Recurring jobs fired by the server: a schedule enqueues one item per run,
//! with the id `schedule:<schedule>:<due-ms>` (a form no client may
//! enqueue), in the same call that moves the
//! schedule to its next run. A schedule lives in two keys: its definition in
//! `schedules` (hash) and its next run in `schedule_due` (sorted set, by
//! due time), which the timer reads as it reads `delayed`. The run's id makes a
//! run enqueued twice impossible: an id already in the queue's life is not
//! added again, and the next run is written in the same atomic call.
//!
//! Runs fall either every `period_ms` on the multiples of it since the Unix
//! epoch (so a schedule set again with the same period keeps its runs, and
//! their ids), or when a cron pattern matches in a time zone (croner's
//! semantics, DST included; the zone database is compiled in, so a replica
//! computes what its master did). A run is *missed* when the next one fell
//! due before it fired (a stopped server, a failover, a long script); the
//! schedule's policy says what then: `skip` fires none of them, `one` the
//! latest, `all` every one (a bounded number per timer run on the queue).

use std::str::FromStr;

use chrono_tz::Tz;
use croner::Cron;

use super::cron_search::{search, Search, Steps, STEPS_PER_SEARCH};
use super::scoring::{enter, is_present};
use super::types::{Anomaly, CoreError, Due, NewItem};
use super::virtual_time::Placing;
use crate::limits::{MAX_CRON_LEN, MAX_PERIOD_MS, MAX_WEIGHT};
use crate::store::number::canonical_int;
use crate::store::{HashKey, Store, ZsetKey};

/// When a schedule's runs fall.
#[derive(Debug, Clone)]
pub enum Timing {
    /// Every `period_ms`, at its multiples since the Unix epoch.
    Every { period_ms: i64 },
    /// When `pattern` matches in `zone`.
    Cron {
        pattern: String,
        zone: Tz,
        cron: Box<Cron>,
    },
}

/// Why a timing was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimingError {
    /// EVERY out of 1..=MAX_PERIOD_MS.
    Period,
    /// The pattern is not one croner reads (its message).
    Pattern(String),
    /// Not an IANA time zone name.
    Zone,
}

impl Timing {
    pub fn every(period_ms: i64) -> Result<Timing, TimingError> {
        if !(1..=MAX_PERIOD_MS).contains(&period_ms) {
            return Err(TimingError::Period);
        }
        Ok(Timing::Every { period_ms })
    }

    /// A cron pattern (5 fields; 6 with seconds first; 7 with a year last;
    /// or an alias such as `@daily`) in an IANA zone (UTC when None).
    pub fn cron(pattern: &[u8], zone: Option<&[u8]>) -> Result<Timing, TimingError> {
        let pattern = std::str::from_utf8(pattern)
            .ok()
            .filter(|p| p.len() <= MAX_CRON_LEN)
            .ok_or_else(|| {
                TimingError::Pattern("not a pattern of at most 256 ASCII characters".into())
            })?;
        let zone = match zone {
            None => Tz::UTC,
            Some(raw) => std::str::from_utf8(raw)
                .ok()
                .and_then(|name| Tz::from_str(name).ok())
                .ok_or(TimingError::Zone)?,
        };
        let cron = Cron::from_str(pattern).map_err(|e| refusal(pattern, &e.to_string()))?;
        Ok(Timing::Cron {
            pattern: pattern.to_string(),
            zone,
            cron: Box::new(cron),
        })
    }

    /// The first run strictly after `t_ms` (a pattern with a year may have
    /// none left), a cron search taking its steps from `steps`.
    pub fn next_after(&self, t_ms: i64, steps: &mut Steps) -> Search {
        match self {
            Timing::Every { period_ms } => t_ms
                .div_euclid(*period_ms)
                .checked_add(1)
                .and_then(|n| n.checked_mul(*period_ms))
                .map_or(Search::Never, Search::Found),
            Timing::Cron { zone, cron, .. } => search(cron, zone, t_ms, true, steps),
        }
    }

    /// The last run at or before `t_ms`.
    fn latest_upto(&self, t_ms: i64, steps: &mut Steps) -> Search {
        match self {
            Timing::Every { period_ms } => Search::Found(t_ms.div_euclid(*period_ms) * period_ms),
            Timing::Cron { zone, cron, .. } => search(cron, zone, t_ms, false, steps),
        }
    }

    /// Whether two timings have the same runs (a schedule set again keeps
    /// its next run then).
    fn same_runs(&self, other: &Timing) -> bool {
        match (self, other) {
            (Timing::Every { period_ms: a }, Timing::Every { period_ms: b }) => a == b,
            (
                Timing::Cron {
                    pattern: a,
                    zone: za,
                    ..
                },
                Timing::Cron {
                    pattern: b,
                    zone: zb,
                    ..
                },
            ) => a == b && za == zb,
            _ => false,
        }
    }
}

/// The fields of a pattern of 5, 6 (seconds first) or 7 (a year last).
fn field_names(count: usize) -> Option<&'static [&'static str]> {
    const FIELDS: [&str; 7] = [
        "seconds",
        "minutes",
        "hours",
        "day of month",
        "month",
        "day of week",
        "year",
    ];
    match count {
        5 => Some(&FIELDS[1..6]),
        6 => Some(&FIELDS[..6]),
        7 => Some(&FIELDS[..]),
        _ => None,
    }
}

/// Why croner refused `pattern`, naming the field at fault: croner's own
/// message (`Component error: Number out of bounds.`) does not. The field
/// is the first whose replacement by `*` makes the pattern read.
fn refusal(pattern: &str, why: &str) -> TimingError {
    let fields: Vec<&str> = pattern.split_whitespace().collect();
    let at_fault = field_names(fields.len()).and_then(|names| {
        (0..fields.len()).find_map(|i| {
            let mut starred = fields.clone();
            starred[i] = "*";
            Cron::from_str(&starred.join(" ")).ok().map(|_| names[i])
        })
    });
    TimingError::Pattern(match at_fault {
        Some(field) => format!("its {field} field: {why}"),
        None => why.to_string(),
    })
}

/// What a schedule does with runs it missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    Skip,
    One,
    All,
}

impl Missed {
    pub fn parse(raw: &[u8]) -> Option<Missed> {
        [Missed::Skip, Missed::One, Missed::All]
            .into_iter()
            .find(|m| raw.eq_ignore_ascii_case(m.name().as_bytes()))
    }

    pub const fn name(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::One => "one",
            Missed::All => "all",
        }
    }
}

/// A schedule's definition: when, what it does with missed runs, and the
/// item each run enqueues.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub timing: Timing,
    pub missed: Missed,
    pub partition: Vec<u8>,
    pub weight: u64,
    pub payload: Vec<u8>,
}

impl Schedule {
    /// The definition as stored in `schedules` and carried by `VTRR.APPLY`:
    /// length-prefixed fields (`<len>:<bytes>,`), binary-safe:
    /// `every|cron`, the period or pattern, the zone (empty for every), the
    /// missed policy, the weight, the partition, the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.partition.len() + self.payload.len());
        let mut field = |bytes: &[u8]| {
            out.extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
            out.push(b':');
            out.extend_from_slice(bytes);
            out.push(b',');
        };
        match &self.timing {
            Timing::Every { period_ms } => {
                field(b"every");
                field(itoa::Buffer::new().format(*period_ms).as_bytes());
                field(b"");
            }
            Timing::Cron { pattern, zone, .. } => {
                field(b"cron");
                field(pattern.as_bytes());
                field(zone.name().as_bytes());
            }
        }
        field(self.missed.name().as_bytes());
        field(itoa::Buffer::new().format(self.weight).as_bytes());
        field(&self.partition);
        field(&self.payload);
        out
    }

    /// Reads [`encode`](Self::encode)'s form back, checking every field as
    /// the command does; None when it is not one.
    pub fn decode(raw: &[u8]) -> Option<Schedule> {
        let mut rest = raw;
        let mut fields: [&[u8]; 7] = [&[]; 7];
        for field in &mut fields {
            let colon = rest.iter().position(|&b| b == b':')?;
            let len: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
            let body = rest.get(colon + 1..)?;
            if body.get(len) != Some(&b',') {
                return None;
            }
            *field = &body[..len];
            rest = &body[len + 1..];
        }
        if !rest.is_empty() {
            return None;
        }
        let [kind, spec, zone, missed, weight, partition, payload] = fields;
        let timing = match kind {
            b"every" if zone.is_empty() => Timing::every(canonical_int(spec)?).ok()?,
            b"cron" => Timing::cron(spec, Some(zone)).ok()?,
            _ => return None,
        };
        let weight = canonical_int(weight).filter(|w| (1..=MAX_WEIGHT).contains(w))?;
        Some(Schedule {
            timing,
            missed: Missed::parse(missed)?,
            partition: partition.to_vec(),
            weight: weight as u64,
            payload: payload.to_vec(),
        })
    }
}

/// What every run's id begins with, and no client's ENQUEUE or DEFER
/// may: a run's id is predictable, and one taken first would make the
/// genuine run a duplicate, skipped, with the impostor's payload served.
pub const RUN_ID_PREFIX: &[u8] = b"schedule:";

/// The id of a schedule's run due at `due_ms`: `schedule:<name>:<due-ms>`.
pub fn run_id(name: &[u8], due_ms: i64) -> Vec<u8> {
    let mut id = Vec::with_capacity(RUN_ID_PREFIX.len() + name.len() + 21);
    id.extend_from_slice(RUN_ID_PREFIX);
    id.extend_from_slice(name);
    id.push(b':');
    id.extend_from_slice(itoa::Buffer::new().format(due_ms).as_bytes());
    id
}

/// `VTRR.SCHEDULE`: sets schedule `name` (a new one, or a new definition
/// of one). Its next run is the first after `now_ms`, unless it was set
/// before with the same runs: then its next run stays (setting the same
/// schedule again at every deploy moves nothing). The next run, or with
/// nothing written [`CoreError::NoRunAhead`], or
/// [`CoreError::ScheduleSearchTooLong`] when a cron search found no run
/// within its steps.
pub fn schedule(
    store: &mut impl Store,
    now_ms: i64,
    name: &[u8],
    schedule: &Schedule,
) -> Result<i64, CoreError> {
    let kept = store
        .hget(HashKey::Schedules, name)
        .and_then(|raw| Schedule::decode(&raw))
        .filter(|old| old.timing.same_runs(&schedule.timing))
        .and_then(|_| store.zscore(ZsetKey::ScheduleDue, name))
        .map(|due| due as i64);
    let next = match kept {
        Some(next) => next,
        None => match schedule
            .timing
            .next_after(now_ms, &mut Steps::new(STEPS_PER_SEARCH))
        {
            Search::Found(next) => next,
            Search::Never => return Err(CoreError::NoRunAhead),
            Search::OverBudget | Search::NotStarted => {
                return Err(CoreError::ScheduleSearchTooLong)
            }
        },
    };
    store.hset(HashKey::Schedules, name, &schedule.encode());
    store.zadd(ZsetKey::ScheduleDue, name, next as f64);
    Ok(next)
}

/// `VTRR.UNSCHEDULE`: removes each schedule named; how many there were.
/// Runs already enqueued stay.
pub fn unschedule(store: &mut impl Store, names: &[&[u8]]) -> u64 {
    let mut removed = 0;
    for name in names {
        let had_due = store.zrem(ZsetKey::ScheduleDue, name);
        let had_definition = store.hget(HashKey::Schedules, name).is_some();
        store.hdel(HashKey::Schedules, name);
        removed += u64::from(had_due || had_definition);
    }
    removed
}

/// A schedule as `VTRR.SCHEDULES` shows it.
#[derive(Debug, Clone)]
pub struct ScheduleView {
    pub name: Vec<u8>,
    /// None when the stored definition does not read as one.
    pub schedule: Option<Schedule>,
    /// The run it waits for (None when it has none ahead).
    pub next_ms: Option<i64>,
    /// Its next runs from `next_ms` on, as many as asked.
    pub runs: Vec<i64>,
}

/// The search steps one `VTRR.SCHEDULES` call may spend on the runs it
/// shows: at most about 6 ms, whatever the patterns.
pub const STEPS_PER_LISTING: u32 = 5 * STEPS_PER_SEARCH;

/// `VTRR.SCHEDULES`: one HSCAN step over `schedules`, each with its next
/// `runs` runs, as many as [`STEPS_PER_LISTING`] finds.
pub fn schedules_page(
    store: &mut impl Store,
    cursor: u64,
    count: usize,
    runs: usize,
) -> Result<(u64, Vec<ScheduleView>), CoreError> {
    let (next, entries) = store.hscan(HashKey::Schedules, cursor, count)?;
    let mut steps = Steps::new(STEPS_PER_LISTING);
    let views = entries
        .into_iter()
        .map(|(name, raw)| view(store, name, &raw, runs, &mut steps))
        .collect();
    Ok((next, views))
}

/// `VTRR.SCHEDULES ... SCHEDULE <name>`: one schedule, if it exists.
pub fn schedule_view(store: &mut impl Store, name: &[u8], runs: usize) -> Option<ScheduleView> {
    let raw = store.hget(HashKey::Schedules, name)?;
    let mut steps = Steps::new(STEPS_PER_LISTING);
    Some(view(store, name.to_vec(), &raw, runs, &mut steps))
}

fn view(
    store: &mut impl Store,
    name: Vec<u8>,
    raw: &[u8],
    runs: usize,
    steps: &mut Steps,
) -> ScheduleView {
    let schedule = Schedule::decode(raw);
    let next_ms = store
        .zscore(ZsetKey::ScheduleDue, &name)
        .map(|due| due as i64);
    let mut upcoming = Vec::with_capacity(runs.min(64));
    let mut next = next_ms;
    while let (Some(due), true) = (next, upcoming.len() < runs) {
        upcoming.push(due);
        next = schedule
            .as_ref()
            .and_then(|s| s.timing.next_after(due, steps).found());
    }
    ScheduleView {
        name,
        schedule,
        next_ms,
        runs: upcoming,
    }
}

/// The search steps that fund every firing one needs (three at most: a
/// missed run under `one`). The timer gives them to its first call of a
/// run, so a costly firing is made at the latest in the next run; its
/// later calls get [`STEPS_PER_SEARCH`], so none of them holds the server
/// for more than one search past the run's budget.
pub const STEPS_FOR_ANY_FIRING: u32 = 3 * STEPS_PER_SEARCH;

/// Where a firing moves its schedule.
enum NextRun {
    At(i64),
    /// None left: the pattern's years are behind.
    Never,
    /// A search ran out of steps: the schedule has no run the server can
    /// find, so it leaves `schedule_due` and is not searched again until it
    /// is set again.
    NotFound,
}

/// What a firing does, decided before anything is written.
struct Firing {
    run: Option<i64>,
    next: NextRun,
}

/// The runs of a schedule due at `due_ms`, at `now_ms`, as its missed
/// policy says; None when `steps` could not fund a search (the schedule
/// waits for the next call).
fn plan(schedule: &Schedule, due_ms: i64, now_ms: i64, steps: &mut Steps) -> Option<Firing> {
    let timing = &schedule.timing;
    let next_of = |found: Search| match found {
        Search::Found(next) => Some(NextRun::At(next)),
        Search::Never => Some(NextRun::Never),
        Search::OverBudget => Some(NextRun::NotFound),
        Search::NotStarted => None,
    };
    let after_due = timing.next_after(due_ms, steps);
    let missed = matches!(after_due, Search::Found(next) if next <= now_ms);
    if !missed {
        // Nothing fell due between: the due run fires, the next follows it.
        return Some(Firing {
            run: Some(due_ms),
            next: next_of(after_due)?,
        });
    }
    let run = match schedule.missed {
        Missed::All => {
            return Some(Firing {
                run: Some(due_ms),
                next: next_of(after_due)?,
            })
        }
        Missed::One => match timing.latest_upto(now_ms, steps) {
            Search::Found(latest) if latest >= due_ms => Some(latest),
            Search::NotStarted => return None,
            _ => Some(due_ms),
        },
        Missed::Skip => None,
    };
    Some(Firing {
        run,
        next: next_of(timing.next_after(now_ms, steps))?,
    })
}

/// The timer's part: fires up to `limit` runs of the schedules due at
/// `now_ms`, each enqueued at `now_ms` (scored as an ENQUEUE then), and
/// moves each schedule to its next run as its missed policy says, within
/// `steps` of cron searches (a firing they cannot fund waits for a call
/// with more). How many it took: runs fired or found already in the
/// queue's life, and missed runs skipped.
pub(super) fn fire_at(
    store: &mut impl Store,
    at: &Placing,
    now_ms: i64,
    limit: usize,
    mut steps: Steps,
    outcome: &mut Due,
) -> usize {
    let mut taken = 0;
    while taken < limit && steps.can_search() {
        let Some((name, due)) = store
            .zrange_upto(ZsetKey::ScheduleDue, now_ms as f64, 1)
            .pop()
        else {
            break;
        };
        let due_ms = due as i64;
        let Some(schedule) = store
            .hget(HashKey::Schedules, &name)
            .and_then(|raw| Schedule::decode(&raw))
        else {
            // Written by another client: nothing to fire; the definition,
            // if any, stays for an operator to read or remove.
            store.zrem(ZsetKey::ScheduleDue, &name);
            outcome
                .anomalies
                .push(Anomaly::ScheduleUnreadable { schedule: name });
            taken += 1;
            continue;
        };
        let Some(firing) = plan(&schedule, due_ms, now_ms, &mut steps) else {
            break; // the next call, with steps afresh
        };
        taken += 1;
        if let Some(run) = firing.run {
            let id = run_id(&name, run);
            if !is_present(store, &id) {
                let item = NewItem {
                    partition: &schedule.partition,
                    id: &id,
                    weight: schedule.weight,
                    payload: &schedule.payload,
                };
                enter(store, at, now_ms, &item, 0, &mut outcome.anomalies);
                outcome.fired += 1;
            }
        }
        match firing.next {
            NextRun::At(next) => store.zadd(ZsetKey::ScheduleDue, &name, next as f64),
            NextRun::Never => {
                store.zrem(ZsetKey::ScheduleDue, &name);
            }
            NextRun::NotFound => {
                store.zrem(ZsetKey::ScheduleDue, &name);
                outcome
                    .anomalies
                    .push(Anomaly::ScheduleRunNotFound { schedule: name });
            }
        }
    }
    taken
}
