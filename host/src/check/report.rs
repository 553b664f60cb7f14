//! What a check found: one outcome per scenario, printed as lines, as one JSON
//! document (`--json`) or as a JUnit XML file (`--junit`).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::error::Error;

/// How one scenario ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    /// The component did something its world forbids, or not what it must: why.
    Fail(String),
    /// The scenario does not apply to this component, or cannot run here: why.
    Skip(String),
}

/// A scenario's body ends `Ok(())` when it passed, else with the outcome to report:
/// `?` on a [`Outcome::Fail`] or [`Outcome::Skip`] ends it there.
pub type Step = Result<(), Outcome>;

/// A failed step, with `message` as what the line says.
pub fn fail(message: impl Into<String>) -> Outcome {
    Outcome::Fail(message.into())
}

/// A skipped step, with `reason` as what the line says.
pub fn skip(reason: impl Into<String>) -> Outcome {
    Outcome::Skip(reason.into())
}

/// A step that may pass with something to say: `Ok(Some(note))`, as the scenario's line
/// says it.
pub type Noted = Result<Option<String>, Outcome>;

/// `Ok(())` when `holds`, else the failure `message`.
pub fn ensure(holds: bool, message: impl FnOnce() -> String) -> Step {
    if holds { Ok(()) } else { Err(fail(message())) }
}

/// One scenario's name, outcome and how long it took.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub outcome: Outcome,
    /// What a pass has to say (how it passed), if anything.
    pub note: Option<String>,
    pub duration: Duration,
}

impl Scenario {
    /// Runs `body` and times it.
    pub fn run(name: &str, body: impl FnOnce() -> Step) -> Scenario {
        Scenario::run_noted(name, || body().map(|()| None))
    }

    /// [`Scenario::run`] for a body whose pass may carry a note.
    pub fn run_noted(name: &str, body: impl FnOnce() -> Noted) -> Scenario {
        let started = Instant::now();
        let (outcome, note) = match body() {
            Ok(note) => (Outcome::Pass, note),
            Err(outcome) => (outcome, None),
        };
        Scenario {
            name: name.to_string(),
            outcome,
            note,
            duration: started.elapsed(),
        }
    }

    /// A scenario that did not run, for `reason`.
    pub fn skipped(name: &str, reason: impl Into<String>) -> Scenario {
        Scenario {
            name: name.to_string(),
            outcome: Outcome::Skip(reason.into()),
            note: None,
            duration: Duration::ZERO,
        }
    }

    fn word(&self) -> &'static str {
        match self.outcome {
            Outcome::Pass => "pass",
            Outcome::Fail(_) => "fail",
            Outcome::Skip(_) => "skip",
        }
    }

    fn message(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Pass => self.note.as_deref(),
            Outcome::Fail(m) | Outcome::Skip(m) => Some(m),
        }
    }
}

/// The whole check: the component, its world, and every scenario in order.
#[derive(Debug)]
pub struct Report {
    pub component: String,
    /// `tool`, `driver`, `hook` or `loop`.
    pub world: String,
    /// The one-line description of what it imports and exports.
    pub summary: String,
    pub scenarios: Vec<Scenario>,
}

/// How many scenarios passed, failed and were skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Report {
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in &self.scenarios {
            match s.outcome {
                Outcome::Pass => t.passed += 1,
                Outcome::Fail(_) => t.failed += 1,
                Outcome::Skip(_) => t.skipped += 1,
            }
        }
        t
    }

    /// The plain form: the world line, a line per scenario, the totals.
    pub fn plain(&self) -> String {
        let mut out = format!("{}\n", self.summary);
        for s in &self.scenarios {
            let ms = s.duration.as_millis();
            let _ = match &s.outcome {
                Outcome::Pass => match &s.note {
                    Some(note) => writeln!(out, "PASS {}: {} ({ms} ms)", s.name, shown(note)),
                    None => writeln!(out, "PASS {} ({ms} ms)", s.name),
                },
                Outcome::Fail(m) => writeln!(out, "FAIL {}: {} ({ms} ms)", s.name, shown(m)),
                Outcome::Skip(m) => writeln!(out, "SKIP {}: {}", s.name, shown(m)),
            };
        }
        let t = self.totals();
        let _ = writeln!(
            out,
            "{} passed, {} failed, {} skipped",
            t.passed, t.failed, t.skipped
        );
        out
    }

    /// The `--json` document.
    pub fn json(&self) -> Value {
        let t = self.totals();
        json!({
            "component": self.component,
            "world": self.world,
            "summary": self.summary,
            "scenarios": self.scenarios.iter().map(|s| json!({
                "name": s.name,
                "outcome": s.word(),
                "message": s.message(),
                "duration_ms": s.duration.as_millis() as u64,
            })).collect::<Vec<_>>(),
            "totals": {"passed": t.passed, "failed": t.failed, "skipped": t.skipped},
        })
    }

    /// A JUnit XML document: one testsuite, one testcase per scenario.
    pub fn junit(&self) -> String {
        let t = self.totals();
        let total: Duration = self.scenarios.iter().map(|s| s.duration).sum();
        let suite = format!("mur component check {}", self.component);
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<testsuites><testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{:.3}\">",
            xml(&suite),
            self.scenarios.len(),
            t.failed,
            t.skipped,
            total.as_secs_f64()
        );
        for s in &self.scenarios {
            let head = format!(
                "  <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
                xml(&format!("{}.{}", self.world, self.component)),
                xml(&s.name),
                s.duration.as_secs_f64()
            );
            let _ = match &s.outcome {
                Outcome::Pass => match &s.note {
                    Some(note) => writeln!(
                        out,
                        "{head}>\n    <system-out>{}</system-out>\n  </testcase>",
                        xml(note)
                    ),
                    None => writeln!(out, "{head}/>"),
                },
                Outcome::Fail(m) => writeln!(
                    out,
                    "{head}>\n    <failure message=\"{}\">{}</failure>\n  </testcase>",
                    xml(&one_line(m)),
                    xml(m)
                ),
                Outcome::Skip(m) => writeln!(
                    out,
                    "{head}>\n    <skipped message=\"{}\"/>\n  </testcase>",
                    xml(&one_line(m))
                ),
            };
        }
        out.push_str("</testsuite></testsuites>\n");
        out
    }

    /// Writes [`Report::junit`] to `path`.
    pub fn write_junit(&self, path: &Path) -> Result<(), Error> {
        std::fs::write(path, self.junit()).map_err(|e| {
            Error::new(
                "E-CHK-005",
                format!("could not write the JUnit file {}: {e}", path.display()),
            )
            .hint("pass --junit a path in a directory that exists and is writable")
        })
    }
}

/// A message on one line: the plain output has a line per scenario.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// [`one_line`], for a terminal: a component's words, so control characters escaped.
fn shown(text: &str) -> String {
    crate::escape::line(&one_line(text)).into_owned()
}

/// `text` escaped for an XML attribute or text node; characters XML 1.0 cannot hold
/// at all (most control characters) become U+FFFD.
pub fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            component: "t.wasm".into(),
            world: "tool".into(),
            summary: "world: tool".into(),
            scenarios: vec![
                Scenario::skipped("a", "why"),
                Scenario {
                    name: "b <&>".into(),
                    outcome: Outcome::Fail("said \"no\"\nat 'once' \u{1}".into()),
                    note: None,
                    duration: Duration::from_millis(3),
                },
                Scenario {
                    name: "c".into(),
                    outcome: Outcome::Pass,
                    note: None,
                    duration: Duration::from_millis(5),
                },
                Scenario::run_noted("d", || Ok(Some("answered <error>\nin two".into()))),
            ],
        }
    }

    #[test]
    fn plain_lines_end_with_the_totals() {
        let text = report().plain();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "SKIP a: why");
        assert_eq!(lines[2], "FAIL b <&>: said \"no\" at 'once' \\u{1} (3 ms)");
        assert_eq!(lines[3], "PASS c (5 ms)");
        assert!(
            lines[4].starts_with("PASS d: answered <error> in two ("),
            "{}",
            lines[4]
        );
        assert_eq!(lines[5], "2 passed, 1 failed, 1 skipped");
        let doc = report().json();
        assert_eq!(doc["scenarios"][2]["message"], Value::Null);
        assert_eq!(doc["scenarios"][3]["message"], "answered <error>\nin two");
    }

    #[test]
    fn junit_escapes_what_xml_cannot_hold() {
        let xml = report().junit();
        assert!(xml.contains("tests=\"4\" failures=\"1\" errors=\"0\" skipped=\"1\""));
        assert!(xml.contains("name=\"b &lt;&amp;&gt;\""));
        assert!(xml.contains(
            "<failure message=\"said &quot;no&quot; at &apos;once&apos; \u{FFFD}\">said &quot;no&quot;&#10;at"
        ));
        assert!(xml.contains("<skipped message=\"why\"/>"));
        assert!(xml.contains("<system-out>answered &lt;error&gt;&#10;in two</system-out>"));
    }
}
