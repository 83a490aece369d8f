//! vtrr-queue's reference Lua scripts, loaded into a server and called on
//! a queue's nine keys.

use std::path::Path;

use super::queue_keys;

/// The reference Lua scripts (`lua/`), loaded into a server.
pub struct LuaScripts {
    shas: std::collections::BTreeMap<&'static str, String>,
}

impl LuaScripts {
    pub const NAMES: [&'static str; 5] = ["enqueue", "lease", "ack", "renew", "reclaim"];

    pub fn load(con: &mut redis::Connection) -> LuaScripts {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let common = std::fs::read_to_string(dir.join("common.lua")).unwrap();
        let shas = Self::NAMES
            .iter()
            .map(|name| {
                let body = std::fs::read_to_string(dir.join(format!("{name}.lua"))).unwrap();
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(format!("{common}\n{body}"))
                    .query(con)
                    .unwrap();
                (*name, sha)
            })
            .collect();
        LuaScripts { shas }
    }

    /// `EVALSHA <script> 9 <the queue's keys>`; add the ARGV with `.arg()`.
    pub fn cmd(&self, script: &str, queue: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.shas[script]).arg(9).arg(queue_keys(queue));
        cmd
    }
}
