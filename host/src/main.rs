//! The `mur` command: parses the command line and runs it on a tokio runtime.

use std::process::ExitCode;

use clap::Parser;
use mur::{check, cli, client, inspect, kit, run, serve, warm};

/// Blocks of 256 KiB and more are mapped for themselves and unmapped when freed.
/// glibc otherwise raises that threshold as big blocks are freed and serves them from
/// its heaps, where a stream of megabyte-sized pieces (a tool flooding chunks, each
/// framed for the seed's wire and for the A2A door) leaves holes that hold tens of
/// megabytes: the capsule's peak memory would grow with how its pieces interleave,
/// not with what it keeps.
fn big_blocks_from_the_kernel() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any thread
    // is started.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

fn main() -> ExitCode {
    big_blocks_from_the_kernel();
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
            cli::Command::Ps(args) => client::ps(&args),
            cli::Command::Token(args) => client::token(&args),
            cli::Command::Warm(args) => warm::run(&args),
            cli::Command::Wit(args) => kit::wit::run(args),
            cli::Command::New(args) => kit::new::run(args),
            cli::Command::Component(cli::ComponentCommand::Check(args)) => check::check(&args),
            cli::Command::Trace(command) => inspect::run(command).await,
            cli::Command::Mcp(cli::McpCommand::Ls(args)) => mur::mcp_ls::run(&args).await,
            cli::Command::Push(args) => mur::registry::push(&args).await,
            cli::Command::Pull(args) => mur::registry::pull(&args).await,
            cli::Command::Ls(args) => mur::registry::ls(&args).await,
            cli::Command::Install(args) => mur::registry::install(&args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            // A message may quote a guest (a loop's failure, a task's reason).
            eprintln!("{}", mur::escape::error_text(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}
