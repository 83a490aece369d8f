//! The decimal encodings used in the keys: virtual times and `meta` values,
//! and integer fields read as the store keeps them.

use crate::store::{HashKey, Store};

/// Scores are doubles in Redis; integers above 2^53 lose precision, so
/// virtual times saturate there instead of wrapping or erroring mid-command.
pub const MAX_VIRTUAL_TIME: i64 = 1 << 53;

/// Parses a stored virtual time: a decimal integer, or (as Lua writes large
/// numbers, e.g. `1e+15`) a finite decimal number, rounded down.
pub fn parse_virtual_time(raw: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(raw).ok()?;
    if let Ok(n) = text.parse::<i64>() {
        return Some(n);
    }
    let value = text.parse::<f64>().ok().filter(|v| v.is_finite())?;
    Some(
        value
            .floor()
            .clamp(-(MAX_VIRTUAL_TIME as f64), MAX_VIRTUAL_TIME as f64) as i64,
    )
}

/// `meta[id]` = `<weight>:<partition>`.
pub fn format_meta(weight: u64, partition: &[u8]) -> Vec<u8> {
    let mut digits = itoa::Buffer::new();
    let weight = digits.format(weight).as_bytes();
    let mut meta = Vec::with_capacity(weight.len() + 1 + partition.len());
    meta.extend_from_slice(weight);
    meta.push(b':');
    meta.extend_from_slice(partition);
    meta
}

/// Splits `meta` at its first `:` (the partition may contain more). The
/// weight must be a positive decimal integer.
pub fn parse_meta(meta: &[u8]) -> Option<(u64, &[u8])> {
    let colon = meta.iter().position(|&b| b == b':')?;
    let (weight, rest) = meta.split_at(colon);
    if weight.is_empty() || !weight.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let weight: u64 = std::str::from_utf8(weight).ok()?.parse().ok()?;
    (weight > 0).then_some((weight, &rest[1..]))
}

/// An integer field: None when absent; else its value, the store's
/// number or its stored bytes as `read` reads them (None: unreadable).
pub(super) fn int_field(
    store: &mut impl Store,
    key: HashKey,
    field: &[u8],
    read: impl FnOnce(&[u8]) -> Option<i64>,
) -> Option<Option<i64>> {
    Some(match store.hget_int(key, field)? {
        Ok(n) => Some(n),
        Err(raw) => read(&raw),
    })
}

/// A decimal integer as `str::parse` reads it (a `+`, leading zeros).
pub(super) fn parse_decimal(raw: &[u8]) -> Option<i64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_partitions_with_colons() {
        let meta = format_meta(3, b"tenant:a:b");
        assert_eq!(meta, b"3:tenant:a:b");
        assert_eq!(parse_meta(&meta), Some((3, &b"tenant:a:b"[..])));
        assert_eq!(parse_meta(b"1:"), Some((1, &b""[..])));
    }

    #[test]
    fn meta_rejects_bad_weights() {
        for bad in [
            &b"0:p"[..],
            b":p",
            b"x:p",
            b"-1:p",
            b"1.5:p",
            b"nocolon",
            b"99999999999999999999999:p",
        ] {
            assert_eq!(parse_meta(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn virtual_time_accepts_lua_number_formats() {
        assert_eq!(parse_virtual_time(b"42"), Some(42));
        assert_eq!(parse_virtual_time(b"-3"), Some(-3));
        assert_eq!(
            parse_virtual_time(b"1e+15"),
            Some(1_000_000_000_000_000.min(MAX_VIRTUAL_TIME))
        );
        assert_eq!(parse_virtual_time(b"7.9"), Some(7));
        assert_eq!(parse_virtual_time(b"abc"), None);
        assert_eq!(parse_virtual_time(b"inf"), None);
        assert_eq!(parse_virtual_time(b""), None);
    }
}
