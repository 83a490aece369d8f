//! `VTRR.APPLY`, the internal command a time-dependent call propagates in
//! `vtrr.replication commands` mode: the operation with the clock reading,
//! the limit and the lease tokens it used, so a replica or an AOF load redoes
//! exactly the master's writes. Both directions of the format live here.
//!
//! `VTRR.APPLY <name> <version> <operation> <now-ms> <arguments...>`:
//!
//! | operation | arguments |
//! |---|---|
//! | `LEASE` | `<lease-ms> <count> <due-limit> [<token> ...]` (one token per item leased) |
//! | `RENEW` | `<id> <token> <lease-ms> [<cost>]` |
//! | `NACK` | `<id> <token> <delay-ms>\|REQUEUE\|DEAD\|RELEASE [<reason>]` |
//! | `DEFER` | `<due-ms> [PRIORITY <level>] <partition> <id> <weight> <payload> [...]` (PRIORITY when the level is not 0: an odd number of pairs after `<due-ms>` cannot be groups of four) |
//! | `RECLAIM` | `<limit>` (VTRR.RECLAIM) |
//! | `DUE` | `<limit>` (a timer run on the queue) |
//! | `SCHEDULE` | `<schedule> <definition>` (VTRR.SCHEDULE; the definition as `schedules` stores it) |
//!
//! The version changes whenever the format or the meaning of an operation
//! does; a server that meets a version it does not know applies nothing and
//! says so in its log.

use crate::core::{parse_level, Ack, Level, Nack, NewItem, STEPS_PER_SEARCH};

/// The format this module writes and reads.
pub const VERSION: &str = "1";

/// A time-dependent operation as the master ran it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation<'a> {
    Lease {
        lease_ms: i64,
        count: usize,
        due_limit: usize,
        tokens: Vec<&'a [u8]>,
    },
    Renew {
        id: &'a [u8],
        token: &'a [u8],
        lease_ms: i64,
        /// `RENEW ... COST`: what the job cost since its last report.
        cost: Option<u64>,
    },
    Nack {
        id: &'a [u8],
        token: &'a [u8],
        how: Nack,
        /// `NACK ... REASON`: the item's last error.
        reason: Option<&'a [u8]>,
    },
    Defer {
        due_ms: i64,
        level: Level,
        items: Vec<NewItem<'a>>,
    },
    Reclaim {
        limit: usize,
    },
    /// The timer's run: `schedule_steps` is what it funded the firing of
    /// schedules with (a replica must fire exactly what its master fired).
    Due {
        limit: usize,
        schedule_steps: u32,
    },
    /// `VTRR.SCHEDULE`: its next run is read from the clock.
    Schedule {
        name: &'a [u8],
        definition: &'a [u8],
    },
    /// `VTRR.ACK` (`ACKCOST`, `ACKRESULT`) on a queue that keeps outcomes:
    /// the jobs are recorded done at the master's time.
    Ack {
        acks: Vec<Ack<'a>>,
    },
    /// `VTRR.CANCEL` on a queue that keeps outcomes: the jobs are recorded
    /// cancelled at the master's time.
    Cancel {
        ids: Vec<&'a [u8]>,
    },
}

/// One `VTRR.APPLY`: when, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apply<'a> {
    pub now_ms: i64,
    pub operation: Operation<'a>,
}

/// Why a `VTRR.APPLY` could not be read. Nothing was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Written by a newer module.
    UnknownVersion(Vec<u8>),
    Malformed(&'static str),
}

impl Apply<'_> {
    /// The arguments after the command name: `<name> <version> ...`.
    pub fn to_args(&self, queue: &[u8]) -> Vec<Vec<u8>> {
        let mut args = Vec::new();
        self.write_args(queue, |arg| args.push(arg.to_vec()));
        args
    }

    /// Hands each argument after the command name to `emit`, in order,
    /// without building them first (numbers are formatted on the stack).
    pub fn write_args(&self, queue: &[u8], mut emit: impl FnMut(&[u8])) {
        let mut digits = itoa::Buffer::new();
        emit(queue);
        emit(VERSION.as_bytes());
        match &self.operation {
            Operation::Lease {
                lease_ms,
                count: n,
                due_limit,
                tokens,
            } => {
                emit(b"LEASE");
                emit(digits.format(self.now_ms).as_bytes());
                emit(digits.format(*lease_ms).as_bytes());
                emit(digits.format(*n).as_bytes());
                emit(digits.format(*due_limit).as_bytes());
                tokens.iter().for_each(|token| emit(token));
            }
            Operation::Renew {
                id,
                token,
                lease_ms,
                cost,
            } => {
                emit(b"RENEW");
                emit(digits.format(self.now_ms).as_bytes());
                emit(id);
                emit(token);
                emit(digits.format(*lease_ms).as_bytes());
                if let Some(cost) = cost {
                    emit(digits.format(*cost).as_bytes());
                }
            }
            Operation::Nack {
                id,
                token,
                how,
                reason,
            } => {
                emit(b"NACK");
                emit(digits.format(self.now_ms).as_bytes());
                emit(id);
                emit(token);
                match how {
                    Nack::Requeue => emit(b"REQUEUE"),
                    Nack::Dead => emit(b"DEAD"),
                    Nack::Release => emit(b"RELEASE"),
                    Nack::Delay { ms } => emit(digits.format(*ms).as_bytes()),
                }
                if let Some(reason) = reason {
                    emit(reason);
                }
            }
            Operation::Defer {
                due_ms,
                level,
                items,
            } => {
                emit(b"DEFER");
                emit(digits.format(self.now_ms).as_bytes());
                emit(digits.format(*due_ms).as_bytes());
                if *level != 0 {
                    emit(b"PRIORITY");
                    emit(digits.format(*level).as_bytes());
                }
                for item in items {
                    emit(item.partition);
                    emit(item.id);
                    emit(digits.format(item.weight).as_bytes());
                    emit(item.payload);
                }
            }
            Operation::Reclaim { limit } => {
                emit(b"RECLAIM");
                emit(digits.format(self.now_ms).as_bytes());
                emit(digits.format(*limit).as_bytes());
            }
            Operation::Due {
                limit,
                schedule_steps,
            } => {
                emit(b"DUE");
                emit(digits.format(self.now_ms).as_bytes());
                emit(digits.format(*limit).as_bytes());
                emit(digits.format(*schedule_steps).as_bytes());
            }
            Operation::Schedule { name, definition } => {
                emit(b"SCHEDULE");
                emit(digits.format(self.now_ms).as_bytes());
                emit(name);
                emit(definition);
            }
            Operation::Cancel { ids } => {
                emit(b"CANCEL");
                emit(digits.format(self.now_ms).as_bytes());
                ids.iter().for_each(|id| emit(id));
            }
            Operation::Ack { acks } => {
                emit(b"ACK");
                emit(digits.format(self.now_ms).as_bytes());
                // Four words each: id, token, cost (`-`: none) and result
                // (`-`: none, else `=` and its bytes).
                let mut result = Vec::new();
                for ack in acks {
                    emit(ack.id);
                    emit(ack.token);
                    match ack.cost {
                        Some(cost) => emit(digits.format(cost).as_bytes()),
                        None => emit(b"-"),
                    }
                    match ack.result {
                        Some(bytes) => {
                            result.clear();
                            result.push(b'=');
                            result.extend_from_slice(bytes);
                            emit(&result);
                        }
                        None => emit(b"-"),
                    }
                }
            }
        }
    }

    /// Reads the arguments after `<name>`: `<version> <operation> <now-ms> ...`.
    pub fn parse<'a>(args: &[&'a [u8]]) -> Result<Apply<'a>, ParseError> {
        let [version, name, now_ms, rest @ ..] = args else {
            return Err(ParseError::Malformed("too few arguments"));
        };
        if *version != VERSION.as_bytes() {
            return Err(ParseError::UnknownVersion(version.to_vec()));
        }
        let now_ms = integer(now_ms)?;
        let count = |raw: &[u8]| -> Result<usize, ParseError> {
            std::str::from_utf8(raw)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .ok_or(ParseError::Malformed("not a count"))
        };
        let operation = match (name.to_ascii_uppercase().as_slice(), rest) {
            (b"LEASE", [lease_ms, n, due_limit, tokens @ ..]) => Operation::Lease {
                lease_ms: integer(lease_ms)?,
                count: count(n)?,
                due_limit: count(due_limit)?,
                tokens: tokens.to_vec(),
            },
            (b"RENEW", [id, token, lease_ms, cost @ ..]) if cost.len() <= 1 => Operation::Renew {
                id,
                token,
                lease_ms: integer(lease_ms)?,
                cost: match cost {
                    [cost] => Some(
                        u64::try_from(integer(cost)?)
                            .map_err(|_| ParseError::Malformed("a negative cost"))?,
                    ),
                    _ => None,
                },
            },
            (b"NACK", [id, token, how, reason @ ..]) if reason.len() <= 1 => Operation::Nack {
                id,
                token,
                how: match how.to_ascii_uppercase().as_slice() {
                    b"REQUEUE" => Nack::Requeue,
                    b"DEAD" => Nack::Dead,
                    b"RELEASE" => Nack::Release,
                    _ => Nack::Delay { ms: integer(how)? },
                },
                reason: reason.first().copied(),
            },
            (b"DEFER", [due_ms, rest @ ..]) => {
                let (level, groups) = match rest {
                    [b"PRIORITY", level, groups @ ..] if groups.len() % 4 == 0 => (
                        parse_level(level).ok_or(ParseError::Malformed("bad priority"))?,
                        groups,
                    ),
                    groups if groups.len() % 4 == 0 => (0, groups),
                    _ => return Err(ParseError::Malformed("unknown operation or arguments")),
                };
                Operation::Defer {
                    due_ms: integer(due_ms)?,
                    level,
                    items: groups
                        .chunks_exact(4)
                        .map(|group| {
                            Ok(NewItem {
                                partition: group[0],
                                id: group[1],
                                weight: u64::try_from(integer(group[2])?)
                                    .map_err(|_| ParseError::Malformed("negative weight"))?,
                                payload: group[3],
                            })
                        })
                        .collect::<Result<_, ParseError>>()?,
                }
            }
            (b"RECLAIM", [limit]) => Operation::Reclaim {
                limit: count(limit)?,
            },
            // Before the steps were carried, every run funded three searches.
            (b"DUE", [limit]) => Operation::Due {
                limit: count(limit)?,
                schedule_steps: 3 * STEPS_PER_SEARCH,
            },
            (b"DUE", [limit, steps]) => Operation::Due {
                limit: count(limit)?,
                schedule_steps: u32::try_from(integer(steps)?)
                    .map_err(|_| ParseError::Malformed("steps out of range"))?,
            },
            (b"SCHEDULE", [name, definition]) => Operation::Schedule { name, definition },
            (b"CANCEL", ids) if !ids.is_empty() => Operation::Cancel { ids: ids.to_vec() },
            (b"ACK", words) if !words.is_empty() && words.len() % 4 == 0 => Operation::Ack {
                acks: words
                    .chunks_exact(4)
                    .map(|ack| {
                        let cost = match ack[2] {
                            b"-" => None,
                            raw => Some(
                                u64::try_from(integer(raw)?)
                                    .map_err(|_| ParseError::Malformed("a negative cost"))?,
                            ),
                        };
                        let result = match ack[3] {
                            b"-" => None,
                            [b'=', bytes @ ..] => Some(bytes),
                            _ => return Err(ParseError::Malformed("not a result")),
                        };
                        Ok(Ack {
                            cost,
                            result,
                            ..Ack::pair(ack[0], ack[1])
                        })
                    })
                    .collect::<Result<_, ParseError>>()?,
            },
            _ => return Err(ParseError::Malformed("unknown operation or arguments")),
        };
        Ok(Apply { now_ms, operation })
    }
}

fn integer(raw: &[u8]) -> Result<i64, ParseError> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(ParseError::Malformed("not an integer"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a master's stream (or a forged AOF) carries, the reader
        /// answers: an operation or a refusal, never a panic.
        #[test]
        fn any_arguments_are_read_or_refused(
            words in proptest::collection::vec(
                prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..12),
                    Just(VERSION.as_bytes().to_vec()),
                    prop::sample::select(vec![
                        b"LEASE".to_vec(), b"RECLAIM".to_vec(), b"DUE".to_vec(),
                        b"NACK".to_vec(), b"ENQUEUE".to_vec(), b"0".to_vec(),
                        b"-1".to_vec(), b"9223372036854775808".to_vec(),
                    ]),
                ],
                0..10,
            )
        ) {
            let refs: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            let _ = Apply::parse(&refs);
        }
    }

    fn round_trip(apply: Apply<'_>) {
        let args = apply.to_args(b"{q}");
        assert_eq!(args[0], b"{q}");
        let refs: Vec<&[u8]> = args[1..].iter().map(Vec::as_slice).collect();
        assert_eq!(Apply::parse(&refs).unwrap(), apply);
    }

    #[test]
    fn every_operation_reads_back_as_written() {
        let item = NewItem {
            partition: b"alice",
            id: b"a 1",
            weight: 3,
            payload: b"\x00\xffbinary",
        };
        for operation in [
            Operation::Lease {
                lease_ms: 30_000,
                count: 10,
                due_limit: 16,
                tokens: vec![b"0123456789abcdef0123456789abcdef", b"t2"],
            },
            Operation::Lease {
                lease_ms: 1,
                count: 1,
                due_limit: 1,
                tokens: vec![],
            },
            Operation::Renew {
                id: b"x",
                token: b"t",
                lease_ms: 5,
                cost: None,
            },
            Operation::Renew {
                id: b"x",
                token: b"t",
                lease_ms: 5,
                cost: Some(12),
            },
            Operation::Nack {
                id: b"x",
                token: b"t",
                how: Nack::Requeue,
                reason: None,
            },
            Operation::Nack {
                id: b"x",
                token: b"t",
                how: Nack::Delay { ms: 10 },
                reason: Some(b"ValueError: x\n  at \x00\xff"),
            },
            Operation::Nack {
                id: b"x",
                token: b"t",
                how: Nack::Dead,
                reason: Some(b"REQUEUE"),
            },
            Operation::Nack {
                id: b"x",
                token: b"t",
                how: Nack::Release,
                reason: None,
            },
            Operation::Nack {
                id: b"x",
                token: b"t",
                how: Nack::Delay { ms: 250 },
                reason: None,
            },
            Operation::Defer {
                due_ms: 1_700_000_000_123,
                level: 0,
                items: vec![item, item],
            },
            Operation::Defer {
                due_ms: 1_700_000_000_123,
                level: -100,
                items: vec![item],
            },
            Operation::Reclaim { limit: 100 },
            // VTRR.RECLAIM without LIMIT: every expired lease.
            Operation::Reclaim { limit: usize::MAX },
            Operation::Due {
                limit: 16,
                schedule_steps: 8_000,
            },
        ] {
            round_trip(Apply {
                now_ms: 1_700_000_000_000,
                operation,
            });
        }
    }

    #[test]
    fn an_unknown_version_or_a_malformed_command_is_refused() {
        fn parse(words: &[&'static str]) -> Result<Apply<'static>, ParseError> {
            let refs: Vec<&'static [u8]> = words.iter().map(|w| w.as_bytes()).collect();
            Apply::parse(&refs)
        }
        assert_eq!(
            parse(&["2", "DUE", "1", "16"]),
            Err(ParseError::UnknownVersion(b"2".to_vec()))
        );
        for words in [
            &["1"][..],
            &["1", "DUE", "x", "16"],
            &["1", "DUE", "1"],
            &["1", "DUE", "1", "-1"],
            &["1", "RENEW", "1", "id", "token"],
            &["1", "DEFER", "1", "2", "p", "id", "1"],
            &["1", "LEASE", "1", "100", "1"],
            &["1", "NACK", "1", "id", "token", "DEAD", "why", "extra"],
            &["1", "FLY", "1"],
        ] {
            assert!(
                matches!(parse(words), Err(ParseError::Malformed(_))),
                "{words:?}"
            );
        }
    }
}
