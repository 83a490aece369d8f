//! Typed, strict argument parsing shared by the command handlers. Every value
//! is checked here, before a command opens a key.

use redis_module::{RedisError, RedisString};

use crate::{error, limits};

/// Parses a decimal integer the way Redis does: optional `-`, digits, no
/// `+`, no spaces, no leading zeros, no `-0`, no overflow.
pub fn parse_i64(raw: &[u8]) -> Option<i64> {
    let digits = raw.strip_prefix(b"-").unwrap_or(raw);
    if digits.is_empty()
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits[0] == b'0' && (digits.len() > 1 || digits.len() < raw.len()))
    {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// An integer in `min..=max`, else `error`.
pub fn int_in(
    raw: &[u8],
    min: i64,
    max: i64,
    error: impl FnOnce() -> RedisError,
) -> Result<i64, RedisError> {
    parse_i64(raw)
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(error)
}

/// A non-empty queue name.
pub fn queue_name(raw: &RedisString) -> Result<&[u8], RedisError> {
    let name = raw.as_slice();
    if name.is_empty() {
        return Err(error::empty("queue name"));
    }
    Ok(name)
}

/// A name argument that must not be empty (`what`: its name in errors).
pub fn non_empty<'a>(raw: &'a RedisString, what: &str) -> Result<&'a [u8], RedisError> {
    let name = raw.as_slice();
    if name.is_empty() {
        return Err(error::empty(what));
    }
    Ok(name)
}

/// A CURSOR value: an unsigned integer.
pub fn cursor(raw: &RedisString) -> Result<u64, RedisError> {
    std::str::from_utf8(raw.as_slice())
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(error::cursor)
}

/// `lease-ms`.
pub fn lease_ms(raw: &RedisString) -> Result<i64, RedisError> {
    int_in(raw.as_slice(), 1, limits::MAX_LEASE_MS, error::lease_ms)
}

/// Walks options: names matched case-insensitively, each followed by its
/// value, if it takes one.
pub struct Options<'a> {
    rest: std::slice::Iter<'a, RedisString>,
}

impl<'a> Options<'a> {
    pub fn new(rest: &'a [RedisString]) -> Self {
        Options { rest: rest.iter() }
    }

    /// The next option name, upper-cased.
    pub fn next_name(&mut self) -> Option<String> {
        let name = self.rest.next()?;
        Some(String::from_utf8_lossy(name.as_slice()).to_ascii_uppercase())
    }

    /// The value of the option just named; missing is a syntax error.
    pub fn value(&mut self) -> Result<&'a RedisString, RedisError> {
        self.rest.next().ok_or_else(error::syntax)
    }

    /// Every argument left: the values of an option that takes the rest.
    pub fn rest(&mut self) -> &'a [RedisString] {
        let rest = self.rest.as_slice();
        self.rest = [].iter();
        rest
    }
}

/// A positive count for `option` (COUNT, LIMIT).
/// A reported cost (`VTRR.ACKCOST`), in the units of a weight.
pub fn cost(raw: &RedisString) -> Result<u64, RedisError> {
    int_in(raw.as_slice(), 0, limits::MAX_WEIGHT, error::cost).map(|cost| cost as u64)
}

pub fn positive(raw: &RedisString, option: &str) -> Result<i64, RedisError> {
    int_in(raw.as_slice(), 1, i64::MAX, || error::positive(option))
}

/// A BLOCK timeout (VTRR.LEASE, VTRR.RESULT): 0 (forever) to
/// [`limits::MAX_BLOCK_MS`] milliseconds.
pub fn block_ms(raw: &RedisString) -> Result<i64, RedisError> {
    int_in(raw.as_slice(), 0, limits::MAX_BLOCK_MS, error::block_ms)
}

/// A job's result (`VTRR.ACKRESULT`): any bytes, at most
/// [`limits::MAX_RESULT_BYTES`].
pub fn result(raw: &RedisString) -> Result<&[u8], RedisError> {
    let bytes = raw.as_slice();
    if bytes.len() > limits::MAX_RESULT_BYTES {
        return Err(error::result_too_long());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::parse_i64;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes: the integer Redis would read, or none (the reference:
        /// an i64 whose canonical decimal form is exactly the bytes).
        #[test]
        fn any_bytes_parse_as_redis_reads_them(raw in proptest::collection::vec(any::<u8>(), 0..24)) {
            let reference = std::str::from_utf8(&raw)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .filter(|n| n.to_string().as_bytes() == raw.as_slice());
            prop_assert_eq!(parse_i64(&raw), reference);
        }

        /// Every i64 reads back from its decimal form.
        #[test]
        fn every_integer_reads_back(n in any::<i64>()) {
            prop_assert_eq!(parse_i64(n.to_string().as_bytes()), Some(n));
        }
    }

    #[test]
    fn integers_follow_redis_rules() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"-01",
            b"1.0",
            b"1e3",
            b"9223372036854775808",
            b"abc",
            b"\x001",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
