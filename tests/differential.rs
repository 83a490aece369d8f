//! One behaviour on both layouts: random sequences of every command (bad
//! input included) run against a keys-layout queue and a native queue side
//! by side, each pair in one transaction, and every reply must be the same
//! — lease tokens aside (each queue draws its own; the test keeps the pairs)
//! and clock readings within the few milliseconds between the two calls —
//! with VTRR.CHECK clean on both after every step and the queues equal
//! through every inspecting command at the end.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use redis::Value;

const KEYS: &str = "{k}";
const NATIVE: &str = "{n}";

/// The token each queue gave the current (and earlier) leases of an id.
#[derive(Default)]
struct Tokens {
    current: BTreeMap<String, (String, String)>,
    stale: Vec<(String, String, String)>,
}

/// A word list for each queue: `{q}` stands for the queue name and `{t}`
/// for the queue's own token of the id being acted on.
struct Step {
    words: Vec<String>,
    /// (id, whose tokens) when the step names a token.
    token_of: Option<(String, (String, String))>,
}

fn pick<'a>(rng: &mut Rng, options: &[&'a str]) -> &'a str {
    options[rng.below(options.len() as u64) as usize]
}

fn items(rng: &mut Rng, words: &mut Vec<String>) {
    for _ in 0..1 + rng.below(4) {
        words.push(format!("p{}", rng.below(6)));
        let id = format!("i{}", rng.below(40));
        words.push(id.clone());
        words.push((1 + rng.below(3)).to_string());
        words.push(format!("payload-{id}"));
    }
}

fn random_step(rng: &mut Rng, tokens: &Tokens) -> Step {
    let mut words: Vec<String> = Vec::new();
    let mut token_of = None;
    let partition = format!("p{}", rng.below(6));
    let id = format!("i{}", rng.below(40));
    let leased = |rng: &mut Rng| -> Option<(String, (String, String))> {
        if !tokens.current.is_empty() && rng.chance(80) {
            let n = rng.below(tokens.current.len() as u64) as usize;
            let (id, pair) = tokens.current.iter().nth(n).unwrap();
            Some((id.clone(), pair.clone()))
        } else if !tokens.stale.is_empty() {
            let n = rng.below(tokens.stale.len() as u64) as usize;
            let (id, k, n) = tokens.stale[n].clone();
            Some((id, (k, n)))
        } else {
            None
        }
    };
    match rng.below(22) {
        0..=3 => {
            words.extend(["VTRR.ENQUEUE".into(), "{q}".into()]);
            items(rng, &mut words);
        }
        4 => {
            words.extend(["VTRR.DEFER".into(), "{q}".into()]);
            words.push(pick(rng, &["1", "60000"]).into());
            items(rng, &mut words);
        }
        5..=7 => {
            words.extend(["VTRR.LEASE".into(), "{q}".into()]);
            words.push(pick(rng, &["1", "60000"]).into());
            if rng.chance(50) {
                words.extend(["COUNT".into(), (1 + rng.below(4)).to_string()]);
            }
            if rng.chance(30) {
                words.push("WITHCOUNTERS".into());
            }
            if rng.chance(30) {
                words.push("WITHPARTITION".into());
            }
            // Settling a lease in the same call (ACK is the last option).
            if rng.chance(40) {
                if let Some((id, pair)) = leased(rng) {
                    if rng.chance(50) {
                        words.extend(["ACK".into(), id.clone(), "{t}".into()]);
                    } else {
                        words.extend(["ACKCOST".into(), id.clone(), "{t}".into()]);
                        words.push(pick(rng, &["1", "3", "40"]).into());
                    }
                    token_of = Some((id, pair));
                }
            }
        }
        8 | 9 => {
            if let Some((id, pair)) = leased(rng) {
                if rng.chance(50) {
                    words.extend(["VTRR.ACK".into(), "{q}".into(), id.clone(), "{t}".into()]);
                } else {
                    // A cost below, at or above the weights enqueued (1..=3).
                    words.extend([
                        "VTRR.ACKCOST".into(),
                        "{q}".into(),
                        id.clone(),
                        "{t}".into(),
                    ]);
                    words.push(pick(rng, &["1", "3", "40"]).into());
                }
                token_of = Some((id, pair));
            } else {
                words.extend(["VTRR.ACK".into(), "{q}".into(), id, "0".repeat(32)]);
            }
        }
        10 => {
            if let Some((id, pair)) = leased(rng) {
                words.extend(["VTRR.RENEW".into(), "{q}".into(), id.clone(), "{t}".into()]);
                words.push(pick(rng, &["1", "60000"]).into());
                if rng.chance(50) {
                    words.extend(["COST".into(), pick(rng, &["0", "2", "9"]).into()]);
                }
                token_of = Some((id, pair));
            }
        }
        11 => {
            if let Some((id, pair)) = leased(rng) {
                words.extend(["VTRR.NACK".into(), "{q}".into(), id.clone(), "{t}".into()]);
                let how = rng.below(5);
                match how {
                    0 => words.extend(["DELAY".into(), pick(rng, &["1", "60000"]).into()]),
                    1 => words.push("DEAD".into()),
                    2 => words.push("RELEASE".into()),
                    _ => {}
                }
                // What failed, kept with the item (DEAD lists it); a
                // release takes none.
                if how != 2 && rng.chance(50) {
                    words.extend(["REASON".into(), format!("boom {id}\n\tat line {how}")]);
                }
                if rng.chance(50) {
                    words.push("WITHSTATE".into());
                }
                token_of = Some((id, pair));
            }
        }
        12 => {
            words.extend(["VTRR.RECLAIM".into(), "{q}".into()]);
            if rng.chance(50) {
                words.extend(["LIMIT".into(), (1 + rng.below(3)).to_string()]);
            }
        }
        13 => {
            words.extend(["VTRR.POLICY".into(), "{q}".into()]);
            let option = pick(
                rng,
                &[
                    "MAX-TIMEOUTS",
                    "MAX-NACKS",
                    "DEFAULT-CONCURRENCY",
                    "DEFAULT-RATE",
                    "CONCURRENCY",
                    "RATE",
                    "DEFAULT-MAX-QUEUED",
                ],
            );
            if rng.chance(80) {
                words.push(option.into());
                let value = pick(rng, &["1", "2", "5", "NONE"]);
                words.push(value.into());
                if option.ends_with("RATE") && value != "NONE" {
                    // As LIMIT's rates: no token between the two views' reads.
                    words.extend(["PER".into(), pick(rng, &["60000", "86400000"]).into()]);
                }
            }
        }
        14 => {
            words.extend(["VTRR.LIMIT".into(), "{q}".into(), partition]);
            match rng.below(4) {
                0 => words.extend(["CONCURRENCY".into(), pick(rng, &["1", "2", "NONE"]).into()]),
                // Small enough that enqueues meet it: FULL on both, or neither.
                3 => words.extend(["MAX-QUEUED".into(), pick(rng, &["2", "5", "NONE"]).into()]),
                1 => words.extend(["SHARE".into(), pick(rng, &["1", "2", "5"]).into()]),
                // Periods long enough that no token comes between the two
                // views' reads (each at its own clock): a partition spends
                // its burst and waits, the same on both.
                2 if rng.chance(50) => words.extend([
                    "RATE".into(),
                    pick(rng, &["1", "3", "NONE"]).into(),
                    "PER".into(),
                    pick(rng, &["60000", "86400000"]).into(),
                ]),
                _ => {}
            }
        }
        15 => words.extend([
            pick(rng, &["VTRR.PAUSE", "VTRR.RESUME"]).into(),
            "{q}".into(),
            partition,
        ]),
        16 => words.extend([
            "VTRR.PARTITIONS".into(),
            "{q}".into(),
            "PARTITION".into(),
            partition,
        ]),
        17 => words.extend([
            pick(rng, &["VTRR.RECOUNT", "VTRR.STATS", "VTRR.CHECK"]).into(),
            "{q}".into(),
        ]),
        18 => words.extend([
            "VTRR.DEAD".into(),
            "{q}".into(),
            "COUNT".into(),
            (1 + rng.below(5)).to_string(),
        ]),
        19 => words.extend([
            pick(rng, &["VTRR.REVIVE", "VTRR.CANCEL", "VTRR.JOB"]).into(),
            "{q}".into(),
            id,
            format!("i{}", rng.below(40)),
        ]),
        20 => {
            // Bad input: each must be refused the same way, changing nothing.
            let bad: &[&[&str]] = &[
                &["VTRR.ENQUEUE", "{q}", "p0", "x", "0", "payload"],
                &["VTRR.LEASE", "{q}", "-5"],
                &["VTRR.LEASE", "{q}", "1000", "COUNT", "0"],
                &["VTRR.NACK", "{q}", "i1", "t", "DELAY", "-1"],
                &["VTRR.NACK", "{q}", "i1", "t", "REASON", ""],
                &["VTRR.NACK", "{q}", "i1", "t", "RELEASE", "REASON", "x"],
                &["VTRR.LIMIT", "{q}", "p0", "SHARE", "0"],
                &["VTRR.POLICY", "{q}", "MAX-NACKS", "-3"],
                &["VTRR.DEFER", "{q}", "-1", "p0", "x", "1", "payload"],
                &["VTRR.PARTITIONS", "{q}", "CURSOR", "nope"],
            ];
            words.extend(
                bad[rng.below(bad.len() as u64) as usize]
                    .iter()
                    .map(|w| w.to_string()),
            );
        }
        _ => words.extend(["VTRR.STATS".into(), "{q}".into()]),
    }
    if words.is_empty() {
        words.extend(["VTRR.STATS".into(), "{q}".into()]);
    }
    Step { words, token_of }
}

fn command_for(step: &Step, queue: &str, keys_side: bool) -> redis::Cmd {
    let mut cmd = redis::cmd(&step.words[0]);
    for word in &step.words[1..] {
        match word.as_str() {
            "{q}" => cmd.arg(queue),
            "{t}" => {
                let (_, (k, n)) = step.token_of.as_ref().unwrap();
                cmd.arg(if keys_side { k } else { n })
            }
            other => cmd.arg(other),
        };
    }
    cmd
}

/// Leases in a LEASE reply, (id, token): nil, one lease, or an array.
fn leases(reply: &Value) -> Vec<(String, String)> {
    leases_in(reply)
        .into_iter()
        .map(|(id, token)| {
            (
                String::from_utf8(id).unwrap(),
                String::from_utf8(token).unwrap(),
            )
        })
        .collect()
}

/// How far apart two clock readings of one MULTI may be: Redis 7.0 does not
/// freeze the clock in a transaction, so the second command reads it as
/// late as the first one took (a few ms on a loaded machine), and a wait is
/// two such readings (seen: 6 ms in CI).
const CLOCK_SKEW_MS: i64 = 20;

/// Whether two replies are the same but for tokens (32 hex digits) and
/// clock readings (Unix ms, and the waits measured from them) up to
/// [`CLOCK_SKEW_MS`] apart.
fn same(a: &Value, b: &Value) -> bool {
    let is_token = |v: &[u8]| v.len() == 32 && v.iter().all(u8::is_ascii_hexdigit);
    let is_wait = |v: &Value| {
        let name = match v {
            Value::BulkString(name) => name.as_slice(),
            Value::SimpleString(name) => name.as_bytes(),
            _ => return false,
        };
        name == b"waiting-ms" || name == b"oldest-waiting-ms"
    };
    let near = |x: &Value, y: &Value| match (x, y) {
        (Value::Int(x), Value::Int(y)) => (x - y).abs() <= CLOCK_SKEW_MS,
        _ => x == y,
    };
    match (a, b) {
        (Value::BulkString(x), Value::BulkString(y)) if is_token(x) && is_token(y) => true,
        (Value::Int(x), Value::Int(y)) if *x > 1_000_000_000_000 && *y > 1_000_000_000_000 => {
            (x - y).abs() <= CLOCK_SKEW_MS
        }
        (Value::Array(xs), Value::Array(ys)) | (Value::Set(xs), Value::Set(ys)) => {
            xs.len() == ys.len()
                && xs.iter().zip(ys).enumerate().all(|(i, (x, y))| {
                    let after_wait = i > 0 && is_wait(&xs[i - 1]);
                    if after_wait {
                        near(x, y)
                    } else {
                        same(x, y)
                    }
                })
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|((kx, vx), (ky, vy))| {
                    same(kx, ky)
                        && if is_wait(kx) {
                            near(vx, vy)
                        } else {
                            same(vx, vy)
                        }
                })
        }
        (Value::ServerError(x), Value::ServerError(y)) => {
            x.code() == y.code() && x.details() == y.details()
        }
        _ => a == b,
    }
}

/// A STATS reply without its `layout` field, the one that differs.
fn without_layout(reply: Value) -> Value {
    match reply {
        Value::Array(fields)
            if fields
                .iter()
                .step_by(2)
                .any(|name| name == &Value::BulkString(b"layout".to_vec())) =>
        {
            let mut kept = Vec::new();
            let mut fields = fields.into_iter();
            while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
                if name != Value::BulkString(b"layout".to_vec()) {
                    kept.extend([name, value]);
                }
            }
            Value::Array(kept)
        }
        other => other,
    }
}

#[test]
fn random_sequences_of_every_command_give_the_same_replies_on_both_layouts() {
    let server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0", "default-layout", "keys"])
        .spawn();
    let mut con = server.connect();
    let seed = seed();
    for run in 0..4 {
        let mut rng = Rng::new(seed.wrapping_add(run));
        let (keys_queue, native_queue) = (format!("{KEYS}{run}"), format!("{NATIVE}{run}"));
        // The native queue is made native by its first call.
        let _: () = command(&["CONFIG", "SET", "vtrr.default-layout", "native"])
            .query(&mut con)
            .unwrap();
        let _: Value = command(&["VTRR.POLICY", &native_queue, "MAX-TIMEOUTS", "NONE"])
            .query(&mut con)
            .unwrap();
        enqueue_one(&mut con, &native_queue, "p0", "seed", "S");
        let _: () = command(&["CONFIG", "SET", "vtrr.default-layout", "keys"])
            .query(&mut con)
            .unwrap();
        let _: Value = command(&["VTRR.POLICY", &keys_queue, "MAX-TIMEOUTS", "NONE"])
            .query(&mut con)
            .unwrap();
        enqueue_one(&mut con, &keys_queue, "p0", "seed", "S");
        assert_eq!(layout_of(&mut con, &native_queue), "native");
        assert_eq!(layout_of(&mut con, &keys_queue), "keys");

        let mut tokens = Tokens::default();
        let mut history: Vec<String> = Vec::new();
        for _ in 0..400 {
            let step = random_step(&mut rng, &tokens);
            history.push(step.words.join(" "));
            // Leases and delays of 1 ms have passed for both by the next step.
            std::thread::sleep(Duration::from_millis(2));
            let (keys_reply, native_reply): (Value, Value) = redis::pipe()
                .atomic()
                .ignore_errors()
                .add_command(command_for(&step, &keys_queue, true))
                .add_command(command_for(&step, &native_queue, false))
                .query(&mut con)
                .unwrap();
            let (keys_reply, native_reply) =
                (without_layout(keys_reply), without_layout(native_reply));
            assert!(
                same(&keys_reply, &native_reply),
                "seed {seed} run {run}: replies differ\n keys:   {keys_reply:?}\n native: {native_reply:?}\nafter {history:#?}"
            );
            if step.words[0] == "VTRR.LEASE" {
                for ((id, k), (_, n)) in leases(&keys_reply).into_iter().zip(leases(&native_reply))
                {
                    if let Some((old_k, old_n)) = tokens.current.insert(id.clone(), (k, n)) {
                        tokens.stale.push((id, old_k, old_n));
                    }
                }
            }
            for queue in [&keys_queue, &native_queue] {
                let problems = vtrr_check(&mut con, queue);
                assert!(
                    problems.is_empty(),
                    "seed {seed}: {queue}: {problems:?} after {history:#?}"
                );
            }
        }
        // The views are read one after the other: the last step's 1 ms
        // leases and delays must have passed for both, as between steps.
        std::thread::sleep(Duration::from_millis(2));
        let (keys_view, native_view) = (
            observed(&mut con, &keys_queue),
            observed(&mut con, &native_queue),
        );
        assert_eq!(keys_view.len(), native_view.len());
        for ((field, k), (_, n)) in keys_view.iter().zip(&native_view) {
            assert!(same(k, n), "seed {seed}: {field} differs: {k:?} vs {n:?}");
        }
    }
}
