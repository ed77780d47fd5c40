//! The transfer workload's table: one row a summary field, one column an
//! engine, the ratio beside two.

use serde_json::Value;

use crate::harness::RunArgs;

/// One table row: a label and how to show a summary's field.
struct Row {
    label: &'static str,
    field: &'static str,
    unit: Unit,
}

#[derive(Clone, Copy)]
enum Unit {
    Ms,
    Ns,
    Mib,
    Bytes,
    Seconds,
    Ratio,
    Percent,
}

const ROWS: &[Row] = &[
    Row {
        label: "mean workload",
        field: "mean_workload_ms",
        unit: Unit::Ms,
    },
    Row {
        label: "p50 workload",
        field: "p50_workload_ms",
        unit: Unit::Ms,
    },
    Row {
        label: "p99 workload",
        field: "p99_workload_ms",
        unit: Unit::Ms,
    },
    Row {
        label: "mean read latency",
        field: "mean_read_ns",
        unit: Unit::Ns,
    },
    Row {
        label: "  disk p50 before the open",
        field: "disk_read_before_ns",
        unit: Unit::Ns,
    },
    Row {
        label: "  disk mean before the open",
        field: "disk_read_before_mean_ns",
        unit: Unit::Ns,
    },
    Row {
        label: "  disk p90 before the open",
        field: "disk_read_before_p90_ns",
        unit: Unit::Ns,
    },
    Row {
        label: "  disk p50 after the last commit",
        field: "disk_read_after_ns",
        unit: Unit::Ns,
    },
    Row {
        label: "  disk mean after the last commit",
        field: "disk_read_after_mean_ns",
        unit: Unit::Ns,
    },
    Row {
        label: "  disk p90 after the last commit",
        field: "disk_read_after_p90_ns",
        unit: Unit::Ns,
    },
    Row {
        label: "  files read through before",
        field: "read_through_s",
        unit: Unit::Seconds,
    },
    Row {
        label: "mean commit_and_prove",
        field: "mean_commit_and_prove_ms",
        unit: Unit::Ms,
    },
    Row {
        label: "  finish (root + witness)",
        field: "mean_finish_ms",
        unit: Unit::Ms,
    },
    Row {
        label: "  trie + witness",
        field: "mean_trie_ms",
        unit: Unit::Ms,
    },
    Row {
        label: "  plan",
        field: "mean_plan_ms",
        unit: Unit::Ms,
    },
    Row {
        label: "  durable write",
        field: "mean_write_ms",
        unit: Unit::Ms,
    },
    Row {
        label: "SSD reads per account update",
        field: "reads_per_update",
        unit: Unit::Ratio,
    },
    Row {
        label: "disk read per workload",
        field: "os_read_bytes_per_workload",
        unit: Unit::Mib,
    },
    Row {
        label: "disk written per workload",
        field: "os_write_bytes_per_workload",
        unit: Unit::Mib,
    },
    Row {
        label: "disk written per account update",
        field: "os_write_bytes_per_update",
        unit: Unit::Bytes,
    },
    Row {
        label: "blocks the cleaner moved per workload",
        field: "blocks_moved_per_workload",
        unit: Unit::Ratio,
    },
    Row {
        label: "pages written again to join runs per workload",
        field: "blocks_rewritten_per_workload",
        unit: Unit::Ratio,
    },
    Row {
        label: "blocks per run of consecutive writes",
        field: "blocks_per_write_run",
        unit: Unit::Ratio,
    },
    Row {
        label: "witness per workload",
        field: "witness_bytes_per_workload",
        unit: Unit::Mib,
    },
    Row {
        label: "page cache hit rate",
        field: "page_cache_hit_rate",
        unit: Unit::Percent,
    },
    Row {
        label: "bucket cache hit rate",
        field: "value_cache_hit_rate",
        unit: Unit::Percent,
    },
    Row {
        label: "database on disk",
        field: "db_bytes",
        unit: Unit::Mib,
    },
    Row {
        label: "  per account",
        field: "db_bytes_per_account",
        unit: Unit::Bytes,
    },
    Row {
        label: "peak RSS (workloads)",
        field: "peak_rss_bytes",
        unit: Unit::Mib,
    },
    Row {
        label: "import (NOMT: fill by commits)",
        field: "import_s",
        unit: Unit::Seconds,
    },
    Row {
        label: "open",
        field: "open_s",
        unit: Unit::Seconds,
    },
];

fn show(v: &Value, unit: Unit) -> String {
    let Some(x) = v.as_f64() else {
        return "-".into();
    };
    match unit {
        Unit::Ms => format!("{x:.1} ms"),
        Unit::Ns => format!("{:.1} us", x / 1e3),
        Unit::Mib => format!("{:.1} MiB", x / (1 << 20) as f64),
        Unit::Bytes => format!("{x:.1} B"),
        Unit::Seconds => format!("{x:.2} s"),
        Unit::Ratio => format!("{x:.3}"),
        Unit::Percent => format!("{:.1}%", 100.0 * x),
    }
}

/// The figures of one engine, or of two with their ratio.
pub fn table(args: &RunArgs, columns: &[(&str, &Value)]) {
    println!(
        "transfer workload: 2^{} accounts, {} workloads of {} transfers ({}% fresh), {} thread(s), lookahead {}, {} commit workers{}",
        args.accounts_log2,
        args.workloads,
        args.transfers,
        args.fresh,
        args.threads,
        args.lookahead,
        args.workers,
        if args.cold { ", cold OS cache" } else { "" }
    );
    if args.pipeline {
        println!("  pipelined: each workload executes on the writes of the one before (pagetrie updates and commits that one meanwhile; NOMT on its overlay, committed after)");
    }
    let mut header = format!("  {:<32}", "");
    for (name, _) in columns {
        header += &format!(" {name:>14}");
    }
    if columns.len() == 2 {
        header += &format!(" {:>9}", "ratio");
    }
    println!("{header}");
    for row in ROWS {
        let values: Vec<&Value> = columns.iter().map(|(_, s)| &s[row.field]).collect();
        if values.iter().all(|v| v.is_null()) {
            continue;
        }
        let mut line = format!("  {:<32}", row.label);
        for v in &values {
            line += &format!(" {:>14}", show(v, row.unit));
        }
        if let [a, b] = values.as_slice() {
            if let (Some(a), Some(b)) = (a.as_f64(), b.as_f64()) {
                if b != 0.0 {
                    line += &format!(" {:>8.2}x", a / b);
                }
            }
        }
        println!("{line}");
    }
    if let Some((_, s)) = columns.first() {
        // pagetrie's yes-or-no facts: the label, the field, what each value means.
        let facts = [
            (
                "open",
                "opened_from_catalog",
                "from the catalog",
                "read every block (no usable catalog)",
            ),
            (
                "direct I/O",
                "direct_io",
                "yes",
                "no (tmpfs?): some SSD reads may be OS cache hits",
            ),
        ];
        for (label, field, yes, no) in facts {
            if let Some(fact) = s[field].as_bool() {
                println!("  pagetrie {label}: {}", if fact { yes } else { no });
            }
        }
    }
}
