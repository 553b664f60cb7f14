//! The `codex` process driver: runs Codex (`codex exec --json`) as a capsule's engine.
//! Its command line and home config are [`launch`], its JSONL output is read by
//! [`parse`], its exits by [`exit`]; all three are plain Rust, tested natively. The
//! `murmur:process` world around them is the process kit's.

mod exit;
mod launch;
mod parse;

use mur_process_kit::{Description, Exit, Failure, Harness, Interrupt, Plan, Request};

pub struct Codex;

impl Harness for Codex {
    type Parser = parse::Parser;

    fn describe() -> Description {
        Description {
            harness: "codex",
            binary: "codex",
            version_args: &["--version"],
            tested_versions: &["0.171.0"],
            interrupt: Interrupt::Signal,
            key_env: launch::KEY_ENV,
            // `turn.completed` counts the whole thread, resumed runs included.
            usage_covers_session: true,
        }
    }

    fn launch(request: &Request) -> Result<(Plan, parse::Parser), String> {
        let plan = launch::plan(request)?;
        let server_name = request.bridge.as_ref().map(|b| b.server_name.clone());
        Ok((plan, parse::Parser::new(server_name)))
    }

    fn classify_exit(exit: &Exit) -> Failure {
        exit::WORDING.classify(exit)
    }
}

mur_process_kit::export_process_driver!(Codex);
