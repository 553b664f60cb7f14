//! Each line's exact fields, in order: the trace is read by tools that compare it byte
//! for byte with the seed's.

use std::path::Path;

use super::*;
use crate::exit_status::ExitStatus;
use crate::queue::{Origin, Source};

fn check(line: Line, kind: &str, fields: &str) {
    assert_eq!(line.kind(), kind);
    assert_eq!(line.fields_json(), fields);
}

fn pending(origin: Origin) -> Pending {
    Pending {
        id: "tsk_1".into(),
        context_id: "ctx_1".into(),
        text: "hello".into(),
        origin,
        source: Source::A2a,
        message_id: Some("msg_1".into()),
        breach: None,
        traceparent: None,
    }
}

const TOTALS: Totals = Totals {
    turns: 2,
    input_tokens: 30,
    output_tokens: 7,
    tool_calls: 1,
    shell_calls: 1,
};

#[test]
fn session_start_records_the_capsule_and_hashes_the_prompt() {
    let start = |prompt, resumed| SessionStart {
        capsule_name: "hello",
        capsule_version: "0.1.0",
        model: "m",
        max_turns: 4,
        grants: json!({"network": [], "filesystem": ".", "shell": ["bash"]}),
        tools_declared: vec!["bash"],
        system_prompt: prompt,
        system_prompt_from_cli: false,
        resumed_from: resumed,
        session_loop: "built-in session loop",
        loop_name: "default",
        loop_version: Some("0.9.0"),
        driver: "built-in scripted driver",
        containment: json!({"declared": "scoped"}),
        components: json!([{"component": "built-in session loop", "sha256": "ab"}]),
        harness: None,
    };
    check(
        session_start(start(Some("be brief"), Some("ses_0"))),
        "session_start",
        r#"{"capsule_name":"hello","capsule_version":"0.1.0","model":"m","max_turns":4,"capabilities":["filesystem","shell"],"tools_declared":["bash"],"system_prompt_source":"manifest","system_prompt_sha256":"b0d336336bae9756708102764ccc977778d8c408df38d7050d69f9e4d22c9a43","resumed_from":"ses_0","context_id":null,"effective_grants":{"network":[],"filesystem":".","shell":["bash"]},"session_loop":"built-in session loop","loop":"default","loop_version":"0.9.0","driver":"built-in scripted driver","containment":{"declared":"scoped"},"components":[{"component":"built-in session loop","sha256":"ab"}],"transport":"http","harness":null}"#,
    );
    check(
        session_start(start(None, None)),
        "session_start",
        r#"{"capsule_name":"hello","capsule_version":"0.1.0","model":"m","max_turns":4,"capabilities":["filesystem","shell"],"tools_declared":["bash"],"system_prompt_source":"none","system_prompt_sha256":null,"resumed_from":null,"context_id":null,"effective_grants":{"network":[],"filesystem":".","shell":["bash"]},"session_loop":"built-in session loop","loop":"default","loop_version":"0.9.0","driver":"built-in scripted driver","containment":{"declared":"scoped"},"components":[{"component":"built-in session loop","sha256":"ab"}],"transport":"http","harness":null}"#,
    );
    // `--system-prompt` is the source whether it set a prompt or cleared it.
    for (prompt, sha) in [
        (
            Some("be brief"),
            json!("b0d336336bae9756708102764ccc977778d8c408df38d7050d69f9e4d22c9a43"),
        ),
        (None, Value::Null),
    ] {
        let line = session_start(SessionStart {
            system_prompt_from_cli: true,
            ..start(prompt, None)
        });
        let v: Value = serde_json::from_str(&line.fields_json()).unwrap();
        assert_eq!(v["system_prompt_source"], "cli");
        assert_eq!(v["system_prompt_sha256"], sha);
    }
    let harness =
        json!({"name": "codex", "version": "codex-cli 0.171.0", "program": "/usr/bin/codex"});
    let line = session_start(SessionStart {
        harness: Some(harness.clone()),
        ..start(None, None)
    });
    let v: Value = serde_json::from_str(&line.fields_json()).unwrap();
    assert_eq!(v["transport"], "process");
    assert_eq!(v["harness"], harness);
}

#[test]
fn capabilities_name_the_granted_categories_in_upstreams_order() {
    let all = json!({"shell": ["bash"], "filesystem": ".", "network": ["https://a.test"]});
    assert_eq!(granted_categories(&all), ["network", "filesystem", "shell"]);
    let none = json!({"network": [], "filesystem": "", "shell": []});
    assert!(granted_categories(&none).is_empty());
}

#[test]
fn session_end_carries_the_totals() {
    check(
        session_end(&TOTALS, 1200, ExitStatus::Ok),
        "session_end",
        r#"{"total_turns":2,"total_input_tokens":30,"total_output_tokens":7,"total_tool_calls":1,"total_shell_calls":1,"duration_ms":1200,"exit_status":"ok"}"#,
    );
}

#[test]
fn shell_http_lines_name_the_verdict() {
    check(
        shell_http(true, "CONNECT", "example.com", 443, None),
        "shell_http_allowed",
        r#"{"method":"CONNECT","host":"example.com","port":443,"reason":null}"#,
    );
    check(
        shell_http(false, "GET", "evil.test", 80, Some("not allowed")),
        "shell_http_denied",
        r#"{"method":"GET","host":"evil.test","port":80,"reason":"not allowed"}"#,
    );
}

#[test]
fn task_arrival_rejection_and_queued_cancel() {
    check(
        a2a_task_received(&pending(Origin::Event), Some("00-abc-01")),
        "a2a_task_received",
        r#"{"task_id":"tsk_1","context_id":"ctx_1","message_id":"msg_1","traceparent_from_caller":"00-abc-01"}"#,
    );
    check(
        a2a_task_received(&pending(Origin::Event), None),
        "a2a_task_received",
        r#"{"task_id":"tsk_1","context_id":"ctx_1","message_id":"msg_1","traceparent_from_caller":null}"#,
    );
    check(
        task_rejected("tsk_1", Rejected::Busy),
        "task_rejected",
        r#"{"task_id":"tsk_1","cause":"capsule_busy"}"#,
    );
    check(
        task_rejected("tsk_1", Rejected::SessionStopped),
        "task_rejected",
        r#"{"task_id":"tsk_1","cause":"session_stopped"}"#,
    );
    check(
        task_canceled_queued("tsk_1"),
        "task_canceled",
        r#"{"task_id":"tsk_1","phase":"queued","detached_work_ids":[]}"#,
    );
}

#[test]
fn task_start_derives_trust_and_lane_from_the_origin() {
    check(
        task_start(&pending(Origin::User)),
        "task_start",
        r#"{"task_id":"tsk_1","context_id":"ctx_1","source":"a2a","origin":"user","trust":"trusted","lane":"user","message_parts_bytes":5}"#,
    );
    check(
        task_start(&pending(Origin::Peer)),
        "task_start",
        r#"{"task_id":"tsk_1","context_id":"ctx_1","source":"a2a","origin":"peer","trust":"untrusted","lane":"peer","message_parts_bytes":5}"#,
    );
    check(
        task_start(&pending(Origin::Completion)),
        "task_start",
        r#"{"task_id":"tsk_1","context_id":"ctx_1","source":"a2a","origin":"completion","trust":"untrusted","lane":"bg","message_parts_bytes":5}"#,
    );
    check(
        task_start(&pending(Origin::System)),
        "task_start",
        r#"{"task_id":"tsk_1","context_id":"ctx_1","source":"a2a","origin":"system","trust":"untrusted","lane":"bg","message_parts_bytes":5}"#,
    );
}

#[test]
fn a_task_keeps_the_traceparent_it_arrived_with_and_opted_in_content() {
    let mut task = pending(Origin::User);
    task.traceparent = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
    check(
        task_start(&task).with_content("text", "hello"),
        "task_start",
        r#"{"task_id":"tsk_1","context_id":"ctx_1","source":"a2a","origin":"user","trust":"trusted","lane":"user","message_parts_bytes":5,"traceparent_from_caller":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","text":"hello"}"#,
    );
    let enqueued = task_enqueued(&task, None).fields_json();
    assert!(!enqueued.contains("traceparent"), "{enqueued}");
}

#[test]
fn task_end_failed_and_reopened() {
    check(
        task_end("tsk_1", ExitStatus::Ok, 55, &TOTALS, 1),
        "task_end",
        r#"{"task_id":"tsk_1","exit_status":"ok","duration_ms":55,"turns":2,"input_tokens":30,"output_tokens":7,"tool_calls":1,"shell_calls":1,"reopen_count":1}"#,
    );
    check(
        task_failed("tsk_1", "boom"),
        "task_failed",
        r#"{"task_id":"tsk_1","cause":"runtime_error","reason":"boom"}"#,
    );
    check(
        task_reopened(&Reopened {
            task_id: "tsk_1",
            hook: "judge",
            reason: "try again",
            number: 1,
            turns_remaining: 3,
        }),
        "task_reopened",
        r#"{"task_id":"tsk_1","hook_name":"judge","reason":"try again","reopen_number":1,"attempt_context":"continued","turns_remaining":3}"#,
    );
}

#[test]
fn a_failed_task_s_reason_is_cut_at_2000_bytes_on_a_character_boundary() {
    let reason = format!("{}é", "x".repeat(1999));
    let line = task_failed("tsk_1", &reason);
    let cut = line.into_fields()["reason"].as_str().unwrap().to_string();
    assert_eq!(cut, "x".repeat(1999));
}

#[test]
fn hook_and_outbound_lines() {
    check(
        hook_dispatch_error("audit", "on-tool-call", "deny"),
        "hook_dispatch_error",
        r#"{"hook_name":"audit","event":"on-tool-call","arm":"deny"}"#,
    );
    check(
        http_denied("https://evil.test"),
        "http_denied",
        r#"{"origin":"https://evil.test","reason":"not in capabilities.network.allow"}"#,
    );
    check(
        http_retry("https://api.test/v1", 2, "status 503", 250),
        "http_retry",
        r#"{"url":"https://api.test/v1","attempt":2,"cause":"status 503","delay_ms":250}"#,
    );
}

const TURN: Turn = Turn {
    turn: 1,
    duration_ms: 40,
    input_estimate: 100,
    output_estimate: 12,
};

#[test]
fn inference_puts_the_estimates_first_and_the_reported_usage_after() {
    let mut reported = Map::new();
    reported.insert("input_tokens".into(), 90.into());
    reported.insert("output_tokens".into(), 10.into());
    reported.insert("cached_tokens".into(), 64.into());
    check(
        inference(
            &TURN,
            ("tool_call", Some("bash".into())),
            "tool_call",
            &reported,
            None,
        ),
        "inference",
        r#"{"turn":1,"input_tokens":100,"output_tokens":12,"decision":"tool_call","tool_name":"bash","stop_reason":"tool_call","duration_ms":40,"input_tokens_actual":90,"output_tokens_actual":10,"cached_tokens":64}"#,
    );
    check(
        inference(&TURN, ("end_turn", None), "end_turn", &Map::new(), None),
        "inference",
        r#"{"turn":1,"input_tokens":100,"output_tokens":12,"decision":"end_turn","tool_name":null,"stop_reason":"end_turn","duration_ms":40}"#,
    );
    check(
        inference_failed(&TURN, "driver_error", "rate limited", None),
        "inference",
        r#"{"turn":1,"input_tokens":100,"output_tokens":0,"decision":"error","tool_name":null,"duration_ms":40,"error_code":"driver_error","error":"rate limited"}"#,
    );
}

#[test]
fn a_task_s_first_inference_after_a_seed_says_whether_it_carried_it() {
    check(
        inference(
            &TURN,
            ("end_turn", None),
            "end_turn",
            &Map::new(),
            Some(false),
        ),
        "inference",
        r#"{"turn":1,"input_tokens":100,"output_tokens":12,"decision":"end_turn","tool_name":null,"stop_reason":"end_turn","duration_ms":40,"seed_carried":false}"#,
    );
    check(
        inference_failed(&TURN, "driver_error", "rate limited", Some(true)),
        "inference",
        r#"{"turn":1,"input_tokens":100,"output_tokens":0,"decision":"error","tool_name":null,"duration_ms":40,"error_code":"driver_error","error":"rate limited","seed_carried":true}"#,
    );
}

#[test]
fn task_enqueued_names_the_lane_and_the_task_that_queued_it() {
    let mut task = pending(Origin::System);
    task.source = Source::Loop;
    check(
        task_enqueued(&task, Some("tsk_0")),
        "task_enqueued",
        r#"{"context_id":"ctx_1","origin":"system","lane":"bg","by_task_id":"tsk_0","message_parts_bytes":5}"#,
    );
}

const CALL: Call = Call {
    turn: 0,
    name: "bash",
    id: "call_1",
    input: r#"{"command":"ls"}"#,
};

#[test]
fn tool_call_records_the_input_as_json_and_the_optional_fields_last() {
    let ran = Ran {
        output: "out",
        duration_ms: 9,
        is_error: false,
        exit_code: Some(0),
        error: None,
    };
    check(
        tool_call(&CALL, &ran, false),
        "tool_call",
        r#"{"turn":0,"tool_name":"bash","tool_call_id":"call_1","input":{"command":"ls"},"input_bytes":16,"output_bytes":3,"duration_ms":9,"status":"ok","exit_code":0}"#,
    );
    check(
        tool_call(&CALL, &ran, true),
        "tool_call",
        r#"{"turn":0,"tool_name":"bash","tool_call_id":"call_1","input":{"command":"ls"},"input_bytes":16,"output_bytes":3,"duration_ms":9,"status":"ok","exit_code":0,"output":"out"}"#,
    );
    let refused = Ran {
        output: "nope",
        duration_ms: 0,
        is_error: true,
        exit_code: None,
        error: Some("nope"),
    };
    let odd = Call {
        id: "",
        input: "not json",
        ..CALL
    };
    check(
        tool_call(&odd, &refused, true),
        "tool_call",
        r#"{"turn":0,"tool_name":"bash","tool_call_id":null,"input":"not json","input_bytes":8,"output_bytes":4,"duration_ms":0,"status":"error","exit_code":null,"error":"nope","output":"nope"}"#,
    );
    check(
        skill_call(&CALL, &refused),
        "skill_call",
        r#"{"turn":0,"skill_name":"bash","output_bytes":4,"duration_ms":0,"status":"error"}"#,
    );
}

#[test]
fn shell_records_the_command_and_a_resource_limit_when_one_was_hit() {
    let mut s = Shell {
        turn: 3,
        binary: "/usr/bin/bash",
        command: "ls",
        exit_code: 0,
        stdout_bytes: 5,
        stderr_bytes: 0,
        duration_ms: 7,
        resource_limit: None,
    };
    check(
        shell(&s),
        "shell",
        r#"{"turn":3,"binary":"/usr/bin/bash","command":"ls","exit_code":0,"stdout_bytes":5,"stderr_bytes":0,"duration_ms":7}"#,
    );
    s.resource_limit = Some("memory");
    check(
        shell(&s),
        "shell",
        r#"{"turn":3,"binary":"/usr/bin/bash","command":"ls","exit_code":0,"stdout_bytes":5,"stderr_bytes":0,"duration_ms":7,"resource_limit":"memory"}"#,
    );
}

#[test]
fn policy_and_quota_lines() {
    check(
        call_denied(&Denied {
            turn: 1,
            event: "on-shell",
            hook: "guard",
            target: "/usr/bin/rm",
            reason: "no",
        }),
        "call_denied",
        r#"{"turn":1,"event":"on-shell","hook_name":"guard","target":"/usr/bin/rm","reason":"no"}"#,
    );
    let breach = Breach {
        bytes: 9000,
        baseline: 100,
        limit_bytes: 4096,
    };
    check(
        quota_breach_after_call(2, "bash", breach),
        "workdir_quota_breach",
        r#"{"turn":2,"tool_name":"bash","bytes_at_least":9000,"bytes_at_start":100,"limit":"capabilities.limits.workdir_bytes","limit_bytes":4096}"#,
    );
    check(
        quota_breach_after_work("wrk_1", breach),
        "workdir_quota_breach",
        r#"{"work_id":"wrk_1","bytes_at_least":9000,"bytes_at_start":100,"limit":"capabilities.limits.workdir_bytes","limit_bytes":4096}"#,
    );
}

#[test]
fn seed_and_compaction_lines() {
    let ids = ["msg_1".to_string()];
    let mut seeded = Seeded {
        task_id: "tsk_1",
        hook: "memory",
        tokens: 10,
        proposed_tokens: 20,
        budget_tokens: 15,
        outcome: "trimmed",
        message_ids: &ids,
        reason: None,
    };
    check(
        context_seed(&seeded),
        "context_seed",
        r#"{"task_id":"tsk_1","hook_name":"memory","tokens":10,"proposed_tokens":20,"budget_tokens":15,"outcome":"trimmed","message_ids":["msg_1"]}"#,
    );
    seeded.reason = Some("message_over_budget");
    seeded.message_ids = &[];
    check(
        context_seed(&seeded),
        "context_seed",
        r#"{"task_id":"tsk_1","hook_name":"memory","tokens":10,"proposed_tokens":20,"budget_tokens":15,"outcome":"trimmed","message_ids":[],"reason":"message_over_budget"}"#,
    );
    check(
        compaction("tsk_1", 4, 900, 300, "actual"),
        "compaction",
        r#"{"task_id":"tsk_1","turn":4,"tokens_before":900,"tokens_after":300,"tokens_before_source":"actual"}"#,
    );
    check(
        compaction_declined(4, 900, "estimate", "no_hook_replacement"),
        "compaction_declined",
        r#"{"turn":4,"tokens":900,"tokens_source":"estimate","reason":"no_hook_replacement"}"#,
    );
}

const WORK: Work = Work {
    work_id: "wrk_1",
    binary: "/usr/bin/bash",
    command: "sleep 9",
};

#[test]
fn detached_command_lines() {
    check(
        shell_detached(&Detached {
            turn: 1,
            task_id: "tsk_1",
            context_id: "ctx_1",
            work_id: "wrk_1",
            binary: "/usr/bin/bash",
            command: "sleep 9",
            grace_ms: 2000,
            output_path: Path::new("/w/logs/wrk_1.log"),
            pid: 42,
        }),
        "shell_detached",
        r#"{"turn":1,"task_id":"tsk_1","context_id":"ctx_1","work_id":"wrk_1","binary":"/usr/bin/bash","command":"sleep 9","grace_ms":2000,"output_path":"/w/logs/wrk_1.log","pid":42}"#,
    );
    let mut completed = Completed {
        exit_code: 0,
        duration_ms: 9000,
        output_path: Path::new("/w/logs/wrk_1.log"),
        output_bytes: 0,
        ok: true,
        completion_task_id: "tsk_2",
        resource_limit: None,
    };
    check(
        shell_completed(&WORK, &completed),
        "shell_completed",
        r#"{"work_id":"wrk_1","binary":"/usr/bin/bash","command":"sleep 9","exit_code":0,"duration_ms":9000,"output_path":"/w/logs/wrk_1.log","output_bytes":0,"status":"ok","completion_task_id":"tsk_2"}"#,
    );
    completed.ok = false;
    completed.resource_limit = Some("cpu");
    check(
        shell_completed(&WORK, &completed),
        "shell_completed",
        r#"{"work_id":"wrk_1","binary":"/usr/bin/bash","command":"sleep 9","exit_code":0,"duration_ms":9000,"output_path":"/w/logs/wrk_1.log","output_bytes":0,"status":"failed","completion_task_id":"tsk_2","resource_limit":"cpu"}"#,
    );
    check(
        shell_abandoned(&WORK, 1500),
        "shell_abandoned",
        r#"{"work_id":"wrk_1","binary":"/usr/bin/bash","command":"sleep 9","running_ms":1500}"#,
    );
    check(
        shell_lost(&Lost {
            work: WORK,
            detached_at_ms: 7,
            by_session: "ses_2",
            task_id: "tsk_9",
        }),
        "shell_lost",
        r#"{"work_id":"wrk_1","binary":"/usr/bin/bash","command":"sleep 9","detached_at_ms":7,"reconciled_by_session":"ses_2","reconciled_task_id":"tsk_9"}"#,
    );
}

#[test]
fn input_wait_lines_end_with_the_task() {
    check(
        input("tsk_1", Input::Requested { prompt_bytes: 12 }),
        "input_requested",
        r#"{"prompt_bytes":12,"task_id":"tsk_1"}"#,
    );
    check(
        input("tsk_1", Input::Received { reply_bytes: 3 }),
        "input_received",
        r#"{"reply_bytes":3,"task_id":"tsk_1"}"#,
    );
    check(
        input("tsk_1", Input::TimedOut { secs: 30 }),
        "input_timeout",
        r#"{"input_timeout_secs":30,"task_id":"tsk_1"}"#,
    );
}

#[test]
fn totals_add_up() {
    let mut t = TOTALS;
    t.add(&TOTALS);
    assert_eq!(
        t,
        Totals {
            turns: 4,
            input_tokens: 60,
            output_tokens: 14,
            tool_calls: 2,
            shell_calls: 2,
        }
    );
}
