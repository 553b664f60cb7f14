//! Every line mur writes to `trace.jsonl`, checked against the reference schema
//! (`trace.md`, upstream 0.8.0): the envelope on every line, and for each event type the
//! fields it must carry, their JSON types and their value sets. Where upstream's own
//! reader needs more than the reference says (its `mur trace show` refuses a whole trace
//! over one line it cannot read), the table asks for that too, and says so.
//!
//! Capsules that make as many event types as the suite can produce run first; then each
//! line of each trace is checked. An event type of ours the reference does not list must
//! still carry the envelope, and must be named in [`OURS`], so a new one is a decision.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::mock_model::MockModel;
use crate::common::*;
use crate::hooks::{Cap, Hook, Yaml, answer, calls};

/// A field's JSON type.
#[derive(Clone, Copy, Debug)]
enum Ty {
    Str,
    /// A non-negative integer.
    U64,
    /// An integer that fits an `i32` (exit codes).
    I32,
    Obj,
    /// Any JSON value.
    Any,
    /// A list of strings.
    Strs,
    /// A string from this set.
    OneOf(&'static [&'static str]),
    /// A list of strings from this set.
    SomeOf(&'static [&'static str]),
    /// The type, or `null`.
    OrNull(&'static Ty),
}

use Ty::*;

/// Whether a field must be there.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Need {
    Required,
    Optional,
}

use Need::*;

struct Spec {
    event: &'static str,
    fields: &'static [(&'static str, Ty, Need)],
}

const SOURCES: &[&str] = &["a2a", "task_md", "detached_shell", "detached_lost"];
const ORIGINS: &[&str] = &["user", "peer", "schedule", "event", "completion", "system"];
const TASK_EXIT: &[&str] = &[
    "ok",
    "failed",
    "max_turns_reached",
    "reopen_budget_exhausted",
    "canceled",
    "spend_ceiling_reached",
    "no_answer",
];
const SESSION_EXIT: &[&str] = &[
    "ok",
    "failed",
    "max_turns_reached",
    "canceled",
    "deadline_reached",
    // Not in the reference's session table: a session whose last task a spend ceiling
    // stopped ends with the task's status, as `mur run`'s `status:` line says.
    "spend_ceiling_reached",
];
const FAILED_CAUSES: &[&str] = &[
    "driver_error",
    "malformed_response",
    "compaction_hook",
    "input_timeout",
    "reopen_budget_exhausted",
    "runtime_error",
    "credential_rejected",
    "workdir_path_refused",
];

/// The reference's events. `decision` may also be `error`: upstream writes it on a failed
/// call's line, and its reader refuses an `inference` line with no `decision`.
const SCHEMA: &[Spec] = &[
    Spec {
        event: "session_start",
        fields: &[
            ("capsule_name", Str, Required),
            ("capsule_version", Str, Required),
            ("model", Str, Required),
            ("max_turns", U64, Required),
            // Upstream's reader takes a list here and refuses a map.
            (
                "capabilities",
                SomeOf(&["network", "filesystem", "shell"]),
                Required,
            ),
            ("tools_declared", Strs, Required),
            (
                "system_prompt_source",
                OneOf(&["manifest", "cli", "none"]),
                Required,
            ),
            ("system_prompt_sha256", OrNull(&Str), Required),
            ("resumed_from", OrNull(&Str), Required),
            ("context_id", OrNull(&Str), Required),
            ("effective_grants", Obj, Required),
        ],
    },
    Spec {
        event: "session_end",
        fields: &[
            ("total_turns", U64, Required),
            ("total_input_tokens", U64, Required),
            ("total_output_tokens", U64, Required),
            ("total_tool_calls", U64, Required),
            ("total_shell_calls", U64, Required),
            ("duration_ms", U64, Required),
            ("exit_status", OneOf(SESSION_EXIT), Required),
        ],
    },
    Spec {
        event: "a2a_task_received",
        fields: &[
            ("task_id", Str, Required),
            ("context_id", Str, Required),
            ("message_id", OrNull(&Str), Required),
            ("traceparent_from_caller", OrNull(&Str), Required),
        ],
    },
    Spec {
        event: "task_start",
        fields: &[
            ("task_id", Str, Required),
            ("context_id", Str, Required),
            ("source", OneOf(SOURCES), Required),
            ("origin", OneOf(ORIGINS), Required),
            ("trust", OneOf(&["trusted", "untrusted"]), Required),
            ("lane", OneOf(&["user", "peer", "bg"]), Required),
            ("message_parts_bytes", U64, Required),
            ("part_kinds", SomeOf(&["text", "data"]), Optional),
        ],
    },
    Spec {
        event: "task_end",
        fields: &[
            ("task_id", Str, Required),
            ("exit_status", OneOf(TASK_EXIT), Required),
            ("duration_ms", U64, Required),
            ("turns", U64, Required),
            ("input_tokens", U64, Required),
            ("output_tokens", U64, Required),
            ("tool_calls", U64, Required),
            ("shell_calls", U64, Required),
            ("reopen_count", U64, Optional),
            ("running_commands", Strs, Optional),
        ],
    },
    Spec {
        event: "task_reopened",
        fields: &[
            ("task_id", Str, Required),
            ("hook_name", Str, Required),
            ("reason", Str, Required),
            ("reopen_number", U64, Required),
            (
                "attempt_context",
                OneOf(&["continued", "restarted"]),
                Optional,
            ),
            ("turns_remaining", U64, Optional),
        ],
    },
    Spec {
        event: "task_failed",
        fields: &[
            ("task_id", Str, Optional),
            ("turn", U64, Optional),
            ("cause", OneOf(FAILED_CAUSES), Required),
            ("reason", Str, Required),
        ],
    },
    Spec {
        event: "task_canceled",
        fields: &[
            ("phase", Str, Required),
            ("detached_work_ids", Strs, Required),
        ],
    },
    Spec {
        event: "task_rejected",
        fields: &[
            // Upstream's reader needs the task id: the line is the task's only record.
            ("task_id", Str, Required),
            // `capsule_busy` is ours: a task refused on arrival, which upstream has no
            // line for.
            (
                "cause",
                OneOf(&["session_ended", "session_stopped", "capsule_busy"]),
                Required,
            ),
        ],
    },
    Spec {
        event: "inference",
        fields: &[
            ("turn", U64, Required),
            ("input_tokens", U64, Required),
            ("output_tokens", U64, Required),
            (
                "decision",
                OneOf(&["tool_call", "end_turn", "text", "error"]),
                Required,
            ),
            ("tool_name", OrNull(&Str), Required),
            ("stop_reason", Str, Optional),
            (
                "error_code",
                OneOf(&["driver_error", "driver_failed", "malformed_response"]),
                Optional,
            ),
            ("error", Str, Optional),
            ("origin", Str, Optional),
            ("model", Str, Optional),
        ],
    },
    Spec {
        event: "tool_call",
        fields: &[
            ("turn", U64, Required),
            ("tool_name", Str, Required),
            ("tool_call_id", OrNull(&Str), Required),
            ("input", Any, Required),
            ("input_bytes", U64, Required),
            ("output", Str, Optional),
            ("output_bytes", U64, Required),
            ("duration_ms", U64, Required),
            ("status", OneOf(&["ok", "error"]), Required),
            ("error", Str, Optional),
        ],
    },
    Spec {
        event: "skill_call",
        fields: &[
            ("turn", U64, Required),
            ("skill_name", Str, Required),
            ("output_bytes", U64, Required),
            ("duration_ms", U64, Required),
            ("status", OneOf(&["ok", "error"]), Required),
        ],
    },
    Spec {
        event: "shell",
        fields: &[
            ("turn", U64, Required),
            ("binary", Str, Required),
            ("command", Str, Required),
            ("exit_code", I32, Required),
            ("stdout_bytes", U64, Required),
            ("stderr_bytes", U64, Required),
            ("duration_ms", U64, Required),
            ("resource_limit", Str, Optional),
        ],
    },
    Spec {
        event: "call_denied",
        fields: &[
            ("turn", U64, Required),
            ("event", OneOf(&["on-tool-call", "on-shell"]), Required),
            ("hook_name", Str, Required),
            ("target", Str, Required),
            ("reason", Str, Required),
        ],
    },
    Spec {
        event: "tool_input_refused",
        fields: &[
            ("turn", U64, Required),
            ("tool_name", Str, Required),
            ("tool_call_id", OrNull(&Str), Required),
            ("missing", Strs, Required),
            ("reason", Str, Required),
        ],
    },
    Spec {
        event: "hook_dispatch_error",
        fields: &[
            ("hook_name", Str, Required),
            ("event", Str, Required),
            ("arm", Str, Required),
        ],
    },
    Spec {
        event: "shell_detached",
        fields: &[
            ("turn", U64, Required),
            ("task_id", Str, Required),
            ("work_id", Str, Required),
            ("binary", Str, Required),
            ("command", Str, Required),
            ("grace_ms", U64, Required),
        ],
    },
    Spec {
        event: "shell_completed",
        fields: &[
            ("work_id", Str, Required),
            ("binary", Str, Required),
            ("command", Str, Required),
            ("exit_code", I32, Required),
            ("duration_ms", U64, Required),
            ("output_path", Str, Required),
            ("output_bytes", U64, Required),
            ("status", Str, Required),
            ("completion_task_id", Str, Required),
            ("resource_limit", Str, Optional),
        ],
    },
    Spec {
        event: "shell_abandoned",
        fields: &[
            ("work_id", Str, Required),
            ("binary", Str, Required),
            ("command", Str, Required),
            ("running_ms", U64, Required),
            ("exit_code", I32, Optional),
            ("output_path", Str, Optional),
            ("output_bytes", U64, Optional),
        ],
    },
    Spec {
        event: "shell_lost",
        fields: &[
            ("work_id", Str, Required),
            ("binary", Str, Required),
            ("command", Str, Required),
            ("detached_at_ms", U64, Required),
            ("reconciled_by_session", Str, Required),
            ("reconciled_task_id", Str, Required),
        ],
    },
    Spec {
        event: "context_seed",
        fields: &[
            ("task_id", Str, Required),
            ("hook_name", Str, Required),
            ("tokens", U64, Required),
            ("proposed_tokens", U64, Required),
            ("budget_tokens", U64, Required),
            (
                "outcome",
                OneOf(&["seeded", "trimmed", "compacted", "rejected"]),
                Required,
            ),
            (
                "reason",
                OneOf(&[
                    "no_budget",
                    "message_over_budget",
                    "overflow_over_limit",
                    "unsupported_transport",
                ]),
                Optional,
            ),
            ("message_ids", Strs, Required),
        ],
    },
    Spec {
        event: "compaction",
        fields: &[
            ("turn", U64, Required),
            ("tokens_before", U64, Required),
            ("tokens_after", U64, Required),
            ("task_id", Str, Optional),
            (
                "tokens_before_source",
                OneOf(&["actual", "estimate"]),
                Optional,
            ),
        ],
    },
    Spec {
        event: "compaction_declined",
        fields: &[
            ("turn", U64, Required),
            ("tokens", U64, Required),
            ("tokens_source", Str, Required),
            (
                "reason",
                OneOf(&["no_hook_replacement", "unresolved_tool_call"]),
                Required,
            ),
        ],
    },
];

/// Event types of ours the reference does not list: the envelope is all they owe.
const OURS: &[&str] = &[
    "task_enqueued",
    "shell_http_allowed",
    "shell_http_denied",
    "http_denied",
    "http_retry",
    "workdir_quota_breach",
    "input_requested",
    "input_received",
    "input_timeout",
    "spend_ceiling_reached",
    "member_call",
    "peer_task_answered",
    "peer_task_received",
    "hook",
    "harness_session",
    "harness_tool",
    "harness_note",
    "harness_exit",
];

const ENVELOPE: &[&str] = &[
    "event_type",
    "event_id",
    "parent_id",
    "session_id",
    "timestamp",
    "task_id",
];

fn fits(v: &Value, ty: Ty) -> bool {
    match ty {
        Str => v.is_string(),
        U64 => v.is_u64(),
        I32 => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
        Obj => v.is_object(),
        Any => true,
        Strs => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        OneOf(set) => v.as_str().is_some_and(|s| set.contains(&s)),
        SomeOf(set) => v.as_array().is_some_and(|a| {
            a.iter()
                .all(|x| x.as_str().is_some_and(|s| set.contains(&s)))
        }),
        OrNull(ty) => v.is_null() || fits(v, *ty),
    }
}

fn is_event_id(v: &Value) -> bool {
    v.as_str().is_some_and(|id| is_minted(id, "evt_", 32))
}

/// The OpenTelemetry ids after the envelope: `trace_id` (32 hex digits) and `span_id`
/// (16) on every line, and `parent_span_id` (16, or null for a root) on a line that is
/// or opens a span; a span line's own id is the end of its event id.
fn span_ids(fields: &serde_json::Map<String, Value>) -> Vec<String> {
    const SPANS: &[&str] = &[
        "session_start",
        "task_start",
        "inference",
        "tool_call",
        "skill_call",
        "shell",
        "compaction",
        "hook",
        "member_call",
    ];
    let hex = |key: &str, n: usize| {
        fields
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|h| h.len() == n && h.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let mut wrong = Vec::new();
    let keys: Vec<&str> = fields
        .keys()
        .skip(ENVELOPE.len())
        .take(2)
        .map(String::as_str)
        .collect();
    if keys != ["trace_id", "span_id"] || !hex("trace_id", 32) || !hex("span_id", 16) {
        wrong.push(format!(
            "no trace_id and span_id after the envelope: {keys:?}"
        ));
    }
    let text = |key: &str| fields.get(key).and_then(Value::as_str).unwrap_or_default();
    let kind = text("event_type");
    if SPANS.contains(&kind) {
        let parent = fields.get("parent_span_id");
        if !(hex("parent_span_id", 16)
            || parent.is_some_and(Value::is_null) && kind == "session_start")
        {
            wrong.push(format!("a {kind} line's parent_span_id is {parent:?}"));
        }
        if !text("event_id").ends_with(text("span_id")) || text("span_id").is_empty() {
            wrong.push(format!(
                "a {kind} line's span_id is not the end of its event id"
            ));
        }
    }
    wrong
}

/// What is wrong with one line, given the event ids of the lines before it; none when
/// it is right.
fn problems(line: &Value, session_id: &str, earlier: &HashSet<String>) -> Vec<String> {
    let mut wrong = Vec::new();
    let Some(fields) = line.as_object() else {
        return vec!["not a JSON object".into()];
    };
    let keys: Vec<&str> = fields
        .keys()
        .take(ENVELOPE.len())
        .map(String::as_str)
        .collect();
    if keys != ENVELOPE {
        wrong.push(format!(
            "the line starts {keys:?}, not with the envelope in order"
        ));
    }
    let kind = line["event_type"].as_str().unwrap_or_default();
    let envelope = [
        ("event_id", is_event_id(&line["event_id"])),
        (
            "parent_id",
            line.get("parent_id")
                .is_some_and(|p| p.is_null() || p.as_str().is_some_and(|id| earlier.contains(id))),
        ),
        ("session_id", line["session_id"] == session_id),
        ("timestamp", line["timestamp"].is_u64()),
        (
            "task_id",
            line.get("task_id")
                .is_some_and(|t| t.is_null() || t.is_string()),
        ),
    ];
    for (key, ok) in envelope {
        if !ok {
            wrong.push(format!("envelope {key} is {}", line[key]));
        }
    }
    wrong.extend(span_ids(fields));
    let Some(spec) = SCHEMA.iter().find(|s| s.event == kind) else {
        if !OURS.contains(&kind) {
            wrong.push(format!("{kind} is in neither the schema nor OURS"));
        }
        return wrong;
    };
    for (key, ty, need) in spec.fields {
        match fields.get(*key) {
            None if *need == Required => wrong.push(format!("no {key}")),
            None => {}
            Some(v) if !fits(v, *ty) => wrong.push(format!("{key} is {v}, not {ty:?}")),
            Some(_) => {}
        }
    }
    wrong.extend(rules(kind, line));
    wrong
}

/// The rules that tie fields together.
fn rules(kind: &str, line: &Value) -> Vec<String> {
    let mut wrong = Vec::new();
    match kind {
        "task_start" => {
            let origin = line["origin"].as_str().unwrap_or_default();
            let lane = match origin {
                "user" => "user",
                "peer" => "peer",
                _ => "bg",
            };
            if line["lane"] != lane {
                wrong.push(format!("origin {origin} runs in lane {lane}"));
            }
            let trust = match origin {
                "user" | "schedule" | "system" => Some("trusted"),
                "event" => Some("untrusted"),
                _ => None,
            };
            if trust.is_some_and(|t| line["trust"] != t) {
                wrong.push(format!("origin {origin} is {trust:?}"));
            }
        }
        "task_failed" if line["reason"].as_str().is_some_and(|r| r.len() > 2000) => {
            wrong.push("reason over 2000 bytes".into());
        }
        "shell_abandoned" => {
            let finished = ["exit_code", "output_path", "output_bytes"]
                .iter()
                .filter(|k| line.get(**k).is_some())
                .count();
            if finished != 0 && finished != 3 {
                wrong.push("exit_code, output_path, output_bytes: all three or none".into());
            }
        }
        "shell_lost" => {
            for key in ["exit_code", "status", "duration_ms", "output_path"] {
                if line.get(key).is_some() {
                    wrong.push(format!("a lost command has no {key}"));
                }
            }
        }
        _ => {}
    }
    let detached = matches!(
        kind,
        "shell_detached" | "shell_completed" | "shell_abandoned" | "shell_lost"
    );
    let work_id = line["work_id"].as_str().unwrap_or_default();
    if detached && !(work_id.len() > 4 && is_minted(work_id, "wrk_", work_id.len() - 4)) {
        wrong.push(format!("work_id {} is no wrk_ id", line["work_id"]));
    }
    wrong
}

/// Checks every line of the trace at `path`; returns the event types it held.
pub(crate) fn assert_schema(path: &Path) -> Vec<String> {
    let lines = json_lines(path);
    let session_id = path
        .parent()
        .and_then(Path::file_name)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mut earlier = HashSet::new();
    let mut kinds = Vec::new();
    let mut report = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        for wrong in problems(line, &session_id, &earlier) {
            report.push(format!("{}:{}: {wrong}\n  {line}", path.display(), n + 1));
        }
        if let Some(id) = line["event_id"].as_str() {
            assert!(earlier.insert(id.to_string()), "event_id {id} twice");
        }
        kinds.push(line["event_type"].as_str().unwrap_or_default().to_string());
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
    kinds
}

fn trace_of(session: &Session) -> std::path::PathBuf {
    session.records.join("trace.jsonl")
}

/// The hello example: the lines of an ordinary session.
fn hello() -> Vec<String> {
    let run = finish(
        mur()
            .current_dir(repo())
            .args(["run", "--json", "--port", "0"])
            .args(["--manifest", "examples/hello/murmur.yaml", "--workdir"])
            .arg(scratch("schema-hello"))
            .args(["--task", "What is in your workdir?"]),
    );
    run.assert_ok();
    assert_schema(&trace_of(&run.session()))
}

const DETACHED: &str = "name: detached\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
    script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\n\
    lifecycle:\n  shell_grace_secs: 1\n";

fn bash_then_text(command: &str, more: &str) -> String {
    format!(
        "turns:\n{}  - text: \"{{{{last_tool_result}}}}\"\n{more}",
        bash_turn(command)
    )
}

/// A queued capsule: a command that detaches and completes (its completion task), then
/// a task over HTTP, then a stop.
fn detached_and_http() -> Vec<String> {
    let script = bash_then_text(
        "sleep 2; echo done",
        "  - text: completion seen\n  - text: http answer\n",
    );
    let manifest = format!("{DETACHED}  task_acceptance: queue\n  after_task: sleep\n");
    let cap = Capsule::new("schema-detached", &manifest, &script);
    let running = cap.spawn(&["--task", "start it"]);
    let session = running.session();
    eventually(Duration::from_secs(60), "the completion task", || {
        session
            .trace_so_far()
            .iter()
            .filter(|e| e["event_type"] == "task_end")
            .count()
            >= 2
    });
    let body = message_stream_body("over http");
    let reply = read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &body,
    ));
    assert!(reply.contains("http answer"), "{reply}");
    let stop = json!({"jsonrpc": "2.0", "id": 9, "method": "murmur/stop", "params": {}});
    read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &stop.to_string(),
    ));
    running.wait(LIMIT).assert_ok();
    assert_schema(&trace_of(&session))
}

/// A command still running at the end (abandoned), and one whose runtime was killed
/// (lost, marked in the old trace by the resume that reports it).
fn abandoned_and_lost() -> Vec<String> {
    let mark = marker(30);
    let _cleanup = KillOnDrop(mark.clone());
    let command = format!("sleep {mark}");
    let exit = format!("{DETACHED}  task_acceptance: none\n  after_task: exit\n");
    let cap = Capsule::new("schema-abandoned", &exit, &bash_then_text(&command, ""));
    let run = cap.run(&["--task", "go"]);
    run.assert_ok();
    let mut kinds = assert_schema(&trace_of(&run.session()));

    let queue = format!("{DETACHED}  task_acceptance: queue\n  after_task: sleep\n");
    let cap = Capsule::new("schema-lost", &queue, &bash_then_text(&command, ""));
    let mut running = cap.spawn(&["--task", "go"]);
    let old = running.session();
    eventually(Duration::from_secs(60), "shell_detached", || {
        old.trace_so_far()
            .iter()
            .any(|e| e["event_type"] == "shell_detached")
    });
    running.child.kill().unwrap();
    running.child.wait().unwrap();
    std::fs::write(
        cap.dir.join("script.yaml"),
        format!("{SPAN_SESSION}turns:\n  - text: resumed\n  - text: reported\n"),
    )
    .unwrap();
    let resumed = cap.run(&[
        "--task",
        "again",
        "--resume",
        &old.id,
        "--lifecycle-task-acceptance",
        "none",
        "--lifecycle-after-task",
        "exit",
    ]);
    resumed.assert_ok();
    kinds.extend(assert_schema(&trace_of(&old)));
    kinds.extend(assert_schema(&trace_of(&resumed.session())));
    kinds
}

/// A script that runs out after one turn: the driver fails the second call, and the
/// task fails; and a session loop that traps.
fn failed() -> Vec<String> {
    let manifest = format!("{DETACHED}  task_acceptance: none\n");
    let cap = Capsule::new(
        "schema-failed",
        &manifest,
        &format!("turns:\n{}", bash_turn("true")),
    );
    let run = cap.run(&["--task", "go"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let mut kinds = assert_schema(&trace_of(&run.session()));

    // A session loop that traps: the runtime fails the task (`task_failed`).
    let manifest = hostile_loop_manifest("trapping", "", "./script.yaml", 600);
    let cap = Capsule::new("schema-trap", &manifest, "turns: []\n");
    let run = finish(
        mur()
            .env("MUR_HOSTILE", "trap-early")
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(cap.manifest())
            .arg("--loop")
            .arg(guest(MUR_LOOP_HOSTILE))
            .args(["--task", "never taken"]),
    );
    assert_eq!(run.status, 1, "{}", run.stderr);
    kinds.extend(assert_schema(&trace_of(&run.session())));
    kinds
}

/// Hooks: a reopen, a denied call, a compaction.
fn hooked() -> Vec<String> {
    let mut kinds = Vec::new();
    let gate = Yaml::scripted().hook(
        Hook::new("gatekeeper", MUR_HOOK_GATEKEEPER)
            .bind("on-task-end")
            .policy("reopen-task")
            .scope("gate"),
    );
    let cap = Cap::new(
        "schema-reopen",
        &gate,
        "turns:\n  - text: Paris.\n  - text: Paris, France.\n",
    );
    cap.scope_file("gate", "required.txt", "France\n");
    let done = cap.run_task("Where is Paris?");
    done.assert_ok();
    kinds.extend(assert_schema(&trace_of(&done.session)));

    let deny = Yaml::scripted().hook(
        Hook::new("guard", MUR_HOOK_DENY_LIST)
            .bind("on-shell")
            .policy("deny"),
    );
    let script = format!(
        "turns:\n{}  - text: refused\n",
        bash_turn("curl -s http://example.com")
    );
    let done = Cap::new("schema-deny", &deny, &script).run_task("fetch it");
    done.assert_ok();
    kinds.extend(assert_schema(&trace_of(&done.session)));

    let mock = MockModel::with(vec![
        calls("c1", "echo", r#"{"command":"one"}"#, (100, 10)),
        calls("c2", "echo", r#"{"command":"two"}"#, (600, 10)),
        answer("done"),
    ]);
    let squash = Hook::recorder("squash")
        .bind("on-compaction")
        .policy("replace-context");
    let yaml = Yaml::openai(&mock)
        .inference("  compaction:\n    threshold: 0.5\n")
        .section("context:\n  max_tokens: 1000\n")
        .hook(squash);
    let cap = Cap::new("schema-compact", &yaml, "");
    cap.answers("squash", json!({"compaction": [{"replace_keep_last": 1}]}));
    let done = cap.run_task("echo twice");
    done.assert_ok();
    kinds.extend(assert_schema(&trace_of(&done.session)));
    kinds
}

fn ask_manifest(lifecycle: &str) -> String {
    format!(
        "name: input\nversion: \"0.1.0\"\nartifacts:\n  - name: ask\n    runtime: tool\n    \
         source: {}\ninference:\n  driver: scripted\n  script: ./script.yaml\n  \
         model: scripted-test\nlifecycle:\n{lifecycle}",
        json!(guest(MUR_TOOL_ASK).to_str().unwrap())
    )
}

const ASK: &str = "turns:\n  - tool_calls: [{id: a1, name: ask, input: {prompt: Anyone?}}]\n  \
                   - text: \"{{last_tool_result}}\"\n";

fn rpc(address: &str, body: &Value) -> String {
    read_to_close(post(
        address,
        &[("content-type", "application/json")],
        &body.to_string(),
    ))
}

/// A task waiting for input, a task queued behind it: the queued one is canceled
/// (`task_canceled`), then the waiting one.
fn input_and_cancel() -> Vec<String> {
    let cap = Capsule::new(
        "schema-cancel",
        &ask_manifest("  task_acceptance: queue\n  after_task: sleep\n  input_timeout_secs: 60\n"),
        ASK,
    );
    let running = cap.spawn(&[]);
    let session = running.session();
    let address = running.address.clone();
    let open = |text: &str, context: &str| {
        let socket = post(
            &address,
            &[("content-type", "application/json")],
            &message_stream_body_in(text, context),
        );
        crate::common::sse_frames::Sse::open(socket, std::time::Instant::now(), LIMIT)
    };
    let mut waiting = open("ask and wait", "ctx_waits");
    let frames = waiting.until(LIMIT, |f| f.state() == "input-required");
    let waiting_id = frames.last().unwrap().data["id"]
        .as_str()
        .unwrap()
        .to_string();
    let _queued = open("wait your turn", "ctx_queued");
    // A queued task has no frame before it runs: its id is in the trace.
    let mut queued_id = String::new();
    eventually(LIMIT, "the queued task's arrival", || {
        let arrived: Vec<Value> = session
            .trace_so_far()
            .into_iter()
            .filter(|e| e["event_type"] == "a2a_task_received")
            .collect();
        if let [_, second] = arrived.as_slice() {
            queued_id = second["task_id"].as_str().unwrap().to_string();
        }
        !queued_id.is_empty()
    });
    for id in [&queued_id, &waiting_id] {
        let cancel =
            json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {"id": id}});
        let reply = rpc(&address, &cancel);
        assert!(reply.contains("\"result\""), "{reply}");
    }
    rpc(
        &address,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "murmur/stop", "params": {}}),
    );
    // The last task ended canceled: the run says so (E-RUN-040).
    assert_eq!(running.wait(LIMIT).status, 1);
    assert_schema(&trace_of(&session))
}

/// A session ceiling of one token: the first call is refused before the driver runs.
fn spent() -> Vec<String> {
    let manifest = "name: spent\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
                    script: ./script.yaml\n  model: scripted-test\n  max_session_tokens: 1\n\
                    lifecycle:\n  task_acceptance: none\n";
    let cap = Capsule::new("schema-spent", manifest, "turns:\n  - text: never\n");
    let run = cap.run(&["--task", "go"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert_schema(&trace_of(&run.session()))
}

#[test]
fn every_line_we_write_fits_the_reference_schema() {
    let mut kinds: Vec<String> = Vec::new();
    kinds.extend(hello());
    kinds.extend(detached_and_http());
    kinds.extend(abandoned_and_lost());
    kinds.extend(failed());
    kinds.extend(hooked());
    kinds.extend(input_and_cancel());
    kinds.extend(spent());
    let seen: HashSet<&str> = kinds.iter().map(String::as_str).collect();
    // What these capsules must have produced, so the check above covered them.
    for kind in [
        "session_start",
        "session_end",
        "task_start",
        "task_end",
        "inference",
        "tool_call",
        "shell",
        "a2a_task_received",
        "shell_detached",
        "shell_completed",
        "shell_abandoned",
        "shell_lost",
        "task_failed",
        "task_reopened",
        "call_denied",
        "compaction",
        "task_canceled",
        "input_requested",
        "spend_ceiling_reached",
    ] {
        assert!(seen.contains(kind), "no {kind} line was produced: {seen:?}");
    }
}

/// The checker itself: it catches what it is for.
#[test]
fn the_checker_refuses_what_the_schema_forbids() {
    let start = json!({"event_type": "session_start", "event_id": format!("evt_{}", "a".repeat(32)),
        "parent_id": null, "session_id": "ses_x", "timestamp": 1, "task_id": null,
        "trace_id": "1".repeat(32), "span_id": "a".repeat(16), "parent_span_id": null,
        "capsule_name": "c", "capsule_version": "1", "model": "m", "max_turns": 4,
        "capabilities": ["filesystem", "shell"], "tools_declared": [],
        "system_prompt_source": "none", "system_prompt_sha256": null, "resumed_from": null,
        "context_id": null, "effective_grants": {}});
    assert_eq!(
        problems(&start, "ses_x", &HashSet::new()),
        Vec::<String>::new()
    );
    let mut map = start.clone();
    map["capabilities"] = json!({"shell": ["bash"]});
    assert_eq!(
        problems(&map, "ses_x", &HashSet::new()),
        [r#"capabilities is {"shell":["bash"]}, not SomeOf(["network", "filesystem", "shell"])"#]
    );
    let mut orphan = start.clone();
    orphan["parent_id"] = json!(format!("evt_{}", "b".repeat(32)));
    assert_eq!(problems(&orphan, "ses_x", &HashSet::new()).len(), 1);
    let wrong_lane = json!({"event_type": "task_start", "event_id": format!("evt_{}", "c".repeat(32)),
        "parent_id": null, "session_id": "ses_x", "timestamp": 1, "task_id": "tsk_1",
        "trace_id": "1".repeat(32), "span_id": "c".repeat(16), "parent_span_id": "a".repeat(16),
        "context_id": "ctx_1", "source": "a2a", "origin": "event", "trust": "untrusted",
        "lane": "user", "message_parts_bytes": 3});
    assert_eq!(
        problems(&wrong_lane, "ses_x", &HashSet::new()),
        ["origin event runs in lane bg"]
    );
    let unknown = json!({"event_type": "made_up", "event_id": format!("evt_{}", "d".repeat(32)),
        "parent_id": null, "session_id": "ses_x", "timestamp": 1, "task_id": null,
        "trace_id": "1".repeat(32), "span_id": "a".repeat(16)});
    assert_eq!(
        problems(&unknown, "ses_x", &HashSet::new()),
        ["made_up is in neither the schema nor OURS"]
    );
    // A span line's ids: its own span id is the end of its event id.
    let mut foreign = wrong_lane.clone();
    foreign["span_id"] = json!("e".repeat(16));
    foreign["lane"] = json!("bg");
    assert_eq!(
        problems(&foreign, "ses_x", &HashSet::new()),
        ["a task_start line's span_id is not the end of its event id"]
    );
}
