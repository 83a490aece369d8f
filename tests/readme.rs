//! The README's redis-cli session is what a real server replies: each of
//! its commands is run through `redis-cli` against a fresh server with the
//! module, and the replies must be the README's, tokens and times aside
//! (they differ on every run). `VTRR_WRITE_README=1 cargo test --test
//! readme` writes the session anew from the server's replies.

mod common;

use std::collections::HashMap;
use std::process::Command;

use common::*;

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
const PROMPT: &str = "127.0.0.1:6379> ";

/// The session's block: the first fenced block after its heading, as
/// (where it starts, where it ends) in the README's text.
fn session_span(readme: &str) -> (usize, usize) {
    let heading = readme
        .find("## A redis-cli session")
        .expect("the README has a redis-cli session");
    let open = heading + readme[heading..].find("```\n").expect("its block") + 4;
    let close = open + readme[open..].find("```\n").expect("its block's end");
    (open, close)
}

/// A lease token: 32 hex digits.
fn is_token(word: &str) -> bool {
    word.len() == 32 && word.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The tokens of a reply, in order.
fn tokens_in(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .filter(|word| is_token(word))
        .map(str::to_string)
        .collect()
}

/// Tokens and Unix-millisecond times as placeholders.
fn normalised(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if is_token(word) {
            out.push_str("<token>");
        } else if word.len() == 13 && word.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str("<ms>");
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Runs the session's commands on `server`: the session as redis-cli
/// shows it, with the server's own tokens.
fn replayed(server: &Server, session: &str) -> String {
    // The README's tokens, in the order its replies give them, stand for
    // the server's, in the order its replies give them.
    let mut tokens: HashMap<String, String> = HashMap::new();
    let mut readme_tokens = Vec::new();
    let mut out = String::new();
    let mut commands = Vec::new();
    for line in session.lines() {
        match line.strip_prefix(PROMPT) {
            Some(command) => commands.push((command.to_string(), String::new())),
            None => {
                let (_, reply) = commands.last_mut().expect("a reply follows a command");
                reply.push_str(line);
                reply.push('\n');
            }
        }
    }
    for (command, readme_reply) in commands {
        let args: Vec<String> = command
            .split_whitespace()
            .map(|word| {
                tokens
                    .get(word)
                    .cloned()
                    .unwrap_or_else(|| word.to_string())
            })
            .collect();
        let done = Command::new("redis-cli")
            .args(["--no-raw", "-p", &server.port.to_string()])
            .args(&args)
            .output()
            .expect("redis-cli runs");
        assert!(done.status.success(), "redis-cli {args:?}: {done:?}");
        let reply = String::from_utf8(done.stdout).expect("text");
        readme_tokens.extend(tokens_in(&readme_reply));
        let mut ours = tokens_in(&reply).into_iter();
        for readme_token in readme_tokens.drain(..) {
            if let Some(real) = ours.next() {
                tokens.insert(readme_token, real);
            }
        }
        out.push_str(PROMPT);
        out.push_str(&args.join(" "));
        out.push('\n');
        out.push_str(&reply);
    }
    out
}

#[test]
fn the_readme_session_is_what_a_server_replies() {
    if keys_layout_only("the README's session shows the keys layout") {
        return;
    }
    let readme = std::fs::read_to_string(README).unwrap();
    let (open, close) = session_span(&readme);
    let session = &readme[open..close];
    let server = Server::start();
    let replies = replayed(&server, session);
    if std::env::var_os("VTRR_WRITE_README").is_some() {
        let written = format!("{}{}{}", &readme[..open], replies, &readme[close..]);
        std::fs::write(README, written).unwrap();
        return;
    }
    assert_eq!(
        normalised(session),
        normalised(&replies),
        "the README's session is not what the server replies: \
         VTRR_WRITE_README=1 cargo test --test readme writes it anew"
    );
}

#[test]
fn make_run_on_a_taken_port_says_so_at_once_and_offers_a_free_one() {
    if keys_layout_only("make run's port check has no layout") {
        return;
    }
    let taken = Server::start();
    let done = Command::new("make")
        .args([
            "--no-print-directory",
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "run",
        ])
        .arg(format!("PORT={}", taken.port))
        .output()
        .expect("make runs");
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(!done.status.success(), "{said}");
    let prefix = format!("port {} is taken", taken.port);
    assert!(said.starts_with(&prefix), "checked before building: {said}");
    let offered: u16 = said
        .trim_end()
        .rsplit("PORT=")
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("a port offered: {said}"));
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", offered)).is_err(),
        "the port offered is free"
    );
}
