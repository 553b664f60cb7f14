//! What `mur watch` prints for each frame of the event stream.
//!
//! Every string a frame carries is a capsule's, and a guest's at heart (a reply, a
//! tool's output, a context id a peer chose): what reaches the terminal is escaped by
//! `crate::escape`, a chunk keeping its line ends and any other field kept to its line.

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::Value;

use super::wrap::wrap;
use crate::escape;
use crate::sse::Event;

/// The column a completed task's response is wrapped at.
const WRAP_WIDTH: usize = 78;

/// What the watch does after a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// `capsule-closed`: the stream ended on purpose.
    CapsuleClosed,
    /// The reader closed stdout: nobody is watching any more.
    StdoutClosed,
}

/// Turns frames into what `mur watch` prints: stdout for the capsule's work, stderr
/// for what the watch itself has to say.
pub struct Printer<O: Write, E: Write> {
    out: O,
    err: E,
    threaded: bool,
    /// A text chunk left the cursor mid-line.
    open_line: bool,
    /// The id of the last complete frame that had one.
    last_id: Option<u64>,
    /// Tasks ended so far in each context (threaded mode).
    ended: HashMap<String, u64>,
    /// The context of every task seen with one, for frames that omit it.
    contexts: HashMap<String, String>,
}

impl<O: Write, E: Write> Printer<O, E> {
    pub fn new(out: O, err: E) -> Self {
        Printer {
            out,
            err,
            threaded: false,
            open_line: false,
            last_id: None,
            ended: HashMap::new(),
            contexts: HashMap::new(),
        }
    }

    pub fn last_id(&self) -> Option<u64> {
        self.last_id
    }

    /// Handles one frame. Errors are stdout failures other than a closed pipe.
    pub fn frame(&mut self, event: &Event) -> io::Result<Flow> {
        if let Some(id) = event.id {
            self.last_id = Some(id);
        }
        // Unknown event types and data that is not a JSON object are ignored.
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        let printed = match event.event.as_str() {
            "connection-ack" => {
                self.threaded = data["conversation_mode"] == "threaded";
                Ok(())
            }
            "status" => self.status(&data),
            "artifact" => self.artifact(&data),
            "text" => self.text(&data),
            "gap" => {
                if let Some(first) = data["first_available_id"].as_u64() {
                    self.warn(&format!(
                        "[murmur] warning: buffer overflow — some earlier events were lost (first available id: {first})"
                    ))?;
                }
                Ok(())
            }
            "lagged" => {
                if let Some(missed) = data["missed"].as_u64() {
                    self.warn(&format!(
                        "[murmur] warning: this watch fell behind and missed {missed} frames"
                    ))?;
                }
                Ok(())
            }
            "capsule-closed" => {
                self.warn("[murmur] capsule closed")?;
                return Ok(Flow::CapsuleClosed);
            }
            _ => Ok(()),
        };
        match printed.and_then(|()| self.out.flush()) {
            Ok(()) => Ok(Flow::Continue),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Flow::StdoutClosed),
            Err(e) => Err(e),
        }
    }

    /// Ends a line a text chunk left open, so what follows starts on its own line.
    pub fn end_line(&mut self) -> io::Result<()> {
        if self.open_line {
            self.open_line = false;
            self.out.write_all(b"\n")?;
            self.out.flush()?;
        }
        Ok(())
    }

    /// A line on stderr, after ending any open stdout line so the two do not mix.
    fn warn(&mut self, line: &str) -> io::Result<()> {
        self.end_line()?;
        let _ = writeln!(self.err, "{line}");
        let _ = self.err.flush();
        Ok(())
    }

    fn status(&mut self, data: &Value) -> io::Result<()> {
        let Some(state) = data["status"]["state"].as_str() else {
            return Ok(());
        };
        let shown_state = escape::line(state);
        let task = data["id"].as_str();
        if let (Some(task), Some(context)) = (task, data["context_id"].as_str()) {
            self.contexts.insert(task.to_string(), context.to_string());
        }
        let context = data["context_id"]
            .as_str()
            .or_else(|| task.and_then(|t| self.contexts.get(t)).map(String::as_str))
            .map(str::to_string);
        let label = match (&context, self.threaded) {
            (Some(context), true) => {
                let turn = self.ended.get(context).copied().unwrap_or(0) + 1;
                let context = short_context(context);
                format!("[{} / turn {turn} / {shown_state}]", escape::line(&context))
            }
            _ => format!("[{shown_state}]"),
        };
        let message = data["status"]["message"].as_str();
        self.end_line()?;
        if data["final"] != true {
            match message {
                Some(message) => writeln!(self.out, "{label}  {}", escape::line(message))?,
                None => writeln!(self.out, "{label}")?,
            }
            return Ok(());
        }
        writeln!(self.out, "{label}")?;
        if state == "completed" {
            let response = data["status"]["response"].as_str().unwrap_or_default();
            for line in wrap(response, WRAP_WIDTH) {
                self.indented(&escape::line(&line))?;
            }
            writeln!(self.out)?;
        }
        // A task has ended, and with it a turn of its conversation; the seed's
        // `input-timeout` failure is final but the task goes on.
        let goes_on = state == "failed" && message == Some("input-timeout");
        if let (Some(context), false) = (context, goes_on) {
            *self.ended.entry(context).or_insert(0) += 1;
        }
        Ok(())
    }

    fn artifact(&mut self, data: &Value) -> io::Result<()> {
        let artifact = &data["artifact"];
        let Some(tool) = artifact["tool_name"].as_str() else {
            return Ok(());
        };
        let mut facts = Vec::new();
        if let Some(is_error) = artifact["is_error"].as_bool() {
            facts.push(if is_error { "error" } else { "ok" }.to_string());
        }
        if let Some(code) = artifact["exit_code"].as_i64() {
            facts.push(format!("exit {code}"));
        }
        if let Some(ms) = artifact["duration_ms"].as_u64() {
            facts.push(format!("{ms}ms"));
        }
        if artifact["truncated"] == true {
            facts.push("truncated".to_string());
        }
        let mut line = format!("[artifact] tool: {}", escape::line(tool));
        if !facts.is_empty() {
            line.push_str(&format!(" [{}]", facts.join(", ")));
        }
        let content = artifact["content"].as_str().unwrap_or_default();
        let content = if artifact["fence_source"].is_string() {
            unfence(content)
        } else {
            content
        };
        let mut lines: Vec<&str> = content.lines().collect();
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        self.end_line()?;
        let mut lines = lines.into_iter();
        match lines.next() {
            Some(first) => writeln!(self.out, "{line} | {}", escape::line(first))?,
            None => writeln!(self.out, "{line}")?,
        }
        for rest in lines {
            self.indented(&escape::line(rest))?;
        }
        Ok(())
    }

    /// A continuation line, indented under the label it belongs to; a blank line stays bare.
    fn indented(&mut self, line: &str) -> io::Result<()> {
        if line.is_empty() {
            writeln!(self.out)
        } else {
            writeln!(self.out, "  {line}")
        }
    }

    fn text(&mut self, data: &Value) -> io::Result<()> {
        // A final text frame is the end-of-chunks marker, or the whole reply that
        // the `completed` status prints anyway.
        if data["final"] == true {
            return Ok(());
        }
        let Some(text) = data["text"].as_str() else {
            return Ok(());
        };
        if text.is_empty() {
            return Ok(());
        }
        self.out.write_all(escape::text(text).as_bytes())?;
        self.open_line = !text.ends_with('\n');
        Ok(())
    }
}

/// `ctx_0199c4e2...` for a minted context id; any other id shortened the same way.
fn short_context(context: &str) -> String {
    let (prefix, rest) = match context.strip_prefix("ctx_") {
        Some(rest) => ("ctx_", rest),
        None => ("", context),
    };
    if rest.chars().count() <= 8 {
        return context.to_string();
    }
    let head: String = rest.chars().take(8).collect();
    format!("{prefix}{head}...")
}

/// The body of fenced content, for display; anything else unchanged.
fn unfence(content: &str) -> &str {
    let Some(rest) = content.strip_prefix("<untrusted-content source=") else {
        return content;
    };
    let Some((_, body)) = rest.split_once('\n') else {
        return content;
    };
    if body == "</untrusted-content>" {
        return "";
    }
    body.strip_suffix("\n</untrusted-content>")
        .unwrap_or(content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::FrameReader;

    fn events(wire: &str) -> Vec<Event> {
        FrameReader::default().feed(wire.as_bytes())
    }

    /// Runs frames through a printer: (stdout, stderr, the flow after the last one).
    fn print(wire: &str) -> (String, String, Flow, Option<u64>) {
        let mut printer = Printer::new(Vec::new(), Vec::new());
        let mut flow = Flow::Continue;
        for event in events(wire) {
            flow = printer.frame(&event).unwrap();
            if flow != Flow::Continue {
                break;
            }
        }
        let last = printer.last_id();
        (
            String::from_utf8(printer.out).unwrap(),
            String::from_utf8(printer.err).unwrap(),
            flow,
            last,
        )
    }

    fn status(id: u64, task: &str, ctx: &str, state: &str, message: &str, fin: bool) -> String {
        format!(
            "id: {id}\nevent: status\ndata: {{\"id\":\"{task}\",\"context_id\":\"{ctx}\",\"status\":{{\"state\":\"{state}\",\"message\":\"{message}\"}},\"final\":{fin}}}\n\n"
        )
    }

    fn completed(id: u64, task: &str, ctx: &str, response: &str) -> String {
        let data = serde_json::json!({
            "id": task, "context_id": ctx,
            "status": {"state": "completed", "message": "session ended", "response": response},
            "final": true
        });
        format!("id: {id}\nevent: status\ndata: {data}\n\n")
    }

    #[test]
    fn frames_split_anywhere_still_parse() {
        let wire = "event: connection-ack\ndata: {\"role\":\"observer\"}\n\n:heartbeat\n\nid: 7\nevent: text\ndata: {\"text\":\"hé\"}\n\n";
        let whole = events(wire);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[1].id, Some(7));
        assert_eq!(whole[1].data, "{\"text\":\"hé\"}");
        for split in 0..wire.len() {
            let mut reader = FrameReader::default();
            let mut got = reader.feed(&wire.as_bytes()[..split]);
            got.extend(reader.feed(&wire.as_bytes()[split..]));
            assert_eq!(got, whole, "split at {split}");
        }
        // An incomplete frame is not a frame.
        assert!(events("id: 3\nevent: status\ndata: {}\n").is_empty());
    }

    #[test]
    fn a_stateless_task_prints_as_the_table_says() {
        let mut wire = String::from(
            "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"stateless\"}\n\n",
        );
        wire += &status(0, "tsk_a", "ctx_a", "working", "inference turn 1", false);
        wire += "id: 1\nevent: thinking\ndata: {\"id\":\"tsk_a\",\"text\":\"hidden\",\"final\":false}\n\n";
        wire +=
            "id: 2\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"Let me \",\"final\":false}\n\n";
        wire += ":heartbeat\n\n";
        wire +=
            "id: 3\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"look.\",\"final\":false}\n\n";
        wire += "id: 4\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"\",\"final\":true}\n\n";
        wire += "id: 5\nevent: artifact\ndata: {\"id\":\"tsk_a\",\"artifact\":{\"tool_name\":\"bash\",\"content\":\"<untrusted-content source=tool:bash>\\n$ echo hi\\nExit code: 0\\nStdout:\\nhi\\n\\nStderr:\\n\\n</untrusted-content>\",\"fence_source\":\"tool:bash\",\"tool_call_id\":\"t1\",\"is_error\":false,\"duration_ms\":12,\"exit_code\":0,\"truncated\":false,\"future_key\":1}}\n\n";
        wire += "id: 6\nevent: future-frame\ndata: {\"x\":1}\n\n";
        wire += &status(7, "tsk_a", "ctx_a", "working", "inference turn 2", false);
        wire += "id: 8\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"Done\",\"final\":true}\n\n";
        wire += &completed(9, "tsk_a", "ctx_a", "Done");
        let (out, err, flow, last) = print(&wire);
        assert_eq!(
            out,
            "[working]  inference turn 1\nLet me look.\n[artifact] tool: bash [ok, exit 0, 12ms] | $ echo hi\n  Exit code: 0\n  Stdout:\n  hi\n\n  Stderr:\n[working]  inference turn 2\n[completed]\n  Done\n\n"
        );
        assert_eq!(err, "");
        assert_eq!(flow, Flow::Continue);
        assert_eq!(last, Some(9));
    }

    #[test]
    fn artifact_brackets_show_only_what_is_known() {
        let frame = |a: &str| {
            format!("id: 1\nevent: artifact\ndata: {{\"id\":\"t\",\"artifact\":{a}}}\n\n")
        };
        let (out, ..) = print(&frame(
            "{\"tool_name\":\"no-such-tool\",\"content\":\"tool 'no-such-tool' is not declared in manifest allowlist\",\"fence_source\":null,\"tool_call_id\":\"t3\",\"is_error\":true,\"duration_ms\":0,\"exit_code\":null,\"truncated\":false}",
        ));
        assert_eq!(
            out,
            "[artifact] tool: no-such-tool [error, 0ms] | tool 'no-such-tool' is not declared in manifest allowlist\n"
        );
        let (out, ..) = print(&frame(
            "{\"tool_name\":\"my-hook\",\"content\":\"{\\\"reviewed\\\":true}\",\"fence_source\":null,\"tool_call_id\":null,\"is_error\":false,\"duration_ms\":null,\"exit_code\":null,\"truncated\":false}",
        ));
        assert_eq!(out, "[artifact] tool: my-hook [ok] | {\"reviewed\":true}\n");
        let (out, ..) = print(&frame(
            "{\"tool_name\":\"big\",\"content\":\"<untrusted-content source=tool:big>\\n\\n</untrusted-content>\",\"fence_source\":\"tool:big\",\"is_error\":false,\"duration_ms\":3,\"exit_code\":2,\"truncated\":true}",
        ));
        assert_eq!(out, "[artifact] tool: big [ok, exit 2, 3ms, truncated]\n");
        let (out, ..) = print(&frame("{\"tool_name\":\"bare\",\"content\":\"x\\ny\"}"));
        assert_eq!(out, "[artifact] tool: bare | x\n  y\n");
    }

    #[test]
    fn other_final_states_print_the_label_alone() {
        let mut wire = status(2, "tsk_a", "ctx_a", "failed", "max_turns exceeded", true);
        wire += &status(1, "tsk_b", "ctx_b", "canceled", "task canceled", true);
        let (out, ..) = print(&wire);
        assert_eq!(out, "[failed]\n[canceled]\n");
    }

    #[test]
    fn threaded_labels_count_turns_per_context() {
        let ctx = "ctx_0199c4e2f1b7712a9d3e4f50617283a1";
        let other = "ctx_0aaabbbbccccdddd0000111122223333";
        let mut wire = String::from(
            "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"threaded\"}\n\n",
        );
        wire += &status(0, "tsk_1", ctx, "working", "inference turn 1", false);
        wire += &completed(1, "tsk_1", ctx, "first");
        wire += &status(0, "tsk_2", other, "working", "inference turn 1", false);
        wire += &status(1, "tsk_2", other, "failed", "session ended", true);
        wire += &status(0, "tsk_3", ctx, "working", "inference turn 1", false);
        // The input-wait frames carry no context id: the task's is remembered.
        wire += "id: 9223372036854775807\nevent: status\ndata: {\"id\":\"tsk_3\",\"status\":{\"state\":\"input-required\",\"message\":\"Which file?\"},\"final\":false}\n\n";
        wire += "id: 9223372036854775808\nevent: status\ndata: {\"id\":\"tsk_3\",\"status\":{\"state\":\"failed\",\"message\":\"input-timeout\"},\"final\":true}\n\n";
        wire += &completed(2, "tsk_3", ctx, "second");
        let (out, ..) = print(&wire);
        assert_eq!(
            out,
            "[ctx_0199c4e2... / turn 1 / working]  inference turn 1\n\
             [ctx_0199c4e2... / turn 1 / completed]\n  first\n\n\
             [ctx_0aaabbbb... / turn 1 / working]  inference turn 1\n\
             [ctx_0aaabbbb... / turn 1 / failed]\n\
             [ctx_0199c4e2... / turn 2 / working]  inference turn 1\n\
             [ctx_0199c4e2... / turn 2 / input-required]  Which file?\n\
             [ctx_0199c4e2... / turn 2 / failed]\n\
             [ctx_0199c4e2... / turn 2 / completed]\n  second\n\n"
        );
        assert_eq!(short_context("my-conversation"), "my-conve...");
        assert_eq!(short_context("short"), "short");
    }

    #[test]
    fn gap_and_lagged_warn_on_stderr() {
        let mut wire = String::from("event: gap\ndata: {\"first_available_id\":37}\n\n");
        wire += "id: 40\nevent: text\ndata: {\"id\":\"t\",\"text\":\"abc\",\"final\":false}\n\n";
        wire += "event: lagged\ndata: {\"missed\":5}\n\n";
        wire += &status(41, "t", "c", "working", "inference turn 3", false);
        let (out, err, flow, last) = print(&wire);
        assert_eq!(out, "abc\n[working]  inference turn 3\n");
        assert_eq!(
            err,
            "[murmur] warning: buffer overflow — some earlier events were lost (first available id: 37)\n\
             [murmur] warning: this watch fell behind and missed 5 frames\n"
        );
        assert_eq!(flow, Flow::Continue);
        assert_eq!(last, Some(41));
    }

    #[test]
    fn capsule_closed_ends_the_watch() {
        let mut wire = status(3, "t", "c", "working", "inference turn 1", false);
        wire += "event: capsule-closed\ndata: {}\n\n";
        wire += &status(4, "t", "c", "working", "never printed", false);
        let (out, err, flow, last) = print(&wire);
        assert_eq!(out, "[working]  inference turn 1\n");
        assert_eq!(err, "[murmur] capsule closed\n");
        assert_eq!(flow, Flow::CapsuleClosed);
        assert_eq!(last, Some(3));
    }

    /// Text, a status message, a tool's name and output, a response: each reaches the
    /// terminal escaped, and only a text chunk keeps its line ends.
    #[test]
    fn guest_text_is_escaped_wherever_it_is_printed() {
        let hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[31m[murmur] FORGED\x1b[0m\r\u{9b}31m";
        let frame = |event: &str, data: Value| format!("id: 1\nevent: {event}\ndata: {data}\n\n");
        let mut wire = frame(
            "text",
            serde_json::json!({"id": "t", "text": format!("a\n{hostile}"), "final": false}),
        );
        wire += &frame(
            "status",
            serde_json::json!({"id": "t", "context_id": "c",
                "status": {"state": "working", "message": format!("m\n{hostile}")}, "final": false}),
        );
        wire += &frame(
            "artifact",
            serde_json::json!({"id": "t", "artifact": {"tool_name": hostile, "content": format!("x\n{hostile}")}}),
        );
        wire += &frame(
            "status",
            serde_json::json!({"id": "t", "context_id": "c",
                "status": {"state": "completed", "response": format!("done\n{hostile}")}, "final": true}),
        );
        let (out, err, ..) = print(&wire);
        assert_eq!(err, "");
        let e = "\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{1b}[31m[murmur] FORGED\\u{1b}[0m";
        // Wrapping splits words at the carriage return, which is whitespace.
        assert_eq!(
            out,
            format!(
                "a\n{e}\\u{{d}}\\u{{9b}}31m\n\
                 [working]  m\\u{{a}}{e}\\u{{d}}\\u{{9b}}31m\n\
                 [artifact] tool: {e}\\u{{d}}\\u{{9b}}31m | x\n\
                 \x20 {e}\\u{{d}}\\u{{9b}}31m\n\
                 [completed]\n  done\n  {e} \\u{{9b}}31m\n\n"
            )
        );
        assert!(
            !out.chars()
                .any(|c| c != '\n' && crate::escape::needs_escape(c))
        );
    }

    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_stdout_ends_the_watch_quietly() {
        let mut printer = Printer::new(ClosedPipe, Vec::new());
        let event = &events(&status(0, "t", "c", "working", "inference turn 1", false))[0];
        assert_eq!(printer.frame(event).unwrap(), Flow::StdoutClosed);
    }
}
