//! examples/worker.py, a worker with nothing but redis-py (what the Python
//! package's Worker does, by hand; the README links it), running against the
//! module: two worker processes, three partitions, every item processed
//! exactly once and in fair order; an item whose task always fails is
//! retried with growing delays (VTRR.NACK ... DELAY) and dead-lettered by
//! the queue's MAX-NACKS policy.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The worker's first retry delay here (`VTRR_BACKOFF_MS`), and the
/// `MAX_NACKS` of its dead-letter policy.
const BACKOFF_MS: i64 = 20;
const MAX_NACKS: i64 = 3;

/// Waits for every worker to exit, with its stdout and stderr (read as they
/// come, so no pipe fills). After `timeout` it kills them all and panics: a
/// worker that never goes idle (an item retried forever) fails the test
/// instead of hanging it.
fn wait_all(mut workers: Vec<Child>, timeout: Duration) -> Vec<(ExitStatus, String, String)> {
    fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut text = String::new();
            pipe.read_to_string(&mut text).unwrap();
            text
        })
    }
    let outputs: Vec<_> = workers
        .iter_mut()
        .map(|w| {
            (
                read_all(w.stdout.take().unwrap()),
                read_all(w.stderr.take().unwrap()),
            )
        })
        .collect();
    let deadline = Instant::now() + timeout;
    let mut statuses = vec![None; workers.len()];
    while statuses.iter().any(Option::is_none) {
        for (worker, status) in workers.iter_mut().zip(&mut statuses) {
            if status.is_none() {
                *status = worker.try_wait().unwrap();
            }
        }
        if Instant::now() > deadline {
            for worker in &mut workers {
                let _ = worker.kill();
                let _ = worker.wait();
            }
            let stderr: Vec<String> = outputs
                .into_iter()
                .map(|(_, err)| err.join().unwrap())
                .collect();
            let tail: Vec<&str> = stderr
                .iter()
                .flat_map(|e| e.lines().rev().take(5))
                .collect();
            panic!("the workers did not finish within {timeout:?}; last stderr lines: {tail:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    statuses
        .into_iter()
        .zip(outputs)
        .map(|(status, (out, err))| (status.unwrap(), out.join().unwrap(), err.join().unwrap()))
        .collect()
}

/// A `MONITOR` connection: every command the server runs, with the server's
/// clock.
struct Monitor(BufReader<TcpStream>);

impl Monitor {
    fn start(server: &Server) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut monitor = Monitor(BufReader::new(stream));
        assert_eq!(monitor.line(), "+OK");
        monitor
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    /// Every command seen until `ECHO <marker>` (sent by `con`), as (server
    /// time in µs, arguments).
    fn commands_until(&mut self, con: &mut redis::Connection) -> Vec<(i64, Vec<String>)> {
        let marker = "end-of-monitoring";
        let _: String = redis::cmd("ECHO").arg(marker).query(con).unwrap();
        let mut seen = Vec::new();
        loop {
            // +1700000000.123456 [0 127.0.0.1:5000] "VTRR.NACK" "jobs" ...
            let line = self.line();
            let (time, rest) = line[1..].split_once(' ').unwrap();
            let (seconds, micros) = time.split_once('.').unwrap();
            let at = seconds.parse::<i64>().unwrap() * 1_000_000 + micros.parse::<i64>().unwrap();
            let args: Vec<String> = rest
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            if args == ["ECHO", marker] {
                return seen;
            }
            seen.push((at, args));
        }
    }
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
    // A short timer interval: a retry due in 20 ms should not wait a whole
    // default second for the timer to promote it while both workers block.
    let server = timed_server("10");
    let mut con = server.connect();
    let mut monitor = Monitor::start(&server);
    // An item whose task always fails, in its own partition.
    enqueue_one(&mut con, "jobs", "p3", "p3-fail", "fail: always");
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
                .env("VTRR_BACKOFF_MS", BACKOFF_MS.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
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
    let mut failures = Vec::new();
    for (status, stdout, stderr) in wait_all(workers, Duration::from_secs(30)) {
        assert!(status.success(), "worker failed:\n{stderr}");
        failures.extend(stderr.lines().map(str::to_string));
        let mut last = None;
        for line in stdout.lines() {
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
    let stats = stats(&mut con, "jobs");
    assert_eq!(
        ["queued", "inflight", "delayed", "dead"].map(|field| stats[field].clone()),
        [Value::Int(0), Value::Int(0), Value::Int(0), Value::Int(1)],
        "{stats:?}"
    );

    // The failing item: MAX_NACKS + 1 attempts, each nacked with twice the
    // delay before, then dead-lettered by the policy, not acked.
    assert_eq!(
        failures.len() as i64,
        MAX_NACKS + 1,
        "one failure line per attempt: {failures:?}"
    );
    assert!(
        failures
            .iter()
            .all(|line| line.starts_with("failed p3-fail")),
        "{failures:?}"
    );
    let nacks: Vec<(i64, i64)> = monitor
        .commands_until(&mut con)
        .into_iter()
        .filter(|(_, args)| args[0].eq_ignore_ascii_case("VTRR.NACK") && args[2] == "p3-fail")
        .map(|(at, args)| {
            assert_eq!(args[4], "DELAY", "{args:?}");
            (at, args[5].parse().unwrap())
        })
        .collect();
    eprintln!("nacks of p3-fail (server µs, DELAY ms): {nacks:?}");
    let delays: Vec<i64> = nacks.iter().map(|(_, delay)| *delay).collect();
    let expected: Vec<i64> = (0..=MAX_NACKS).map(|n| BACKOFF_MS << n).collect();
    assert_eq!(delays, expected, "backoff");
    for pair in nacks.windows(2) {
        let ((nacked_at, delay), (next_at, _)) = (pair[0], pair[1]);
        // Leased again no earlier than its due time (1 ms: the module's
        // clock counts whole milliseconds).
        assert!(
            next_at - nacked_at >= (delay - 1) * 1000,
            "retried {} µs after a nack with DELAY {delay}",
            next_at - nacked_at
        );
    }
    let dead: Vec<Value> = redis::cmd("VTRR.DEAD").arg("jobs").query(&mut con).unwrap();
    let expected_dead: Vec<Value> = vec![
        Value::BulkString(b"p3-fail".to_vec()),
        Value::BulkString(b"fail: always".to_vec()),
        Value::BulkString(b"p3".to_vec()),
        Value::Int(1),
        Value::Int(0),
        Value::Int(MAX_NACKS + 1),
    ];
    match &dead[..] {
        [Value::Array(item)] => {
            assert_eq!(item[..6], expected_dead[..], "{item:?}");
            assert_eq!(
                item[7],
                Value::BulkString(b"max-nacks".to_vec()),
                "{item:?}"
            );
        }
        other => panic!("expected one dead item: {other:?}"),
    }
}
