//! Client helpers: a command from its words, the error a reply must be, and
//! one function per module call the suites make again and again (enqueue,
//! defer, lease in its forms, ack, renew, nack, policy, stats, partitions).

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::Value;

use super::Server;

/// A command from its words.
pub fn command(words: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    cmd
}

/// The error reply `result` must be, as `CODE detail`.
pub fn error_of(result: redis::RedisResult<Value>) -> String {
    let error = result.expect_err("expected an error reply");
    format!(
        "{} {}",
        error.code().unwrap_or("?"),
        error.detail().unwrap_or("")
    )
}

/// An item as ENQUEUE and DEFER take it: partition, id, weight, payload.
pub type Item<'a> = (&'a str, &'a str, u64, &'a [u8]);

/// `cmd` (ENQUEUE or DEFER, its leading arguments given) with `items`
/// appended, run on `con`: the number added.
fn add_items(con: &mut redis::Connection, mut cmd: redis::Cmd, items: &[Item]) -> i64 {
    for (partition, id, weight, payload) in items {
        cmd.arg(*partition).arg(*id).arg(*weight).arg(*payload);
    }
    cmd.query(con).unwrap()
}

/// `VTRR.ENQUEUE queue` with `(partition, id, weight, payload)` items in one
/// call; the number added.
pub fn enqueue_items(con: &mut redis::Connection, queue: &str, items: &[Item]) -> i64 {
    let mut cmd = redis::cmd("VTRR.ENQUEUE");
    cmd.arg(queue);
    add_items(con, cmd, items)
}

/// `VTRR.ENQUEUE` of one weight-1 item; returns how many were added.
pub fn enqueue_one(
    con: &mut redis::Connection,
    queue: &str,
    partition: &str,
    id: &str,
    payload: &str,
) -> i64 {
    enqueue_items(con, queue, &[(partition, id, 1, payload.as_bytes())])
}

/// `VTRR.DEFER queue delay_ms` with `(partition, id, weight, payload)`
/// items in one call; the number added.
pub fn defer_items(con: &mut redis::Connection, queue: &str, delay_ms: u64, items: &[Item]) -> i64 {
    let mut cmd = redis::cmd("VTRR.DEFER");
    cmd.arg(queue).arg(delay_ms);
    add_items(con, cmd, items)
}

/// `VTRR.STATS <queue>`, by field name.
pub fn stats(
    con: &mut redis::Connection,
    queue: &str,
) -> std::collections::BTreeMap<String, Value> {
    redis::cmd("VTRR.STATS").arg(queue).query(con).unwrap()
}

/// An integer field of `VTRR.STATS <queue>`.
pub fn stat(con: &mut redis::Connection, queue: &str, name: &str) -> i64 {
    match &stats(con, queue)[name] {
        Value::Int(n) => *n,
        other => panic!("stats {name} is {other:?}"),
    }
}

/// One lease as VTRR.LEASE replies: id, payload, token, timeouts.
pub type Lease = (Vec<u8>, Vec<u8>, String, i64);

/// `VTRR.LEASE <queue> <lease_ms>`: the lease, or None on an empty queue.
pub fn lease(con: &mut redis::Connection, queue: &str, lease_ms: u64) -> Option<Lease> {
    redis::cmd("VTRR.LEASE")
        .arg(queue)
        .arg(lease_ms)
        .query(con)
        .unwrap()
}

/// `VTRR.ACK <queue> <id> <token>`: the number acked (0 or 1).
pub fn ack(con: &mut redis::Connection, queue: &str, id: &[u8], token: &str) -> i64 {
    redis::cmd("VTRR.ACK")
        .arg(queue)
        .arg(id)
        .arg(token)
        .query(con)
        .unwrap()
}

/// `VTRR.RENEW <queue> <id> <token> <lease_ms>`: 1 when renewed, else 0.
pub fn renew(
    con: &mut redis::Connection,
    queue: &str,
    id: &[u8],
    token: &str,
    lease_ms: u64,
) -> i64 {
    redis::cmd("VTRR.RENEW")
        .arg(queue)
        .arg(id)
        .arg(token)
        .arg(lease_ms)
        .query(con)
        .unwrap()
}

/// `VTRR.NACK <queue> <id> <token> [options...]` (options such as
/// `["DELAY", "100"]` or `["DEAD"]`): 1 when the token was current, else 0.
pub fn nack(
    con: &mut redis::Connection,
    queue: &str,
    id: &[u8],
    token: &str,
    options: &[&str],
) -> i64 {
    redis::cmd("VTRR.NACK")
        .arg(queue)
        .arg(id)
        .arg(token)
        .arg(options)
        .query(con)
        .unwrap()
}

/// `VTRR.POLICY <queue> <options...>` (such as `["MAX-NACKS", "2"]`), which
/// must reply OK.
pub fn set_policy(con: &mut redis::Connection, queue: &str, options: &[&str]) {
    let reply: String = redis::cmd("VTRR.POLICY")
        .arg(queue)
        .arg(options)
        .query(con)
        .unwrap();
    assert_eq!(reply, "OK");
}

/// Lets a 1 ms lease (or a delay of a few ms) pass.
pub fn let_expire() {
    std::thread::sleep(Duration::from_millis(5));
}

/// RENEWs the lease of `id` (`token` must be current) to 1 ms and lets it
/// expire: nothing has reclaimed it yet on a server whose timer is off.
pub fn expire_lease(con: &mut redis::Connection, queue: &str, id: &[u8], token: &str) {
    assert_eq!(renew(con, queue, id, token, 1), 1);
    let_expire();
}

/// One lease as `VTRR.LEASE ... WITHCOUNTERS` replies: id, payload, token,
/// timeouts, nacks.
pub type CountedLease = (Vec<u8>, Vec<u8>, String, i64, i64);

/// `VTRR.LEASE <queue> <lease_ms> WITHCOUNTERS`: the lease, or None on an
/// empty queue.
pub fn lease_with_counters(
    con: &mut redis::Connection,
    queue: &str,
    lease_ms: u64,
) -> Option<CountedLease> {
    redis::cmd("VTRR.LEASE")
        .arg(queue)
        .arg(lease_ms)
        .arg("WITHCOUNTERS")
        .query(con)
        .unwrap()
}

/// `VTRR.LEASE <queue> <lease_ms> COUNT <count>`: up to `count` leases.
pub fn lease_count(
    con: &mut redis::Connection,
    queue: &str,
    lease_ms: u64,
    count: u64,
) -> Vec<Lease> {
    redis::cmd("VTRR.LEASE")
        .arg(queue)
        .arg(lease_ms)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .unwrap()
}

/// The ids of `leases`, as text, in order.
pub fn ids(leases: &[Lease]) -> Vec<String> {
    leases
        .iter()
        .map(|l| String::from_utf8(l.0.clone()).unwrap())
        .collect()
}

/// The (id, token) of every lease in a LEASE reply (nil, one lease, or an
/// array of them with COUNT; four or five elements with WITHCOUNTERS), in
/// order.
pub fn leases_in(reply: &Value) -> Vec<(Vec<u8>, Vec<u8>)> {
    let Value::Array(elements) = reply else {
        return Vec::new();
    };
    match elements.as_slice() {
        [Value::BulkString(id), _, Value::BulkString(token), Value::Int(_), ..] => {
            vec![(id.clone(), token.clone())]
        }
        _ => elements.iter().flat_map(leases_in).collect(),
    }
}

/// `VTRR.LEASE <queue> <lease_ms> BLOCK <block_ms>` (0: wait forever).
pub fn lease_block_cmd(queue: &str, lease_ms: u64, block_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("VTRR.LEASE");
    cmd.arg(queue).arg(lease_ms).arg("BLOCK").arg(block_ms);
    cmd
}

/// A thread on a connection of its own to `server`, waiting in
/// `VTRR.LEASE q 60000 BLOCK <block_ms>`: it ends with the reply, read as
/// `T` (`Option<Lease>`, or a lease with text fields), and when it came.
pub fn spawn_waiter<T: redis::FromRedisValue + Send + 'static>(
    server: &Server,
    block_ms: u64,
) -> JoinHandle<(T, Instant)> {
    let url = server.url();
    std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let reply = lease_block_cmd("q", 60_000, block_ms)
            .query(&mut con)
            .unwrap();
        (reply, Instant::now())
    })
}

/// `VTRR.RECLAIM <queue>`: the number of expired leases taken back.
pub fn reclaim(con: &mut redis::Connection, queue: &str) -> i64 {
    redis::cmd("VTRR.RECLAIM").arg(queue).query(con).unwrap()
}

/// `VTRR.CANCEL <queue> <ids...>`: the number cancelled.
pub fn cancel(con: &mut redis::Connection, queue: &str, ids: &[&str]) -> i64 {
    redis::cmd("VTRR.CANCEL")
        .arg(queue)
        .arg(ids)
        .query(con)
        .unwrap()
}

/// `VTRR.POLICY <queue>` (no options): the policy, read as `T` (a `View`,
/// or a map of optional integers).
pub fn policy<T: redis::FromRedisValue>(con: &mut redis::Connection, queue: &str) -> T {
    redis::cmd("VTRR.POLICY").arg(queue).query(con).unwrap()
}

/// `VTRR.RECOUNT <queue>`: the number of partition counts it corrected.
pub fn recount(con: &mut redis::Connection, queue: &str) -> i64 {
    redis::cmd("VTRR.RECOUNT").arg(queue).query(con).unwrap()
}

/// `VTRR.CHECK <queue>`: what it finds wrong (empty when nothing is).
pub fn vtrr_check(con: &mut redis::Connection, queue: &str) -> Vec<String> {
    redis::cmd("VTRR.CHECK").arg(queue).query(con).unwrap()
}

/// One map of a `VTRR.PARTITIONS` (or `VTRR.LIMIT` without options)
/// reply, by field name.
pub type View = std::collections::BTreeMap<String, Value>;

/// `VTRR.PARTITIONS <queue> PARTITION <p>`: its one map (the cursor must
/// be "0").
pub fn partition_view(con: &mut redis::Connection, queue: &str, partition: &str) -> View {
    let (cursor, mut maps): (String, Vec<View>) = redis::cmd("VTRR.PARTITIONS")
        .arg(queue)
        .arg("PARTITION")
        .arg(partition)
        .query(con)
        .unwrap();
    assert_eq!(cursor, "0");
    assert_eq!(maps.len(), 1, "{maps:?}");
    maps.pop().unwrap()
}

/// A map reply by field: RESP3's map, or RESP2's flat field/value array
/// (VTRR.SCHEDULES' entries, VTRR.PARTITIONS', VTRR.JOB's).
pub fn map_of(value: &Value) -> std::collections::BTreeMap<String, Value> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs.clone(),
        Value::Array(flat) => flat
            .chunks(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect(),
        other => panic!("not a map: {other:?}"),
    };
    pairs
        .into_iter()
        .map(|(k, v)| (redis::from_redis_value::<String>(k).unwrap(), v))
        .collect()
}
