use super::*;

const REQUEST: &str = r#"{"model":"m","messages":[]}"#;

fn parsed(raw: &str) -> Parsed {
    match parse(raw, REQUEST, 10) {
        Ok(parsed) => parsed,
        Err(e) => panic!("{raw} did not parse: {e:?}"),
    }
}

fn failed(raw: &str) -> String {
    match parse(raw, REQUEST, 10) {
        Err(InferenceError::Failed(why)) => why,
        Err(other) => panic!("{raw}: not Failed but {other:?}"),
        Ok(_) => panic!("{raw} parsed"),
    }
}

#[test]
fn end_turn_joins_the_text_blocks_and_keeps_the_assistant_message() {
    let raw = r#"{"stop_reason":"end_turn","content":[{"type":"text","text":"a"},{"type":"thinking","text":"t"},{"type":"text","text":"b"}],"usage":{"input_tokens":7,"output_tokens":3}}"#;
    let p = parsed(raw);
    assert_eq!(p.reply.stop_reason, StopReason::EndTurn);
    assert_eq!(p.reply.text, "a\nb");
    assert!(p.reply.tool_calls.is_empty());
    assert_eq!(
        p.reply.assistant_message,
        r#"{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"thinking","text":"t"},{"type":"text","text":"b"}]}"#
    );
    assert!(p.reply.context.is_none());
    assert_eq!(decision(&p.reply), ("end_turn", None));
}

#[test]
fn max_tokens_is_a_text_decision() {
    let p = parsed(r#"{"stop_reason":"max_tokens","content":[{"type":"text","text":"cut"}]}"#);
    assert_eq!(p.reply.stop_reason, StopReason::MaxTokens);
    assert_eq!(p.reply.text, "cut");
    assert_eq!(decision(&p.reply), ("text", None));
    assert_eq!(stop_reason_name(p.reply.stop_reason), "max_tokens");
}

#[test]
fn tool_call_blocks_become_calls_with_their_input_as_json_text() {
    let raw = r#"{"stop_reason":"tool_call","content":[{"type":"text","text":"let me"},{"type":"tool_call","id":"c1","name":"echo","input":{"a":1}},{"type":"tool_call","name":"ls","input":null},{"type":"tool_call","id":"c3"}]}"#;
    let p = parsed(raw);
    assert_eq!(p.reply.stop_reason, StopReason::ToolCall);
    let calls: Vec<(&str, &str, &str)> = p
        .reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.input.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("c1", "echo", r#"{"a":1}"#),
            ("", "ls", "{}"),
            ("c3", "", "{}")
        ]
    );
    assert_eq!(p.reply.text, "let me");
    assert_eq!(decision(&p.reply), ("tool_call", Some("echo".to_string())));
    assert_eq!(stop_reason_name(StopReason::ToolCall), "tool_call");
    assert_eq!(stop_reason_name(StopReason::EndTurn), "end_turn");
}

#[test]
fn tool_call_without_blocks_fails_the_turn() {
    assert_eq!(
        failed(r#"{"stop_reason":"tool_call","content":[{"type":"text","text":"x"}]}"#),
        "response stop_reason=tool_call but no tool_call blocks were present"
    );
    assert_eq!(
        failed(r#"{"stop_reason":"tool_call"}"#),
        "response stop_reason=tool_call but no tool_call blocks were present"
    );
}

#[test]
fn an_error_stop_reason_fails_with_the_driver_s_text_or_a_default() {
    assert_eq!(
        failed(r#"{"stop_reason":"error","error":"rate limited"}"#),
        "rate limited"
    );
    assert_eq!(
        failed(r#"{"stop_reason":"error"}"#),
        "driver returned error"
    );
}

#[test]
fn an_unknown_or_missing_stop_reason_fails_the_turn() {
    assert_eq!(
        failed(r#"{"stop_reason":"pause","content":[]}"#),
        "unsupported stop_reason 'pause'"
    );
    assert_eq!(
        failed(r#"{"content":[]}"#),
        "unsupported stop_reason '' (missing)"
    );
    assert_eq!(
        failed(r#"{"stop_reason":7}"#),
        "unsupported stop_reason '' (missing)"
    );
}

#[test]
fn content_that_is_not_a_list_fails_the_turn() {
    assert_eq!(
        failed(r#"{"stop_reason":"end_turn","content":"hello"}"#),
        "driver response 'content' is not a list"
    );
}

#[test]
fn missing_or_null_content_is_an_empty_reply() {
    for raw in [
        r#"{"stop_reason":"end_turn"}"#,
        r#"{"stop_reason":"end_turn","content":null}"#,
    ] {
        let p = parsed(raw);
        assert_eq!(p.reply.text, "");
        assert_eq!(
            p.reply.assistant_message,
            r#"{"role":"assistant","content":[]}"#
        );
    }
}

#[test]
fn a_reply_that_is_not_json_is_malformed() {
    match parse("not json", REQUEST, 10) {
        Err(InferenceError::Malformed(why)) => assert!(
            why.starts_with("failed to parse driver response: "),
            "{why}"
        ),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("parsed"),
    }
}

#[test]
fn reported_usage_keeps_only_known_numeric_keys_in_their_order() {
    let raw = r#"{"stop_reason":"end_turn","content":[],"usage":{"thinking_tokens":4,"output_tokens":9,"input_tokens":20,"cached_tokens":"many","other_tokens":1,"cache_write_tokens":2}}"#;
    let p = parsed(raw);
    assert_eq!(
        Value::Object(p.reported).to_string(),
        r#"{"input_tokens":20,"output_tokens":9,"cache_write_tokens":2,"thinking_tokens":4}"#
    );
    assert_eq!(p.reply.usage.input_tokens, 20);
    assert_eq!(p.reply.usage.output_tokens, 9);
}

#[test]
fn unreported_usage_is_estimated_at_four_bytes_a_token() {
    let raw = r#"{"stop_reason":"end_turn","content":[],"usage":{"output_tokens":-1}}"#;
    let p = parsed(raw);
    assert!(p.reported.is_empty());
    assert_eq!(p.reply.usage.input_tokens, estimate_tokens(REQUEST));
    assert_eq!(p.reply.usage.output_tokens, estimate_tokens(raw));
    assert_eq!(estimate_tokens(""), 0);
    assert_eq!(estimate_tokens("abcd"), 1);
    assert_eq!(estimate_tokens("abcde"), 2);
}

#[test]
fn tool_calls_past_the_bound_are_cut_and_the_rest_of_the_blocks_kept() {
    let raw = r#"{"stop_reason":"tool_call","content":[{"type":"tool_call","id":"1","name":"a"},{"type":"text","text":"mid"},{"type":"tool_call","id":"2","name":"b"},{"type":"tool_call","id":"3","name":"c"},{"type":"text","text":"end"}]}"#;
    let p = match parse(raw, REQUEST, 2) {
        Ok(p) => p,
        Err(e) => panic!("{e:?}"),
    };
    let ids: Vec<&str> = p.reply.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["1", "2"]);
    assert_eq!(p.reply.text, "mid\nend");
    assert_eq!(
        p.reply.assistant_message,
        r#"{"role":"assistant","content":[{"type":"tool_call","id":"1","name":"a"},{"type":"text","text":"mid"},{"type":"tool_call","id":"2","name":"b"},{"type":"text","text":"end"}]}"#
    );
}
