//! Cron searches with a budget: a pattern that never matches, or matches
//! only in daylight-saving gaps, ends within its steps; every other run is
//! the one croner finds unbounded; the steps of a call are shared; the
//! timer fires planted costly definitions within its call's steps.

use std::str::FromStr;

use chrono::TimeZone;
use chrono_tz::Tz;
use croner::Cron;
use proptest::prelude::*;

use super::*;
use crate::core::cron_search::{search, Search, Steps, STEPS_PER_SEARCH};
use crate::store::{HashKey, Store, ZsetKey};

const DEC_2026: i64 = 1_796_000_000_000;

fn searched(pattern: &str, zone: &str, t_ms: i64, forward: bool) -> (Search, u32) {
    let cron = Cron::from_str(pattern).unwrap();
    let mut steps = Steps::new(STEPS_PER_SEARCH);
    let found = search(
        &cron,
        &Tz::from_str(zone).unwrap(),
        t_ms,
        forward,
        &mut steps,
    );
    (found, STEPS_PER_SEARCH - steps.left())
}

/// What croner finds with no budget, from the same whole second.
fn unbounded(pattern: &str, zone: &Tz, t_ms: i64, forward: bool) -> Option<i64> {
    let cron = Cron::from_str(pattern).unwrap();
    let from = zone
        .timestamp_millis_opt(t_ms.div_euclid(1000) * 1000)
        .single()?;
    let found = if forward {
        cron.find_next_occurrence(&from, false)
    } else {
        cron.find_previous_occurrence(&from, true)
    };
    found.ok().map(|at| at.timestamp_millis())
}

#[test]
fn a_pattern_whose_days_never_match_ends_within_its_steps() {
    // The 1st on a fifth Monday: croner alone walks every day to the year 5000.
    for forward in [true, false] {
        let (found, spent) = searched("0 0 0 1 * +MON#5", "UTC", DEC_2026, forward);
        assert_eq!((found, spent), (Search::OverBudget, STEPS_PER_SEARCH));
    }
    // 31 February: the days match (the 31st), the months never do.
    let (found, _) = searched("0 0 31 2 *", "UTC", DEC_2026, true);
    assert_eq!(found, Search::OverBudget);
}

#[test]
fn a_pattern_that_matches_only_in_daylight_saving_gaps_ends_within_its_steps() {
    // Troll skips 01:00-03:00 on the last Sunday of March: every second of it
    // is a gap, and croner alone steps through each, every year.
    let (found, spent) = searched("* * 1-2 * 3 +SUNL", "Antarctica/Troll", DEC_2026, true);
    assert_eq!((found, spent), (Search::OverBudget, STEPS_PER_SEARCH));
}

#[test]
fn runs_the_steps_reach_are_found_and_a_year_with_none_left_is_never() {
    // 29 February on a Monday: 2044 from December 2026, 17 years of days.
    let (found, spent) = searched("0 0 0 29 2 +MON", "UTC", DEC_2026, true);
    let feb_29_2044 = chrono::Utc
        .with_ymd_and_hms(2044, 2, 29, 0, 0, 0)
        .unwrap()
        .timestamp_millis();
    assert_eq!(found, Search::Found(feb_29_2044));
    assert!(spent > 6_000 && spent < STEPS_PER_SEARCH, "{spent}");
    // An hourly run costs a step or two.
    let (_, spent) = searched("0 * * * *", "Europe/Paris", DEC_2026, true);
    assert!(spent <= 2, "{spent}");
    // Every second of 02:xx crosses New York's spring gap second by second.
    let before_gap = chrono_tz::America::New_York
        .with_ymd_and_hms(2027, 3, 14, 1, 59, 59)
        .unwrap()
        .timestamp_millis();
    let (found, spent) = searched("* * 2 * * *", "America/New_York", before_gap, true);
    assert_eq!(
        found.found(),
        unbounded(
            "* * 2 * * *",
            &chrono_tz::America::New_York,
            before_gap,
            true
        )
    );
    assert!(spent > 3_600, "{spent}");
    // Only years behind: no run, not a search that ran out.
    let (found, _) = searched("0 0 0 1 1 * 2020", "UTC", DEC_2026, true);
    assert_eq!(found, Search::Never);
}

#[test]
fn the_steps_of_a_call_are_shared_and_a_search_starts_only_with_enough() {
    let cron = Cron::from_str("0 0 0 1 * +MON#5").unwrap();
    let mut steps = Steps::new(STEPS_PER_SEARCH + 5);
    assert_eq!(
        search(&cron, &Tz::UTC, DEC_2026, true, &mut steps),
        Search::OverBudget
    );
    assert_eq!(steps.left(), 5);
    let hourly = Cron::from_str("@hourly").unwrap();
    assert_eq!(
        search(&hourly, &Tz::UTC, DEC_2026, true, &mut steps),
        Search::NotStarted
    );
    assert_eq!(steps.left(), 5, "a search not started takes nothing");
}

proptest! {
    /// Patterns whose runs lie within a few years: the bounded search finds
    /// exactly what croner finds unbounded, forward and back, in zones with
    /// daylight saving (whole hours, half hours, two hours).
    #[test]
    fn a_bounded_search_finds_what_croner_finds(
        pattern in prop::sample::select(vec![
            "*/5 * * * * *", "0 * * * *", "30 2 * * *", "0 9 * * MON-FRI", "0 0 29 2 *",
            "0 0 0 13 * +FRI", "0 0 L * *", "0 0 * * 5#2", "15 1 * * SUNL", "0 0 1W * *",
            "* * 2 * * *", "0 */5 2 * * *", "0 0 0 31 * +SUN",
        ]),
        zone in prop::sample::select(vec![
            "UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Antarctica/Troll",
        ]),
        t in 0i64..7_000_000_000_000,
        forward in any::<bool>(),
    ) {
        let (found, _) = searched(pattern, zone, t, forward);
        let zone = Tz::from_str(zone).unwrap();
        prop_assert_eq!(found.found(), unbounded(pattern, &zone, t, forward));
    }
}

fn planted(store: &mut MemoryStore, name: &str, pattern: &[u8], due_ms: i64) {
    let definition = Schedule {
        timing: Timing::cron(pattern, None).unwrap(),
        missed: Missed::Skip,
        partition: b"p".to_vec(),
        weight: 1,
        payload: b"x".to_vec(),
    };
    let mut scope = store.scoped(CoreOp::Schedule);
    scope.hset(HashKey::Schedules, name.as_bytes(), &definition.encode());
    scope.zadd(ZsetKey::ScheduleDue, name.as_bytes(), due_ms as f64);
}

#[test]
fn schedule_refuses_a_pattern_no_search_can_answer_and_writes_nothing() {
    let mut store = MemoryStore::new();
    let definition = Schedule {
        timing: Timing::cron(b"0 0 0 1 * +MON#5", None).unwrap(),
        missed: Missed::One,
        partition: b"p".to_vec(),
        weight: 1,
        payload: b"x".to_vec(),
    };
    let refused = schedule(
        &mut store.scoped(CoreOp::Schedule),
        DEC_2026,
        b"s",
        &definition,
    );
    assert_eq!(refused, Err(CoreError::ScheduleSearchTooLong));
    assert_eq!(store.hlen(HashKey::Schedules), 0);
    assert_eq!(store.zcard(ZsetKey::ScheduleDue), 0);
}

#[test]
fn planted_costly_definitions_fire_once_within_each_calls_steps_then_leave() {
    // Twenty definitions SCHEDULE refuses, written with the queue's keys by
    // a client whose ACL allows them, all due.
    let mut store = MemoryStore::new();
    for n in 0..20 {
        planted(
            &mut store,
            &format!("never-{n}"),
            b"0 0 0 1 * +MON#5",
            DEC_2026 - 1_000,
        );
    }
    planted(&mut store, "hourly", b"@hourly", DEC_2026 - 1_000);
    let mut calls = 0;
    let mut not_found = 0;
    while store.zcard(ZsetKey::ScheduleDue) > 1 {
        // As the timer does: its first call of a run funds any firing,
        // the later ones one search each.
        let steps = if calls % 4 == 0 {
            STEPS_FOR_ANY_FIRING
        } else {
            STEPS_PER_SEARCH
        };
        let due = run_due(&mut store.scoped(CoreOp::RunDue), DEC_2026, 16, steps).unwrap();
        calls += 1;
        let found_none = due
            .anomalies
            .iter()
            .filter(|a| matches!(a, Anomaly::ScheduleRunNotFound { .. }))
            .count();
        // One search each for a costly definition, as many as the call funds.
        assert!(
            found_none <= (steps / STEPS_PER_SEARCH) as usize,
            "{found_none} costly searches in one call of {steps} steps"
        );
        not_found += found_none;
        assert!(calls <= 40, "the timer made no progress");
    }
    assert_eq!(not_found, 20);
    // Each fired its due run once and is never searched again: no longer due.
    assert_eq!(store.zcard(ZsetKey::Queue), 21);
    assert_eq!(
        store.hlen(HashKey::Schedules),
        21,
        "the definitions stay for an operator"
    );
    let view = schedule_view(&mut store.scoped(CoreOp::Schedules), b"never-0", 20).unwrap();
    assert_eq!((view.next_ms, view.runs.len()), (None, 0));
    let hourly = schedule_view(&mut store.scoped(CoreOp::Schedules), b"hourly", 3).unwrap();
    assert_eq!(hourly.runs.len(), 3);
}

#[test]
fn a_firing_its_steps_cannot_fund_waits_for_a_call_that_can() {
    // A missed run under `one` searches three times: a call funding one
    // search leaves it due, changing nothing; the timer's next run funds it.
    let mut store = MemoryStore::new();
    let definition = Schedule {
        timing: Timing::cron(b"0 0 0 * * MON", None).unwrap(),
        missed: Missed::One,
        partition: b"p".to_vec(),
        weight: 1,
        payload: b"x".to_vec(),
    };
    let monday = chrono::Utc
        .with_ymd_and_hms(2026, 11, 30, 0, 0, 0)
        .unwrap()
        .timestamp_millis();
    {
        let mut scope = store.scoped(CoreOp::Schedule);
        scope.hset(HashKey::Schedules, b"weekly", &definition.encode());
        scope.zadd(ZsetKey::ScheduleDue, b"weekly", monday as f64);
    }
    // Two weeks on: the next Monday's run was missed.
    let later = monday + 14 * 86_400_000 + 1;
    let short = run_due(
        &mut store.scoped(CoreOp::RunDue),
        later,
        16,
        STEPS_PER_SEARCH,
    )
    .unwrap();
    assert_eq!(short.fired, 0);
    assert_eq!(store.zcard(ZsetKey::Queue), 0);
    assert_eq!(
        store.zscore(ZsetKey::ScheduleDue, b"weekly"),
        Some(monday as f64),
        "still due, nothing written"
    );
    let funded = run_due(
        &mut store.scoped(CoreOp::RunDue),
        later,
        16,
        STEPS_FOR_ANY_FIRING,
    )
    .unwrap();
    assert_eq!(funded.fired, 1, "the latest missed run, under one");
    assert_eq!(
        store.zscore(ZsetKey::ScheduleDue, b"weekly"),
        Some((monday + 21 * 86_400_000) as f64)
    );
}
