//! `bench --instructions`: what each system's operations cost the server in
//! instructions, counted by callgrind. Timed rates drift with the machine;
//! an instruction count does not (the same binaries give the same count
//! whatever else the machine is doing), so these ratios can be compared
//! across runs and machines exactly.
//!
//! The server runs under `scripts/callgrind-server.sh`; each measurement
//! zeroes the counters, runs its operations on one connection and dumps the
//! counters (`callgrind_control`), so set-up is never counted.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{
    cycle_batch, cycle_batch_on, enqueue_batch, fill_backlog, fill_module, spread, Bench,
    EnqueueShape, System,
};

/// The module's queue whose every partition has a cap (the default cap, set
/// before its items are queued, so they wait in `held` behind one head per
/// partition), and that cap: high enough never to bind.
const CAPPED_QUEUE: &str = "qc";
const DEFAULT_CAP: u64 = 1000;

/// Control of the callgrind instance the server runs under.
pub struct Callgrind {
    pid: u32,
    /// Where the wrapper script writes `callgrind.<pid>` and its dumps.
    dir: PathBuf,
    dumps: usize,
}

impl Callgrind {
    pub fn new(pid: u32) -> Callgrind {
        let dir = std::env::var_os("VTRR_CALLGRIND_DIR")
            .map(PathBuf::from)
            .expect("VTRR_CALLGRIND_DIR: where scripts/callgrind-server.sh writes its counts");
        Callgrind { pid, dir, dumps: 0 }
    }

    fn control(&self, option: &str) {
        let status = Command::new("callgrind_control")
            .arg(option)
            .arg(self.pid.to_string())
            .output()
            .expect("callgrind_control (valgrind) is not installed")
            .status;
        assert!(status.success(), "callgrind_control {option} failed");
    }

    fn zero(&self) {
        self.control("-z");
    }

    /// Dumps the counters and returns the instructions since the last zero.
    fn dump(&mut self) -> u64 {
        self.control("-d");
        self.dumps += 1;
        let path = self
            .dir
            .join(format!("callgrind.{}.{}", self.pid, self.dumps));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let total = text.lines().find_map(|line| {
                line.strip_prefix("summary:")
                    .or_else(|| line.strip_prefix("totals:"))
                    .and_then(|n| n.trim().parse().ok())
            });
            if let Some(total) = total {
                return total;
            }
            assert!(Instant::now() < deadline, "no callgrind dump at {path:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Instructions per operation, by system: one figure per repeat.
type Counts = Vec<(System, Vec<f64>)>;

impl Bench<'_> {
    /// Counts a single-item enqueue and a lease+ack cycle for every system,
    /// with `counted_backlog` items queued over 100 partitions, and the
    /// module's lease+ack cycle on a queue with a default cap; one table row
    /// per scenario, labelled with `setting`.
    pub fn instruction_rows(&mut self, callgrind: &mut Callgrind, setting: &str) {
        let sizes = self.sizes;
        let partitions = 100;
        super::reset(&mut self.admin);
        for system in System::ALL {
            fill_backlog(&mut self.admin, system, sizes.counted_backlog, partitions);
        }
        let _: () = redis::cmd("VTRR.POLICY")
            .arg(CAPPED_QUEUE)
            .arg("DEFAULT-CONCURRENCY")
            .arg(DEFAULT_CAP)
            .query(&mut self.admin)
            .unwrap();
        fill_module(
            &mut self.admin,
            CAPPED_QUEUE,
            sizes.counted_backlog,
            partitions,
            |_| 1,
        );
        let shape = EnqueueShape {
            partitions,
            items_per_call: 1,
        };
        let enqueue = self.count(callgrind, &System::ALL, |bench, system, start, n| {
            enqueue_batch(&bench.lua, system, &shape, &mut bench.admin, 0, start, n)
        });
        let cycle = self.count(callgrind, &System::ALL, |bench, system, start, n| {
            cycle_batch(&bench.lua, system, &mut bench.admin, 0, start, n)
        });
        let capped = self.count(callgrind, &[System::Module], |bench, system, start, n| {
            let queue = CAPPED_QUEUE;
            cycle_batch_on(&bench.lua, system, queue, &mut bench.admin, 0, start, n)
        });
        for (scenario, counts) in [
            ("enqueue, 1 item per call".to_string(), enqueue),
            ("lease + ack cycle".to_string(), cycle),
            (
                format!("lease + ack cycle, default cap {DEFAULT_CAP} (module only)"),
                capped,
            ),
        ] {
            let of = |wanted: System| counts.iter().find(|(s, _)| *s == wanted).map(|c| &c.1);
            let cells: Vec<String> = System::ALL
                .iter()
                .map(|&system| of(system).map_or_else(|| "—".to_string(), |r| cell(r)))
                .collect();
            // Speed ratios per repeat, as the timed tables compute them.
            let module = of(System::Module).unwrap();
            let speedup = |other: Option<&Vec<f64>>| -> String {
                other.map_or_else(
                    || "—".to_string(),
                    |other| {
                        ratio_cell(
                            &other
                                .iter()
                                .zip(module)
                                .map(|(o, m)| o / m)
                                .collect::<Vec<_>>(),
                        )
                    },
                )
            };
            writeln!(
                self.report,
                "| {scenario}, {setting} | {} | {} | {} |",
                cells.join(" | "),
                speedup(of(System::Lua)),
                speedup(of(System::Streams)),
            )
            .unwrap();
        }
    }

    /// Runs `batch` for `counted_ops` operations per system of `systems`
    /// and repeat, in batches of 100, the systems taking turns within each
    /// repeat; returns each repeat's instructions per operation.
    fn count(
        &mut self,
        callgrind: &mut Callgrind,
        systems: &[System],
        batch: impl Fn(&mut Self, System, usize, usize),
    ) -> Counts {
        let ops = self.sizes.counted_ops;
        let mut counts: Counts = systems.iter().map(|&system| (system, Vec::new())).collect();
        for repeat in 0..self.sizes.repeats {
            for (system, figures) in &mut counts {
                callgrind.zero();
                let end = (repeat + 1) * ops;
                for start in (repeat * ops..end).step_by(100) {
                    batch(self, *system, start, 100.min(end - start));
                }
                figures.push(callgrind.dump() as f64 / ops as f64);
            }
        }
        counts
    }
}

/// The table's head, before the rows of `instruction_rows`.
pub fn table_head(report: &mut String, sizes: &super::Sizes) {
    writeln!(
        report,
        "## Instructions per operation (whole server)\n\nEvery instruction the server ran (`valgrind --tool=callgrind`, counters zeroed after the set-up), divided by the operations done: {} repeats of {} operations per system, the systems taking turns, on one connection, pipeline 100, {} items queued over 100 partitions; median (min–max) of the repeats. A lease + ack cycle is one operation; PING's cycle is two PINGs. Repeatable: the same binaries give nearly the same count whatever else the machine is doing (what differs is the server's own background work and its random hash seeds). `module ÷ Lua` and `module ÷ Streams` compare speeds, as in the timed tables (the other's instructions over the module's). `no listpacks` is persistence off with `hash-max-listpack-entries 0` and `zset-max-listpack-entries 0`: every hash and sorted set is then a hash table or skip list, as a queue's in-flight set and its two hashes are once it holds more than 128 leases; with up to 100 leases held here, Redis otherwise keeps them as listpacks, which it scans linearly. `default cap {DEFAULT_CAP}` is the module's cycle on a queue of its own, the same backlog queued after `VTRR.POLICY <queue> DEFAULT-CONCURRENCY {DEFAULT_CAP}`: every partition then keeps one item, its head, in `queue` and the rest in `held`, so each LEASE pops a head and promotes the partition's next held item (the cap never binds); the other systems have no such setting.\n\n| scenario | module | Lua | Streams | list | PING | module ÷ Lua | module ÷ Streams |\n|---|---|---|---|---|---|---|---|",
        sizes.repeats, sizes.counted_ops, sizes.counted_backlog
    )
    .unwrap();
}

/// Instructions as `125.6k (125.4–125.9)`: median (min–max) of the repeats.
fn cell(repeats: &[f64]) -> String {
    let (median, min, max) = spread(repeats);
    format!(
        "{:.1}k ({:.1}–{:.1})",
        median / 1000.0,
        min / 1000.0,
        max / 1000.0
    )
}

fn ratio_cell(ratios: &[f64]) -> String {
    let (median, min, max) = spread(ratios);
    format!("{median:.2}× ({min:.2}–{max:.2})")
}
