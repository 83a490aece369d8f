//! What a queue or a database holds, read back to compare: DUMP bytes of
//! keys, a queue or the whole database, and the content dumper (type and
//! content in an order that does not depend on the encoding) that compares
//! servers whose DUMP bytes may differ.

use super::all_queue_keys;

/// DUMP of each of `keys`, in order, beside its name (None for a missing
/// key), in one round trip.
pub fn dump_keys<K: redis::ToRedisArgs>(
    con: &mut redis::Connection,
    keys: Vec<K>,
) -> Vec<(K, Option<Vec<u8>>)> {
    if keys.is_empty() {
        return Vec::new();
    }
    let mut dumps = redis::pipe();
    for key in &keys {
        dumps.cmd("DUMP").arg(key);
    }
    let dumps: Vec<Option<Vec<u8>>> = dumps.query(con).unwrap();
    keys.into_iter().zip(dumps).collect()
}

/// DUMP of every key of queue `name`, all twenty (None for missing keys).
pub fn dump_queue(con: &mut redis::Connection, name: &str) -> Vec<(String, Option<Vec<u8>>)> {
    dump_keys(con, all_queue_keys(name))
}

/// DUMP of every key of the database, sorted by name.
pub fn dump_all(con: &mut redis::Connection) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    dump_keys(con, keys)
}

/// A key's type and content, read back in an order that does not depend on
/// its encoding: sorted fields, members by (score, member), the string.
#[derive(Debug, PartialEq)]
pub enum Content {
    String(Vec<u8>),
    Hash(std::collections::BTreeMap<Vec<u8>, Vec<u8>>),
    Zset(Vec<(Vec<u8>, String)>),
    /// A native queue: its DUMP payload, whose encoding is canonical (the
    /// same content gives the same bytes on one server version).
    Native(Vec<u8>),
}

pub fn content(con: &mut redis::Connection, key: &[u8]) -> Option<Content> {
    let kind: String = redis::cmd("TYPE").arg(key).query(con).unwrap();
    Some(match kind.as_str() {
        "none" => return None,
        "string" => Content::String(redis::cmd("GET").arg(key).query(con).unwrap()),
        "hash" => Content::Hash(redis::cmd("HGETALL").arg(key).query(con).unwrap()),
        // Scores as the server prints them: exact, no float rounding here.
        "zset" => Content::Zset(
            redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(con)
                .unwrap(),
        ),
        "vtrrqueue" => Content::Native(redis::cmd("DUMP").arg(key).query(con).unwrap()),
        other => panic!("{} has type {other}", String::from_utf8_lossy(key)),
    })
}

/// Every key of the database with its content, sorted by name.
pub fn contents_all(con: &mut redis::Connection) -> Vec<(Vec<u8>, Option<Content>)> {
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let content = content(con, &key);
            (key, content)
        })
        .collect()
}

/// A queue as the commands show it, in either layout: STATS (without
/// `layout`), every partition's view (sorted), the dead items, the policy
/// and CHECK's findings. Two queues that show the same are the same to
/// every client. Waits (`oldest_waiting_ms`, `waiting-ms`) are left out:
/// they are measured when asked; the times they are measured from are in
/// the content (`partitions`, `rank_waiting`).
pub fn observed(con: &mut redis::Connection, name: &str) -> Vec<(String, redis::Value)> {
    let mut seen = Vec::new();
    let stats: Vec<(String, redis::Value)> = redis::cmd("VTRR.STATS").arg(name).query(con).unwrap();
    seen.extend(
        stats
            .into_iter()
            .filter(|(field, _)| field != "layout" && field != "oldest-waiting-ms")
            .map(|(field, value)| (format!("stats {field}"), value)),
    );
    let mut cursor = 0u64;
    let mut partitions: Vec<String> = Vec::new();
    loop {
        let (next, page): (u64, Vec<redis::Value>) = redis::cmd("VTRR.PARTITIONS")
            .arg(name)
            .arg("CURSOR")
            .arg(cursor)
            .arg("COUNT")
            .arg(100)
            .query(con)
            .unwrap();
        partitions.extend(page.iter().map(|view| format!("{:?}", without_wait(view))));
        if next == 0 {
            break;
        }
        cursor = next;
    }
    partitions.sort();
    partitions.dedup();
    seen.push((
        "partitions".into(),
        redis::Value::Array(
            partitions
                .into_iter()
                .map(redis::Value::SimpleString)
                .collect(),
        ),
    ));
    let dead: redis::Value = redis::cmd("VTRR.DEAD")
        .arg(name)
        .arg("COUNT")
        .arg(100_000)
        .query(con)
        .unwrap();
    seen.push(("dead".into(), dead));
    let policy: redis::Value = redis::cmd("VTRR.POLICY").arg(name).query(con).unwrap();
    seen.push(("policy".into(), policy));
    let check: redis::Value = redis::cmd("VTRR.CHECK").arg(name).query(con).unwrap();
    seen.push(("check".into(), check));
    seen
}

/// `VTRR.STATS`'s `layout` of queue `name`.
pub fn layout_of(con: &mut redis::Connection, name: &str) -> String {
    let stats: std::collections::HashMap<String, redis::Value> =
        redis::cmd("VTRR.STATS").arg(name).query(con).unwrap();
    match &stats["layout"] {
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("layout is {other:?}"),
    }
}

/// A reply (a partition's view, STATS) without what is measured when asked
/// (`waiting-ms`, `oldest_waiting_ms`, a bucket's `tokens`) or from a
/// clock reading a few ms apart between two queues (`next-token-ms`), a
/// map or a flat array; the records they come from are in the content.
pub fn without_wait(view: &redis::Value) -> redis::Value {
    let is_wait = |v: &redis::Value| {
        let name = match v {
            redis::Value::BulkString(name) => name.as_slice(),
            redis::Value::SimpleString(name) => name.as_bytes(),
            _ => return false,
        };
        matches!(
            name,
            b"waiting-ms" | b"oldest-waiting-ms" | b"tokens" | b"next-token-ms"
        )
    };
    match view {
        redis::Value::Map(pairs) => {
            redis::Value::Map(pairs.iter().filter(|(k, _)| !is_wait(k)).cloned().collect())
        }
        redis::Value::Array(flat) => redis::Value::Array(
            flat.chunks(2)
                .filter(|pair| !is_wait(&pair[0]))
                .flatten()
                .cloned()
                .collect(),
        ),
        other => other.clone(),
    }
}
