//! Loading a whole manifest: the full example, the defaults, files that cannot be read
//! or parsed, and a fuzz run.

use super::testing::*;
use super::*;

#[test]
fn full_example() {
    let s = Scratch::new();
    example_files(&s);
    let loaded = s.ok(EXAMPLE);
    assert_eq!(loaded.warnings, vec![]);
    let m = loaded.manifest;
    assert_eq!(m.path, s.0.join("murmur.yaml"));
    assert_eq!(m.dir, s.0);
    assert_eq!(
        (m.name.as_str(), m.version.as_str()),
        ("notes-agent", "0.3.0")
    );
    assert_eq!(
        m.description.as_deref(),
        Some("Keeps notes on what it reads.")
    );

    let names: Vec<&str> = m.artifacts.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "driver-openai-compat",
            "house-style",
            "memory-seed",
            "result-gate"
        ]
    );
    let driver = &m.artifacts[0];
    assert_eq!(driver.runtime, Runtime::Driver);
    assert_eq!(driver.version.as_deref(), Some("0.1.0"));
    assert_eq!(
        driver.source,
        s.0.join("components/driver-openai-compat.wasm")
    );
    assert_eq!(driver.line, 5);
    let skill = &m.artifacts[1];
    assert_eq!(
        (skill.runtime, skill.version.as_deref()),
        (Runtime::Skill, None)
    );
    assert_eq!(skill.source, s.0.join("skills/house-style"));
    let seed = &m.artifacts[2];
    assert_eq!(seed.runtime, Runtime::Hook);
    let caps = serde_json::json!({"filesystem": {"scope": "memory"}});
    assert_eq!(seed.capabilities, Some(caps));
    assert_eq!(seed.on_overflow, OnOverflow::Drop);
    assert_eq!(m.artifacts[3].on_overflow, OnOverflow::Block);

    let inf = &m.inference;
    assert_eq!(inf.transport, Transport::Http);
    assert_eq!(inf.endpoint.as_deref(), Some("http://127.0.0.1:11434"));
    assert_eq!(inf.model, "qwen2.5-coder");
    assert_eq!(inf.api_key.as_deref(), Some("sk-local"));
    let config = serde_json::json!({"temperature": 0.2});
    let expected = DriverRef::Artifact {
        name: "driver-openai-compat".into(),
        config,
    };
    assert_eq!(inf.driver, expected);
    assert_eq!((inf.max_turns, inf.max_tokens), (12, 4096));
    let prompt = "Keep answers short. Write final notes to notes.md.";
    assert_eq!(inf.system_prompt.as_deref(), Some(prompt));
    assert_eq!(inf.compaction.threshold, 0.9);

    let ctx = &m.context;
    assert_eq!(ctx.max_tokens, Some(128_000));
    assert_eq!((ctx.seed_budget, ctx.seed_overflow_margin), (0.05, 0.2));

    let expected = Lifecycle {
        task_acceptance: TaskAcceptance::Queue,
        after_task: AfterTask::Sleep,
        queue_depth: 4,
        conversation: Conversation::Threaded,
        max_task_reopens: 2,
        shell_grace_secs: 20,
        input_timeout_secs: Some(300),
        parallel_tools: 1,
        task_history: 250,
    };
    assert_eq!(m.lifecycle, expected);

    let rule = NetRule {
        scheme: Some("http".into()),
        host: "127.0.0.1".into(),
        port: Some(11434),
    };
    assert_eq!(m.capabilities.network_allow, vec![rule]);
    assert_eq!(m.capabilities.shell_allow, vec!["bash".to_string()]);
    assert_eq!(m.network.internal_port, Some(52222));
}

#[test]
fn defaults() {
    let s = Scratch::new();
    let m = s.ok(BASE).manifest;
    let inf = &m.inference;
    let driver = DriverRef::Builtin {
        name: "scripted".into(),
        script: Some(s.0.join("s.json")),
    };
    assert_eq!(inf.driver, driver);
    assert_eq!(inf.model, "scripted");
    assert_eq!((inf.max_turns, inf.max_tokens), (10, 8192));
    assert_eq!(inf.transport, Transport::Http);
    assert_eq!((inf.endpoint.clone(), inf.api_key.clone()), (None, None));
    assert_eq!((inf.system_prompt.clone(), inf.temperature), (None, None));
    assert_eq!(inf.compaction, Compaction::default());
    assert_eq!(inf.compaction.threshold, 0.98);
    assert_eq!(m.context, Context::default());
    assert_eq!((m.context.seed_budget, m.context.max_tokens), (0.10, None));
    assert_eq!(m.lifecycle, Lifecycle::default());
    assert_eq!(m.lifecycle.task_acceptance, TaskAcceptance::Single);
    assert_eq!(m.lifecycle.after_task, AfterTask::Exit);
    assert_eq!(
        (m.lifecycle.queue_depth, m.lifecycle.max_task_reopens),
        (1, 1)
    );
    assert_eq!(m.lifecycle.shell_grace_secs, 10);
    assert_eq!(m.lifecycle.task_history, 100);
    assert_eq!(m.description, None);
    assert_eq!(m.capabilities, Capabilities::default());
    assert_eq!(m.capabilities.memory_bytes, 536_870_912);
    assert_eq!(m.capabilities.deadline_seconds, 600);
    assert_eq!(m.network.internal_port, None);
    assert!(!m.trace.include_tool_output);
    assert!(m.artifacts.is_empty());
}

#[test]
fn null_sections_are_defaults_and_versions_keep_their_text() {
    let s = Scratch::new();
    let yaml = "name: t\nversion: 1.10\ninference:\n  driver: scripted\n  script: s.json\n\
                context:\nlifecycle: ~\n";
    let m = s.ok(yaml).manifest;
    assert_eq!(m.version, "1.10");
    assert_eq!(m.lifecycle, Lifecycle::default());
}

#[test]
fn manifest_not_found() {
    let s = Scratch::new();
    let path = s.0.join("nope/murmur.yaml");
    let e = load(&path).unwrap_err();
    let want = format!(
        "error[E-IO-001]: murmur.yaml not found at {}\n  \
         hint: pass --manifest PATH or run mur in the capsule's directory",
        path.display()
    );
    assert_eq!(text(&e), want);
}

#[test]
fn manifest_is_a_directory() {
    let s = Scratch::new();
    let e = load(&s.0).unwrap_err();
    assert_eq!(e.code, "E-IO-003");
}

#[test]
fn not_utf8_rejected_with_line() {
    let s = Scratch::new();
    let path = s.0.join("murmur.yaml");
    std::fs::write(&path, b"name: a\nversion: \xff\n").unwrap();
    let e = load(&path).unwrap_err();
    assert_eq!(e.message, "murmur.yaml:2: not valid UTF-8");
}

#[test]
fn missing_name_at_top_level() {
    let s = Scratch::new();
    let e = s.err("version: \"1\"\n");
    assert_eq!(
        text(&e),
        "error[E-MAN-001]: murmur.yaml: missing required field 'name'"
    );
    let e = s.err("name: x\n");
    assert_eq!(
        text(&e),
        "error[E-MAN-001]: murmur.yaml: missing required field 'version'"
    );
}

#[test]
fn empty_file_is_missing_name() {
    let s = Scratch::new();
    let e = s.err("# nothing yet\n");
    assert_eq!(e.code, "E-MAN-001");
    assert!(e.hint.unwrap().contains("the file is empty"));
}

#[test]
fn top_level_must_be_a_mapping() {
    let s = Scratch::new();
    let e = s.err("- a\n- b\n");
    assert_eq!(
        e.message,
        "murmur.yaml:1: expected a mapping of keys at the top level, found a list"
    );
}

#[test]
fn display_without_hint_is_one_line() {
    let e = Error::new("E-MAN-003", "murmur.yaml:1: x");
    assert_eq!(e.to_string(), "error[E-MAN-003]: murmur.yaml:1: x");
}

/// Odd fragments that reach the parser's and the validator's edges.
#[rustfmt::skip]
const PIECES: &[&str] = &[
    "name: t\n", "version: 1\n", "inference:\n", "  driver: scripted\n", "  script: s.json\n",
    "lifecycle:\n", "  queue_depth: -1\n", "  max_task_reopens: 1e400\n", "\t", "- ", "[",
    "]", "{", "}", ": ", "&a ", "*a ", "? ", "|\n", ">-\n", "\"", "'", "#", "\n", "  ",
    "18446744073709551616", "-9223372036854775809", "0x", "0o7", ".inf", "~", "!!str ",
    "capabilities:\n  network:\n    allow: [\"http://\"]\n", "artifacts:\n  - name: x\n",
    "context:\n  seed_budget: .nan\n", "\u{feff}", "é", "\0", "---\n", "...\n",
];

/// Random bytes, random fragments, and the full example with a few bytes changed.
fn fuzz_input(round: usize, next: &mut impl FnMut() -> usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = Vec::new();
    match round % 3 {
        0 => (0..next() % 64).for_each(|_| bytes.push((next() % 256) as u8)),
        1 => (0..next() % 40).for_each(|_| {
            bytes.extend_from_slice(PIECES[next() % PIECES.len()].as_bytes());
        }),
        _ => {
            bytes = EXAMPLE.as_bytes().to_vec();
            for _ in 0..1 + next() % 4 {
                let at = next() % bytes.len();
                match next() % 3 {
                    0 => bytes[at] = (next() % 128) as u8,
                    1 => drop(bytes.remove(at)),
                    _ => bytes.insert(at, b"-:[{ \t\n#&*'\"0"[next() % 13]),
                }
            }
        }
    }
    bytes
}

#[test]
fn fuzz_never_panics() {
    let s = Scratch::new();
    example_files(&s);
    let path = s.0.join("murmur.yaml");
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        usize::try_from(seed >> 33).unwrap_or(0)
    };
    for round in 0..3000 {
        let bytes = fuzz_input(round, &mut next);
        // In memory: writing thousands of files costs seconds on some file systems.
        let _ = load_bytes(path.clone(), "murmur.yaml".into(), &bytes, &test_env, false);
    }
}

#[test]
fn yaml_to_json_for_scripts() {
    let yaml = "turns:\n  - text: hi\n    n: 2\n    ok: true\n  - {text: '07'}\n";
    let want = serde_json::json!({"turns": [{"text": "hi", "n": 2, "ok": true}, {"text": "07"}]});
    assert_eq!(yaml_to_json(yaml), Ok(want));
    let json = "{\n\t\"turns\": [1, 2.5, null]\n}";
    assert_eq!(
        yaml_to_json(json),
        Ok(serde_json::json!({"turns": [1, 2.5, null]}))
    );
    assert_eq!(yaml_to_json(""), Ok(Json::Null));
    let e = yaml_to_json("a: 1\nb: [1\n").unwrap_err();
    assert_eq!(
        e,
        "line 3: while parsing a flow sequence, expected ',' or ']'"
    );
    let e = yaml_to_json("a:\n  b: .nan\n").unwrap_err();
    assert!(
        e.starts_with("line 2: ") && e.ends_with("JSON has no NaN or infinity"),
        "{e}"
    );
}

/// `inference.max_session_tokens`: no ceiling when left out, a positive number
/// otherwise; 0 would refuse every call and is an error naming the key.
#[test]
fn max_session_tokens_is_a_positive_ceiling_or_none() {
    let s = Scratch::new();
    assert_eq!(s.ok(BASE).manifest.inference.max_session_tokens, None);
    let loaded = s.ok(&base("  max_session_tokens: 250000\n"));
    assert_eq!(loaded.warnings, vec![]);
    assert_eq!(loaded.manifest.inference.max_session_tokens, Some(250_000));
    for (bad, why) in [
        ("0", "must be at least 1, found 0"),
        ("lots", "expected a whole number"),
    ] {
        let e = s.err(&base(&format!("  max_session_tokens: {bad}\n")));
        assert_eq!(e.code, "E-MAN-003", "{e}");
        assert!(
            e.message.contains("inference.max_session_tokens") && e.message.contains(why),
            "{e}"
        );
        assert!(
            e.hint
                .as_deref()
                .is_some_and(|h| h.contains("max_session_tokens caps")),
            "{e}"
        );
    }
}

/// A misspelt section is ignored (a warning), so the error that follows names it: the
/// section is missing, and the hint says where the misspelling is.
#[test]
fn an_error_names_the_misspelt_section_behind_it() {
    let s = Scratch::new();
    let e = s.err("name: t\nversion: \"1\"\ninferenc:\n  driver: scripted\n  script: s.json\n");
    let want = "error[E-RUN-005]: murmur.yaml: driver not configured: 'inference.driver' is not \
                set\n  hint: the manifest has an unknown key 'inferenc' at line 3: did you mean \
                'inference'? Otherwise: set 'inference.driver: {artifact: NAME}' naming an \
                artifacts[] entry with 'runtime: driver', or 'inference.driver: scripted' with \
                'inference.script: PATH'";
    assert_eq!(text(&e), want);
}

/// A misspelt key inside a section: its suggestion is the very key the error misses.
#[test]
fn an_error_names_the_misspelt_key_it_misses() {
    let s = Scratch::new();
    let e = s.err("name: t\nversion: \"1\"\ninference:\n  model: m\n  drivr: openai\n");
    let want = "error[E-RUN-005]: murmur.yaml:3: driver not configured: 'inference.driver' is \
                not set\n  hint: the manifest has an unknown key 'inference.drivr' at line 5: did \
                you mean 'inference.driver'? Otherwise: set 'inference.driver: {artifact: NAME}' \
                naming an artifacts[] entry with 'runtime: driver', or 'inference.driver: \
                scripted' with 'inference.script: PATH'";
    assert_eq!(text(&e), want);
}

/// No suggestion holds what the error names: the top-level misspellings are named (a
/// whole section ignored), a nested one elsewhere is not; without any, the hint stays.
#[test]
fn an_error_otherwise_names_top_level_misspellings() {
    let s = Scratch::new();
    let e = s.err(&base(
        "  max_turns: 0\n  max_tokns: 5\nlifecycel:\n  queue_depth: 2\n",
    ));
    let want = "error[E-MAN-003]: murmur.yaml:6: invalid inference config for \
                'inference.max_turns': must be at least 1, found 0\n  hint: the manifest has an \
                unknown key 'lifecycel' at line 8: did you mean 'lifecycle'? Otherwise: \
                max_turns caps the inference calls of one task; use 1 or more";
    assert_eq!(text(&e), want);
    let e = s.err("name: t\ninferenc: {}\nlifecycel: {}\nobservability: {}\n");
    let want = "error[E-MAN-001]: murmur.yaml: missing required field 'version'\n  hint: the \
                manifest has unknown keys 'inferenc' at line 2 (did you mean 'inference'?), \
                'lifecycel' at line 3 (did you mean 'lifecycle'?)";
    assert_eq!(text(&e), want);
    let e = s.err(&base("  max_turns: 0\n  max_tokns: 5\nobservability: {}\n"));
    let hint = "max_turns caps the inference calls of one task; use 1 or more";
    assert_eq!(e.hint.as_deref(), Some(hint));
}
