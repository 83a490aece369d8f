//! ACL: the commands name a queue, not keys, so the module checks the
//! caller's key permissions on the queue's real keys. Cluster: a queue with a
//! hash tag is routed to the node owning its slot.

mod common;

use std::time::Duration;

use common::*;

fn error_text(result: redis::RedisResult<Value>) -> String {
    let error = result.expect_err("expected an error");
    format!(
        "{} {}",
        error.code().unwrap_or("?"),
        error.detail().unwrap_or("")
    )
}

#[test]
fn a_user_limited_to_one_queue_gets_noperm_for_another_and_nothing_changes() {
    let server = Server::start();
    let mut admin = server.connect();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("files-worker")
        .arg("on")
        .arg(">secret")
        .arg("~vtrr:files:*")
        .arg("+@all")
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("files-reader")
        .arg("on")
        .arg(">secret")
        .arg("%R~vtrr:files:*")
        .arg("+@all")
        .query(&mut admin)
        .unwrap();
    enqueue_one(&mut admin, "other", "p", "o", "O");
    let before = dump_all(&mut admin);

    let client = redis::Client::open(format!(
        "redis://files-worker:secret@127.0.0.1:{}/",
        server.port
    ))
    .unwrap();
    let mut worker = client.get_connection().unwrap();
    let added: i64 = redis::cmd("VTRR.ENQUEUE")
        .arg("files")
        .arg("p")
        .arg("f")
        .arg(1)
        .arg("F")
        .query(&mut worker)
        .unwrap();
    assert_eq!(added, 1);
    let (id, _, token, _) = lease(&mut worker, "files", 60_000).unwrap();
    let after_own_queue = dump_all(&mut admin);
    for (command, args) in [
        ("VTRR.ENQUEUE", vec!["other", "p", "x", "1", "X"]),
        ("VTRR.LEASE", vec!["other", "1000"]),
        ("VTRR.ACK", vec!["other", "o", "t"]),
        ("VTRR.RENEW", vec!["other", "o", "t", "1000"]),
        ("VTRR.RECLAIM", vec!["other"]),
        ("VTRR.STATS", vec!["other"]),
        ("VTRR.CHECK", vec!["other"]),
    ] {
        let err = error_text(redis::cmd(command).arg(&args).query(&mut worker));
        assert!(
            err.starts_with("NOPERM") && err.contains("vtrr:other:"),
            "{command}: {err}"
        );
    }
    assert_eq!(
        after_own_queue,
        dump_all(&mut admin),
        "a refused call changed something"
    );
    assert_ne!(before, after_own_queue);

    // Read-only permission: STATS works, LEASE is refused.
    let client = redis::Client::open(format!(
        "redis://files-reader:secret@127.0.0.1:{}/",
        server.port
    ))
    .unwrap();
    let mut reader = client.get_connection().unwrap();
    let _: Value = redis::cmd("VTRR.STATS")
        .arg("files")
        .query(&mut reader)
        .unwrap();
    let err = error_text(
        redis::cmd("VTRR.ACK")
            .arg("files")
            .arg(&id)
            .arg(&token)
            .query(&mut reader),
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(ack(&mut worker, "files", &id, &token), 1);
}

#[test]
fn a_three_master_cluster_routes_queues_by_hash_tag() {
    let nodes: Vec<Server> = (0..3)
        .map(|_| {
            Server::builder()
                .args(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
                .spawn()
        })
        .collect();
    let addresses: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let status = std::process::Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addresses)
        .arg("--cluster-yes")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("redis-cli --cluster create");
    assert!(status.success());
    let mut connections: Vec<redis::Connection> = nodes.iter().map(Server::connect).collect();
    for con in connections.iter_mut() {
        assert!(wait_for(Duration::from_secs(10), || {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(con).unwrap();
            info.contains("cluster_state:ok")
        }));
    }
    for queue in ["{files}", "{images}", "{t42}"] {
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("vtrr:{queue}:queue"))
            .query(&mut connections[0])
            .unwrap();
        let mut owners = 0;
        for con in connections.iter_mut() {
            match redis::cmd("VTRR.ENQUEUE")
                .arg(queue)
                .arg("p")
                .arg("a")
                .arg(1)
                .arg("A")
                .query::<i64>(con)
            {
                Ok(added) => {
                    assert_eq!(added, 1);
                    owners += 1;
                    assert!(lease(con, queue, 1000).is_some());
                    let keys: Vec<String> = redis::cmd("CLUSTER")
                        .arg("GETKEYSINSLOT")
                        .arg(slot)
                        .arg(100)
                        .query(con)
                        .unwrap();
                    assert!(
                        keys.iter()
                            .all(|k| k.starts_with(&format!("vtrr:{queue}:")))
                            && !keys.is_empty(),
                        "{keys:?}"
                    );
                }
                Err(error) => {
                    assert_eq!(error.code(), Some("MOVED"), "{error}");
                    assert!(
                        error.detail().unwrap_or("").starts_with(&slot.to_string()),
                        "{error}"
                    );
                }
            }
        }
        assert_eq!(owners, 1, "{queue} served by {owners} nodes");
    }
    // A name without a hash tag is refused by the node that owns its slot.
    let mut refused = 0;
    for con in connections.iter_mut() {
        if let Err(error) = redis::cmd("VTRR.STATS").arg("plain").query::<Value>(con) {
            if error.code() == Some("ERR") {
                assert!(error.to_string().contains("hash tag"), "{error}");
                refused += 1;
            } else {
                assert_eq!(error.code(), Some("MOVED"));
            }
        }
    }
    assert_eq!(refused, 1);
}
