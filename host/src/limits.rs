//! The per-capsule budget for what guests make the host hold or write:
//! `capabilities.limits.*` beyond memory and deadlines. Each limit names its manifest
//! key in the text a refusal carries, so the model, the client and the trace all say
//! which bound was hit and where to raise it.

/// The keys and their defaults. Every field is a byte or call count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// One `murmur:text/chunks` chunk, counted as the JSON text it becomes on the wire.
    pub max_chunk_bytes: u64,
    /// One tool component's result (`data` and `summary` together).
    pub max_tool_result_bytes: u64,
    /// One driver reply (or a driver's error text).
    pub max_driver_reply_bytes: u64,
    /// `call-tool` calls since the last `infer` returned.
    pub max_tool_calls_per_reply: u64,
    /// `call-tool` calls in one task, every attempt included.
    pub max_tool_calls_per_task: u64,
    /// What the session may write to `trace.jsonl`.
    pub max_trace_bytes: u64,
    /// What the session may add to its workdir: counted as a WASM guest writes,
    /// watched while a shell command runs, and checked before each file the host writes
    /// there.
    pub workdir_bytes: u64,
    /// What the capsule's records may hold besides the trace: threaded conversations,
    /// the A2A task store's journal, the host's logs.
    pub max_records_bytes: u64,
    /// One task's answer, as the session loop hands it to `finish-task`.
    pub max_answer_bytes: u64,
    /// The text of one list of messages a guest hands the host (a seed, a compaction's
    /// replacement, a conversation to keep, an inference request).
    pub max_conversation_bytes: u64,
    /// The messages such a list may hold.
    pub max_conversation_messages: u64,
    /// The blocks (text, thinking, tool calls, tool results) such a list may hold.
    pub max_conversation_blocks: u64,
    /// What `on-inference` hooks' artifacts may take in one task, in bytes.
    pub max_hook_artifact_bytes: u64,
    /// CPU time of each process a shell command starts.
    pub shell_cpu_seconds: u64,
    /// Open files of each process a shell command starts.
    pub shell_open_files: u64,
    /// Processes one shell command may have at once.
    pub shell_processes: u64,
    /// Shell commands running at once, foreground and background together.
    pub shell_concurrency: u64,
}

pub const MIB: u64 = 1024 * 1024;

impl Default for Limits {
    /// A streamed chunk is a few tokens, so 1 MiB is far above any real one. 4 MiB of
    /// tool output is ~1M tokens, more than any model's window; a driver reply carries
    /// the model's output (at most `max_tokens`) plus its tool calls' inputs, and the
    /// scripted driver's long streamed replies reach 13 MB, hence 16 MiB.
    /// 64 calls per reply is above what providers send in practice; 1024 per task is
    /// 16 such replies. A 256 MiB trace is thousands of ordinary sessions' worth, and a
    /// 1 GiB workdir is the confined shell's quota. A shell command's CPU time matches
    /// the default call deadline; 1024 open files is the usual soft limit; 256 processes
    /// is far above a build's parallel jobs and far below what exhausts a machine; 8
    /// commands at once keeps one reply asking for thousands from starting thousands.
    /// The records get the workdir's gigabyte. An answer is one driver reply's worth; a
    /// conversation twice that, and 10,000 messages (50,000 blocks) is far past any
    /// model's context window, while a million tiny ones would cost the host a gigabyte.
    fn default() -> Self {
        Limits {
            max_chunk_bytes: MIB,
            max_tool_result_bytes: 4 * MIB,
            max_driver_reply_bytes: 16 * MIB,
            max_tool_calls_per_reply: 64,
            max_tool_calls_per_task: 1024,
            max_trace_bytes: 256 * MIB,
            workdir_bytes: 1024 * MIB,
            max_records_bytes: 1024 * MIB,
            max_answer_bytes: 16 * MIB,
            max_conversation_bytes: 32 * MIB,
            max_conversation_messages: 10_000,
            max_conversation_blocks: 50_000,
            max_hook_artifact_bytes: 16 * MIB,
            shell_cpu_seconds: 600,
            shell_open_files: 1024,
            shell_processes: 256,
            shell_concurrency: 8,
        }
    }
}

/// What the host structures of one lifted message and one block take, at most, as
/// wasmtime's hostcall fuel counts them (the size of the Rust value per list element).
const MESSAGE_COST: u64 = 32;
const BLOCK_COST: u64 = 80;

impl Limits {
    /// What one guest call may make the host allocate: the largest answer and
    /// conversation `finish-task` may carry together (or the largest tool result or
    /// driver reply, if larger), with each message's and block's own structure, and a
    /// MiB of room for the rest of the call's arguments.
    pub fn hostcall_bytes(&self) -> u64 {
        let conversation = self
            .max_conversation_bytes
            .saturating_add(self.max_conversation_messages.saturating_mul(MESSAGE_COST))
            .saturating_add(self.max_conversation_blocks.saturating_mul(BLOCK_COST));
        let one_call = self
            .max_answer_bytes
            .saturating_add(conversation)
            .max(self.max_tool_result_bytes)
            .max(self.max_driver_reply_bytes);
        one_call.saturating_add(MIB)
    }
}

/// `<what> of <n> bytes is over capabilities.limits.<key> (<limit>)`.
pub fn over(what: &str, bytes: u64, key: &str, limit: u64) -> String {
    format!("{what} of {bytes} bytes is over capabilities.limits.{key} ({limit})")
}

/// The size `text` takes as a JSON string's contents, as serde_json escapes it: `"` and
/// `\` take two bytes, control characters two (`\n`, `\t`, ...) or six (`\u0001`).
/// Counting this rather than the raw length keeps a flood of control characters from
/// growing sixfold past the limit on its way to the wire.
pub fn json_escaped_len(text: &str) -> u64 {
    // serde_json's own escaper, writing into a counter: no copy, and its fast loop.
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, text) {
        Ok(()) => counter.0.saturating_sub(2),
        Err(_) => counter.0,
    }
}

struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A chunk over `max_chunk_bytes`, or `None`. The raw length is checked first: the
/// escaped size is never smaller, so a huge chunk is refused without a scan.
pub fn chunk_refusal(kind: &str, chunk: &str, limit: u64) -> Option<String> {
    let raw = chunk.len() as u64;
    let size = if raw > limit {
        raw
    } else {
        json_escaped_len(chunk)
    };
    (size > limit).then(|| over(&format!("{kind} chunk"), size, "max_chunk_bytes", limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_length_matches_serde_json() {
        for text in [
            "plain",
            "a\"b\\c",
            "\n\t\r\u{8}\u{c}",
            "\u{1}\u{1f}\u{7f}",
            "é€",
        ] {
            let json = serde_json::Value::String(text.into()).to_string();
            assert_eq!(json_escaped_len(text), json.len() as u64 - 2, "{text:?}");
        }
    }

    #[test]
    fn a_chunk_is_measured_as_it_goes_on_the_wire() {
        assert_eq!(chunk_refusal("text", "abcd", 4), None);
        assert_eq!(
            chunk_refusal("text", "\u{1}", 4).as_deref(),
            Some("text chunk of 6 bytes is over capabilities.limits.max_chunk_bytes (4)")
        );
        assert_eq!(
            chunk_refusal("thinking", "abcde", 4).as_deref(),
            Some("thinking chunk of 5 bytes is over capabilities.limits.max_chunk_bytes (4)")
        );
    }
}
