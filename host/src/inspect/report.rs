//! `mur trace report`: each metric's mean, standard deviation, minimum and maximum
//! across sessions, and how many sessions ended each way.
//!
//! The standard deviation is the population's (the sum of squares divided by N, as
//! upstream computes it): the sessions reported are all the sessions asked about, not
//! a sample of them.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::fmt;
use super::select::{Found, Places};
use super::summary::{Metric, Summary, summarize};
use super::{ReportArgs, print_json};
use crate::error::Error;

const METRIC_COL: usize = 22;
const VALUE_COL: usize = 14;

/// What the output says of its standard deviation.
const STDDEV_KIND: &str = "population";

pub fn run(args: &ReportArgs) -> Result<(), Error> {
    let places = Places::new(&args.place);
    let summaries = chosen(&places, args)?;
    let stats = Stats::of(&summaries);
    if args.place.json {
        print_json(&document(&summaries, &stats));
    } else {
        super::out(&render(&places.describe(), &summaries, &stats));
    }
    Ok(())
}

/// The sessions named, else every session narrowed by `--since` and `--last`, oldest
/// first.
fn chosen(places: &Places, args: &ReportArgs) -> Result<Vec<Summary>, Error> {
    let found: Vec<Found> = if args.sessions.is_empty() {
        places.sessions()
    } else {
        args.sessions
            .iter()
            .map(|s| places.resolve(Some(s)))
            .collect::<Result<_, _>>()?
    };
    let mut summaries = found
        .iter()
        .map(|f| Ok(summarize(&f.id, &f.read()?)))
        .collect::<Result<Vec<_>, Error>>()?;
    if let Some(since) = &args.since {
        let cutoff = crate::trace::now_ms().saturating_sub(since_ms(since)?);
        summaries.retain(|s| s.started_ms.is_some_and(|t| t >= cutoff));
    }
    if let Some(last) = args.last {
        let skip = summaries.len().saturating_sub(last as usize);
        summaries.drain(..skip);
    }
    if summaries.is_empty() {
        return Err(Error::new(
            "E-TRC-002",
            format!("no sessions to report under {}", places.describe()),
        )
        .hint(
            "widen --since or --last, or look elsewhere with --manifest, --workdir or --records",
        ));
    }
    Ok(summaries)
}

/// `90s`, `30m`, `2h`, `7d` in milliseconds.
fn since_ms(text: &str) -> Result<u64, Error> {
    let bad = || {
        Error::new("E-TRC-004", format!("--since {text}: not a duration"))
            .hint("write a number and a unit: 90s, 30m, 2h or 7d")
    };
    let unit = text.chars().last().ok_or_else(bad)?;
    let scale: u64 = match unit {
        's' => 1000,
        'm' => 60_000,
        'h' => 3_600_000,
        'd' => 86_400_000,
        _ => return Err(bad()),
    };
    let n: u64 = text[..text.len() - 1].parse().map_err(|_| bad())?;
    n.checked_mul(scale).ok_or_else(bad)
}

/// One metric across the sessions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    pub mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    /// Of a non-empty list; the standard deviation is the population's.
    pub fn of(values: &[f64]) -> Stat {
        let n = values.len().max(1) as f64;
        let mean = values.iter().sum::<f64>() / n;
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        Stat {
            mean,
            stddev: variance.sqrt(),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

pub struct Stats {
    pub metrics: Vec<(Metric, Stat)>,
    /// Sessions by how they ended.
    pub exit_status: BTreeMap<String, usize>,
}

impl Stats {
    pub fn of(summaries: &[Summary]) -> Stats {
        let per_session: Vec<Vec<(Metric, f64)>> = summaries.iter().map(Summary::metrics).collect();
        let metrics = per_session
            .first()
            .map(|first| {
                first
                    .iter()
                    .enumerate()
                    .map(|(i, (metric, _))| {
                        let values: Vec<f64> = per_session.iter().map(|m| m[i].1).collect();
                        (*metric, Stat::of(&values))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut exit_status = BTreeMap::new();
        for s in summaries {
            *exit_status.entry(s.status().to_string()).or_insert(0) += 1;
        }
        Stats {
            metrics,
            exit_status,
        }
    }
}

pub fn render(places: &str, summaries: &[Summary], stats: &Stats) -> String {
    let mut out = format!("Sessions: {}  ({places})\n", summaries.len());
    out.push_str(&format!(
        "StdDev: {STDDEV_KIND} (the spread of exactly these sessions: divided by N)\n\n"
    ));
    let row = |cells: [&str; 5]| {
        format!(
            "{:<METRIC_COL$} {:<VALUE_COL$} {:<VALUE_COL$} {:<VALUE_COL$} {}\n",
            cells[0], cells[1], cells[2], cells[3], cells[4]
        )
    };
    out.push_str(&row(["Metric", "Mean", "StdDev", "Min", "Max"]));
    out.push_str(&format!(
        "{} {} {} {} {}\n",
        "─".repeat(METRIC_COL),
        "─".repeat(VALUE_COL),
        "─".repeat(VALUE_COL),
        "─".repeat(VALUE_COL),
        "─".repeat(VALUE_COL)
    ));
    for (metric, stat) in &stats.metrics {
        let shown = |v: f64| figure(*metric, v);
        let label = match metric {
            Metric::Duration => "duration (ms)",
            other => other.label(),
        };
        out.push_str(&row([
            label,
            &shown(stat.mean),
            &shown(stat.stddev),
            &shown(stat.min),
            &shown(stat.max),
        ]));
    }
    out.push_str("\nExit status:\n");
    for (status, count) in &stats.exit_status {
        let share = 100.0 * *count as f64 / summaries.len() as f64;
        out.push_str(&format!("  {status:<24} {count}  ({share:.1}%)\n"));
    }
    out
}

/// Counts to one decimal; tokens and milliseconds whole, with thousands separators.
fn figure(metric: Metric, v: f64) -> String {
    match metric {
        Metric::Duration | Metric::InputTokens | Metric::OutputTokens => {
            fmt::thousands(v.round() as u64)
        }
        _ => format!("{v:.1}"),
    }
}

fn document(summaries: &[Summary], stats: &Stats) -> Value {
    let mut metrics = Map::new();
    for (metric, stat) in &stats.metrics {
        metrics.insert(
            metric.key().to_string(),
            json!({"mean": stat.mean, "stddev": stat.stddev, "min": stat.min, "max": stat.max}),
        );
    }
    json!({
        "sessions": summaries.iter().map(|s| json!({
            "session_id": s.session_id,
            "path": s.path,
            "exit_status": s.status(),
        })).collect::<Vec<_>>(),
        "stddev": STDDEV_KIND,
        "metrics": metrics,
        "exit_status": stats.exit_status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_the_populations() {
        let s = Stat::of(&[2.0, 4.0, 9.0]);
        assert_eq!(s.mean, 5.0);
        assert!(
            (s.stddev - (26.0f64 / 3.0).sqrt()).abs() < 1e-12,
            "{}",
            s.stddev
        );
        assert_eq!((s.min, s.max), (2.0, 9.0));
        assert_eq!(Stat::of(&[7.0]).stddev, 0.0);
    }

    #[test]
    fn since_takes_a_number_and_a_unit() {
        assert_eq!(since_ms("90s").unwrap(), 90_000);
        assert_eq!(since_ms("2h").unwrap(), 7_200_000);
        assert_eq!(since_ms("7d").unwrap(), 604_800_000);
        for bad in ["", "h", "2", "2w", "-1h", "1.5h"] {
            assert_eq!(since_ms(bad).unwrap_err().code, "E-TRC-004", "{bad}");
        }
    }
}
