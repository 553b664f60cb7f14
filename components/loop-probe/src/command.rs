//! The commands a task may hold, one per line; blank lines are skipped.
//!
//! - `infer [tools=A,B] [temperature=X] [top-p=X] [stop=S,T] [max-tokens=N]`: one
//!   inference of a one-message conversation. `tools=` offers none, no `tools` every
//!   tool; `stop=` is one empty sequence, `stop=a,` one real and one empty.
//! - `call-tools`: `call-tools` with an empty list.
//! - `enqueue-until-full`: follow-up tasks (`noop`) until the host refuses one.
//! - `finish-twice`: ends the task (`finished once`), then ends it again; both answers
//!   become a note. The lines after it are not run.
//! - `finish-then-enqueue`: ends the task (`finished once`), then queues a follow-up
//!   (`noop`) between tasks; both answers become a note. The lines after it are not run.
//! - `budget`: the budget of a one-message conversation.
//! - `status TEXT`: a status with the rest of the line.
//! - `report`: the notes, one per line.
//! - `noop`: nothing (the follow-up tasks' text).

use crate::murmur::message::types::{Block, Message, Role};
use crate::murmur::session::host;
use crate::murmur::session::types::{InferenceRequest, Params, TaskOutcome};
use crate::words;

/// How many follow-ups `enqueue-until-full` asks for before it gives up on a refusal.
const ENQUEUE_BOUND: u32 = 1000;

/// The result lines of `text`'s commands; `None` when one of them ended the task.
pub fn run_all(text: &str, notes: &mut Vec<String>) -> Option<Vec<String>> {
    let mut lines = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, rest) = line.split_once(' ').unwrap_or((line, ""));
        match name {
            "report" => lines.extend(notes.iter().cloned()),
            "finish-twice" => {
                notes.push(finish_then("finish-task", || {
                    let again = TaskOutcome::Completed("finished twice".into());
                    words::plain(&host::finish_task(&again, None))
                }));
                return None;
            }
            "finish-then-enqueue" => {
                notes.push(finish_then("enqueue", || {
                    words::plain(&host::enqueue("noop", None))
                }));
                return None;
            }
            _ => lines.push(format!("{line}: {}", run(name, rest))),
        }
    }
    Some(lines)
}

/// One command's answer.
fn run(name: &str, rest: &str) -> String {
    match name {
        "infer" => match request(rest) {
            Ok(request) => words::inference(&host::infer(&request)),
            Err(why) => why,
        },
        "call-tools" => words::plain(&host::call_tools(&[])),
        "enqueue-until-full" => enqueue_until_full(),
        "budget" => words::budget(&host::budget(&one_message())),
        "status" => words::plain(&host::status(rest)),
        "noop" => "ok".into(),
        other => format!("unknown command '{other}'"),
    }
}

/// A conversation of one user message.
pub fn one_message() -> Vec<Message> {
    vec![Message {
        role: Role::User,
        content: vec![Block::Text("one two three four".into())],
    }]
}

/// [`one_message`] with every tool and the manifest's settings.
pub fn plain_request() -> InferenceRequest {
    InferenceRequest {
        messages: one_message(),
        system: None,
        tools: None,
        max_tokens: None,
        params: Params {
            temperature: None,
            top_p: None,
            stop: Vec::new(),
        },
    }
}

/// The request `infer`'s options describe; `Err` names an option it cannot read.
fn request(options: &str) -> Result<InferenceRequest, String> {
    let mut request = plain_request();
    for option in options.split_whitespace() {
        let bad = || format!("bad option '{option}'");
        let (key, value) = option.split_once('=').ok_or_else(bad)?;
        let list = || value.split(',').map(String::from).collect::<Vec<_>>();
        match key {
            "tools" if value.is_empty() => request.tools = Some(Vec::new()),
            "tools" => request.tools = Some(list()),
            "stop" => request.params.stop = list(),
            "temperature" => request.params.temperature = Some(value.parse().map_err(|_| bad())?),
            "top-p" => request.params.top_p = Some(value.parse().map_err(|_| bad())?),
            "max-tokens" => request.max_tokens = Some(value.parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        }
    }
    Ok(request)
}

/// `queued N, then err: <why>`: how many follow-ups the host took before it refused.
fn enqueue_until_full() -> String {
    for queued in 0..ENQUEUE_BOUND {
        if let Err(why) = host::enqueue("noop", None) {
            return format!("queued {queued}, then err: {why}");
        }
    }
    format!("queued {ENQUEUE_BOUND} and the host never refused one")
}

/// Ends the task, then makes one more call (now between tasks): the note says what
/// each answered, `finish-task: ok, then <call>: <answer>`.
fn finish_then(call: &str, then: impl FnOnce() -> String) -> String {
    let once = TaskOutcome::Completed("finished once".into());
    let finished = words::plain(&host::finish_task(&once, None));
    format!("finish-task: {finished}, then {call}: {}", then())
}

#[cfg(test)]
mod tests {
    use super::request;

    #[test]
    fn infer_options_fill_the_request() {
        let r = request("tools=echo,bash temperature=0.5 top-p=1 stop=a, max-tokens=7").unwrap();
        assert_eq!(r.tools, Some(vec!["echo".into(), "bash".into()]));
        assert_eq!(r.params.temperature, Some(0.5));
        assert_eq!(r.params.top_p, Some(1.0));
        assert_eq!(r.params.stop, ["a", ""]);
        assert_eq!(r.max_tokens, Some(7));
    }

    #[test]
    fn empty_values_are_an_empty_offer_and_an_empty_stop() {
        let r = request("tools= stop=").unwrap();
        assert_eq!(r.tools, Some(Vec::new()));
        assert_eq!(r.params.stop, [""]);
        let plain = request("").unwrap();
        assert_eq!((plain.tools, plain.params.stop.len()), (None, 0));
    }

    #[test]
    fn an_unreadable_option_is_named() {
        assert_eq!(
            request("temperature=warm").err(),
            Some("bad option 'temperature=warm'".into())
        );
        assert_eq!(request("seed=1").err(), Some("bad option 'seed=1'".into()));
    }
}
