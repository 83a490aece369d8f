//! The refusal harness: calls that must each be refused with exactly their
//! error and change nothing (`Refusals`), and the arity error's text.

use super::{command, dump_all, dump_queue, error_of};

/// `ERR wrong number of arguments for '<name>' command`.
pub fn arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// Calls that must each be refused with exactly their error: (words, error).
#[derive(Default)]
pub struct Refusals(Vec<(Vec<String>, String)>);

impl Refusals {
    pub fn case(&mut self, words: &[&str], error: &str) {
        let words = words.iter().map(|w| w.to_string()).collect();
        self.0.push((words, error.to_string()));
    }

    /// Makes each call on `con`: it must be refused with its error and leave
    /// queue `queue` as it was. Returns the queue's DUMP they were held to.
    pub fn assert_refused(
        &self,
        con: &mut redis::Connection,
        queue: &str,
    ) -> Vec<(String, Option<Vec<u8>>)> {
        self.assert_refused_leaving(con, |con| dump_queue(con, queue))
    }

    /// As `assert_refused`, each call leaving every key of the server as
    /// it was (for calls that would write outside one queue's keys).
    pub fn assert_refused_leaving_all(&self, con: &mut redis::Connection) {
        self.assert_refused_leaving(con, dump_all);
    }

    fn assert_refused_leaving<S: PartialEq + std::fmt::Debug>(
        &self,
        con: &mut redis::Connection,
        snapshot: impl Fn(&mut redis::Connection) -> S,
    ) -> S {
        let before = snapshot(con);
        for (words, expected) in &self.0 {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let got = error_of(command(&words).query(con));
            assert_eq!(&got, expected, "{words:?}");
            assert_eq!(before, snapshot(con), "{words:?} changed something");
        }
        before
    }
}
