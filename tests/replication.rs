//! Every write reaches replicas and the AOF as effects: after a random
//! workload a replica's keys equal the master's byte for byte, whether or not
//! the replica loads the module, and an AOF/RDB reload gives the same state.

mod common;

use std::time::Duration;

use common::*;
use redis::Connection;

/// A random workload of every command, including expiring leases that the
/// master's timer (50 ms) and LEASE reclaim.
fn workload(con: &mut Connection, seed: u64, queue: &str) {
    let mut rng = Rng::new(seed);
    for step in 0..300u64 {
        let id = format!("i{}", rng.below(50));
        match rng.below(8) {
            6 => {
                // From Lua: the script's effects are what replicates.
                let _: Value = redis::cmd("EVAL")
                    .arg("return redis.call('VTRR.LEASE', KEYS[1], ARGV[1], 'COUNT', ARGV[2])")
                    .arg(1)
                    .arg(queue)
                    .arg(1 + rng.below(20))
                    .arg(1 + rng.below(3))
                    .query(con)
                    .unwrap();
            }
            7 => {
                // Inside MULTI/EXEC.
                let _: Value = redis::pipe()
                    .atomic()
                    .cmd("VTRR.ENQUEUE")
                    .arg(queue)
                    .arg("multi")
                    .arg(&id)
                    .arg(1)
                    .arg("M")
                    .cmd("VTRR.LEASE")
                    .arg(queue)
                    .arg(1 + rng.below(20))
                    .cmd("VTRR.RECLAIM")
                    .arg(queue)
                    .query(con)
                    .unwrap();
            }
            0 | 1 => {
                let _: i64 = redis::cmd("VTRR.ENQUEUE")
                    .arg(queue)
                    .arg(format!("p{}", rng.below(5)))
                    .arg(&id)
                    .arg(1 + rng.below(3))
                    .arg(format!("payload-{step}"))
                    .query(con)
                    .unwrap();
            }
            2 => {
                let lease_ms = if rng.chance(50) {
                    1 + rng.below(20)
                } else {
                    600_000
                };
                let _: Value = redis::cmd("VTRR.LEASE")
                    .arg(queue)
                    .arg(lease_ms)
                    .arg("COUNT")
                    .arg(1 + rng.below(3))
                    .query(con)
                    .unwrap();
            }
            3 | 4 => {
                let token: Option<String> = redis::cmd("HGET")
                    .arg(format!("vtrr:{queue}:lease"))
                    .arg(&id)
                    .query(con)
                    .unwrap();
                if let Some(token) = token {
                    let command = if rng.chance(70) {
                        "VTRR.ACK"
                    } else {
                        "VTRR.RENEW"
                    };
                    let mut cmd = redis::cmd(command);
                    cmd.arg(queue).arg(&id).arg(token);
                    if command == "VTRR.RENEW" {
                        cmd.arg(1 + rng.below(30));
                    }
                    let _: i64 = cmd.query(con).unwrap();
                }
            }
            _ => {
                let _: i64 = redis::cmd("VTRR.RECLAIM").arg(queue).query(con).unwrap();
            }
        }
        if rng.chance(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Let some leases expire and be reclaimed by the timer alone.
    std::thread::sleep(Duration::from_millis(200));
}

fn wait_replicated(master: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(master).unwrap();
    assert_eq!(acked, 1);
}

fn assert_same_keys(master: &mut Connection, replica: &mut Connection) {
    let (m, r) = (dump_all(master), dump_all(replica));
    assert!(!m.is_empty());
    assert_eq!(m.len(), r.len(), "key count differs");
    for ((mk, mv), (rk, rv)) in m.iter().zip(r.iter()) {
        assert_eq!(String::from_utf8_lossy(mk), String::from_utf8_lossy(rk));
        assert_eq!(mv, rv, "{} differs", String::from_utf8_lossy(mk));
    }
}

#[test]
fn a_replica_with_the_module_ends_identical_and_its_timer_never_writes() {
    let master = Server::builder()
        .module_args(&["reclaim-interval-ms", "50"])
        .spawn();
    let replica = Server::builder()
        .module_args(&["reclaim-interval-ms", "10"])
        .spawn();
    attach_replica(&replica, &master);
    let mut m = master.connect();
    let mut r = replica.connect();
    workload(&mut m, seed(), "jobs");
    // Expired leases on the master, reclaimed by its timer only.
    enqueue_one(&mut m, "jobs", "late", "z", "Z");
    let _: Value = redis::cmd("VTRR.LEASE")
        .arg("jobs")
        .arg(30)
        .arg("COUNT")
        .arg(100)
        .query(&mut m)
        .unwrap();
    wait_replicated(&mut m);
    let info: String = redis::cmd("INFO").arg("vtrr").query(&mut r).unwrap();
    assert!(
        info.contains("vtrr_timer_items_reclaimed:0"),
        "replica timer wrote:\n{info}"
    );
    assert!(
        wait_for(Duration::from_secs(3), || {
            let stats: std::collections::HashMap<String, Value> =
                redis::cmd("VTRR.STATS").arg("jobs").query(&mut m).unwrap();
            stats["expired"] == Value::Int(0)
        }),
        "master timer did not reclaim"
    );
    std::thread::sleep(Duration::from_millis(100));
    wait_replicated(&mut m);
    assert_same_keys(&mut m, &mut r);
    assert_invariants(&mut r, "jobs");
    let info: String = redis::cmd("INFO").arg("vtrr").query(&mut r).unwrap();
    assert!(
        info.contains("vtrr_timer_items_reclaimed:0"),
        "replica timer wrote:\n{info}"
    );
    let master_info: String = redis::cmd("INFO").arg("vtrr").query(&mut m).unwrap();
    assert!(
        !master_info.contains("vtrr_timer_items_reclaimed:0\r"),
        "master timer reclaimed nothing:\n{master_info}"
    );
}

#[test]
fn a_replica_without_the_module_ends_identical() {
    let master = Server::builder()
        .module_args(&["reclaim-interval-ms", "50"])
        .spawn();
    let replica = Server::builder().without_module().spawn();
    attach_replica(&replica, &master);
    let mut m = master.connect();
    let mut r = replica.connect();
    workload(&mut m, seed(), "plain");
    wait_replicated(&mut m);
    assert_same_keys(&mut m, &mut r);
}

#[test]
fn aof_and_rdb_reloads_give_back_the_same_state_and_leases_still_ack() {
    let mut server = Server::builder()
        .module_args(&["reclaim-interval-ms", "0"])
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .spawn();
    let mut con = server.connect();
    workload(&mut con, seed(), "durable");
    enqueue_one(&mut con, "durable", "p", "keep", "K");
    let _: Value = redis::cmd("VTRR.LEASE")
        .arg("durable")
        .arg(600_000)
        .arg("COUNT")
        .arg(1000)
        .query(&mut con)
        .unwrap();
    let token: String = redis::cmd("HGET")
        .arg("vtrr:durable:lease")
        .arg("keep")
        .query(&mut con)
        .unwrap();
    let before = dump_all(&mut con);

    // From the AOF (commands as effects).
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(before, dump_all(&mut con), "AOF reload differs");

    // After a rewrite, and from an RDB snapshot.
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut con)
            .unwrap();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    }));
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_eq!(before, dump_all(&mut con), "rewritten AOF reload differs");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query(&mut con)
        .unwrap();
    server.stop(true);
    // Only the RDB remains to load from.
    std::fs::remove_dir_all(server.dir.join("appendonlydir")).unwrap();
    assert!(server.dir.join("dump.rdb").exists());
    server.set_option("--appendonly", "no");
    server.restart();
    let mut con = server.connect();
    assert_eq!(before, dump_all(&mut con), "RDB reload differs");
    assert_eq!(ack(&mut con, "durable", b"keep", &token), 1);
    assert_invariants(&mut con, "durable");
}

#[test]
fn a_promoted_replica_starts_reclaiming() {
    // The master's timer is off, so an expired lease stays expired on both.
    let master = Server::builder()
        .module_args(&["reclaim-interval-ms", "0"])
        .spawn();
    let replica = Server::builder()
        .module_args(&["reclaim-interval-ms", "20"])
        .spawn();
    attach_replica(&replica, &master);
    let mut m = master.connect();
    let mut r = replica.connect();
    enqueue_one(&mut m, "q", "p", "a", "A");
    lease(&mut m, "q", 30).unwrap();
    wait_replicated(&mut m);
    std::thread::sleep(Duration::from_millis(200));
    let inflight: i64 = redis::cmd("ZCARD")
        .arg("vtrr:q:inflight")
        .query(&mut r)
        .unwrap();
    assert_eq!(inflight, 1, "a replica's timer must not reclaim");
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(2), || {
            let timeouts: Option<i64> = redis::cmd("HGET")
                .arg("vtrr:q:timeouts")
                .arg("a")
                .query(&mut r)
                .unwrap();
            timeouts == Some(1)
        }),
        "the promoted replica did not reclaim"
    );
    assert_invariants(&mut r, "q");
}
