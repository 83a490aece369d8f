//! Recurring schedules: each run enqueued once, with the id
//! `<schedule>:<due-ms>`, in the call that moves the schedule on; missed
//! runs as the schedule's policy says; cron patterns in a time zone.

use chrono::TimeZone;
use proptest::prelude::*;

use super::*;
use crate::core::cron_search::{Search, Steps, STEPS_PER_SEARCH};
use crate::store::{HashKey, Store, ZsetKey};

fn every(period_ms: i64, missed: Missed) -> Schedule {
    Schedule {
        timing: Timing::every(period_ms).unwrap(),
        missed,
        partition: b"cron".to_vec(),
        weight: 2,
        payload: b"report".to_vec(),
    }
}

fn set(store: &mut MemoryStore, now_ms: i64, name: &str, definition: &Schedule) -> i64 {
    schedule(
        &mut store.scoped(CoreOp::Schedule),
        now_ms,
        name.as_bytes(),
        definition,
    )
    .unwrap()
}

fn run_timer(store: &mut MemoryStore, now_ms: i64, limit: usize) -> Due {
    run_due(
        &mut store.scoped(CoreOp::RunDue),
        now_ms,
        limit,
        STEPS_FOR_ANY_FIRING,
    )
    .unwrap()
}

fn queued_ids(store: &mut MemoryStore) -> Vec<String> {
    store
        .zrange_upto(ZsetKey::Queue, f64::INFINITY, usize::MAX)
        .into_iter()
        .map(|(id, _)| String::from_utf8(id).unwrap())
        .collect()
}

fn next_run(store: &mut MemoryStore, name: &str) -> Option<i64> {
    store
        .zscore(ZsetKey::ScheduleDue, name.as_bytes())
        .map(|s| s as i64)
}

fn assert_sound(store: &mut MemoryStore) {
    let problems = check::check(&mut store.scoped(CoreOp::Check)).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn every_runs_fall_on_multiples_of_the_period_and_each_enqueues_one_item() {
    let mut store = MemoryStore::new();
    assert_eq!(
        set(&mut store, 1_050, "tick", &every(100, Missed::One)),
        1_100
    );
    // Nothing before the run is due.
    assert_eq!(run_timer(&mut store, 1_099, 16).fired, 0);
    assert_eq!(run_timer(&mut store, 1_103, 16).fired, 1);
    assert_eq!(queued_ids(&mut store), ["schedule:tick:1100"]);
    assert_eq!(next_run(&mut store, "tick"), Some(1_200));
    // The item is the schedule's: partition, weight, payload.
    let leased = lease_at(&mut store, 1_150, 60_000, 1, 16).unwrap().leased;
    assert_eq!(leased[0].payload, b"report");
    assert_eq!(
        store.hget(HashKey::Meta, b"schedule:tick:1100").as_deref(),
        Some(&b"2:cron"[..])
    );
    assert_sound(&mut store);
}

#[test]
fn a_run_already_in_the_queues_life_is_not_enqueued_again() {
    let mut store = MemoryStore::new();
    set(&mut store, 0, "tick", &every(100, Missed::One));
    run_timer(&mut store, 100, 16);
    // The schedule's next run put back where it was (as a lost write
    // would): the same run fires no second item.
    store.zadd(ZsetKey::ScheduleDue, b"tick", 100.0);
    let again = run_timer(&mut store, 100, 16);
    assert_eq!(again.fired, 0);
    assert_eq!(queued_ids(&mut store), ["schedule:tick:100"]);
    assert_eq!(next_run(&mut store, "tick"), Some(200));
}

#[test]
fn missed_runs_follow_the_policy() {
    // Due at 100; the server comes back at 450: runs 100..400 are due.
    let fired = |missed| {
        let mut store = MemoryStore::new();
        set(&mut store, 0, "s", &every(100, missed));
        let mut due = run_timer(&mut store, 450, 16);
        due.anomalies.clear();
        (queued_ids(&mut store), next_run(&mut store, "s"), due.fired)
    };
    assert_eq!(fired(Missed::Skip), (vec![], Some(500), 0));
    assert_eq!(
        fired(Missed::One),
        (vec!["schedule:s:400".to_string()], Some(500), 1)
    );
    let (all, next, count) = fired(Missed::All);
    assert_eq!(
        all,
        [
            "schedule:s:100",
            "schedule:s:200",
            "schedule:s:300",
            "schedule:s:400"
        ]
    );
    assert_eq!((next, count), (Some(500), 4));
}

#[test]
fn a_late_run_that_is_not_missed_fires_under_every_policy() {
    for missed in [Missed::Skip, Missed::One, Missed::All] {
        let mut store = MemoryStore::new();
        set(&mut store, 0, "s", &every(100, missed));
        // 90 ms late, before the next run: late, not missed.
        assert_eq!(run_timer(&mut store, 190, 16).fired, 1, "{missed:?}");
        assert_eq!(queued_ids(&mut store), ["schedule:s:100"]);
    }
}

#[test]
fn missed_runs_of_all_are_fired_a_bounded_number_per_call() {
    let mut store = MemoryStore::new();
    set(&mut store, 0, "s", &every(10, Missed::All));
    assert_eq!(run_timer(&mut store, 1_000, 16).fired, 16);
    // The rest stay due, from where it stopped.
    assert_eq!(next_run(&mut store, "s"), Some(170));
    assert_eq!(next_due(&mut store.scoped(CoreOp::NextDue)), Some(170));
    let mut total = 16;
    while let Some(due) = next_run(&mut store, "s").filter(|&d| d <= 1_000) {
        let _ = due;
        total += run_timer(&mut store, 1_000, 16).fired;
    }
    assert_eq!(total, 100);
    assert_eq!(next_run(&mut store, "s"), Some(1_010));
}

#[test]
fn setting_a_schedule_again_with_the_same_runs_keeps_its_next_run() {
    let mut store = MemoryStore::new();
    assert_eq!(set(&mut store, 0, "s", &every(1_000, Missed::One)), 1_000);
    // A deploy sets it again at 900 with another payload: the run at 1,000
    // stays (and carries the new payload).
    let mut changed = every(1_000, Missed::One);
    changed.payload = b"v2".to_vec();
    assert_eq!(set(&mut store, 900, "s", &changed), 1_000);
    // Another period: runs from the new timing.
    assert_eq!(set(&mut store, 900, "s", &every(300, Missed::One)), 1_200);
    run_timer(&mut store, 1_200, 16);
    let leased = lease_at(&mut store, 1_200, 60_000, 1, 16).unwrap().leased;
    assert_eq!(leased[0].payload, b"report");
}

#[test]
fn unschedule_removes_the_schedule_and_keeps_its_enqueued_runs() {
    let mut store = MemoryStore::new();
    set(&mut store, 0, "s", &every(100, Missed::One));
    run_timer(&mut store, 100, 16);
    let names: [&[u8]; 2] = [b"s", b"never"];
    assert_eq!(unschedule(&mut store.scoped(CoreOp::Unschedule), &names), 1);
    assert_eq!(run_timer(&mut store, 500, 16).fired, 0);
    assert_eq!(queued_ids(&mut store), ["schedule:s:100"]);
    assert_eq!(store.hlen(HashKey::Schedules), 0);
}

#[test]
fn a_due_schedule_without_a_definition_is_reported_and_fires_nothing() {
    let mut store = MemoryStore::new();
    store.zadd(ZsetKey::ScheduleDue, b"ghost", 10.0);
    store.hset(HashKey::Schedules, b"bad", b"not a definition");
    store.zadd(ZsetKey::ScheduleDue, b"bad", 10.0);
    let due = run_timer(&mut store, 20, 16);
    assert_eq!(due.fired, 0);
    assert_eq!(due.anomalies.len(), 2);
    assert_eq!(store.zcard(ZsetKey::ScheduleDue), 0);
    assert_eq!(store.hlen(HashKey::Schedules), 1, "left for an operator");
}

fn paris_ms(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
    chrono_tz::Europe::Paris
        .with_ymd_and_hms(y, mo, d, h, mi, 0)
        .earliest()
        .unwrap()
        .timestamp_millis()
}

/// The next run after `t_ms`, searched with a whole search's steps.
fn next_of(timing: &Timing, t_ms: i64) -> Search {
    timing.next_after(t_ms, &mut Steps::new(STEPS_PER_SEARCH))
}

fn runs_after(timing: &Timing, from_ms: i64, n: usize) -> Vec<i64> {
    let mut runs = Vec::new();
    let mut t = from_ms;
    for _ in 0..n {
        t = next_of(timing, t).found().unwrap();
        runs.push(t);
    }
    runs
}

#[test]
fn cron_runs_are_local_times_across_daylight_saving() {
    let daily = Timing::cron(b"30 2 * * *", Some(b"Europe/Paris")).unwrap();
    // 2025-03-30 02:30 does not exist in Paris: that day's run is at 03:00.
    let spring = runs_after(&daily, paris_ms(2025, 3, 29, 12, 0), 3);
    assert_eq!(
        spring,
        [
            paris_ms(2025, 3, 30, 3, 0),
            paris_ms(2025, 3, 31, 2, 30),
            paris_ms(2025, 4, 1, 2, 30)
        ]
    );
    // 2025-10-26 02:30 happens twice: the run is once, at the first.
    let autumn = runs_after(&daily, paris_ms(2025, 10, 25, 12, 0), 2);
    assert_eq!(autumn[0], paris_ms(2025, 10, 26, 2, 30));
    assert_eq!(autumn[1] - autumn[0], 25 * 3_600_000);
}

#[test]
fn cron_patterns_take_seconds_and_aliases_and_refuse_nonsense() {
    let every_five_seconds = Timing::cron(b"*/5 * * * * *", None).unwrap();
    assert_eq!(
        runs_after(&every_five_seconds, 1_000_500, 2),
        [1_005_000, 1_010_000]
    );
    let hourly = Timing::cron(b"@hourly", None).unwrap();
    assert_eq!(next_of(&hourly, 0), Search::Found(3_600_000));
    for bad in [
        &b""[..],
        b"61 * * * *",
        b"* * *",
        b"*/0 * * * *",
        b"\xff * * * *",
    ] {
        assert!(
            matches!(Timing::cron(bad, None), Err(TimingError::Pattern(_))),
            "{bad:?}"
        );
    }
    assert_eq!(
        Timing::cron(b"* * * * *", Some(b"Mars/Olympus")).unwrap_err(),
        TimingError::Zone
    );
    // The field at fault is named: croner's message alone does not.
    for (bad, field) in [
        (&b"61 * * * *"[..], "its minutes field"),
        (b"0 0 25 * * *", "its hours field"),
        (b"* * 32 * *", "its day of month field"),
        (b"* * * 13 *", "its month field"),
        (b"* * * * 9", "its day of week field"),
        (b"0 0 0 1 1 * 6000", "its year field"),
    ] {
        let Err(TimingError::Pattern(why)) = Timing::cron(bad, None) else {
            panic!("{bad:?} refused");
        };
        assert!(why.starts_with(field), "{bad:?}: {why}");
    }
    assert_eq!(Timing::every(0).unwrap_err(), TimingError::Period);
}

#[test]
fn a_pattern_with_no_run_ahead_is_refused_and_writes_nothing() {
    let mut store = MemoryStore::new();
    let definition = Schedule {
        timing: Timing::cron(b"0 0 0 1 1 * 2020", None).unwrap(),
        ..every(1, Missed::One)
    };
    let refused = schedule(
        &mut store.scoped(CoreOp::Schedule),
        paris_ms(2025, 1, 1, 0, 0),
        b"s",
        &definition,
    );
    assert_eq!(refused, Err(CoreError::NoRunAhead));
    assert_eq!(store.hlen(HashKey::Schedules), 0);
}

#[test]
fn the_view_lists_the_next_runs() {
    let mut store = MemoryStore::new();
    set(&mut store, 0, "s", &every(100, Missed::One));
    let view = schedule_view(&mut store.scoped(CoreOp::Schedules), b"s", 3).unwrap();
    assert_eq!((view.next_ms, view.runs), (Some(100), vec![100, 200, 300]));
    let view = schedule_view(&mut store.scoped(CoreOp::Schedules), b"s", 0).unwrap();
    assert_eq!((view.next_ms, view.runs), (Some(100), vec![]));
    let (cursor, page) = schedules_page(&mut store.scoped(CoreOp::Schedules), 0, 10, 1).unwrap();
    assert_eq!(
        (cursor, page.len(), page[0].runs.clone()),
        (0, 1, vec![100])
    );
}

#[test]
fn schedules_are_listed_in_bounded_pages() {
    let mut store = MemoryStore::new();
    for n in 0..50 {
        set(&mut store, 0, &format!("s{n:02}"), &every(100, Missed::One));
    }
    let mut cursor = 0;
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let (next, page) =
            schedules_page(&mut store.scoped(CoreOp::Schedules), cursor, 7, 1).unwrap();
        assert!(page.len() <= 14, "a page of {}", page.len());
        seen.extend(page.into_iter().map(|view| view.name));
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 50);
}

proptest! {
    /// A definition reads back as written, whatever bytes its partition
    /// and payload hold.
    #[test]
    fn definitions_read_back(
        partition in proptest::collection::vec(any::<u8>(), 0..40),
        payload in proptest::collection::vec(any::<u8>(), 0..80),
        period in 1..=crate::limits::MAX_PERIOD_MS,
        weight in 1u64..=1_000_000_000,
        cron in any::<bool>(),
    ) {
        let timing = if cron {
            Timing::cron(b"*/7 3 * * 1-5", Some(b"America/New_York")).unwrap()
        } else {
            Timing::every(period).unwrap()
        };
        let definition = Schedule { timing, missed: Missed::All, partition, weight, payload };
        let encoded = definition.encode();
        let read = Schedule::decode(&encoded).unwrap();
        prop_assert_eq!(read.encode(), encoded);
    }

    /// Any bytes: a definition or none, never a panic.
    #[test]
    fn any_bytes_decode_or_not(raw in proptest::collection::vec(any::<u8>(), 0..120)) {
        let _ = Schedule::decode(&raw);
    }

    /// Any pattern built from cron's vocabulary: refused, or one whose next
    /// run is after the time asked and whose latest run is not.
    #[test]
    fn patterns_parse_or_refuse_and_runs_move_forward(
        fields in proptest::collection::vec(
            prop_oneof![
                Just("*".to_string()), Just("*/3".to_string()), Just("L".to_string()),
                Just("5#2".to_string()), Just("1-5".to_string()), Just("MON".to_string()),
                Just("?".to_string()), Just("W".to_string()), Just("0".to_string()),
                (0u32..70).prop_map(|n| n.to_string()),
                (0u32..40, 0u32..40).prop_map(|(a, b)| format!("{a}-{b}/{}", b % 7)),
                "[ -~]{0,6}",
            ],
            1..8,
        ),
        t in 0i64..4_000_000_000_000,
    ) {
        let pattern = fields.join(" ");
        if let Ok(timing) = Timing::cron(pattern.as_bytes(), Some(b"Europe/Paris")) {
            if let Search::Found(next) = next_of(&timing, t) {
                prop_assert!(next > t);
            }
        }
    }
}
