//! The `codex` process driver: runs Codex (`codex exec --json`) as a capsule's engine.
//! Its command line and home config are [`launch`], its JSONL output is read by
//! [`parse`], its exits by [`exit`]; all three are plain Rust, tested natively. This
//! file only converts between them and the `murmur:process` world.

wit_bindgen::generate!({
    path: "../../wit/process",
    world: "murmur:process/process-driver",
});

mod exit;
mod launch;
mod parse;

use exports::murmur::process::harness as wit;
use std::sync::Mutex;

/// The run's parser; `launch` starts it afresh (the host runs one instance a task).
static PARSER: Mutex<Option<parse::Parser>> = Mutex::new(None);

struct Component;

impl wit::Guest for Component {
    fn describe() -> wit::Description {
        wit::Description {
            harness: "codex".into(),
            binary: "codex".into(),
            version_args: vec!["--version".into()],
            tested_versions: vec!["0.171.0".into()],
            interrupt: wit::Interrupt::Signal,
            key_env: launch::KEY_ENV.into(),
        }
    }

    fn launch(request: wit::LaunchRequest) -> Result<wit::LaunchPlan, String> {
        let server_name = request.bridge.as_ref().map(|b| b.server_name.clone());
        let resumed = request.resume.is_some();
        let plan = launch::plan(&launch::Request {
            task: request.task,
            model: request.model,
            endpoint: request.endpoint,
            system_prompt: request.system_prompt,
            config: request.config,
            resume: request.resume,
            bridge: request.bridge.map(|bridge| launch::Bridge {
                server_name: bridge.server_name,
                url: bridge.url,
                token_env: bridge.token_env,
            }),
            home: request.home,
            workdir: request.workdir,
        })?;
        *lock() = Some(parse::Parser::new(server_name, resumed));
        Ok(wit::LaunchPlan {
            args: plan.args,
            env: plan.env,
            files: plan
                .files
                .into_iter()
                .map(|file| wit::HomeFile {
                    path: file.path,
                    contents: file.contents,
                })
                .collect(),
            stdin: None,
            keep_stdin_open: false,
        })
    }

    fn parse(line: String) -> Vec<wit::Event> {
        let mut parser = lock();
        parser
            .get_or_insert_with(parse::Parser::default)
            .parse(&line)
            .into_iter()
            .map(event)
            .collect()
    }

    fn classify_exit(status: wit::ExitStatus) -> wit::Failure {
        failure(exit::classify(&exit::Exit {
            code: status.code,
            signal: status.signal,
            stderr_tail: status.stderr_tail,
            interrupted: status.interrupted,
        }))
    }
}

fn lock() -> std::sync::MutexGuard<'static, Option<parse::Parser>> {
    PARSER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn event(event: parse::Event) -> wit::Event {
    match event {
        parse::Event::Session { id, auth, model } => {
            wit::Event::Session(wit::SessionInfo { id, auth, model })
        }
        parse::Event::TurnStarted => wit::Event::TurnStarted,
        parse::Event::Text(text) => wit::Event::Text(text),
        parse::Event::Thinking(text) => wit::Event::Thinking(text),
        parse::Event::ToolCall {
            id,
            name,
            input,
            bridged,
        } => wit::Event::ToolCall(wit::ToolCall {
            id,
            name,
            input,
            bridged,
        }),
        parse::Event::ToolResult {
            id,
            output,
            is_error,
        } => wit::Event::ToolResult(wit::ToolResult {
            id,
            output,
            is_error,
        }),
        parse::Event::Usage(usage) => wit::Event::Usage(wit::Usage {
            input: usage.input,
            output: usage.output,
            cache_read: usage.cache_read,
            cache_write: usage.cache_write,
            thinking: usage.thinking,
        }),
        parse::Event::Answer(text) => wit::Event::Answer(text),
        parse::Event::Failed(failed) => wit::Event::Failed(failure(failed)),
        parse::Event::Note(text) => wit::Event::Note(text),
    }
}

fn failure(failure: parse::Failure) -> wit::Failure {
    wit::Failure {
        class: match failure.class {
            parse::Class::Refused => wit::ExitClass::Refused,
            parse::Class::Auth => wit::ExitClass::Auth,
            parse::Class::RateLimit => wit::ExitClass::RateLimit,
            parse::Class::Crashed => wit::ExitClass::Crashed,
        },
        message: failure.message,
    }
}

export!(Component);
