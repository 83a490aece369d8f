//! `make bench` cannot rot: its program runs here at tiny sizes (seconds) and
//! must produce every section. It measures; nothing here checks a timing.

use std::path::Path;
use std::process::Command;

#[test]
fn the_benchmark_runs_every_scenario_at_tiny_sizes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let program = root.join("target/debug/examples/bench");
    assert!(
        program.exists(),
        "bench not built at {} (run `cargo build --examples` or `make test`)",
        program.display()
    );
    let plot = std::env::temp_dir().join(format!("vtrr-bench-smoke-{}.svg", std::process::id()));
    let output = Command::new(program)
        .arg("--smoke")
        .arg("--plot")
        .arg(&plot)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = String::from_utf8(output.stdout).unwrap();
    for expected in [
        "| enqueue 1/call | module |",
        "| enqueue 100/call | Lua |",
        "| lease+ack cycle | Streams |",
        "| reclaim 10k expired | module |",
        "### 10000 partition(s)",
        "## Job lifecycle",
        "## Scaling",
        "| VTRR (module) |",
        "| FIFO list |",
        "Worst deviation from the ideal share",
        "## Tenant controls: the lease+ack cycle under caps and pauses",
        "| share | items served | weight served | fraction | ideal | deviation |",
        "## Timer",
        "A flood of expired leases: see Mass expiry",
        "## Mass expiry",
        "| idle baseline: A's server after its drain,",
        "| target (issue, not asserted) |",
        "![When each partition was served",
    ] {
        assert!(
            report.contains(expected),
            "missing {expected:?} in:\n{report}"
        );
    }
    // The lifecycle rows, each with the server cost of what it measures.
    for (row, cost) in [
        ("| defer 1/call |", "vtrr.defer "),
        ("| defer 100/call |", "vtrr.defer "),
        ("| lease+nack cycle |", "vtrr.nack "),
        ("| promotion of 100 due items, by LEASE |", "vtrr.lease "),
        ("| promotion of 100 due items, by the timer |", "timer run "),
    ] {
        let line = report
            .lines()
            .find(|line| line.starts_with(row))
            .unwrap_or_else(|| panic!("no {row} row in:\n{report}"));
        assert!(line.contains(cost), "{row} has no {cost}cost: {line}");
    }
    // The mass expiry rows at the smoke sizes, every cell filled; and the
    // one LEASE over expired leases reclaims no more than `vtrr.reclaim-batch`.
    for row in [
        "| A: one queue, 300 leases |",
        "| B: one lease per queue, 100 queues |",
    ] {
        let line = report
            .lines()
            .find(|line| line.starts_with(row))
            .unwrap_or_else(|| panic!("no {row} row in:\n{report}"));
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 11, "{line}");
        assert!(cells.iter().all(|cell| !cell.is_empty()), "{line}");
    }
    let lease = report
        .lines()
        .find(|line| line.starts_with("One `VTRR.LEASE` on a queue with 100 expired leases"))
        .unwrap_or_else(|| panic!("no single LEASE line in:\n{report}"));
    let number_after = |word: &str| -> u64 {
        let rest = lease
            .split(word)
            .nth(1)
            .unwrap_or_else(|| panic!("{word} in {lease}"));
        rest.trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(lease.contains("µs of server time"), "{lease}");
    assert_eq!(
        number_after("It reclaimed"),
        number_after("`vtrr.reclaim-batch`"),
        "{lease}"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    std::fs::remove_file(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // Both queues drawn, with the 10 light partitions of the smoke size.
    for title in ["VTRR (module)", "FIFO list"] {
        assert!(svg.contains(title), "missing {title:?} in:\n{svg}");
    }
    // Each light partition's row (its own y) carries a mark, in both panels.
    let light_rows: std::collections::BTreeSet<&str> = svg
        .lines()
        .filter(|line| line.contains(r##"fill="#1f6feb""##))
        .filter_map(|line| line.split(" y=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        light_rows.len(),
        2 * 10,
        "light rows {light_rows:?} in:\n{svg}"
    );
}

#[test]
fn the_instruction_counts_run_under_callgrind_at_tiny_sizes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let program = root.join("target/debug/examples/bench");
    let counts = std::env::temp_dir().join(format!("vtrr-callgrind-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&counts).unwrap();
    let output = Command::new(program)
        .args(["--instructions", "--smoke"])
        .env(
            "VTRR_REDIS_SERVER",
            root.join("scripts/callgrind-server.sh"),
        )
        .env("VTRR_CALLGRIND_DIR", &counts)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&counts).unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = String::from_utf8(output.stdout).unwrap();
    // Six rows (two scenarios; persistence off, AOF on, no listpacks), each
    // with a count, `<median>k (<min>–<max>)`, for all five systems.
    for scenario in ["enqueue, 1 item per call", "lease + ack cycle"] {
        for setting in ["persistence off", "AOF on", "no listpacks"] {
            let row = report
                .lines()
                .find(|line| line.starts_with(&format!("| {scenario}, {setting} |")))
                .unwrap_or_else(|| panic!("no {scenario}, {setting} row in:\n{report}"));
            let counts: Vec<f64> = row
                .split('|')
                .filter_map(|cell| cell.trim().split_once("k (")?.0.parse().ok())
                .collect();
            assert_eq!(counts.len(), 5, "{row}");
            assert!(counts.iter().all(|&n| n > 0.0), "{row}");
        }
    }
}
