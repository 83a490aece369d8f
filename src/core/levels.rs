//! Priority levels in scores: each level is a fair queue of its own, and a
//! higher level is always served first (`VTRR.ENQUEUE ... PRIORITY`).
//!
//! A level's virtual times live in a band of scores, so `queue` stays one
//! sorted set popped from its lowest score:
//!
//! ```text
//! level  p > 0:   score = v - p * SPAN               v in [0, SPAN)
//! level  0:       score = v                          v in [0, 2^52)
//! level  p < 0:   score = 2^52 + (-p - 1) * SPAN + v  v in [0, SPAN)
//! ```
//!
//! With SPAN = 2^45 and |p| <= 100 every score is an integer within 2^53,
//! exact as a double. Level 0 keeps the scores, keys and scripts of a queue
//! without priorities. In `held`, whose times are integers relative to a
//! per-level offset, a level's band is [`HELD_SPAN`] wide around
//! `-p * HELD_SPAN`: level 0's members are those written before levels.

/// A priority level: larger is served first, 0 by default.
pub type Level = i8;

/// The highest level; the lowest is its negation.
pub const MAX_LEVEL: Level = 100;

/// How many virtual times one level other than 0 spans in `queue`.
pub const SPAN: i64 = 1 << 45;

/// How far a charge may move a partition ahead of its level's current
/// virtual time (about a thousand jobs of the largest cost). The clock
/// follows a partition's lead only when nothing else is left at the level,
/// so reaching the end of a level's band this way takes 32 such stretches
/// of 1,100 maximal reports each at a level other than 0 (4,096 at level 0),
/// where a level other than 0 also starts again once it empties
/// (`virtual_time::rebase_if_idle`).
pub const MAX_LEAD: i64 = 1 << 40;

/// Where the bands of the levels below 0 start (level 0 ends below it).
const BELOW_ZERO: i64 = 1 << 52;

/// The largest virtual time of `level`: a time past it is clamped there, as
/// level 0's always was (its items then tie and go by id).
pub const fn max_time(level: Level) -> i64 {
    if level == 0 {
        BELOW_ZERO - 1
    } else {
        SPAN - 1
    }
}

/// `queue`'s score of virtual time `time` at `level` (clamped to the level).
pub fn queue_score(level: Level, time: i64) -> i64 {
    let time = time.clamp(0, max_time(level));
    let level = i64::from(level);
    match level {
        0 => time,
        1.. => time - level * SPAN,
        _ => BELOW_ZERO + (-level - 1) * SPAN + time,
    }
}

/// The level and virtual time of `queue`'s score `score` (one no level
/// wrote, a script's, reads at the nearest level).
pub fn of_queue_score(score: i64) -> (Level, i64) {
    if score < 0 {
        let level =
            (score.saturating_neg().saturating_add(SPAN - 1) / SPAN).min(i64::from(MAX_LEVEL));
        (level as Level, score + level * SPAN)
    } else if score < BELOW_ZERO {
        (0, score)
    } else {
        let below = ((score - BELOW_ZERO) / SPAN).min(i64::from(MAX_LEVEL) - 1);
        (-(below as Level) - 1, score - BELOW_ZERO - below * SPAN)
    }
}

/// How wide a level's band is in `held`: times relative to an offset stay
/// within a quarter of it either side.
pub const HELD_SPAN: i64 = 1 << 55;

/// `held`'s time of a relative virtual time at `level`.
pub fn held_time(level: Level, relative: i64) -> i64 {
    let bound = HELD_SPAN / 2 - 1;
    (-i64::from(level)) * HELD_SPAN + relative.clamp(-bound, bound)
}

/// The level and relative virtual time of `held`'s time `time`.
pub fn of_held_time(time: i64) -> (Level, i64) {
    let band = time.saturating_add(HELD_SPAN / 2).div_euclid(HELD_SPAN);
    let level = (-band).clamp(-i64::from(MAX_LEVEL), i64::from(MAX_LEVEL));
    (level as Level, time + level * HELD_SPAN)
}

/// The lowest `held` time of `level`: where a search for its first item
/// starts.
pub fn held_band_start(level: Level) -> i64 {
    (-i64::from(level)) * HELD_SPAN - HELD_SPAN / 2
}

/// A level as a command gives it (`-100`..=`100`).
pub fn parse_level(raw: &[u8]) -> Option<Level> {
    let level: i64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
    Level::try_from(level)
        .ok()
        .filter(|level| (-MAX_LEVEL..=MAX_LEVEL).contains(level))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn level_zero_keeps_its_scores() {
        assert_eq!(queue_score(0, 0), 0);
        assert_eq!(queue_score(0, 12345), 12345);
        assert_eq!(of_queue_score(12345), (0, 12345));
        assert_eq!(held_time(0, -7), -7);
        assert_eq!(of_held_time(-7), (0, -7));
    }

    #[test]
    fn the_extreme_scores_are_exact_doubles() {
        for level in [-MAX_LEVEL, MAX_LEVEL] {
            for time in [0, max_time(level)] {
                let score = queue_score(level, time);
                assert!(score.unsigned_abs() < 1 << 53);
                assert_eq!((score as f64) as i64, score);
                assert_eq!(of_queue_score(score), (level, time));
            }
        }
    }

    #[test]
    fn a_time_past_its_level_is_clamped_to_it() {
        assert_eq!(of_queue_score(queue_score(3, SPAN + 5)), (3, SPAN - 1));
        assert_eq!(of_queue_score(queue_score(-3, -5)), (-3, 0));
    }

    #[test]
    fn levels_parse_within_range_only() {
        assert_eq!(parse_level(b"100"), Some(100));
        assert_eq!(parse_level(b"-100"), Some(-100));
        assert_eq!(parse_level(b"0"), Some(0));
        for bad in [&b"101"[..], b"-101", b"", b"1.5", b"x", b"99999999999"] {
            assert_eq!(parse_level(bad), None);
        }
    }

    proptest! {
        /// Scores order by level (higher first), then virtual time, and
        /// read back as they were written.
        #[test]
        fn scores_order_by_level_then_time(
            a in (-MAX_LEVEL..=MAX_LEVEL, 0..SPAN),
            b in (-MAX_LEVEL..=MAX_LEVEL, 0..SPAN),
        ) {
            let (score_a, score_b) = (queue_score(a.0, a.1), queue_score(b.0, b.1));
            prop_assert_eq!(of_queue_score(score_a), a);
            prop_assert_eq!(score_a.cmp(&score_b), (b.0, a.1).cmp(&(a.0, b.1)));
        }

        #[test]
        fn held_times_order_by_level_then_time(
            a in (-MAX_LEVEL..=MAX_LEVEL, -(1i64 << 53)..(1i64 << 53)),
            b in (-MAX_LEVEL..=MAX_LEVEL, -(1i64 << 53)..(1i64 << 53)),
        ) {
            let (time_a, time_b) = (held_time(a.0, a.1), held_time(b.0, b.1));
            prop_assert_eq!(of_held_time(time_a), a);
            prop_assert!(time_a >= held_band_start(a.0));
            prop_assert_eq!(time_a.cmp(&time_b), (b.0, a.1).cmp(&(a.0, b.1)));
        }
    }
}
