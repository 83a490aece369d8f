//! Every error reply of the module, each starting with its Redis error code.
//! Argument names match the README's command reference.

use redis_module::RedisError;

use crate::core::{CoreError, MAX_LEVEL, STEPS_PER_SEARCH};
use crate::layout::native::LoadError;
use crate::layout::open::OpenError;
use crate::limits::{
    MAX_BLOCK_MS, MAX_COUNT_LIMIT, MAX_DELAY_MS, MAX_KEEP_MS, MAX_LEASE_MS, MAX_PARTITIONS_COUNT,
    MAX_PERIOD_MS, MAX_POLICY_LIMIT, MAX_RATE, MAX_RATE_PER_MS, MAX_REASON_BYTES, MAX_RESULT_BYTES,
    MAX_SHARE, MAX_TOP_OFFSET, MAX_WEIGHT,
};
use crate::text::{printable_line, Quoted};

/// The one constructor of an error reply: its message made printable
/// ASCII (client text in it is [`Quoted`] already).
fn err(message: String) -> RedisError {
    RedisError::String(printable_line(message))
}

pub fn syntax() -> RedisError {
    err("ERR syntax error".into())
}

/// An ENQUEUE or DEFER id in the form of a schedule's runs.
pub fn reserved_id() -> RedisError {
    err(
        "ERR id must not begin with 'schedule:': that form is the runs of recurring schedules"
            .to_string(),
    )
}

pub fn empty(argument: &str) -> RedisError {
    err(format!("ERR {argument} must not be empty"))
}

pub fn weight() -> RedisError {
    err(format!(
        "ERR weight must be an integer between 1 and {MAX_WEIGHT}"
    ))
}

pub fn lease_ms() -> RedisError {
    err(format!(
        "ERR lease-ms must be an integer between 1 and {MAX_LEASE_MS}"
    ))
}

pub fn block_ms() -> RedisError {
    err(format!(
        "ERR BLOCK timeout-ms must be an integer between 0 and {MAX_BLOCK_MS}"
    ))
}

/// `argument` is a delay: `delay-ms` of DEFER, `DELAY ms` of NACK.
pub fn delay_ms(argument: &str) -> RedisError {
    err(format!(
        "ERR {argument} must be an integer between 0 and {MAX_DELAY_MS}"
    ))
}

/// `VTRR.NACK ... REASON`.
pub fn reason() -> RedisError {
    err(format!(
        "ERR REASON must be between 1 and {MAX_REASON_BYTES} bytes"
    ))
}

pub fn policy_limit(option: &str) -> RedisError {
    err(format!(
        "ERR {option} must be an integer between 0 and {MAX_POLICY_LIMIT}, or NONE"
    ))
}

/// `option` is CONCURRENCY or DEFAULT-CONCURRENCY.
pub fn count_limit(option: &str) -> RedisError {
    err(format!(
        "ERR {option} must be an integer between 1 and {MAX_COUNT_LIMIT}, or NONE"
    ))
}

/// `option`: RATE (`VTRR.LIMIT`) or DEFAULT-RATE (`VTRR.POLICY`).
pub fn rate(option: &str) -> RedisError {
    err(format!(
        "ERR {option} must be an integer between 1 and {MAX_RATE}, or NONE"
    ))
}

pub fn rate_per(option: &str) -> RedisError {
    err(format!(
        "ERR {option} <n> must be followed by PER <ms>, an integer between 1 and {MAX_RATE_PER_MS}"
    ))
}

pub fn burst(option: &str) -> RedisError {
    err(format!(
        "ERR BURST must be an integer between 1 and {MAX_RATE}, and follow {option} <n> PER <ms>"
    ))
}

pub fn share() -> RedisError {
    err(format!(
        "ERR SHARE must be an integer between 1 and {MAX_SHARE}"
    ))
}

pub fn partitions_count() -> RedisError {
    err(format!(
        "ERR COUNT must be an integer between 1 and {MAX_PARTITIONS_COUNT}"
    ))
}

pub fn top_count() -> RedisError {
    err(format!(
        "ERR TOP must be an integer between 1 and {MAX_PARTITIONS_COUNT}"
    ))
}

pub fn top_offset() -> RedisError {
    err(format!(
        "ERR OFFSET must be an integer between 0 and {MAX_TOP_OFFSET}"
    ))
}

pub fn rank() -> RedisError {
    err("ERR BY must be one of queued, oldest, leased, dead".into())
}

/// An option given without the one it refines.
pub fn needs(option: &str, needed: &str) -> RedisError {
    err(format!("ERR {option} needs {needed}"))
}

pub fn cursor() -> RedisError {
    err("ERR invalid cursor".into())
}

/// `VTRR.LEASE ... ACK` without whole (id, token) pairs after it.
pub fn ack_pairs() -> RedisError {
    err("ERR ACK must be followed by one or more <id> <token> pairs, and be the last option".into())
}

pub fn ack_costs() -> RedisError {
    err("ERR ACKCOST must be followed by one or more <id> <token> <cost> triples, and be the last option".into())
}

/// A reported cost is in the units of a weight, and bounded as one.
pub fn cost() -> RedisError {
    err(format!(
        "ERR cost must be an integer between 0 and {MAX_WEIGHT}"
    ))
}

pub fn exclusive(first: &str, second: &str) -> RedisError {
    err(format!("ERR {first} and {second} cannot be combined"))
}

/// `VTRR.SCHEDULE ... EVERY`.
pub fn every() -> RedisError {
    err(format!(
        "ERR EVERY must be an integer between 1 and {MAX_PERIOD_MS} (a year)"
    ))
}

/// `VTRR.SCHEDULE ... CRON` that croner does not read.
pub fn cron(why: &str) -> RedisError {
    err(format!(
        "ERR CRON is not a valid pattern: {}",
        Quoted(why.as_bytes())
    ))
}

pub fn time_zone(given: &[u8]) -> RedisError {
    err(format!(
        "ERR TZ must be an IANA time zone name such as Europe/Paris, not '{}'",
        Quoted(given)
    ))
}

pub fn missed() -> RedisError {
    err("ERR MISSED must be one of skip, one, all".into())
}

/// `VTRR.ENQUEUE ... PRIORITY` and `VTRR.DEFER ... PRIORITY`.
pub fn priority() -> RedisError {
    err(format!(
        "ERR PRIORITY must be an integer between -{MAX_LEVEL} and {MAX_LEVEL}"
    ))
}

pub fn result_too_long() -> RedisError {
    err(format!(
        "ERR result must be at most {MAX_RESULT_BYTES} bytes"
    ))
}

pub fn ack_results() -> RedisError {
    err("ERR ACKRESULT must be followed by one or more <id> <token> <result> triples, and be the last option".into())
}

/// RESULT-TTL, DEDUP-MS.
pub fn keep_ms(option: &str) -> RedisError {
    err(format!(
        "ERR {option} must be an integer between 1 and {MAX_KEEP_MS}, or NONE"
    ))
}

/// A required option left out.
pub fn required(option: &str) -> RedisError {
    err(format!("ERR {option} is required"))
}

/// `VTRR.SCHEDULES ... COUNT` and `RUNS`.
pub fn between(option: &str, min: i64, max: i64) -> RedisError {
    err(format!(
        "ERR {option} must be an integer between {min} and {max}"
    ))
}

pub fn positive(option: &str) -> RedisError {
    err(format!("ERR {option} must be a positive integer"))
}

pub fn open(error: &OpenError) -> RedisError {
    match error {
        OpenError::WrongType { key, expected } => err(format!(
            "WRONGTYPE Operation against a key holding the wrong kind of value: {} must be {}",
            Quoted(key),
            expected.described()
        )),
        OpenError::NoPermission { key } => err(format!(
            "NOPERM this user has no permissions to access the key {} of this queue",
            Quoted(key)
        )),
        // Cluster clients retry TRYAGAIN; by then the slot has an owner.
        OpenError::SlotMoving => {
            err("TRYAGAIN the queue's slot is being migrated; retry when it has moved".into())
        }
    }
}

/// An internal command sent by a client.
pub fn internal_command(command: &str) -> RedisError {
    err(format!(
        "ERR {command} is internal: only a master's replication stream or the AOF may send it"
    ))
}

pub fn apply_version(version: &[u8]) -> RedisError {
    err(format!(
        "ERR VTRR.APPLY version {} is not one this module reads ({}): upgrade the module on this server (replicas before their master)",
        Quoted(version),
        crate::replication::replay::VERSION
    ))
}

pub fn apply_malformed(why: &str) -> RedisError {
    err(format!("ERR VTRR.APPLY malformed: {why}"))
}

pub fn cluster_needs_hash_tag() -> RedisError {
    err("ERR in cluster mode the queue name must contain a hash tag, like {files}, so all its keys share one slot".into())
}

pub fn core(error: &CoreError, queue: &[u8]) -> RedisError {
    match error {
        CoreError::CurrentVirtualTimeNotInteger => err(format!(
            "ERR vtrr:{}:current_virtual_time is not an integer",
            Quoted(queue)
        )),
        CoreError::NoRunAhead => err("ERR the schedule has no run after now".to_string()),
        CoreError::ScheduleSearchTooLong => err(format!(
            "ERR CRON: no run found within {STEPS_PER_SEARCH} steps; simplify the pattern"
        )),
        // Its own code: a client sheds or retries it, unlike a mistake.
        CoreError::PartitionFull {
            partition,
            max_queued,
            waiting,
            adds,
            ..
        } => err(format!(
            "FULL partition '{}' has {waiting} items waiting and MAX-QUEUED {max_queued}: the call would add {adds}; nothing was enqueued",
            Quoted(partition)
        )),
        CoreError::Store(refused) => err(format!(
            "ERR {} {} failed: {}",
            refused.command,
            Quoted(&refused.key),
            refused.reply
        )),
    }
}

/// `VTRR.LOAD` refused a chunk: nothing was changed.
pub fn load_refused(key: &[u8], why: &LoadError) -> RedisError {
    let key = Quoted(key);
    match why {
        LoadError::WrongType => err(format!(
            "WRONGTYPE VTRR.LOAD: key {key} holds another type than a native vtrr queue"
        )),
        LoadError::Undecodable(decode) => err(format!(
            "ERR VTRR.LOAD: not a native queue's encoding for key {key}: {decode}"
        )),
    }
}

/// `VTRR.CONVERT` with a layout it does not know.
pub fn unknown_layout(given: &[u8]) -> RedisError {
    err(format!(
        "ERR layout must be NATIVE or KEYS, not '{}'",
        Quoted(given)
    ))
}

/// `VTRR.CONVERT <name> KEYS` of a native queue beside which another
/// client wrote a key of the keys layout.
pub fn convert_key_taken(key: &[u8]) -> RedisError {
    err(format!(
        "ERR VTRR.CONVERT: key {} exists beside the native queue; delete or rename it before converting to KEYS",
        Quoted(key)
    ))
}

/// `VTRR.INSPECT` of a key a queue does not have.
pub fn unknown_key(given: &[u8]) -> RedisError {
    err(format!(
        "ERR key must be one of a queue's key suffixes (queue, inflight, task, ...), not '{}'",
        Quoted(given)
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every error reply is built by `err`: no other file constructs a
    /// `RedisError` from text (clippy.toml bans the crate's log and raw
    /// reply calls the same way).
    #[test]
    fn only_this_file_builds_error_text() {
        fn scan(dir: &Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    scan(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("error.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for marker in ["RedisError::String", "RedisError::Str(", "StaticError"] {
                        if text.contains(marker) {
                            found.push(format!("{} uses {marker}", path.display()));
                        }
                    }
                }
            }
        }
        let mut found = Vec::new();
        scan(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn client_text_in_an_error_is_quoted_and_printable() {
        let cases: &[(&[u8], &str)] = &[
            ("Ā".as_bytes(), "\\xc4\\x80"),
            (b"%s%n\r\n\x00", "%s%n\\r\\n\\x00"),
        ];
        for (given, quoted) in cases {
            let super::RedisError::String(message) = super::unknown_layout(given) else {
                panic!("not a text error");
            };
            assert_eq!(
                message,
                format!("ERR layout must be NATIVE or KEYS, not '{quoted}'")
            );
        }
    }
}
