//! A queue through live resharding and failover, on real clusters on
//! loopback, under enqueue/lease/renew/ack traffic with the timer running on
//! every node: slots moved the legacy way (SETSLOT/MIGRATE, as `redis-cli
//! --cluster reshard` does), atomically (Valkey 9's CLUSTER MIGRATESLOTS),
//! and a master failed over to its replica. A ledger of what every client
//! saw checks that nothing is lost, acked twice, leased twice at once, or
//! served with the wrong payload.
//!
//! `VTRR_SOAK_ROUNDS` (default 1) moves the slot back and forth that many
//! times (`make soak`).

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::{key_slot, Cluster, ClusterClient, Redirects};
use common::*;

const QUEUE: &str = "{q}";

fn payload_of(id: &str) -> Vec<u8> {
    format!("payload-of-{id}").into_bytes()
}

/// A lease as a client saw it: the earliest its server-side expiry can be.
struct Held {
    token: String,
    expires_no_earlier_than: Instant,
}

/// Everything the clients saw, and every broken promise found on the way.
#[derive(Default)]
struct Ledger {
    /// Clients wait for a replica (`WAIT 1`) after each write, and only
    /// what a replica confirmed is promised to survive a failover.
    confirm: bool,
    enqueued: HashSet<String>,
    /// Enqueued without a replica's confirmation: may be lost.
    maybe_enqueued: HashSet<String>,
    acked: HashMap<String, u32>,
    /// Acked without a replica's confirmation: may come back.
    maybe_acked: HashSet<String>,
    leased: HashMap<String, Held>,
    leases: u64,
    violations: Vec<String>,
    redirects: Redirects,
}

impl Ledger {
    fn on_lease(&mut self, id: &str, payload: &[u8], token: &str, asked: Instant, lease: Duration) {
        self.leases += 1;
        if payload != payload_of(id).as_slice() {
            self.violations.push(format!(
                "{id} leased with payload {:?}",
                String::from_utf8_lossy(payload)
            ));
        }
        if self.acked.contains_key(id) {
            self.violations
                .push(format!("{id} leased after it was acked"));
        }
        if let Some(previous) = self.leased.get(id) {
            // The new lease was granted before this reply arrived; the old
            // one cannot have expired before its lower bound.
            // The server's clock has millisecond steps: 2 ms of slack.
            let now = Instant::now() + Duration::from_millis(2);
            if now < previous.expires_no_earlier_than {
                self.violations.push(format!(
                    "{id} leased while its lease {} was current for {:?} more",
                    previous.token,
                    previous.expires_no_earlier_than - now
                ));
            }
        }
        self.leased.insert(
            id.to_string(),
            Held {
                token: token.to_string(),
                expires_no_earlier_than: asked + lease,
            },
        );
    }

    fn on_renew(&mut self, id: &str, asked: Instant, lease: Duration) {
        if let Some(held) = self.leased.get_mut(id) {
            held.expires_no_earlier_than = held.expires_no_earlier_than.max(asked + lease);
        }
    }

    fn on_ack(&mut self, id: &str, confirmed: bool) {
        if !confirmed {
            self.maybe_acked.insert(id.to_string());
            self.leased.remove(id);
            return;
        }
        let count = self.acked.entry(id.to_string()).or_default();
        *count += 1;
        if *count > 1 {
            self.violations.push(format!("{id} acked {count} times"));
        }
        self.leased.remove(id);
    }

    fn on_enqueue(&mut self, ids: Vec<String>, confirmed: bool) {
        if confirmed {
            self.enqueued.extend(ids);
        } else {
            self.maybe_enqueued.extend(ids);
        }
    }

    /// Whether `id` needs no more work: acked, confirmed or not.
    fn done(&self, id: &str) -> bool {
        self.acked.contains_key(id) || self.maybe_acked.contains(id)
    }

    fn add_redirects(&mut self, seen: Redirects) {
        self.redirects.moved += seen.moved;
        self.redirects.ask += seen.ask;
        self.redirects.try_again += seen.try_again;
    }
}

/// The connection closed under the command (a demoted master drops its
/// clients): its outcome is unknown.
fn dropped(error: &redis::RedisError) -> bool {
    error.is_io_error() || error.is_connection_dropped()
}

fn int(value: Value) -> i64 {
    match value {
        Value::Int(n) => n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// Enqueues `count` items (ids `prefix0..`) over 200 partitions, 10 per call.
fn enqueue_batch(
    client: &mut ClusterClient,
    ledger: &Mutex<Ledger>,
    prefix: &str,
    from: u64,
    count: u64,
) {
    let mut n = from;
    while n < from + count {
        let mut cmd = redis::cmd("VTRR.ENQUEUE");
        cmd.arg(QUEUE);
        let mut ids = Vec::new();
        for _ in 0..10.min(from + count - n) {
            let id = format!("{prefix}{n}");
            cmd.arg(format!("p{}", n % 200))
                .arg(&id)
                .arg(1 + n % 3)
                .arg(payload_of(&id));
            ids.push(id);
            n += 1;
        }
        let confirmed = match client.query(&cmd) {
            Ok(added) => {
                assert_eq!(int(added), ids.len() as i64);
                let confirm = ledger.lock().unwrap().confirm;
                !confirm || client.replicated()
            }
            // The connection closed: maybe added, maybe not.
            Err(e) if dropped(&e) => false,
            Err(e) => panic!("ENQUEUE: {e}"),
        };
        ledger.lock().unwrap().on_enqueue(ids, confirmed);
    }
}

/// One worker's loop until `stop`: lease; then ack (most), renew and ack,
/// or abandon a short lease to the timer.
fn work(cluster_client: &mut ClusterClient, ledger: &Mutex<Ledger>, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::Relaxed) {
        let abandon = rng.chance(15);
        // Abandoned leases expire over the next second: some during the move.
        let lease_ms: u64 = if abandon {
            30 + rng.below(1_000)
        } else {
            5_000
        };
        let asked = Instant::now();
        let reply = match cluster_client.query(redis::cmd("VTRR.LEASE").arg(QUEUE).arg(lease_ms)) {
            Ok(reply) => reply,
            // A lease granted then is lost to this worker; the timer takes
            // it back.
            Err(e) if dropped(&e) => continue,
            Err(e) => panic!("LEASE: {e}"),
        };
        let (id, payload, token, _): (Vec<u8>, Vec<u8>, String, i64) = match reply {
            Value::Nil => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            value => redis::from_redis_value(value).unwrap(),
        };
        let id = String::from_utf8(id).unwrap();
        ledger.lock().unwrap().on_lease(
            &id,
            &payload,
            &token,
            asked,
            Duration::from_millis(lease_ms),
        );
        if abandon {
            continue;
        }
        if rng.chance(20) {
            let asked = Instant::now();
            let renewed = match cluster_client.query(
                redis::cmd("VTRR.RENEW")
                    .arg(QUEUE)
                    .arg(&id)
                    .arg(&token)
                    .arg(5_000),
            ) {
                Ok(renewed) => int(renewed),
                Err(e) if dropped(&e) => 0,
                Err(e) => panic!("RENEW: {e}"),
            };
            if renewed == 1 {
                ledger
                    .lock()
                    .unwrap()
                    .on_renew(&id, asked, Duration::from_millis(5_000));
            }
        }
        match cluster_client.query(redis::cmd("VTRR.ACK").arg(QUEUE).arg(&id).arg(&token)) {
            Ok(acked) if int(acked.clone()) == 1 => {
                let confirm = ledger.lock().unwrap().confirm;
                let confirmed = !confirm || cluster_client.replicated();
                ledger.lock().unwrap().on_ack(&id, confirmed);
            }
            Ok(_) => {}
            // Maybe acked, maybe not: the item may come back.
            Err(e) if dropped(&e) => ledger.lock().unwrap().on_ack(&id, false),
            Err(e) => panic!("ACK: {e}"),
        }
    }
    ledger
        .lock()
        .unwrap()
        .add_redirects(cluster_client.redirects);
}

/// Traffic against `cluster` while `during` runs: a producer and three
/// workers; with `confirm`, each waits for a replica after every write.
/// Returns the ledger once the queue is drained.
fn under_traffic(cluster: &Cluster, confirm: bool, during: impl FnOnce()) -> Ledger {
    let ledger = Arc::new(Mutex::new(Ledger {
        confirm,
        ..Ledger::default()
    }));
    let mut setup = ClusterClient::new(cluster, 0);
    // A backlog the workers cannot drain while the slot moves: a drained
    // keys-layout queue has fewer keys (no `queue`, `task`,
    // `partition_virtual_time`), and the moves must meet all of them.
    enqueue_batch(&mut setup, &ledger, "before-", 0, 20_000);
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for seed in 0..3u64 {
        let (ledger, stop) = (ledger.clone(), stop.clone());
        let mut client = ClusterClient::new(cluster, (seed as usize) % cluster.nodes.len());
        threads.push(thread::spawn(move || {
            work(&mut client, &ledger, seed + 1, &stop)
        }));
    }
    {
        let (ledger, stop, produced) = (ledger.clone(), stop.clone(), produced.clone());
        let mut client = ClusterClient::new(cluster, 1);
        threads.push(thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                enqueue_batch(&mut client, &ledger, "during-", n, 10);
                n += 10;
                produced.store(n, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(3));
            }
            ledger.lock().unwrap().add_redirects(client.redirects);
        }));
    }
    thread::sleep(Duration::from_millis(300));
    during();
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a client thread failed");
    }
    assert!(produced.load(Ordering::Relaxed) > 0);
    // Drain: abandoned leases come back through the timer alone.
    let mut client = ClusterClient::new(cluster, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = {
            let ledger = ledger.lock().unwrap();
            ledger.enqueued.iter().all(|id| ledger.done(id))
        };
        if done && drained(&mut client) {
            break;
        }
        assert!(Instant::now() < deadline, "items never came back");
        let reply = client
            .query(
                redis::cmd("VTRR.LEASE")
                    .arg(QUEUE)
                    .arg(60_000)
                    .arg("COUNT")
                    .arg(100),
            )
            .expect("LEASE");
        let leases: Vec<(Vec<u8>, Vec<u8>, String, i64)> =
            redis::from_redis_value(reply).unwrap_or_default();
        if leases.is_empty() {
            thread::sleep(Duration::from_millis(20));
        }
        for (id, payload, token, _) in leases {
            let id = String::from_utf8(id).unwrap();
            let mut ledger = ledger.lock().unwrap();
            ledger.on_lease(
                &id,
                &payload,
                &token,
                Instant::now(),
                Duration::from_millis(60_000),
            );
            let acked = client
                .query(redis::cmd("VTRR.ACK").arg(QUEUE).arg(&id).arg(&token))
                .expect("ACK");
            assert_eq!(int(acked), 1);
            ledger.on_ack(&id, true);
        }
    }
    Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap()
}

/// Nothing queued, leased or delayed.
fn drained(client: &mut ClusterClient) -> bool {
    let reply = client
        .query(redis::cmd("VTRR.STATS").arg(QUEUE))
        .expect("STATS");
    let stats: HashMap<String, Value> = redis::from_redis_value(reply).unwrap();
    ["queued", "inflight", "delayed"]
        .iter()
        .all(|count| stats.get(*count) == Some(&Value::Int(0)))
}

/// Every promise of the issue, on the ledger and on the nodes.
fn assert_nothing_lost_or_doubled(
    cluster: &Cluster,
    ledger: &Ledger,
    owner: usize,
    old: Option<usize>,
) {
    assert!(
        ledger.violations.is_empty(),
        "{:#?}",
        &ledger.violations[..ledger.violations.len().min(20)]
    );
    let missing: Vec<&String> = ledger
        .enqueued
        .iter()
        .filter(|id| !ledger.done(id))
        .collect();
    assert!(missing.is_empty(), "never acked: {missing:?}");
    let mut con = cluster.con(owner);
    assert_invariants(&mut con, QUEUE);
    let stats = stats(&mut con, QUEUE);
    for count in ["queued", "inflight"] {
        assert_eq!(stats.get(count), Some(&Value::Int(0)), "{stats:?}");
    }
    if let Some(old) = old {
        let slot = key_slot(QUEUE);
        assert_eq!(
            cluster.keys_in_slot(old, slot),
            0,
            "keys left on the old owner"
        );
    }
}

/// Slot moves per test: 1, or `VTRR_SOAK_ROUNDS` (`make soak`).
fn soak_rounds() -> usize {
    std::env::var("VTRR_SOAK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
}

/// After the queue's slot moved between the two masters, ending on
/// `owner`: nothing lost or doubled, clients were redirected, and the
/// leases abandoned to the timer were taken back by the new owner's.
fn assert_moved_whole(cluster: &Cluster, ledger: &Ledger, owner: usize) {
    eprintln!(
        "leases {}, acked {}, redirects {:?}",
        ledger.leases,
        ledger.acked.len(),
        ledger.redirects
    );
    assert_nothing_lost_or_doubled(cluster, ledger, owner, Some(1 - owner));
    assert!(ledger.redirects.moved > 0, "{:?}", ledger.redirects);
    assert!(timer_reclaimed(cluster, owner) > 0);
}

fn timer_reclaimed(cluster: &Cluster, node: usize) -> i64 {
    vtrr_info(&mut cluster.con(node))
        .get("vtrr_timer_items_reclaimed")
        .copied()
        .unwrap_or(0)
}

#[test]
fn a_legacy_reshard_under_traffic_completes_and_loses_or_doubles_nothing() {
    let cluster = Cluster::start(2, &["reclaim-interval-ms", "10"]);
    let slot = key_slot(QUEUE);
    let rounds = soak_rounds();
    let first_owner = cluster.owner(0, slot);
    let mut owner = first_owner;
    let ledger = under_traffic(&cluster, false, || {
        for _ in 0..rounds {
            let to = 1 - owner;
            // One key per MIGRATE, 50 ms apart: traffic meets every split
            // (a native queue is one key: MIGRATE moves it whole, DUMP and
            // RESTORE of the module's type, and traffic meets the moment
            // after, when the old owner answers ASK).
            let moved = cluster.migrate_slot_legacy(slot, owner, to, 1, Duration::from_millis(50));
            if native_layout() {
                assert_eq!(moved, 1, "a native queue is one key");
            } else {
                assert!(moved >= 9, "only {moved} keys moved");
            }
            owner = to;
        }
    });
    assert_moved_whole(&cluster, &ledger, owner);
    assert!(
        ledger.redirects.ask + ledger.redirects.try_again > 0,
        "the traffic never met the migration: {:?}",
        ledger.redirects
    );
}

#[test]
fn an_atomic_slot_migration_under_traffic_loses_or_doubles_nothing() {
    let cluster = Cluster::start(2, &["reclaim-interval-ms", "10"]);
    if !cluster.has_atomic_slot_migration() {
        eprintln!("skipped: this server has no CLUSTER MIGRATESLOTS (Valkey 9+)");
        return;
    }
    let slot = key_slot(QUEUE);
    let mut owner = cluster.owner(0, slot);
    let ledger = under_traffic(&cluster, false, || {
        for _ in 0..soak_rounds() * 2 {
            let to = 1 - owner;
            cluster.migrate_slot_atomic(slot, owner, to);
            owner = to;
            thread::sleep(Duration::from_millis(200));
        }
    });
    assert_moved_whole(&cluster, &ledger, owner);
}

#[test]
fn a_failover_under_traffic_keeps_confirmed_writes_and_leases_held_across_it() {
    let slot = key_slot(QUEUE);
    let master = Cluster::first_owner(3, slot);
    let cluster = Cluster::start_with(3, 1, master, &["reclaim-interval-ms", "10"], &[]);
    let replica = 3;
    // Leases this test holds across the failover, on a queue of the same
    // slot that no worker touches: five minutes, so a slow failover on a
    // busy machine does not let them expire before the new master acks.
    let held = "held{q}";
    let mut con = cluster.con(master);
    for i in 0..30 {
        enqueue_one(&mut con, held, &format!("p{i}"), &format!("h{i}"), "H");
    }
    let long: Vec<Lease> = (0..20)
        .map(|_| lease(&mut con, held, 300_000).unwrap())
        .collect();
    let short: Vec<Lease> = (0..10)
        .map(|_| lease(&mut con, held, 2_000).unwrap())
        .collect();
    wait_replicated(&mut con);

    let ledger = under_traffic(&cluster, true, || {
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut cluster.con(replica))
            .unwrap();
        wait_until(Duration::from_secs(20), "the replica took over", || {
            cluster.is_master(replica)
        });
        cluster.wait_owner(slot, replica);
    });
    eprintln!(
        "leases {}, acked {} (+{} unconfirmed), enqueued {} (+{} unconfirmed), redirects {:?}",
        ledger.leases,
        ledger.acked.len(),
        ledger.maybe_acked.len(),
        ledger.enqueued.len(),
        ledger.maybe_enqueued.len(),
        ledger.redirects
    );
    assert_nothing_lost_or_doubled(&cluster, &ledger, replica, None);
    assert!(ledger.redirects.moved > 0, "{:?}", ledger.redirects);

    // On the new master the long leases still renew and ack...
    let mut con = cluster.con(replica);
    for (i, (id, _, token, _)) in long.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(renew(&mut con, held, id, token, 20_000), 1);
        }
        assert_eq!(ack(&mut con, held, id, token), 1);
    }
    // ...and its timer alone brings the short ones back.
    wait_until(Duration::from_secs(10), "short leases reclaimed", || {
        stats(&mut con, held).get("inflight") == Some(&Value::Int(0))
    });
    let view = stats(&mut con, held);
    assert_eq!(view.get("queued"), Some(&Value::Int(10)), "{view:?}");
    for (id, _, token, _) in &short {
        assert_eq!(ack(&mut con, held, id, token), 0, "an expired lease acked");
    }
    assert!(timer_reclaimed(&cluster, replica) >= 10);
    assert_invariants(&mut con, held);
}

/// The README's worker (`examples/worker.py`) with redis-py's RedisCluster,
/// two of them, through a legacy reshard of their queue's slot while more
/// items arrive: each item processed once, with its payload.
#[test]
fn redis_py_cluster_workers_process_every_item_once_through_a_reshard() {
    let cluster = Cluster::start(2, &["reclaim-interval-ms", "10"]);
    let slot = key_slot(QUEUE);
    let owner = cluster.owner(0, slot);
    let ledger = Mutex::new(Ledger::default());
    let mut producer = ClusterClient::new(&cluster, 0);
    enqueue_batch(&mut producer, &ledger, "before-", 0, 400);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/worker.py");
    let workers: Vec<std::process::Child> = (0..2)
        .map(|w| {
            std::process::Command::new("python3")
                .arg(script)
                .env(
                    "VTRR_URL",
                    format!("redis://127.0.0.1:{}", cluster.nodes[w].port),
                )
                .env("VTRR_CLUSTER", "1")
                .env("VTRR_QUEUE", QUEUE)
                .env("VTRR_EXIT_WHEN_IDLE", "1")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("python3 with redis-py (make deps installs it)")
        })
        .collect();
    // Items keep arriving while the slot moves one key at a time.
    let moving = AtomicBool::new(true);
    thread::scope(|scope| {
        scope.spawn(|| {
            let mut n = 0;
            while moving.load(Ordering::Relaxed) {
                enqueue_batch(&mut producer, &ledger, "during-", n, 10);
                n += 10;
                thread::sleep(Duration::from_millis(5));
            }
        });
        cluster.migrate_slot_legacy(slot, owner, 1 - owner, 1, Duration::from_millis(50));
        moving.store(false, Ordering::Relaxed);
    });
    let mut processed: HashMap<String, u32> = HashMap::new();
    for worker in workers {
        let output = worker.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "worker failed:\n{stderr}");
        assert!(stderr.is_empty(), "{stderr}");
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let mut words = line.split_whitespace().skip(1);
            let (id, payload) = (words.next().unwrap(), words.next().unwrap());
            assert_eq!(payload.as_bytes(), payload_of(id), "{line}");
            *processed.entry(id.to_string()).or_default() += 1;
        }
    }
    let ledger = ledger.into_inner().unwrap();
    assert!(ledger.enqueued.len() > 400);
    for id in &ledger.enqueued {
        assert_eq!(
            processed.get(id),
            Some(&1),
            "{id} processed {:?} times",
            processed.get(id)
        );
    }
    assert_eq!(processed.len(), ledger.enqueued.len());
    let mut con = cluster.con(1 - owner);
    assert_invariants(&mut con, QUEUE);
    assert_eq!(cluster.keys_in_slot(owner, slot), 0);
}

/// A LEASE blocked forever on the old owner is not left waiting on a queue
/// that has moved: it gets MOVED when the slot leaves.
#[test]
fn a_lease_blocked_on_the_old_owner_is_redirected_when_the_slot_leaves() {
    let cluster = Cluster::start(2, &["reclaim-interval-ms", "10"]);
    let slot = key_slot(QUEUE);
    let owner = cluster.owner(0, slot);
    let mut con = cluster.con(owner);
    enqueue_one(&mut con, QUEUE, "p", "a", "A");
    let (id, _, token, _) = lease(&mut con, QUEUE, 60_000).unwrap();
    assert_eq!(ack(&mut con, QUEUE, &id, &token), 1);
    let (sender, receiver) = std::sync::mpsc::channel();
    let mut waiter = cluster.con(owner);
    thread::spawn(move || {
        let reply = lease_block_cmd(QUEUE, 60_000, 0).query::<Value>(&mut waiter);
        let _ = sender.send(reply);
    });
    wait_blocked(&mut con, 1);
    cluster.migrate_slot_legacy(slot, owner, 1 - owner, 10, Duration::ZERO);
    let reply = receiver
        .recv_timeout(Duration::from_secs(5))
        .expect("the blocked LEASE was left waiting");
    let error = reply.expect_err("no item to lease");
    assert_eq!(error.code(), Some("MOVED"), "{error}");
}
