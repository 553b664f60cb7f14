use super::*;
use crate::bindings::message::Thinking;
use crate::conversation::estimate_tokens;

fn usage(input: Option<u64>, output: Option<u64>) -> Reported {
    Reported {
        input_tokens: input,
        output_tokens: output,
        cached_tokens: None,
        cache_write_tokens: None,
        thinking_tokens: None,
    }
}

fn response(stop_reason: Stop, content: Vec<Block>) -> Response {
    Response {
        stop_reason,
        content,
        usage: usage(Some(7), Some(3)),
    }
}

fn call(id: &str, name: &str, input: &str) -> Block {
    Block::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input: input.into(),
    })
}

fn parsed(r: Response) -> Parsed {
    match read(r, 50, 10) {
        Ok(parsed) => parsed,
        Err(e) => panic!("did not read: {e:?}"),
    }
}

#[test]
fn end_turn_joins_the_text_blocks_and_keeps_the_assistant_message() {
    let thinking = Block::Thinking(Thinking {
        text: "t".into(),
        signature: Some("s".into()),
    });
    let content = vec![Block::Text("a".into()), thinking, Block::Text("b".into())];
    let p = parsed(response(Stop::EndTurn, content.clone()));
    assert_eq!(p.reply.stop_reason, StopReason::EndTurn);
    assert_eq!(p.reply.text, "a\nb");
    assert!(p.reply.tool_calls.is_empty());
    assert_eq!(p.reply.message.role, Role::Assistant);
    assert_eq!(p.reply.message.content, content);
    assert_eq!(decision(&p.reply), ("end_turn", None));
}

#[test]
fn max_tokens_is_a_text_decision() {
    let p = parsed(response(Stop::MaxTokens, vec![Block::Text("cut".into())]));
    assert_eq!(p.reply.stop_reason, StopReason::MaxTokens);
    assert_eq!(decision(&p.reply), ("text", None));
    assert_eq!(stop_reason_name(p.reply.stop_reason), "max_tokens");
}

#[test]
fn tool_call_blocks_become_calls_and_a_call_without_input_gets_an_empty_object() {
    let content = vec![
        Block::Text("let me".into()),
        call("c1", "echo", r#"{"a":1}"#),
        call("", "ls", ""),
    ];
    let p = parsed(response(Stop::ToolCall, content));
    let calls: Vec<(&str, &str, &str)> = p
        .reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.input.as_str()))
        .collect();
    assert_eq!(calls, [("c1", "echo", r#"{"a":1}"#), ("", "ls", "{}")]);
    assert_eq!(p.reply.text, "let me");
    assert_eq!(decision(&p.reply), ("tool_call", Some("echo".to_string())));
    assert_eq!(stop_reason_name(StopReason::ToolCall), "tool_call");
    assert_eq!(stop_reason_name(StopReason::EndTurn), "end_turn");
}

#[test]
fn tool_call_without_blocks_fails_the_turn() {
    match read(
        response(Stop::ToolCall, vec![Block::Text("x".into())]),
        1,
        10,
    ) {
        Err(InferenceError::Failed(why)) => assert_eq!(
            why,
            "response stop_reason=tool_call but no tool_call blocks were present"
        ),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("read"),
    }
}

#[test]
fn reported_usage_keeps_what_the_provider_counted_in_the_trace_s_order() {
    let mut r = response(Stop::EndTurn, Vec::new());
    r.usage = Reported {
        input_tokens: Some(20),
        output_tokens: Some(9),
        cached_tokens: None,
        cache_write_tokens: Some(2),
        thinking_tokens: Some(4),
    };
    let p = parsed(r);
    assert_eq!(
        Value::Object(p.reported).to_string(),
        r#"{"input_tokens":20,"output_tokens":9,"cache_write_tokens":2,"thinking_tokens":4}"#
    );
    assert_eq!(
        (p.reply.usage.input_tokens, p.reply.usage.output_tokens),
        (20, 9)
    );
    assert!(p.reply.usage.reported);
}

#[test]
fn unreported_usage_is_estimated_at_four_bytes_a_token() {
    let mut r = response(Stop::EndTurn, vec![Block::Text("abcdefgh".into())]);
    r.usage = usage(None, Some(9));
    let p = parsed(r);
    assert_eq!(
        Value::Object(p.reported).to_string(),
        r#"{"output_tokens":9}"#
    );
    assert_eq!(p.reply.usage.input_tokens, 50);
    assert!(!p.reply.usage.reported);
    // {"role":"assistant","content":[{"type":"text","text":"abcdefgh"}]}: 66 bytes.
    assert_eq!(p.output_estimate, 17);
    assert_eq!(estimate_tokens(""), 0);
    assert_eq!(estimate_tokens("abcd"), 1);
    assert_eq!(estimate_tokens("abcde"), 2);
}

#[test]
fn tool_calls_past_the_bound_are_cut_and_the_rest_of_the_blocks_kept() {
    let content = vec![
        call("1", "a", "{}"),
        Block::Text("mid".into()),
        call("2", "b", "{}"),
        call("3", "c", "{}"),
        Block::Text("end".into()),
    ];
    let p = match read(response(Stop::ToolCall, content), 1, 2) {
        Ok(p) => p,
        Err(e) => panic!("{e:?}"),
    };
    let ids: Vec<&str> = p.reply.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["1", "2"]);
    assert_eq!(p.reply.text, "mid\nend");
    assert_eq!(p.reply.message.content.len(), 4);
}
