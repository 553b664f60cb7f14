//! Between the world's generated types and the kit's plain ones. The conversions are
//! whole, field for field: a driver sees all that the host sends, and what it returns
//! reaches the host unchanged.

use crate::event::{Class, Event, Failure, Usage};
use crate::exit::Exit;
use crate::exports::murmur::process::harness as wit;
use crate::harness::{Description, Interrupt};
use crate::launch::{Bridge, File, Plan, Request};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| item.to_string()).collect()
}

impl From<Description> for wit::Description {
    fn from(description: Description) -> Self {
        wit::Description {
            harness: description.harness.into(),
            binary: description.binary.into(),
            version_args: strings(description.version_args),
            tested_versions: strings(description.tested_versions),
            interrupt: match description.interrupt {
                Interrupt::Signal => wit::Interrupt::Signal,
                Interrupt::CloseStdin => wit::Interrupt::CloseStdin,
            },
            key_env: description.key_env.into(),
            usage_covers_session: description.usage_covers_session,
        }
    }
}

impl From<wit::LaunchRequest> for Request {
    fn from(request: wit::LaunchRequest) -> Self {
        Request {
            task: request.task,
            model: request.model,
            endpoint: request.endpoint,
            system_prompt: request.system_prompt,
            config: request.config,
            resume: request.resume,
            new_session: request.new_session,
            max_turns: request.max_turns,
            bridge: request.bridge.map(|bridge| Bridge {
                server_name: bridge.server_name,
                url: bridge.url,
                token_env: bridge.token_env,
                tools: bridge.tools,
            }),
            home: request.home,
            workdir: request.workdir,
            harness_version: request.harness_version,
        }
    }
}

impl From<Plan> for wit::LaunchPlan {
    fn from(plan: Plan) -> Self {
        wit::LaunchPlan {
            args: plan.args,
            env: plan.env,
            files: plan
                .files
                .into_iter()
                .map(|File { path, contents }| wit::HomeFile { path, contents })
                .collect(),
            stdin: plan.stdin,
            keep_stdin_open: plan.keep_stdin_open,
        }
    }
}

impl From<Usage> for wit::Usage {
    fn from(usage: Usage) -> Self {
        wit::Usage {
            input: usage.input,
            output: usage.output,
            cache_read: usage.cache_read,
            cache_write: usage.cache_write,
            thinking: usage.thinking,
        }
    }
}

impl From<Event> for wit::Event {
    fn from(event: Event) -> Self {
        match event {
            Event::Session { id, auth, model } => {
                wit::Event::Session(wit::SessionInfo { id, auth, model })
            }
            Event::TurnStarted => wit::Event::TurnStarted,
            Event::Text(text) => wit::Event::Text(text),
            Event::Thinking(text) => wit::Event::Thinking(text),
            Event::ToolCall {
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
            Event::ToolResult {
                id,
                output,
                is_error,
            } => wit::Event::ToolResult(wit::ToolResult {
                id,
                output,
                is_error,
            }),
            Event::Usage(usage) => wit::Event::Usage(usage.into()),
            Event::Answer(text) => wit::Event::Answer(text),
            Event::Failed(failure) => wit::Event::Failed(failure.into()),
            Event::Note(text) => wit::Event::Note(text),
        }
    }
}

impl From<Failure> for wit::Failure {
    fn from(failure: Failure) -> Self {
        wit::Failure {
            class: match failure.class {
                Class::Refused => wit::ExitClass::Refused,
                Class::Auth => wit::ExitClass::Auth,
                Class::RateLimit => wit::ExitClass::RateLimit,
                Class::Crashed => wit::ExitClass::Crashed,
            },
            message: failure.message,
        }
    }
}

impl From<wit::ExitStatus> for Exit {
    fn from(status: wit::ExitStatus) -> Self {
        Exit {
            code: status.code,
            signal: status.signal,
            stderr_tail: status.stderr_tail,
            interrupted: status.interrupted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_arrives_whole() {
        let request = Request::from(wit::LaunchRequest {
            task: "t".into(),
            model: "m".into(),
            endpoint: Some("http://e".into()),
            system_prompt: Some("p".into()),
            config: "{}".into(),
            resume: Some("r".into()),
            new_session: "n".into(),
            max_turns: 7,
            bridge: Some(wit::Bridge {
                server_name: "mur".into(),
                url: "http://b".into(),
                token_env: "TOKEN".into(),
                tools: vec!["a".into()],
            }),
            home: "/h".into(),
            workdir: "/w".into(),
            harness_version: Some("1.0".into()),
        });
        assert_eq!(
            request,
            Request {
                task: "t".into(),
                model: "m".into(),
                endpoint: Some("http://e".into()),
                system_prompt: Some("p".into()),
                config: "{}".into(),
                resume: Some("r".into()),
                new_session: "n".into(),
                max_turns: 7,
                bridge: Some(Bridge {
                    server_name: "mur".into(),
                    url: "http://b".into(),
                    token_env: "TOKEN".into(),
                    tools: vec!["a".into()],
                }),
                home: "/h".into(),
                workdir: "/w".into(),
                harness_version: Some("1.0".into()),
            }
        );
    }

    #[test]
    fn a_plan_leaves_whole() {
        let plan = wit::LaunchPlan::from(Plan {
            args: vec!["-p".into()],
            env: vec![("A".into(), "1".into())],
            files: vec![File {
                path: "f".into(),
                contents: "c".into(),
            }],
            stdin: Some("in".into()),
            keep_stdin_open: true,
        });
        assert_eq!(plan.args, ["-p"]);
        assert_eq!(plan.env, [("A".to_string(), "1".to_string())]);
        assert_eq!(plan.files.len(), 1);
        assert_eq!((&*plan.files[0].path, &*plan.files[0].contents), ("f", "c"));
        assert_eq!(plan.stdin.as_deref(), Some("in"));
        assert!(plan.keep_stdin_open);
    }

    #[test]
    fn events_leave_whole() {
        let session = wit::Event::from(Event::Session {
            id: "s".into(),
            auth: "subscription".into(),
            model: Some("m".into()),
        });
        assert!(matches!(
            session,
            wit::Event::Session(wit::SessionInfo { id, auth, model })
                if id == "s" && auth == "subscription" && model.as_deref() == Some("m")
        ));
        let call = wit::Event::from(Event::ToolCall {
            id: "c".into(),
            name: "n".into(),
            input: "{}".into(),
            bridged: true,
        });
        assert!(matches!(
            call,
            wit::Event::ToolCall(wit::ToolCall { id, name, input, bridged: true })
                if id == "c" && name == "n" && input == "{}"
        ));
        let result = wit::Event::from(Event::ToolResult {
            id: "c".into(),
            output: "o".into(),
            is_error: true,
        });
        assert!(matches!(
            result,
            wit::Event::ToolResult(wit::ToolResult { id, output, is_error: true })
                if id == "c" && output == "o"
        ));
        let usage = wit::Event::from(Event::Usage(Usage {
            input: Some(1),
            output: Some(2),
            cache_read: Some(3),
            cache_write: None,
            thinking: Some(5),
        }));
        assert!(matches!(
            usage,
            wit::Event::Usage(wit::Usage {
                input: Some(1),
                output: Some(2),
                cache_read: Some(3),
                cache_write: None,
                thinking: Some(5),
            })
        ));
        for (class, expected) in [
            (Class::Refused, wit::ExitClass::Refused),
            (Class::Auth, wit::ExitClass::Auth),
            (Class::RateLimit, wit::ExitClass::RateLimit),
            (Class::Crashed, wit::ExitClass::Crashed),
        ] {
            let failed = wit::Event::from(Event::Failed(Failure {
                class,
                message: "why".into(),
            }));
            match failed {
                wit::Event::Failed(failure) => {
                    assert_eq!(failure.class, expected);
                    assert_eq!(failure.message, "why");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            wit::Event::from(Event::TurnStarted),
            wit::Event::TurnStarted
        ));
        let texts = [
            Event::Text("a".into()),
            Event::Thinking("b".into()),
            Event::Answer("c".into()),
            Event::Note("d".into()),
        ]
        .map(|event| match wit::Event::from(event) {
            wit::Event::Text(text) => format!("text {text}"),
            wit::Event::Thinking(text) => format!("thinking {text}"),
            wit::Event::Answer(text) => format!("answer {text}"),
            wit::Event::Note(text) => format!("note {text}"),
            other => panic!("{other:?}"),
        });
        assert_eq!(texts, ["text a", "thinking b", "answer c", "note d"]);
    }
}
