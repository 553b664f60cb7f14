//! `mur trace diff [A] [B]`: two sessions metric by metric, `@2` against `@1` by default.

use serde_json::{Value, json};

use super::fmt;
use super::select::Places;
use super::summary::{Metric, Summary, summarize};
use super::{DiffArgs, print_json};
use crate::error::Error;

const METRIC_COL: usize = 22;
const VALUE_COL: usize = 16;

pub fn run(args: &DiffArgs) -> Result<(), Error> {
    let places = Places::new(&args.place);
    let a = load(&places, args.a.as_deref().unwrap_or("@2"))?;
    let b = load(&places, args.b.as_deref().unwrap_or("@1"))?;
    if args.place.json {
        print_json(&document(&a, &b));
    } else {
        super::out(&render(&a, &b));
    }
    Ok(())
}

fn load(places: &Places, selector: &str) -> Result<Summary, Error> {
    let found = places.resolve(Some(selector))?;
    Ok(summarize(&found.id, &found.read()?))
}

/// B minus A, for every metric.
fn deltas(a: &Summary, b: &Summary) -> Vec<(Metric, u64, u64, i128)> {
    a.metrics()
        .into_iter()
        .zip(b.metrics())
        .map(|((metric, va), (_, vb))| {
            let (va, vb) = (va as u64, vb as u64);
            (metric, va, vb, i128::from(vb) - i128::from(va))
        })
        .collect()
}

pub fn render(a: &Summary, b: &Summary) -> String {
    let mut out = format!(
        "A: {}  ({})\nB: {}  ({})\n\n",
        a.session_id, a.path, b.session_id, b.path
    );
    let row = |label: &str, va: &str, vb: &str, delta: &str| {
        format!("{label:<METRIC_COL$} {va:<VALUE_COL$} {vb:<VALUE_COL$} {delta}\n")
    };
    out.push_str(&row("Metric", "Run A", "Run B", "Delta"));
    out.push_str(&format!(
        "{} {} {} {}\n",
        "─".repeat(METRIC_COL),
        "─".repeat(VALUE_COL),
        "─".repeat(VALUE_COL),
        "─".repeat(10)
    ));
    for (metric, va, vb, delta) in deltas(a, b) {
        let (va, vb, delta) = match metric {
            Metric::Duration => (fmt::duration(va), fmt::duration(vb), signed_duration(delta)),
            _ => (fmt::thousands(va), fmt::thousands(vb), signed(delta)),
        };
        out.push_str(&row(metric.label(), &va, &vb, &delta));
    }
    let changed = if a.status() == b.status() {
        "="
    } else {
        "changed"
    };
    out.push_str(&row("exit status", a.status(), b.status(), changed));
    out
}

/// `+2`, `-1,000`, or `=` for none.
fn signed(delta: i128) -> String {
    match delta {
        0 => "=".to_string(),
        d if d > 0 => format!("+{}", fmt::thousands(d as u64)),
        d => format!("-{}", fmt::thousands(d.unsigned_abs() as u64)),
    }
}

fn signed_duration(delta: i128) -> String {
    match delta {
        0 => "=".to_string(),
        d if d > 0 => format!("+{}", fmt::duration(d as u64)),
        d => format!("-{}", fmt::duration(d.unsigned_abs() as u64)),
    }
}

fn document(a: &Summary, b: &Summary) -> Value {
    let side = |s: &Summary| json!({"session_id": s.session_id, "path": s.path, "exit_status": s.status()});
    let metrics: Vec<Value> = deltas(a, b)
        .into_iter()
        .map(|(metric, va, vb, delta)| {
            json!({"metric": metric.key(), "a": va, "b": vb, "delta": delta as i64})
        })
        .collect();
    json!({
        "a": side(a),
        "b": side(b),
        "metrics": metrics,
        "exit_status_changed": a.status() != b.status(),
    })
}
