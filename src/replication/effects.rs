//! Effects replication: every write a store makes is recorded as the plain
//! command that redoes it (ZADD, ZREM, HSET, HDEL, SET, DEL) and propagated
//! at commit, so replicas and the AOF need no module and never re-run clock
//! or random logic (`vtrr.replication effects`). In `commands` mode a call
//! propagates one command instead: verbatim, or `VTRR.APPLY`.

use std::ffi::CStr;
use std::io::Write as _;

use redis_module::{raw, Context};
use smallvec::SmallVec;

use super::replay::Apply;

use crate::core::Ack;
use crate::server::api::api;
use crate::server::strings::OwnedString;

/// The plain commands a store's writes replicate as.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Zadd,
    Zrem,
    Hset,
    Hdel,
    Set,
    Del,
}

impl Command {
    fn name(self) -> &'static CStr {
        match self {
            Command::Zadd => c"ZADD",
            Command::Zrem => c"ZREM",
            Command::Hset => c"HSET",
            Command::Hdel => c"HDEL",
            Command::Set => c"SET",
            Command::Del => c"DEL",
        }
    }
}

/// One replicated write command, possibly merged from several writes. The
/// arguments are the very strings handed to the key API (shared, not
/// copied). A single write's two arguments (field and value, score and
/// member) and a key's single effect are held inline, so a lease or an ack
/// records its effects without allocating (37 allocations per cycle to 14).
struct Effect {
    command: Command,
    args: SmallVec<[OwnedString; 2]>,
}

/// The effects recorded on one key, in order.
#[derive(Default)]
pub struct Effects(SmallVec<[Effect; 1]>);

impl Effects {
    pub fn record<const N: usize>(&mut self, command: Command, args: [OwnedString; N]) {
        match self.0.last_mut() {
            // Consecutive writes of one kind to one key become one command
            // (ZADD k s1 m1 s2 m2 ...), which applies in the same order.
            Some(last)
                if last.command == command
                    && matches!(
                        command,
                        Command::Zadd | Command::Zrem | Command::Hset | Command::Hdel
                    ) =>
            {
                last.args.extend(args);
            }
            // Only the last value of a string survives.
            Some(last) if last.command == Command::Set && command == Command::Set => {
                last.args = args.into_iter().collect();
            }
            _ => self.0.push(Effect {
                command,
                args: args.into_iter().collect(),
            }),
        }
    }

    /// Propagates the effects on `key` and forgets them.
    pub fn replicate(&mut self, ctx: &Context, key: &OwnedString) {
        let mut argv: SmallVec<[*mut raw::RedisModuleString; 8]> = SmallVec::new();
        for effect in self.0.drain(..) {
            argv.clear();
            argv.push(key.0);
            argv.extend(effect.args.iter().map(|arg| arg.0));
            // SAFETY: live context; "v" takes an array of valid strings and
            // its length, and Redis takes its own reference to each.
            unsafe {
                api!(RedisModule_Replicate)(
                    ctx.ctx,
                    effect.command.name().as_ptr(),
                    c"v".as_ptr(),
                    argv.as_mut_ptr(),
                    argv.len(),
                )
            };
        }
    }
}

/// Propagates the calling client's command as it was sent.
pub fn replicate_verbatim(ctx: &Context) {
    // SAFETY: live command context.
    unsafe { api!(RedisModule_ReplicateVerbatim)(ctx.ctx) };
}

/// The arguments of one `VTRR.APPLY`, each copied once, straight into the
/// string the server propagates; and those of the `VTRR.ACK` (or
/// `VTRR.ACKCOST`) that goes first, when the call settled leases before it
/// leased (`VTRR.LEASE ... ACK`: an ACK is deterministic, so replicas redo
/// it as itself).
#[derive(Default)]
pub struct ApplyArgs {
    args: SmallVec<[OwnedString; 12]>,
    ack_first: Vec<OwnedString>,
    ack_costs: bool,
    /// `ack_first` is a `VTRR.APPLY` of its own (acks that kept outcomes).
    ack_applied: bool,
}

impl ApplyArgs {
    pub fn push(&mut self, arg: &[u8]) {
        self.args.push(OwnedString::new(arg));
    }

    /// `apply` (acks that kept outcomes, so replayed at this call's time)
    /// as a `VTRR.APPLY` of its own, propagated first.
    pub fn apply_first(&mut self, queue: &[u8], apply: &Apply<'_>) {
        apply.write_args(queue, |arg| self.ack_first.push(OwnedString::new(arg)));
        self.ack_applied = true;
    }

    /// `VTRR.ACK <queue> <id> <token> ...` of `acks`, propagated first;
    /// `VTRR.ACKCOST <queue> <id> <token> <cost> ...` when they carry costs
    /// (one call's acks all do or all do not).
    pub fn ack_first<'a>(&mut self, queue: &[u8], acks: impl Iterator<Item = &'a Ack<'a>>) {
        self.ack_first.push(OwnedString::new(queue));
        let mut digits = itoa::Buffer::new();
        for ack in acks {
            self.ack_first.push(OwnedString::new(ack.id));
            self.ack_first.push(OwnedString::new(ack.token));
            if let Some(cost) = ack.cost {
                self.ack_costs = true;
                self.ack_first
                    .push(OwnedString::new(digits.format(cost).as_bytes()));
            }
        }
    }
}

/// Propagates `VTRR.APPLY <args...>`, after its `VTRR.ACK` if it has one
/// (the server wraps the two in MULTI/EXEC).
pub fn replicate_apply(ctx: &Context, args: &ApplyArgs) {
    if !args.ack_first.is_empty() {
        let command = if args.ack_applied {
            c"VTRR.APPLY"
        } else if args.ack_costs {
            c"VTRR.ACKCOST"
        } else {
            c"VTRR.ACK"
        };
        replicate(ctx, command, &args.ack_first);
    }
    replicate(ctx, c"VTRR.APPLY", &args.args);
}

fn replicate(ctx: &Context, command: &CStr, args: &[OwnedString]) {
    let mut argv: SmallVec<[*mut raw::RedisModuleString; 12]> = args.iter().map(|s| s.0).collect();
    // SAFETY: live context; "v" takes an array of valid strings and its
    // length, and Redis takes its own reference to each.
    unsafe {
        api!(RedisModule_Replicate)(
            ctx.ctx,
            command.as_ptr(),
            c"v".as_ptr(),
            argv.as_mut_ptr(),
            argv.len(),
        )
    };
}

/// Propagates `VTRR.LOAD <key> <chunk>`: a native queue a call created
/// reaches replicas and the AOF as what it holds, so it is native there
/// too whatever their `vtrr.default-layout`.
pub fn replicate_load(ctx: &Context, key: &OwnedString, chunk: &[u8]) {
    // SAFETY: live context; "sb" takes a valid string and a buffer with its
    // length, both copied.
    unsafe {
        api!(RedisModule_Replicate)(
            ctx.ctx,
            c"VTRR.LOAD".as_ptr(),
            c"sb".as_ptr(),
            key.0,
            chunk.as_ptr(),
            chunk.len(),
        )
    };
}

/// Formats a score the way Redis parses it back exactly, into `buffer`:
/// integers below 10^17 in plain digits, anything else in the shortest
/// round-trip exponent form (at most 24 bytes, e.g. `-1.2345678901234567e-308`;
/// plain `{}` would spell 1e300 in 301 digits).
pub fn format_score(score: f64, buffer: &mut [u8; 32]) -> &[u8] {
    if score.fract() == 0.0 && score.abs() < 1e17 {
        let mut integer = itoa::Buffer::new();
        let text = integer.format(score as i64).as_bytes();
        buffer[..text.len()].copy_from_slice(text);
        return &buffer[..text.len()];
    }
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    let written = write!(cursor, "{score:e}");
    written.expect("a score fits in 32 bytes");
    let len = cursor.position() as usize;
    &buffer[..len]
}

#[cfg(test)]
mod tests {
    use super::format_score;

    #[test]
    fn scores_format_so_redis_reads_back_the_same_double() {
        let mut buffer = [0u8; 32];
        for (score, text) in [
            (0.0, "0"),
            (42.0, "42"),
            (-3.0, "-3"),
            (1_700_000_000_000.0, "1700000000000"),
            (9_007_199_254_740_992.0, "9007199254740992"),
            (1e17, "1e17"),
            (-9.3e18, "-9.3e18"),
            (1e300, "1e300"),
            (0.5, "5e-1"),
            (f64::MAX, "1.7976931348623157e308"),
            (-1.2345678901234567e-308, "-1.2345678901234567e-308"),
        ] {
            let formatted = format_score(score, &mut buffer);
            assert_eq!(formatted, text.as_bytes(), "{score}");
            let parsed: f64 = std::str::from_utf8(formatted).unwrap().parse().unwrap();
            assert_eq!(parsed.to_bits(), score.to_bits(), "{score}");
        }
    }
}
