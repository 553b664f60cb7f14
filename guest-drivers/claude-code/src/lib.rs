//! The `claude-code` process driver: runs Claude Code (`claude -p`) as a capsule's
//! engine. Its command line is [`launch`], its stream-json output is read by
//! [`parse`], its exits by [`exit`]; all three are plain Rust, tested natively. The
//! `murmur:process` world around them is the process kit's.

mod exit;
mod launch;
mod parse;

use mur_process_kit::{Description, Exit, Failure, Harness, Interrupt, Plan, Request};

pub struct ClaudeCode;

impl Harness for ClaudeCode {
    type Parser = parse::Parser;

    fn describe() -> Description {
        Description {
            harness: "claude-code",
            binary: "claude",
            version_args: &["--version"],
            tested_versions: &["2.1.197"],
            interrupt: Interrupt::Signal,
            key_env: "ANTHROPIC_API_KEY",
            usage_covers_session: false,
        }
    }

    fn launch(request: &Request) -> Result<(Plan, parse::Parser), String> {
        let plan = launch::plan(request)?;
        let server_name = request.bridge.as_ref().map(|b| b.server_name.clone());
        Ok((plan, parse::Parser::new(server_name, request.max_turns)))
    }

    fn classify_exit(exit: &Exit) -> Failure {
        exit::WORDING.classify(exit)
    }
}

mur_process_kit::export_process_driver!(ClaudeCode);
