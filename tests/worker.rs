//! The README's Python worker (examples/worker.py) running against the
//! module: two worker processes, three partitions, every item processed
//! exactly once and in fair order.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use common::*;

fn example() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/worker.py")).unwrap()
}

#[test]
fn the_readme_shows_the_tested_worker_verbatim() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains(&example()),
        "README's worker differs from examples/worker.py"
    );
}

#[test]
fn two_python_workers_process_every_item_once_in_fair_order() {
    let has_redis_py = Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        has_redis_py,
        "python3 with redis-py is required (make deps installs it)"
    );
    let server = Server::start();
    let mut con = server.connect();
    // Three partitions, each enqueuing its whole backlog at once.
    let mut fair_order = Vec::new();
    for partition in ["p0", "p1", "p2"] {
        let mut cmd = redis::cmd("VTRR.ENQUEUE");
        cmd.arg("jobs");
        for n in 0..30 {
            cmd.arg(partition)
                .arg(format!("{partition}-{n:02}"))
                .arg(1)
                .arg(format!("payload-{n}"));
        }
        let added: i64 = cmd.query(&mut con).unwrap();
        assert_eq!(added, 30);
    }
    for n in 0..30 {
        for partition in ["p0", "p1", "p2"] {
            fair_order.push(format!("{partition}-{n:02}"));
        }
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/worker.py");
    let workers: Vec<_> = (0..2)
        .map(|_| {
            Command::new("python3")
                .arg(script)
                .env("VTRR_URL", server.url())
                .env("VTRR_QUEUE", "jobs")
                .env("VTRR_EXIT_WHEN_IDLE", "1")
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("python3")
        })
        .collect();
    let mut processed: BTreeMap<String, usize> = BTreeMap::new();
    let position: BTreeMap<&str, usize> = fair_order
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    for worker in workers {
        let output = worker.wait_with_output().unwrap();
        assert!(output.status.success());
        let mut last = None;
        for line in String::from_utf8(output.stdout).unwrap().lines() {
            let id = line.split_whitespace().nth(1).unwrap().to_string();
            // Each worker sees its items in the fair (round-robin) order.
            let at = position[id.as_str()];
            assert!(last.is_none_or(|l| l < at), "{id} out of fair order");
            last = Some(at);
            *processed.entry(id).or_default() += 1;
        }
    }
    assert_eq!(processed.len(), 90, "not every item was processed");
    assert!(
        processed.values().all(|&n| n == 1),
        "an item was processed twice"
    );
    let stats: BTreeMap<String, Value> = redis::cmd("VTRR.STATS")
        .arg("jobs")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        (stats["queued"].clone(), stats["inflight"].clone()),
        (Value::Int(0), Value::Int(0))
    );
}
