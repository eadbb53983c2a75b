//! What operators read: the plan table and the JSON report. Snapshot-tested (cli/tests/snapshots).

use rehash::plan::ranges;
use rehash::Plan;
use std::io::Write;

/// `-o table|json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table for a terminal.
    Table,
    /// The JSON report (docs/report.md).
    Json,
}

/// Writes the plan in the chosen form.
pub fn plan(plan: &Plan, output: Output, out: &mut dyn Write) -> std::io::Result<()> {
    match output {
        Output::Json => {
            let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
            plan.write_json(&mut out)?;
            writeln!(out)?;
            out.flush()
        }
        Output::Table => table(plan, out),
    }
}

fn table(plan: &Plan, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "runtime {} at {}; kubelet {} → {}",
        plan.runtime.name(),
        plan.root,
        plan.from
            .map(|v| v.to_string())
            .unwrap_or_else(|| "?".into()),
        plan.to
    )?;
    if plan.from_candidates.len() > 1 {
        writeln!(
            out,
            "(stored hashes are consistent with kubelet {}; they all hash these containers alike)",
            ranges(&plan.from_candidates.iter().copied().collect())
        )?;
    }
    writeln!(
        out,
        "{:<14} {:<36} {:<18} {:<9} {:<9} {:<9} {:<12} REASON",
        "ID", "POD", "CONTAINER", "STORED", "FROM", "TARGET", "ACTION"
    )?;
    let mut rows: Vec<_> = plan.records.iter().collect();
    rows.sort_by(|a, b| {
        (
            a.namespace.as_deref(),
            a.pod.as_deref(),
            a.kind,
            a.container.as_deref(),
            a.attempt,
        )
            .cmp(&(
                b.namespace.as_deref(),
                b.pod.as_deref(),
                b.kind,
                b.container.as_deref(),
                b.attempt,
            ))
    });
    let hash = |h: Option<rehash::Hash>| h.map(|h| h.to_string()).unwrap_or_else(|| "-".into());
    for r in rows {
        let pod = match (&r.namespace, &r.pod) {
            (Some(n), Some(p)) => format!("{n}/{p}"),
            _ => "-".into(),
        };
        let action = serde_json::to_value(r.action)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        writeln!(
            out,
            "{:<14} {:<36} {:<18} {:<9} {:<9} {:<9} {:<12} {}",
            &r.id[..r.id.len().min(12)],
            truncate(&pod, 36),
            truncate(r.container.as_deref().unwrap_or("-"), 18),
            r.stored_hash.as_deref().unwrap_or("-"),
            hash(r.from_hash),
            hash(r.target_hash),
            action,
            r.reason
        )?;
    }
    for h in &plan.hazards {
        let level = match h.severity {
            rehash::Severity::Block => "BLOCKED",
            rehash::Severity::Warn => "WARNING",
        };
        writeln!(out, "{level} [{}]: {}", h.code, h.message)?;
    }
    writeln!(out, "{}", plan.summary.sentence)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}
