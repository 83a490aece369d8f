//! Cron searches with a budget. croner walks the calendar until a pattern
//! matches or the year 5000: a pattern whose days never match (`0 0 0 1 *
//! +MON#5`, the 1st on a fifth Monday) walks every day to it, and one that
//! matches only in a daylight-saving gap walks every second of every gap:
//! tens of milliseconds of the server's one thread per search. Every
//! search here is metered in steps of about the same cost: each wall clock
//! time croner stops at is resolved in the zone (a step), and the days it
//! walked since the last one count a step each. A search ends when its
//! [`STEPS_PER_SEARCH`] are spent. Before croner walks at all, the pattern's
//! days must match within [`DAYS_CHECKED_FIRST`] days: a pattern whose days
//! never match would walk to the year 5000 before its first stop.
//!
//! What a search costs is a function of the pattern, the zone and the start
//! alone (no clock is read), so a replica or a reload decides as the
//! master did. An hourly pattern takes one or two steps; 29 February on a
//! Monday, as many as the days to it (a run up to 21 years ahead is found).

use std::cell::Cell;
use std::cmp::Ordering;

use chrono::{DateTime, Datelike, NaiveDate, TimeZone};
use chrono_tz::Tz;
use croner::errors::CronError;
use croner::time::{CivilDateTime, CronDateTime, Resolution, Weekday};
use croner::Cron;

/// The steps one search may take: at most about 130 ns each on the
/// machines the benchmarks run on (a resolution in a zone with many
/// transitions; a day walked costs less), so a search costs at most about
/// a millisecond. That is 21 years of days, or a daylight-saving gap of two
/// hours walked second by second (a pattern of every second or minute).
pub const STEPS_PER_SEARCH: u32 = 8_000;

/// How many days from the start a pattern's days must match within, or the
/// search ends at once: every pattern whose days match at all matches
/// within a few months of any date (its days repeat with the weekdays and
/// the lengths of the months).
pub const DAYS_CHECKED_FIRST: u32 = 1_461;

/// The steps one call may spend on searches, shared by all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps(u32);

impl Steps {
    pub const fn new(steps: u32) -> Steps {
        Steps(steps)
    }

    /// Enough for one whole search: a search is only started with this,
    /// so one that runs out of steps ran out of its own.
    pub const fn can_search(self) -> bool {
        self.0 >= STEPS_PER_SEARCH
    }

    /// What is left.
    pub const fn left(self) -> u32 {
        self.0
    }
}

/// How a search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// The run found (milliseconds since the epoch).
    Found(i64),
    /// There is none: the pattern's years are behind, or its times lie out
    /// of range.
    Never,
    /// Its steps ran out before a run was found.
    OverBudget,
    /// Not started: the call had not the steps for a whole search left.
    NotStarted,
}

impl Search {
    /// The run found, if any.
    pub fn found(self) -> Option<i64> {
        match self {
            Search::Found(t) => Some(t),
            Search::Never | Search::OverBudget | Search::NotStarted => None,
        }
    }
}

/// The steps a search has left, and the day of its last stop.
struct Meter {
    steps_left: Cell<u32>,
    last_day: Cell<i32>,
}

impl Meter {
    /// Charges `steps`; false once the budget is spent.
    fn charge(&self, steps: u32) -> bool {
        match self.steps_left.get().checked_sub(steps) {
            Some(left) => {
                self.steps_left.set(left);
                true
            }
            None => {
                self.steps_left.set(0);
                false
            }
        }
    }
}

fn day_number(year: i32, month: u32, day: u32) -> Option<i32> {
    NaiveDate::from_ymd_opt(year, month, day).map(|date| date.num_days_from_ce())
}

/// A zoned time whose resolutions croner asks for are charged to a meter.
#[derive(Clone)]
struct Metered<'a> {
    at: DateTime<Tz>,
    meter: &'a Meter,
}

impl CronDateTime for Metered<'_> {
    fn to_civil(&self) -> CivilDateTime {
        self.at.to_civil()
    }

    fn civil_weekday(&self) -> Weekday {
        self.at.civil_weekday()
    }

    fn resolve_civil(&self, civil: CivilDateTime) -> Result<Resolution<Self>, CronError> {
        let day =
            day_number(civil.year(), civil.month(), civil.day()).ok_or(CronError::InvalidTime)?;
        let walked = day.abs_diff(self.meter.last_day.replace(day));
        if !self.meter.charge(walked.saturating_add(1)) {
            return Err(CronError::TimeSearchLimitExceeded);
        }
        let wrap = |at| Metered {
            at,
            meter: self.meter,
        };
        Ok(match self.at.resolve_civil(civil)? {
            Resolution::Single(at) => Resolution::Single(wrap(at)),
            Resolution::Ambiguous(earlier, later) => {
                Resolution::Ambiguous(wrap(earlier), wrap(later))
            }
            Resolution::Gap => Resolution::Gap,
        })
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        Some(Metered {
            at: self.at.checked_add_seconds(seconds)?,
            meter: self.meter,
        })
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.at.cmp_instant(&other.at)
    }
}

/// The steps to the first day from `from` on (or back) that the pattern's
/// days match, within [`DAYS_CHECKED_FIRST`].
fn days_to_a_match(cron: &Cron, from: NaiveDate, forward: bool) -> Option<u32> {
    let mut date = from;
    for steps in 0..DAYS_CHECKED_FIRST {
        let weekday = Weekday::from_days_from_sunday(date.weekday().num_days_from_sunday());
        if matches!(
            cron.pattern
                .day_match(date.year(), date.month(), date.day(), weekday),
            Ok(true)
        ) {
            return Some(steps);
        }
        date = if forward {
            date.succ_opt()?
        } else {
            date.pred_opt()?
        };
    }
    None
}

/// The first run of `cron` in `zone` strictly after `t_ms` (`forward`), or
/// the last at or before it, within [`STEPS_PER_SEARCH`] steps taken from
/// `steps`.
pub fn search(cron: &Cron, zone: &Tz, t_ms: i64, forward: bool, steps: &mut Steps) -> Search {
    if !steps.can_search() {
        return Search::NotStarted;
    }
    // Patterns match whole seconds: a search from a fraction would find
    // that second itself.
    let Some(from) = t_ms
        .div_euclid(1000)
        .checked_mul(1000)
        .and_then(|whole| zone.timestamp_millis_opt(whole).single())
    else {
        return Search::Never;
    };
    let local = from.date_naive();
    let meter = Meter {
        steps_left: Cell::new(STEPS_PER_SEARCH),
        last_day: Cell::new(local.num_days_from_ce()),
    };
    match days_to_a_match(cron, local, forward) {
        Some(steps) if meter.charge(steps) => {}
        _ => {
            steps.0 -= STEPS_PER_SEARCH;
            return Search::OverBudget;
        }
    }
    let origin = Metered {
        at: from,
        meter: &meter,
    };
    let found = if forward {
        cron.find_next_occurrence(&origin, false)
    } else {
        cron.find_previous_occurrence(&origin, true)
    };
    steps.0 -= STEPS_PER_SEARCH - meter.steps_left.get();
    match found {
        Ok(at) => Search::Found(at.at.timestamp_millis()),
        Err(_) if meter.steps_left.get() == 0 => Search::OverBudget,
        Err(_) => Search::Never,
    }
}
