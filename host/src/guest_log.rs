//! Where a component's stdout and stderr go: its own log under the host's records
//! (`logs/tool-<name>.log`, `logs/driver.log`, `logs/loop.log`,
//! `logs/hook-<name>.output.log`), never raw onto mur's terminal.
//!
//! A guest's bytes are untrusted: copied raw they could forge a `[murmur]` line, move
//! the cursor or recolour the terminal. So every control character but the line end is
//! escaped (`\u{1b}`, `crate::escape`'s rule), each log is capped, and mur's stderr
//! gets at most a short note per instance naming the log, with a prefix no guest
//! chooses.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use crate::escape;

/// Bytes one log may hold (escaped text); past it the rest of the output is dropped.
pub const LOG_CAP: u64 = 1024 * 1024;
/// How much of a guest's first line the note on mur's stderr shows.
const NOTE_CHARS: usize = 120;
/// Notes one component may cause per session; the next one says the rest is in the log.
const NOTES_PER_LOG: u32 = 3;
/// A line longer than this is written in pieces, so a guest cannot grow a buffer.
const LINE_BUFFER: usize = 64 * 1024;

/// Which component's output this is and where its log is.
#[derive(Clone, Debug)]
pub struct Target {
    /// Shown in brackets before a note: `tool probe`, `driver`, `loop`, `hook audit`.
    pub label: String,
    pub path: PathBuf,
}

impl Target {
    /// `logs/tool-<name>.log`.
    pub fn tool(logs_dir: &Path, name: &str) -> Self {
        Target {
            label: format!("tool {}", escape_str(name)),
            path: logs_dir.join(format!("tool-{}.log", file_part(name))),
        }
    }

    /// `logs/hook-<name>.output.log`, beside the host's `hook-<name>.log` of its faults,
    /// so a hook cannot print lines that pass for the host's.
    pub fn hook(logs_dir: &Path, name: &str) -> Self {
        Target {
            label: format!("hook {}", escape_str(name)),
            path: logs_dir.join(format!("hook-{}.output.log", file_part(name))),
        }
    }

    /// `logs/mcp-<name>.log`: an MCP server's stderr.
    pub fn mcp(logs_dir: &Path, name: &str) -> Self {
        Target {
            label: format!("mcp {}", escape_str(name)),
            path: logs_dir.join(format!("mcp-{}.log", file_part(name))),
        }
    }

    pub fn driver(logs_dir: &Path) -> Self {
        Target {
            label: "driver".into(),
            path: logs_dir.join("driver.log"),
        }
    }

    pub fn session_loop(logs_dir: &Path) -> Self {
        Target {
            label: "loop".into(),
            path: logs_dir.join("loop.log"),
        }
    }

    /// An upstream capsule component's output (its panic message, when it traps).
    pub fn capsule(logs_dir: &Path) -> Self {
        Target {
            label: "capsule".into(),
            path: logs_dir.join("capsule.log"),
        }
    }
}

/// A name as a file name piece: anything but `[A-Za-z0-9._-]` becomes `_`.
pub fn file_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One log file, shared by every instance of its component for the whole session, so
/// the cap and the note budget hold across calls.
struct Sink {
    target: Target,
    file: Option<File>,
    /// Why the file could not be opened, once tried.
    unopenable: Option<String>,
    written: u64,
    capped: bool,
    notes: u32,
}

/// The sinks by log path: one writer per file, however many instances a component has.
fn sinks() -> MutexGuard<'static, HashMap<PathBuf, Arc<Mutex<Sink>>>> {
    static SINKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<Sink>>>>> = OnceLock::new();
    SINKS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn sink_for(target: &Target) -> Arc<Mutex<Sink>> {
    sinks()
        .entry(target.path.clone())
        .or_insert_with(|| {
            Arc::new(Mutex::new(Sink {
                target: target.clone(),
                file: None,
                unopenable: None,
                written: 0,
                capped: false,
                notes: 0,
            }))
        })
        .clone()
}

impl Sink {
    /// Appends whole escaped text; past the cap, one line says the rest was dropped.
    fn append(&mut self, text: &str) {
        if self.capped || text.is_empty() {
            return;
        }
        let written = self.written;
        let Some(file) = self.open() else {
            return;
        };
        let len = text.len() as u64;
        if written + len > LOG_CAP {
            let room = usize::try_from(LOG_CAP - written).unwrap_or(0);
            let cut = floor_char_boundary(text, room);
            let _ = file.write_all(&text.as_bytes()[..cut]);
            let _ = writeln!(
                file,
                "\n[log capped at {LOG_CAP} bytes: the rest of this component's output was dropped]"
            );
            self.written = LOG_CAP;
            self.capped = true;
            return;
        }
        if file.write_all(text.as_bytes()).is_ok() {
            self.written += len;
        }
    }

    fn open(&mut self) -> Option<&mut File> {
        if self.file.is_none() && self.unopenable.is_none() {
            match open_log(&self.target.path) {
                Ok(file) => self.file = Some(file),
                Err(e) => self.unopenable = Some(e.to_string()),
            }
        }
        self.file.as_mut()
    }

    /// The note for mur's stderr about one instance's output, within the budget.
    fn note(&mut self, first_line: &str) -> Option<String> {
        self.notes += 1;
        let label = &self.target.label;
        let path = self.target.path.display();
        if self.notes > NOTES_PER_LOG + 1 {
            return None;
        }
        if self.notes == NOTES_PER_LOG + 1 {
            return Some(format!(
                "[{label}] printed more; further output only in {path}"
            ));
        }
        let kept = match &self.unopenable {
            Some(why) => format!("not kept: {why}"),
            None => format!("full: {path}"),
        };
        Some(format!("[{label}] {first_line} ({kept})"))
    }
}

/// Appends without following a symlink a guest may have put at the log's name.
pub fn open_log(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// What one instance has printed on one of its two streams.
#[derive(Default)]
struct Stream {
    /// Escaped text of the line being written.
    line: String,
    /// The tail of a UTF-8 sequence split across writes.
    partial: Vec<u8>,
}

/// One instance's output: its two streams, and whether its note was given.
struct Instance {
    sink: Arc<Mutex<Sink>>,
    streams: [Stream; 2],
    /// The first non-empty line, escaped and cut, until it is noted.
    first: Option<String>,
    noted: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Instance {
    fn write(&mut self, which: usize, bytes: &[u8]) {
        if lock(&self.sink).capped && self.noted {
            return;
        }
        let stream = &mut self.streams[which];
        let mut input = std::mem::take(&mut stream.partial);
        input.extend_from_slice(bytes);
        let rest = escape_into(&input, &mut stream.line);
        stream.partial = rest.to_vec();
        let mut done = Vec::new();
        while let Some(end) = stream.line.find('\n') {
            let line: String = stream.line.drain(..=end).collect();
            done.push(line);
        }
        if stream.line.len() > LINE_BUFFER {
            done.push(std::mem::take(&mut stream.line));
        }
        for line in done {
            self.remember(&line);
            lock(&self.sink).append(&line);
        }
        self.note_if_ready(false);
    }

    /// Keeps the first non-empty line for the note.
    fn remember(&mut self, line: &str) {
        if self.first.is_some() || self.noted {
            return;
        }
        let line = line.trim_end_matches('\n');
        if !line.trim().is_empty() {
            self.first = Some(cut(line, NOTE_CHARS));
        }
    }

    fn note_if_ready(&mut self, ending: bool) {
        if self.noted {
            return;
        }
        if self.first.is_none() && ending {
            let pending = self
                .streams
                .iter()
                .map(|s| s.line.as_str())
                .find(|l| !l.trim().is_empty());
            self.first = pending.map(|l| cut(l, NOTE_CHARS));
        }
        let Some(first) = self.first.take() else {
            return;
        };
        self.noted = true;
        if let Some(note) = lock(&self.sink).note(&first) {
            eprintln!("{note}");
        }
    }

    /// The instance is gone: an unfinished line still reaches the log, ended.
    fn finish(&mut self) {
        self.note_if_ready(true);
        for which in 0..2 {
            let stream = &mut self.streams[which];
            if !stream.partial.is_empty() {
                let partial = std::mem::take(&mut stream.partial);
                escape_invalid(&partial, &mut stream.line);
            }
            if !stream.line.is_empty() {
                let mut line = std::mem::take(&mut stream.line);
                line.push('\n');
                lock(&self.sink).append(&line);
            }
        }
    }
}

/// A note's text: at most `chars` characters, `…` when cut.
fn cut(line: &str, chars: usize) -> String {
    match line.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// A component instance's stdout and stderr, for its WASI context. Dropped with the
/// instance's store, which ends what it printed last.
pub struct Output {
    instance: Arc<Mutex<Instance>>,
}

impl Output {
    pub fn new(target: &Target) -> Self {
        Output {
            instance: Arc::new(Mutex::new(Instance {
                sink: sink_for(target),
                streams: [Stream::default(), Stream::default()],
                first: None,
                noted: false,
            })),
        }
    }

    pub fn stdout(&self) -> GuestStream {
        GuestStream {
            instance: self.instance.clone(),
            which: 0,
        }
    }

    pub fn stderr(&self) -> GuestStream {
        GuestStream {
            instance: self.instance.clone(),
            which: 1,
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        lock(&self.instance).finish();
    }
}

/// One of an instance's streams, as WASI hands it to the guest.
#[derive(Clone)]
pub struct GuestStream {
    instance: Arc<Mutex<Instance>>,
    which: usize,
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        // A guest told it writes to a terminal might emit colour codes; it writes to a log.
        false
    }
}

impl StdoutStream for GuestStream {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for GuestStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        // Escaping and an append to a local file are short; the cap bounds the total.
        lock(&self.instance).write(self.which, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Escapes `bytes` onto `out` and returns an unfinished UTF-8 sequence at their end,
/// which the next write completes.
fn escape_into<'a>(bytes: &'a [u8], out: &mut String) -> &'a [u8] {
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                escape_text(text, out);
                return &[];
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                // `valid_up_to` marks a prefix that is valid UTF-8, so this never defaults.
                escape_text(std::str::from_utf8(valid).unwrap_or_default(), out);
                match e.error_len() {
                    None => return after,
                    Some(len) => {
                        escape_invalid(&after[..len], out);
                        rest = &after[len..];
                    }
                }
            }
        }
    }
}

fn escape_invalid(bytes: &[u8], out: &mut String) {
    for byte in bytes {
        let _ = write!(out, "\\x{byte:02x}");
    }
}

/// Keeps `\n` (a line end) and tabs; everything else `crate::escape` escapes.
fn escape_text(text: &str, out: &mut String) {
    escape::text_into(text, out);
}

/// A whole string escaped, line ends included: for labels built from names.
pub fn escape_str(text: &str) -> String {
    escape::line(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(bytes: &[u8]) -> String {
        let mut out = String::new();
        let rest = escape_into(bytes, &mut out);
        escape_invalid(rest, &mut out);
        out
    }

    #[test]
    fn escapes_ansi_and_carriage_return_but_keeps_line_ends_and_tabs() {
        assert_eq!(
            escaped(b"\x1b[1;32m[murmur]\x1b[0m done\r\n\tnext\n"),
            "\\u{1b}[1;32m[murmur]\\u{1b}[0m done\\u{d}\n\tnext\n"
        );
    }

    #[test]
    fn escapes_del_c1_and_bidi_overrides() {
        assert_eq!(
            escaped("a\u{7f}b\u{9b}c\u{202e}d\u{2066}é".as_bytes()),
            "a\\u{7f}b\\u{9b}c\\u{202e}d\\u{2066}é"
        );
    }

    #[test]
    fn invalid_utf8_becomes_hex_and_a_split_sequence_waits_for_its_end() {
        assert_eq!(escaped(b"x\xffy"), "x\\xffy");
        let mut out = String::new();
        let rest = escape_into("é".as_bytes().split_at(1).0, &mut out);
        assert_eq!((out.as_str(), rest), ("", &[0xc3u8][..]));
        let mut joined = rest.to_vec();
        joined.push(0xa9);
        assert_eq!(escaped(&joined), "é");
    }

    #[test]
    fn labels_escape_line_ends_too() {
        assert_eq!(escape_str("a\nb\x1b"), "a\\u{a}b\\u{1b}");
        assert_eq!(file_part("../x y"), ".._x_y");
    }

    #[test]
    fn notes_are_cut() {
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(cut("abc", 3), "abc");
    }

    fn target(dir: &Path, name: &str) -> Target {
        Target::tool(dir, name)
    }

    #[test]
    fn an_instance_logs_escaped_lines_and_ends_an_unfinished_one() {
        let dir = std::env::temp_dir().join(format!("mur-guest-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = target(&dir, "lines");
        let output = Output::new(&target);
        let err = output.stderr();
        lock(&err.instance).write(1, b"\x1b[31mred\x1b[0m\npart");
        lock(&err.instance).write(1, b"ial \xc3");
        lock(&err.instance).write(1, b"\xa9");
        drop(err);
        drop(output);
        let text = std::fs::read_to_string(&target.path).unwrap();
        assert_eq!(text, "\\u{1b}[31mred\\u{1b}[0m\npartial é\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_flood_stops_at_the_cap_with_one_line_saying_so() {
        let dir = std::env::temp_dir().join(format!("mur-guest-cap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = target(&dir, "flood");
        let output = Output::new(&target);
        let line = vec![b'\x07'; 1023];
        for _ in 0..2048 {
            let mut chunk = line.clone();
            chunk.push(b'\n');
            lock(&output.instance).write(1, &chunk);
        }
        drop(output);
        let text = std::fs::read_to_string(&target.path).unwrap();
        let cap_line =
            "\n[log capped at 1048576 bytes: the rest of this component's output was dropped]\n";
        assert!(text.ends_with(cap_line), "{}", &text[text.len() - 200..]);
        assert_eq!(text.len() as u64, LOG_CAP + cap_line.len() as u64);
        assert_eq!(text.matches("[log capped").count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
