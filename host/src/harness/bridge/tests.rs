use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn post(bridge: &Bridge, auth: Option<&str>, body: &str) -> (u16, String) {
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", bridge.port()))
        .await
        .expect("connect");
    let auth = auth
        .map(|a| format!("authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{auth}\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    socket.read_to_string(&mut answer).await.expect("read");
    let status = answer[9..12].parse().expect("status");
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn wordcount() -> Offered {
    Offered {
        name: "wordcount".into(),
        description: "Counts words".into(),
        input_schema: r#"{"type":"object","properties":{"text":{"type":"string"}}}"#.into(),
    }
}

#[tokio::test]
async fn only_the_token_gets_in_and_the_tools_are_listed() {
    let bridge = Bridge::start("s3cret".into(), vec![wordcount()])
        .await
        .unwrap();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    assert_eq!(post(&bridge, None, list).await.0, 401);
    assert_eq!(post(&bridge, Some("Bearer s3cre"), list).await.0, 401);
    assert_eq!(post(&bridge, Some("Bearer s3cret!"), list).await.0, 401);
    let (status, body) = post(&bridge, Some("Bearer s3cret"), list).await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"wordcount","description":"Counts words","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}]}}"#
    );
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#;
    let (_, body) = post(&bridge, Some("Bearer s3cret"), init).await;
    assert!(body.contains(r#""protocolVersion":"2025-06-18""#), "{body}");
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(&bridge, Some("Bearer s3cret"), note).await.0, 202);
    let (_, body) = post(&bridge, Some("Bearer s3cret"), "{not json").await;
    assert!(body.contains("-32700"), "{body}");
}

#[tokio::test]
async fn a_call_goes_to_the_attached_run_and_none_is_made_without_one() {
    let bridge = Bridge::start("t".into(), vec![wordcount()]).await.unwrap();
    let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"wordcount","arguments":{"text":"a b"}}}"#;
    let (_, body) = post(&bridge, Some("Bearer t"), call).await;
    assert!(
        body.contains("no task is running") && body.contains(r#""isError":true"#),
        "{body}"
    );
    let mut calls = bridge.attach();
    let answering = tokio::spawn(async move {
        let call = calls.recv().await.expect("a call");
        assert_eq!(
            (call.name.as_str(), call.input.as_str()),
            ("wordcount", r#"{"text":"a b"}"#)
        );
        let _ = call.answer.send(Answer {
            text: "2 words".into(),
            is_error: false,
        });
    });
    let (_, body) = post(&bridge, Some("Bearer t"), call).await;
    answering.await.unwrap();
    assert_eq!(
        body,
        r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"2 words"}],"isError":false}}"#
    );
    let unknown = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"rm"}}"#;
    let (_, body) = post(&bridge, Some("Bearer t"), unknown).await;
    assert!(
        body.contains("-32602") && body.contains("no tool named 'rm'"),
        "{body}"
    );
}
