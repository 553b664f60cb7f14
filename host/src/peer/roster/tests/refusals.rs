//! Every way a roster is refused, each with the exact text a user reads.

use super::*;

#[test]
fn every_shape_fault_is_refused_with_its_exact_text() {
    let name_rule = "a member name matches ^[a-z][a-z0-9-]{0,31}$";
    let base = S1.split("reachability:").next().unwrap();
    let cases: Vec<(String, String)> = vec![
        (
            String::new(),
            "roster.yaml: must be a mapping with `roster_version` and `members`, found an empty \
             block"
                .into(),
        ),
        (
            "- a\n".into(),
            "roster.yaml: must be a mapping with `roster_version` and `members`, found a \
             sequence"
                .into(),
        ),
        (
            format!("{S1}reachabilty: all\n"),
            "roster.yaml: reachabilty: unknown key; the top level accepts only \
             `roster_version`, `members`, `reachability`"
                .into(),
        ),
        (
            format!("zeta: 1\n{S1}alpha: 2\n"),
            "roster.yaml: alpha: unknown key; the top level accepts only `roster_version`, \
             `members`, `reachability`"
                .into(),
        ),
        (
            S1.replace("roster_version: 1\n", ""),
            "roster.yaml: roster_version: is required".into(),
        ),
        (
            S1.replace("roster_version: 1", "roster_version: 2"),
            "roster.yaml: roster_version: must be 1, the only roster format this build reads; \
             found a number"
                .into(),
        ),
        (
            S1.replace("roster_version: 1", "roster_version: '1'"),
            "roster.yaml: roster_version: must be 1, the only roster format this build reads; \
             found a string"
                .into(),
        ),
        (
            "roster_version: 1\n".into(),
            "roster.yaml: members: is required".into(),
        ),
        (
            "roster_version: 1\nmembers: []\n".into(),
            "roster.yaml: members: must list at least one member".into(),
        ),
        (
            "roster_version: 1\nmembers: {a: 1}\n".into(),
            "roster.yaml: members: must be a list, found a mapping".into(),
        ),
        (
            "roster_version: 1\nmembers:\n  - planner\n".into(),
            "roster.yaml: members[0]: must be a mapping, found a string".into(),
        ),
        (
            with_coder_line("sha: abc"),
            "roster.yaml: members[1].sha (member 'coder'): unknown key; `members[1]` accepts \
             only `name`, `path`, `capsule`, `version`, `entry`"
                .into(),
        ),
        (
            S1.replace("name: coder", "name: Coder\n    sha: abc"),
            "roster.yaml: members[1].sha: unknown key; `members[1]` accepts only `name`, \
             `path`, `capsule`, `version`, `entry`"
                .into(),
        ),
        (
            S1.replace("  - name: coder\n    path", "  - path"),
            "roster.yaml: members[1].name: is required".into(),
        ),
        (
            S1.replace("name: coder", "name: 7"),
            "roster.yaml: members[1].name: must be a string, found a number".into(),
        ),
        (
            S1.replace("name: coder", "name: Bad"),
            format!(
                "roster.yaml: members[1].name: 'Bad' must start with a lowercase letter; {name_rule}"
            ),
        ),
        (
            S1.replace("name: coder", "name: ''"),
            format!("roster.yaml: members[1].name: '' must not be empty; {name_rule}"),
        ),
        (
            S1.replace("name: coder", "name: a_b"),
            format!(
                "roster.yaml: members[1].name: 'a_b' may contain only lowercase letters, digits \
                 and '-' (found '_'); {name_rule}"
            ),
        ),
        (
            S1.replace("name: coder", &format!("name: {}", "a".repeat(33))),
            format!(
                "roster.yaml: members[1].name: '{}' must be at most 32 characters; {name_rule}",
                "a".repeat(33)
            ),
        ),
        (
            S1.replace("    path: ./coder\n", ""),
            "roster.yaml: members[1].path (member 'coder'): is required: the folder holding \
             the member's murmur.yaml"
                .into(),
        ),
        (
            with_coder_line("capsule: local/coder"),
            "roster.yaml: members[1].path (member 'coder'): cannot be given with `capsule` or \
             `version`; a member is found by its `path`, or by its `capsule` and `version`"
                .into(),
        ),
        (
            S1.replace("path: ./coder", "path: '  '"),
            "roster.yaml: members[1].path (member 'coder'): must not be blank".into(),
        ),
        (
            S1.replace("path: ./coder", "path: [a]"),
            "roster.yaml: members[1].path (member 'coder'): must be a folder path, found a \
             sequence"
                .into(),
        ),
        (
            S1.replace("path: ./coder", "version: 1.2.0"),
            "roster.yaml: members[1].capsule (member 'coder'): is required".into(),
        ),
        (
            S1.replace("path: ./coder", "capsule: local/coder"),
            "roster.yaml: members[1].version (member 'coder'): is required".into(),
        ),
        (
            S1.replace("path: ./coder", "capsule: 5\n    version: 1.0.0"),
            "roster.yaml: members[1].capsule (member 'coder'): must be a string, found a number"
                .into(),
        ),
        (
            S1.replace("path: ./coder", "capsule: a/b/c\n    version: 1.0.0"),
            "roster.yaml: members[1].capsule (member 'coder'): 'a/b/c' is not a valid artifact \
             name: expected exactly one '/', between the scope and the name"
                .into(),
        ),
        (
            S1.replace("path: ./coder", "capsule: Local/coder\n    version: 1.0.0"),
            "roster.yaml: members[1].capsule (member 'coder'): 'Local/coder' is not a valid \
             artifact name: the scope may contain only lowercase letters, digits and '-' \
             (found 'L')"
                .into(),
        ),
        (
            S1.replace("path: ./coder", "capsule: local/-x\n    version: 1.0.0"),
            "roster.yaml: members[1].capsule (member 'coder'): 'local/-x' is not a valid \
             artifact name: the name must not start or end with '-'"
                .into(),
        ),
        (
            S1.replace("path: ./coder", "capsule: local/coder\n    version: latest"),
            "roster.yaml: members[1].version (member 'coder'): 'latest' is a reserved alias, \
             not an exact version; pin the version the member runs"
                .into(),
        ),
        (
            S1.replace("path: ./coder", "capsule: local/coder\n    version: \"\""),
            "roster.yaml: members[1].version (member 'coder'): must not be blank; a member pins \
             an exact version"
                .into(),
        ),
        (
            S1.replace("path: ./coder", "capsule: local/coder\n    version: {a: 1}"),
            "roster.yaml: members[1].version (member 'coder'): must be a version string, found a \
             mapping"
                .into(),
        ),
        (
            S1.replace("entry: true", "entry: yes"),
            "roster.yaml: members[0].entry (member 'planner'): must be true or false, found a \
             string"
                .into(),
        ),
        (
            format!("{base}reachability: some\n"),
            "roster.yaml: reachability: 'some' is not a reachability; write `all` or a list of \
             rules"
                .into(),
        ),
        (
            format!("{base}reachability: {{from: a}}\n"),
            "roster.yaml: reachability: must be `all` or a list of rules, found a mapping".into(),
        ),
        (
            format!("{base}reachability: [planner]\n"),
            "roster.yaml: reachability[0]: must be a mapping with `from` and `to`, found a string"
                .into(),
        ),
        (
            S1.replace(
                "    to: [coder]\n",
                "    to: [coder]\n    skills: [review]\n",
            ),
            "roster.yaml: reachability[1].skills: unknown key; `reachability[1]` accepts only \
             `from`, `to`"
                .into(),
        ),
        (
            S1.replace("  - from: reviewer\n", "  - other: reviewer\n")
                .replace("    to: [coder]\n    other", "    other"),
            "roster.yaml: reachability[1].other: unknown key; `reachability[1]` accepts only \
             `from`, `to`"
                .into(),
        ),
        (
            S1.replace("  - from: reviewer\n    to: [coder]\n", "  - to: [coder]\n"),
            "roster.yaml: reachability[1].from: is required".into(),
        ),
        (
            S1.replace("from: reviewer", "from: [reviewer]"),
            "roster.yaml: reachability[1].from: must be a member name, found a sequence".into(),
        ),
        (
            S1.replace("    to: [coder]\n", ""),
            "roster.yaml: reachability[1].to: is required".into(),
        ),
        (
            S1.replace("to: [coder]", "to: []"),
            "roster.yaml: reachability[1].to: must name at least one member 'reviewer' may call"
                .into(),
        ),
        (
            S1.replace("to: [coder]", "to: coder"),
            "roster.yaml: reachability[1].to: must be a list of member names, found a string"
                .into(),
        ),
        (
            S1.replace("to: [coder]", "to: [coder, true]"),
            "roster.yaml: reachability[1].to[1]: must be a member name, found a boolean".into(),
        ),
        (
            S1.replace("to: [coder]", "to: [coder, reviewer]"),
            "roster.yaml: reachability[1].to: lists 'reviewer', the rule's own `from`; a member \
             never calls itself"
                .into(),
        ),
    ];
    for (yaml, want) in cases {
        let e = parse_err(&yaml);
        assert_eq!(e.code, "E-ROS-001", "{yaml}");
        assert_eq!(e.message, want, "{yaml}");
        assert!(e.hint.is_some(), "{want}");
    }
}

#[test]
fn shape_faults_with_a_fix_of_their_own_say_so() {
    let e = parse_err(&S1.replace("name: coder", "name: Bad"));
    assert_eq!(e.hint.as_deref(), Some(GENERIC_HINT));

    let e = parse_err(&S1.replace("    path: ./coder\n", ""));
    assert_eq!(e.hint.as_deref(), Some(PATH_HINT));

    let e = parse_err(&with_coder_line("version: 1.0.0"));
    assert_eq!(
        e.hint.as_deref(),
        Some("keep `path` and remove `capsule` and `version`")
    );

    let e = parse_err(&S1.replace("path: ./coder", "capsule: murmur-crew\n    version: 1.0.0"));
    assert_eq!(
        e.message,
        "roster.yaml: members[1].capsule (member 'coder'): 'murmur-crew' is not a full artifact \
         name: an artifact is named <scope>/<name>"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some(
            "name it with its scope: 'murmur/crew' for a Murmur default artifact, \
             '<owner>/murmur-crew' for one published from github.com/<owner>, or \
             'local/murmur-crew' for one installed from a .mur.zip file"
        )
    );

    let e = parse_err(&format!("{S1}members: []\n"));
    assert_eq!(
        e.message,
        "roster.yaml: YAML syntax error at line 15: duplicate key 'members'"
    );

    let members: String = (0..65)
        .map(|i| format!("  - {{name: m{i}, path: m{i}}}\n"))
        .collect();
    let e = parse_err(&format!("roster_version: 1\nmembers:\n{members}"));
    assert_eq!(e.code, "E-ROS-001");
    assert_eq!(
        e.message,
        "roster.yaml: members: lists 65 members; a roster holds at most 64"
    );
}

#[test]
fn yaml_faults_name_the_line() {
    let e = parse_err("roster_version: 1\nmembers: [\n");
    assert_eq!(e.code, "E-ROS-001");
    assert!(
        e.message
            .starts_with("roster.yaml: YAML syntax error at line "),
        "{e}"
    );

    let e = parse_err("roster_version: 1\n  bad: 2\n");
    assert_eq!(
        e.message,
        "roster.yaml: YAML syntax error at line 2: mapping values are not allowed in this \
         context"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some("check the indentation and quoting on that line")
    );

    let e = parse_err(&format!("{S1}---\nroster_version: 1\n"));
    assert!(e.message.ends_with(": more than one YAML document"), "{e}");

    let e = parse_err("roster_version: 1\n? [a]\n: b\n");
    assert!(
        e.message.ends_with("a mapping key must be a plain string"),
        "{e}"
    );

    let e = parse_err("roster_version: 1\nmembers: *nowhere\n");
    assert!(e.message.ends_with("found unknown anchor"), "{e}");
}

#[test]
fn hostile_yaml_ends_in_a_refusal_not_a_crash() {
    for yaml in [
        format!("{}x", "- ".repeat(20_000)),
        format!("members: {}", "[".repeat(20_000)),
        format!("{}x: 1", "{a: ".repeat(5_000)),
    ] {
        let e = parse_err(&yaml);
        assert_eq!(e.code, "E-ROS-001", "{e}");
    }
    let e = parse_err(&format!("{}x\n", "- ".repeat(100)));
    assert!(e.message.ends_with("nested deeper than 64 levels"), "{e}");

    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..8 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let e = parse_err(&bomb);
    assert!(
        e.message
            .contains("aliases expand to more than 10000 nodes"),
        "{e}"
    );
}

#[test]
fn a_missing_unreadable_or_oversized_file_is_refused() {
    let s = Scratch::new();
    let e = Roster::load(&s.0).unwrap_err();
    assert_eq!(e.code, "E-ROS-001");
    let path = s.0.join(ROSTER_FILE);
    assert_eq!(
        e.message,
        format!("roster.yaml not found at {}", path.display())
    );
    assert_eq!(
        e.hint.as_deref(),
        Some("write a roster.yaml there, or pass the folder that holds one")
    );

    s.file(
        ROSTER_FILE,
        &format!("# {}\n", "x".repeat(MAX_ROSTER_BYTES as usize)),
    );
    let e = Roster::load(&s.0).unwrap_err();
    assert_eq!(e.code, "E-ROS-001");
    assert_eq!(
        e.message,
        format!("roster.yaml at {} is larger than 1 MiB", path.display())
    );

    fs::write(&path, b"roster_version: 1\n\xff\n").unwrap();
    let e = Roster::load(&s.0).unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "failed to read roster.yaml at {}: it is not UTF-8 text",
            path.display()
        )
    );
}

#[test]
fn a_roster_at_the_limits_loads() {
    let s = Scratch::new();
    let mut yaml = String::from("roster_version: 1\nmembers:\n");
    for i in 0..MAX_MEMBERS {
        s.capsule(&format!("m{i}"));
        let entry = if i == 0 { ", entry: true" } else { "" };
        yaml.push_str(&format!("  - {{name: m{i}, path: m{i}{entry}}}\n"));
    }
    yaml.push_str("reachability: all\n");
    let roster = s.ok(&yaml);
    assert_eq!(roster.members.len(), MAX_MEMBERS);
    assert_eq!(roster.edges.len(), (MAX_MEMBERS - 1) * (MAX_MEMBERS - 1));
}

#[test]
fn duplicate_names_are_refused_before_anything_else() {
    let s = Scratch::new();
    // Also no entry and an unknown rule name: the duplicate is still what is reported.
    let e = s.err(
        "roster_version: 1\nmembers:\n  - {name: coder, path: a}\n  - {name: coder, path: b}\n\
         reachability:\n  - {from: ghost, to: [coder]}\n",
    );
    assert_eq!(e.code, "E-ROS-003");
    assert_eq!(
        e.message,
        "roster.yaml: member name 'coder' is declared more than once"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some(
            "give each member in roster.yaml its own name and rename one 'coder'; two members \
             may run the same capsule under different names"
        )
    );
}

#[test]
fn exactly_one_entry_member() {
    let s = Scratch::new();
    let e = s.err(&S1.replace("    entry: true\n", ""));
    assert_eq!(e.code, "E-ROS-002");
    assert_eq!(
        e.message,
        "roster.yaml: no member is marked `entry: true`; a roster designates exactly one entry \
         member"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some(
            "mark the member that receives the formation's task with `entry: true` in roster.yaml"
        )
    );

    let e = s.err(&S1.replace("entry: true", "entry: false"));
    assert_eq!(e.code, "E-ROS-002");

    let e = s
        .err(&with_coder_line("entry: true").replace("path: reviewer", "path: r\n    entry: true"));
    assert_eq!(e.code, "E-ROS-002");
    assert_eq!(
        e.message,
        "roster.yaml: members 'planner', 'coder', 'reviewer' are each marked `entry: true`; a \
         roster designates exactly one entry member"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some(
            "keep `entry: true` in roster.yaml on the one member that receives the formation's \
             task, and remove it from the others"
        )
    );
}

#[test]
fn a_rule_naming_no_member_is_refused() {
    let s = Scratch::new();
    let e = s.err(&S1.replace("from: reviewer", "from: tester"));
    assert_eq!(e.code, "E-ROS-004");
    assert_eq!(
        e.message,
        "roster.yaml: the reachability rule from 'tester' names 'tester', which is not a member \
         of this roster"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some("add 'tester' to roster.yaml's members, or correct the name in the reachability rule")
    );

    let e = s.err(&S1.replace("to: [coder]", "to: [coder, ghost]"));
    assert_eq!(e.code, "E-ROS-004");
    assert_eq!(
        e.message,
        "roster.yaml: the reachability rule from 'reviewer' names 'ghost', which is not a member \
         of this roster"
    );
}

#[test]
fn a_rule_calling_the_entry_member_is_refused() {
    let s = Scratch::new();
    let e = s.err(&S1.replace("to: [coder]", "to: [coder, planner]"));
    assert_eq!(e.code, "E-ROS-008");
    assert_eq!(
        e.message,
        "roster.yaml: the reachability rule from 'reviewer' lists the entry member 'planner' in \
         `to`, but the entry member is never called by a peer: it takes the formation's tasks \
         from the launch or from a client at its door"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some(
            "remove 'planner' from that rule's `to` in roster.yaml. For 'reviewer' to report to \
             'planner', write the edge the other way — `- from: planner` with `to: [reviewer]` — \
             so 'planner' hands 'reviewer' its work and 'reviewer''s answer comes back into \
             'planner''s own task; 'reviewer' then needs exports.peer_tasks.accept: true in its \
             murmur.yaml"
        )
    );
}

#[test]
fn a_capsule_and_version_member_cannot_be_admitted_yet() {
    let s = Scratch::with_members();
    let e = s.err(&S1.replace("path: ./coder", "capsule: local/coder\n    version: '1.10'"));
    assert_eq!(e.code, "E-ROS-007");
    assert_eq!(
        e.message,
        "roster.yaml: member 'coder' (local/coder@1.10) cannot be admitted: mur resolves members \
         by path: a registry holds components by name and version, not whole capsules"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some("give the member `path: <folder holding its murmur.yaml>`")
    );
}

#[test]
fn a_member_folder_must_exist_and_hold_a_murmur_yaml() {
    let s = Scratch::new();
    s.capsule("planner");
    s.capsule("reviewer");
    let hint = "set the member's `path` to the folder holding its murmur.yaml, relative to the \
                folder holding roster.yaml or absolute";

    let e = s.err(S1);
    assert_eq!(e.code, "E-ROS-007");
    assert_eq!(
        e.message,
        format!(
            "roster.yaml: member 'coder' (./coder) cannot be admitted: the folder {} does not \
             exist",
            s.0.join("./coder").display()
        )
    );
    assert_eq!(e.hint.as_deref(), Some(hint));

    fs::create_dir_all(s.0.join("coder")).unwrap();
    let e = s.err(S1);
    assert_eq!(e.code, "E-ROS-007");
    assert_eq!(
        e.message,
        format!(
            "roster.yaml: member 'coder' (./coder) cannot be admitted: the folder {} holds no \
             murmur.yaml",
            s.0.join("./coder").display()
        )
    );

    let manifest = s.capsule("coder");
    let e = s.err(&S1.replace("path: ./coder", "path: coder/murmur.yaml"));
    assert_eq!(
        e.message,
        format!(
            "roster.yaml: member 'coder' (coder/murmur.yaml) cannot be admitted: {} is not a \
             folder",
            manifest.display()
        )
    );
    assert_eq!(s.ok(S1).members[1].manifest, manifest);
}

#[test]
fn folders_are_checked_after_every_structural_check_and_in_roster_order() {
    let s = Scratch::new();
    // No folder exists, yet the rule into the entry member is what is refused.
    let e = s.err(&S1.replace("to: [coder]", "to: [planner]"));
    assert_eq!(e.code, "E-ROS-008");
    // A capsule member after a missing folder: the folder, first in roster order, is refused.
    let e = s.err(&S1.replace("path: reviewer", "capsule: local/r\n    version: 1.0.0"));
    assert_eq!(e.code, "E-ROS-007");
    assert!(e.message.contains("member 'planner'"), "{e}");
}

#[test]
fn echoed_text_is_bounded_and_on_one_line() {
    let long = format!("Bad\n{}", "x".repeat(200));
    assert_eq!(show(&long).chars().count(), 82);
    assert!(show(&long).starts_with("Bad\\nxx"));
    assert!(show(&long).ends_with('…'));
}
