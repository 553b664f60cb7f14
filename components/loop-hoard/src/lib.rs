//! A session loop that hands the host as much as it can, for the containment tests.
//! Each task's text says what: `MODE N [TASKS]`, N bytes or a count, TASKS how many
//! tasks a chain runs (the text travels to the follow-ups it enqueues, so capsules
//! side by side under one `mur serve` can each hoard in their own way):
//! - `chain`: every task finishes with an answer of N bytes and a conversation of one
//!   message of N bytes, after enqueueing the next task in the same context, until
//!   `MUR_HOARD_TASKS` tasks have run;
//! - `answer`: finishes with an answer of N bytes full of control sequences;
//! - `conversation`: finishes with a conversation of N one-block messages;
//! - `compact`: asks the host to compact one message of N text blocks, then finishes;
//! - `infer`: asks for an inference over N one-block messages, then finishes.
//!
//! Each task's answer says what the host answered, so a test can read it back.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are other packages: their bindings are asked for.
    generate_all,
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::{Block, Message, Role};
use murmur::session::host;
use murmur::session::types::{InferenceRequest, Params, TaskOutcome};

struct Component;

fn number(word: Option<&str>, default: usize) -> usize {
    word.and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn tiny(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| Message {
            role: Role::User,
            content: vec![Block::Text(format!("m{i}"))],
        })
        .collect()
}

/// `n` bytes of text that would repaint a terminal if printed raw.
fn hostile_text(n: usize) -> String {
    let unit = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[31m[murmur] FORGED\u{1b}[0m\r\n";
    unit.repeat(n / unit.len() + 1)[..n].to_string()
}

impl Guest for Component {
    fn run(_config: Config) -> Result<(), String> {
        let mut ran = 0;
        while let Some(task) = host::next_task() {
            ran += 1;
            let mut words = task.text.split_whitespace();
            let mode = words.next().unwrap_or_default().to_string();
            let n = number(words.next(), 1024);
            let tasks = number(words.next(), 1);
            let (outcome, kept) = match mode.as_str() {
                "chain" => {
                    if ran < tasks {
                        let _ = host::enqueue(&task.text, Some(&task.context_id));
                    }
                    let big = "x".repeat(n);
                    let kept = vec![Message {
                        role: Role::Assistant,
                        content: vec![Block::Text(big.clone())],
                    }];
                    (TaskOutcome::Completed(big), Some(kept))
                }
                "answer" => (TaskOutcome::Completed(hostile_text(n)), None),
                "conversation" => (TaskOutcome::Completed("kept".into()), Some(tiny(n))),
                "compact" => {
                    let blocks = (0..n).map(|i| Block::Text(format!("b{i}"))).collect();
                    let one = vec![Message {
                        role: Role::User,
                        content: blocks,
                    }];
                    let answer = match host::compact(&one, None) {
                        Ok(_) => "compact: ok".to_string(),
                        Err(e) => format!("compact: {e}"),
                    };
                    (TaskOutcome::Completed(answer), None)
                }
                "infer" => {
                    let request = InferenceRequest {
                        messages: tiny(n),
                        system: None,
                        tools: None,
                        max_tokens: None,
                        params: Params {
                            temperature: None,
                            top_p: None,
                            stop: Vec::new(),
                        },
                    };
                    let answer = match host::infer(&request) {
                        Ok(_) => "infer: ok".to_string(),
                        Err(e) => format!("infer: {e:?}"),
                    };
                    (TaskOutcome::Completed(answer), None)
                }
                other => (
                    TaskOutcome::Failed(format!("unknown hoard mode '{other}'")),
                    None,
                ),
            };
            if let Err(e) = host::finish_task(&outcome, kept.as_deref()) {
                return Err(format!("finish-task refused: {e}"));
            }
        }
        Ok(())
    }
}

export!(Component);
