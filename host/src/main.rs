//! The `mur` command: parses the command line and runs it on a tokio runtime.

use std::process::ExitCode;

use clap::Parser;
use mur::{cli, client, run, serve};

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
            cli::Command::Run(args) => run::run(args).await,
            cli::Command::Serve(args) => serve::serve(args).await,
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
