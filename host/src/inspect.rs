//! `mur trace show|steps|diff|report|calls`: what sessions did, read from their
//! `trace.jsonl`.
//!
//! Read-only, and never needs a running capsule: everything comes from the files the
//! trace writer (`crate::trace`) left. Sessions are looked for where `mur run` puts
//! them for the same `--manifest`, `--workdir` and `--records`, and where upstream
//! Murmur puts them, so a trace of either runtime reads the same way. Lines of event
//! types or with keys this reader does not know are skipped, as the schema asks.
//!
//! A trace holds guests' text (tool inputs, answers, reasons): what is printed is
//! escaped (`crate::escape`), each row kept to its line, the JSON kept the same value.

mod calls;
mod diff;
mod export;
mod fmt;
mod parse;
mod report;
mod select;
mod show;
mod steps;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::Value;

use crate::error::Error;

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// A session in sections: Session, Turns, Tokens, Tool calls, Shell calls,
    /// Compaction, and Tasks when it ran more than one.
    Show(ShowArgs),
    /// A session turn by turn, as a tree: each task, its turns, and each turn's calls.
    Steps(StepsArgs),
    /// Two sessions side by side, metric by metric (default: @2 against @1).
    Diff(DiffArgs),
    /// Mean, standard deviation, minimum and maximum of each metric across sessions,
    /// and how the sessions ended.
    Report(ReportArgs),
    /// A formation's call tree: each task of the entry member's session, the calls it
    /// made to other members, and what each callee's task did, down the chain.
    Calls(CallsArgs),
    /// Sends a session to an OpenTelemetry collector over OTLP/HTTP as the spans it
    /// would have given live, with the same ids: for a run that had no collector.
    Export(ExportArgs),
}

/// Where sessions are looked for, and how to print.
#[derive(clap::Args, Debug, Clone)]
pub struct Where {
    /// The capsule's manifest: its sessions are under <its dir>/workdir, as mur run
    /// puts them.
    #[arg(long, default_value = "./murmur.yaml")]
    pub manifest: PathBuf,
    /// The directory a run was given as --workdir, or <manifest-dir>/workdir.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// The records directory a run was given as --records.
    #[arg(long, value_name = "DIR")]
    pub records: Option<PathBuf>,
    /// Print one JSON document on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
}

const SELECTOR_HELP: &str = "The session: a full ses_ id, a suffix of 4 or more characters, \
@N (@1 = the newest), or a path to a trace.jsonl (anything with a '/' or ending .jsonl); \
default the newest";

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    #[arg(value_name = "SESSION", help = SELECTOR_HELP)]
    pub session: Option<String>,
    #[command(flatten)]
    pub place: Where,
}

#[derive(clap::Args, Debug)]
pub struct StepsArgs {
    #[arg(value_name = "SESSION", help = SELECTOR_HELP)]
    pub session: Option<String>,
    /// Also show each call's input (tool calls) or command (shell calls).
    #[arg(long, short)]
    pub verbose: bool,
    #[command(flatten)]
    pub place: Where,
}

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// Session A (default @2): a full ses_ id, a suffix of 4+ characters, @N or a path.
    #[arg(value_name = "A")]
    pub a: Option<String>,
    /// Session B (default @1), named the same ways.
    #[arg(value_name = "B")]
    pub b: Option<String>,
    #[command(flatten)]
    pub place: Where,
}

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The sessions to include: full ses_ ids, suffixes of 4+ characters, @N or paths
    /// (default: every session).
    #[arg(value_name = "SESSION")]
    pub sessions: Vec<String>,
    /// Only the N newest sessions.
    #[arg(long, value_name = "N", conflicts_with = "sessions",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub last: Option<u64>,
    /// Only sessions started within this long: 90s, 30m, 2h, 7d.
    #[arg(long, value_name = "DURATION", conflicts_with = "sessions")]
    pub since: Option<String>,
    #[command(flatten)]
    pub place: Where,
}

#[derive(clap::Args, Debug)]
pub struct CallsArgs {
    /// The entry member's session: a full ses_ id, a suffix of 4 or more characters, @N
    /// (@1 = the newest), or a path to a trace.jsonl; default the newest.
    #[arg(value_name = "SESSION")]
    pub session: Option<String>,
    /// The formation: a directory holding roster.yaml, or the file.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub roster: PathBuf,
    /// The directory the formation's run was given as --workdir (only its entry member
    /// ran there).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// The records directory the formation's run was given as --records (the entry
    /// member's).
    #[arg(long, value_name = "DIR")]
    pub records: Option<PathBuf>,
    /// Print one JSON document on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    #[arg(value_name = "SESSION", help = SELECTOR_HELP)]
    pub session: Option<String>,
    /// The collector's OTLP/HTTP base URL (spans go to its /v1/traces), when
    /// OTEL_EXPORTER_OTLP_ENDPOINT does not name one.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Send the text the trace holds (tools' arguments and results, a task's text and
    /// answer when they were kept) as the GenAI content attributes.
    #[arg(long)]
    pub capture_content: bool,
    #[command(flatten)]
    pub place: Where,
}

/// Runs one `mur trace` subcommand.
///
/// # Errors
///
/// `E-TRC-001` for a malformed trace line, `E-TRC-002` when no session matches,
/// `E-TRC-003` when a trace cannot be read, `E-TRC-004` for a bad `--since`,
/// `E-TRC-005` when no roster is where `calls` looks, `E-TRC-006` when its entry member
/// has no session, `E-TRC-007` when `export` has no collector to send to, `E-TRC-008`
/// when the collector did not take every span.
pub async fn run(command: TraceCommand) -> Result<ExitCode, Error> {
    match command {
        TraceCommand::Export(args) => export::run(&args).await,
        TraceCommand::Show(args) => show::run(&args),
        TraceCommand::Steps(args) => steps::run(&args),
        TraceCommand::Diff(args) => diff::run(&args),
        TraceCommand::Report(args) => report::run(&args),
        TraceCommand::Calls(args) => calls::run(&args),
    }?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the one JSON document `--json` promises.
fn print_json(document: &Value) {
    let mut text = serde_json::to_string_pretty(document).unwrap_or_default();
    text.push('\n');
    write_out(&crate::escape::json(&text));
}

/// Writes `text` to stdout, control characters escaped (its rows are escaped each
/// already; this holds for any text that is not).
fn out(text: &str) {
    write_out(&crate::escape::text(text));
}

/// Writes to stdout; a reader that went away (`mur trace show | head`) ends nothing
/// but the output.
fn write_out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}
