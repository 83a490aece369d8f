//! An integer as the keys store it: the decimal text `itoa` writes (an
//! optional `-`, then digits without leading zeros). Integer fields (virtual
//! times, counters, totals, held times) are typed values of the store: read
//! as numbers where their text is this canonical form, and handed back as
//! the stored bytes otherwise, for the caller's own reading (a virtual time
//! Lua wrote as `1e+15`, a count with a `+`).

/// The integer `raw` is the canonical text of, if it is one.
pub fn canonical_int(raw: &[u8]) -> Option<i64> {
    let (negative, digits) = match raw.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, raw),
    };
    let valid = match digits {
        [] => false,
        [b'0'] => !negative,
        [first, ..] => {
            *first != b'0' && digits.len() <= 19 && digits.iter().all(u8::is_ascii_digit)
        }
    };
    if !valid {
        return None;
    }
    let mut value: i64 = 0;
    for &digit in digits {
        let digit = i64::from(digit - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_the_canonical_text_reads() {
        for (raw, value) in [
            (&b"0"[..], Some(0)),
            (b"42", Some(42)),
            (b"-7", Some(-7)),
            (b"9223372036854775807", Some(i64::MAX)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
            (b"007", None),
            (b"-0", None),
            (b"+5", None),
            (b"1e+15", None),
            (b"7.9", None),
            (b"", None),
            (b"-", None),
            (b" 1", None),
        ] {
            assert_eq!(
                canonical_int(raw),
                value,
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    proptest! {
        #[test]
        fn every_integer_round_trips(n in any::<i64>()) {
            let text = itoa::Buffer::new().format(n).as_bytes().to_vec();
            prop_assert_eq!(canonical_int(&text), Some(n));
        }

        #[test]
        fn what_reads_is_what_it_formats_to(raw in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Some(n) = canonical_int(&raw) {
                let mut digits = itoa::Buffer::new();
                prop_assert_eq!(digits.format(n).as_bytes(), &raw[..]);
            }
        }
    }
}
