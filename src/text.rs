//! Client text in error replies and log lines. A simple error is one line
//! of text and a log line a C string, while a queue name, partition, id or
//! option is any bytes: quoted here as Redis quotes bytes in its own
//! output (`CLIENT LIST`, `MONITOR`): printable ASCII as is, the rest as
//! `\n`, `\xe5`... Every error and log line passes [`printable_line`] last,
//! so a message is printable ASCII whatever reached it: no NUL for a
//! `CString` to refuse, no line break to split a reply, and nothing the
//! reply and log paths of `redis-module` could mangle or panic on.

use std::fmt::{self, Display, Write as _};

/// Bytes from a client, quoted for a message: `\\` for a backslash,
/// `\n`, `\r`, `\t`, `\xNN` for any other byte that is not printable
/// ASCII. Nothing is dropped or truncated, and the quoting reads back
/// unambiguously.
#[derive(Clone, Copy)]
pub struct Quoted<'a>(pub &'a [u8]);

impl Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.split_inclusive(|byte| !is_plain(*byte)) {
            let (last, plain) = match chunk.split_last() {
                Some((&last, plain)) if !is_plain(last) => (Some(last), plain),
                _ => (None, chunk),
            };
            // Plain bytes are printable ASCII, so valid UTF-8.
            f.write_str(std::str::from_utf8(plain).unwrap_or_default())?;
            if let Some(byte) = last {
                match byte {
                    b'\\' => f.write_str("\\\\")?,
                    b'\n' => f.write_str("\\n")?,
                    b'\r' => f.write_str("\\r")?,
                    b'\t' => f.write_str("\\t")?,
                    other => write!(f, "\\x{other:02x}")?,
                }
            }
        }
        Ok(())
    }
}

/// Printable ASCII other than the backslash, which quoting escapes.
fn is_plain(byte: u8) -> bool {
    (b' '..=b'~').contains(&byte) && byte != b'\\'
}

/// `message` with every byte that is not printable ASCII written `\xNN`:
/// the last step of every error reply and log line. Messages quote client
/// bytes with [`Quoted`] already, so this changes nothing but a message
/// that a mistake let raw text into.
pub fn printable_line(message: String) -> String {
    if message.bytes().all(|byte| (b' '..=b'~').contains(&byte)) {
        return message;
    }
    let mut line = String::with_capacity(message.len() + 16);
    for byte in message.bytes() {
        if (b' '..=b'~').contains(&byte) {
            line.push(char::from(byte));
        } else {
            let _ = write!(line, "\\x{byte:02x}");
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::{printable_line, Quoted};
    use proptest::prelude::*;

    #[test]
    fn quoting_keeps_printable_ascii_and_escapes_the_rest() {
        let cases: &[(&[u8], &str)] = &[
            (b"files", "files"),
            (b"a b~", "a b~"),
            (b"%s%n%x", "%s%n%x"),
            (b"a\\b", "a\\\\b"),
            (b"\r\n\t", "\\r\\n\\t"),
            (b"\x00", "\\x00"),
            (b"\x7f\xff", "\\x7f\\xff"),
            ("Ā".as_bytes(), "\\xc4\\x80"),
            ("一".as_bytes(), "\\xe4\\xb8\\x80"),
            (b"", ""),
        ];
        for (bytes, quoted) in cases {
            assert_eq!(Quoted(bytes).to_string(), *quoted);
        }
    }

    #[test]
    fn a_line_with_raw_text_is_made_printable() {
        assert_eq!(printable_line("ok".into()), "ok");
        assert_eq!(printable_line("a\0b".into()), "a\\x00b");
        assert_eq!(printable_line("刀\r\n".into()), "\\xe5\\x88\\x80\\x0d\\x0a");
        assert_eq!(printable_line("a\\b".into()), "a\\b");
    }

    /// Reads a quoting back: the inverse of `Quoted`, for the property.
    fn unquote(text: &str) -> Vec<u8> {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'\\' {
                out.push(bytes[i]);
                i += 1;
                continue;
            }
            match bytes[i + 1] {
                b'\\' => out.push(b'\\'),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'x' => {
                    let hex = std::str::from_utf8(&bytes[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 2;
                }
                other => panic!("unexpected escape {other}"),
            }
            i += 2;
        }
        out
    }

    proptest! {
        /// Any bytes quote to printable ASCII that reads back to them, and
        /// the last step leaves a quoted message as it is.
        #[test]
        fn quoting_is_printable_and_reversible(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let quoted = Quoted(&bytes).to_string();
            prop_assert!(quoted.bytes().all(|b| (b' '..=b'~').contains(&b)));
            prop_assert_eq!(unquote(&quoted), bytes);
            prop_assert_eq!(printable_line(quoted.clone()), quoted);
        }

        /// Any text comes out of the last step as printable ASCII.
        #[test]
        fn any_text_becomes_a_printable_line(text in any::<String>()) {
            let line = printable_line(text);
            prop_assert!(line.bytes().all(|b| (b' '..=b'~').contains(&b)));
        }
    }
}
