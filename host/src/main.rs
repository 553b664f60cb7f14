mod bindings;
mod builtin;
mod bus;
mod capsule;
mod cli;
mod client;
mod compaction;
mod confine;
mod control;
mod deadline;
mod detached;
mod driver;
mod engine;
mod error;
mod fence;
mod frames;
mod guest_log;
mod hooks;
mod ids;
mod input;
mod limits;
mod manifest;
mod murmur_md;
mod outbound;
mod queue;
mod quota;
mod reaper;
mod resume;
mod rooted;
mod sandbox;
mod secret;
mod seed;
mod server;
mod session;
mod shell;
mod threads;
mod tools;
mod trace;
mod wire;
mod workdir;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error[E-RUN-001]: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            cli::Command::Run(args) => capsule::run(args).await,
            cli::Command::Watch(args) => client::watch(args).await,
            cli::Command::Stop(args) => client::stop(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
