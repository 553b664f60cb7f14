use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A unique directory under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mur-roster-test-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(fs::canonicalize(dir).unwrap())
    }

    fn file(&self, rel: &str, content: &str) -> PathBuf {
        let path = self.0.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
        path
    }

    /// A member folder holding a murmur.yaml.
    fn capsule(&self, rel: &str) -> PathBuf {
        self.file(&format!("{rel}/murmur.yaml"), "name: x\n")
    }

    /// S1's three member folders.
    fn with_members() -> Self {
        let s = Scratch::new();
        for name in ["planner", "coder", "reviewer"] {
            s.capsule(name);
        }
        s
    }

    fn load(&self, yaml: &str) -> Result<Roster, Error> {
        self.file(ROSTER_FILE, yaml);
        Roster::load(&self.0)
    }

    fn ok(&self, yaml: &str) -> Roster {
        match self.load(yaml) {
            Ok(roster) => roster,
            Err(e) => panic!("expected an admitted roster, got:\n{e}"),
        }
    }

    fn err(&self, yaml: &str) -> Error {
        match self.load(yaml) {
            Ok(roster) => panic!("expected a refusal, got {roster:#?}"),
            Err(e) => e,
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const S1: &str = "roster_version: 1
members:
  - name: planner
    path: planner
    entry: true
  - name: coder
    path: ./coder
  - name: reviewer
    path: reviewer
reachability:
  - from: planner
    to: [coder, reviewer]
  - from: reviewer
    to: [coder]
";

/// S1 with `members[1]` (coder) given `extra` as an additional line.
fn with_coder_line(extra: &str) -> String {
    S1.replace(
        "    path: ./coder\n",
        &format!("    path: ./coder\n    {extra}\n"),
    )
}

fn parse(yaml: &str) -> Result<Declared, Error> {
    Cx { file: ROSTER_FILE }.parse(yaml)
}

fn parse_err(yaml: &str) -> Error {
    match parse(yaml) {
        Ok(declared) => panic!("expected a refusal for:\n{yaml}\ngot {declared:#?}"),
        Err(e) => e,
    }
}

fn edges(roster: &Roster) -> Vec<(&str, &str)> {
    let edges = roster.edges.iter();
    edges.map(|e| (e.from.as_str(), e.to.as_str())).collect()
}

const GENERIC_HINT: &str = "correct the key named above in roster.yaml";

#[test]
fn the_documented_roster_loads_from_its_folder_or_its_file() {
    let s = Scratch::with_members();
    let from_dir = s.ok(S1);
    let from_file = Roster::load(&s.0.join(ROSTER_FILE)).unwrap();
    for roster in [from_dir, from_file] {
        assert_eq!(roster.dir, s.0);
        let names: Vec<_> = roster.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["planner", "coder", "reviewer"]);
        assert_eq!(roster.entry, 0);
        assert_eq!(roster.entry().name, "planner");
        assert!(roster.entry().entry);
        assert!(!roster.members[1].entry, "an omitted entry is false");
        assert_eq!(roster.members[1].manifest, s.0.join("coder/murmur.yaml"));
        assert_eq!(roster.member("reviewer"), Some(&roster.members[2]));
        assert_eq!(
            edges(&roster),
            [
                ("planner", "coder"),
                ("planner", "reviewer"),
                ("reviewer", "coder")
            ]
        );
        assert_eq!(roster.callees("planner"), ["coder", "reviewer"]);
        assert_eq!(roster.callees("coder"), Vec::<&str>::new());
        assert_eq!(roster.callees("ghost"), Vec::<&str>::new());
    }
}

#[test]
fn a_relative_roster_path_still_gives_an_absolute_dir() {
    let s = Scratch::with_members();
    s.file(ROSTER_FILE, S1);
    let cwd = std::env::current_dir().unwrap();
    let relative = pathdiff(&s.0.join(ROSTER_FILE), &cwd);
    let roster = Roster::load(&relative).unwrap();
    assert_eq!(roster.dir, s.0);
    assert!(roster.members.iter().all(|m| m.manifest.is_absolute()));
}

/// `target` relative to `base` through `..`, so the test needs no crate.
fn pathdiff(target: &Path, base: &Path) -> PathBuf {
    let mut up = PathBuf::new();
    for _ in base.components().skip(1) {
        up.push("..");
    }
    up.join(target.strip_prefix("/").unwrap())
}

#[test]
fn member_paths_resolve_against_the_roster_folder_or_stand_absolute() {
    let s = Scratch::new();
    s.capsule("crew/lead");
    let outside = Scratch::new();
    let elsewhere = outside.capsule("helper");
    s.capsule("shared/tool");
    let yaml = format!(
        "roster_version: 1\nmembers:\n  - {{name: lead, path: lead, entry: true}}\n  \
         - {{name: helper, path: '{}'}}\n  - {{name: tool, path: ../shared/tool/}}\n",
        outside.0.join("helper").display()
    );
    s.file("crew/roster.yaml", &yaml);
    let roster = Roster::load(&s.0.join("crew")).unwrap();
    assert_eq!(roster.dir, s.0.join("crew"));
    let manifests: Vec<_> = roster.members.iter().map(|m| m.manifest.clone()).collect();
    assert_eq!(
        manifests,
        [
            s.0.join("crew/lead/murmur.yaml"),
            elsewhere,
            s.0.join("shared/tool/murmur.yaml"),
        ]
    );
}

#[test]
fn a_roster_file_under_another_name_is_named_in_refusals() {
    let s = Scratch::new();
    let path = s.file("team.yaml", "roster_version: 2\n");
    let e = Roster::load(&path).unwrap_err();
    assert_eq!(
        e.message,
        "team.yaml: roster_version: must be 1, the only roster format this build reads; found \
         a number"
    );
    assert_eq!(
        e.hint.as_deref(),
        Some("correct the key named above in team.yaml")
    );
}

#[test]
fn reachability_all_pairs_every_member_except_into_the_entry() {
    let s = Scratch::with_members();
    let yaml = "roster_version: 1\nmembers:\n  - {name: coder, path: coder}\n  \
                - {name: planner, path: planner, entry: true}\n  \
                - {name: reviewer, path: reviewer}\nreachability: all\n";
    let roster = s.ok(yaml);
    assert_eq!(roster.entry, 1);
    assert_eq!(
        edges(&roster),
        [
            ("coder", "reviewer"),
            ("planner", "coder"),
            ("planner", "reviewer"),
            ("reviewer", "coder"),
        ]
    );
    assert_eq!(roster.callees("planner"), ["coder", "reviewer"]);
    assert_eq!(roster.callees("reviewer"), ["coder"]);
    // A quoted `all` is the same string.
    let quoted = s.ok(&yaml.replace("reachability: all", "reachability: 'all'"));
    assert_eq!(quoted.edges, roster.edges);
}

#[test]
fn no_reachability_or_an_empty_one_is_a_closed_roster() {
    let s = Scratch::with_members();
    let base = S1.split("reachability:").next().unwrap();
    for tail in [
        "",
        "reachability: []\n",
        "reachability:\n",
        "reachability: ~\n",
    ] {
        let roster = s.ok(&format!("{base}{tail}"));
        assert!(roster.edges.is_empty(), "{tail:?}");
        assert!(roster.callees("planner").is_empty());
    }
}

#[test]
fn rules_collapse_repeats_and_come_out_in_roster_order() {
    let s = Scratch::with_members();
    let rules = "reachability:\n  - {from: reviewer, to: [coder, coder]}\n  \
                 - {from: planner, to: [reviewer, coder, reviewer]}\n  \
                 - {from: planner, to: [coder]}\n";
    let yaml = format!("{}{rules}", S1.split("reachability:").next().unwrap());
    let roster = s.ok(&yaml);
    assert_eq!(
        edges(&roster),
        [
            ("planner", "coder"),
            ("planner", "reviewer"),
            ("reviewer", "coder")
        ]
    );
    assert_eq!(roster.callees("planner"), ["coder", "reviewer"]);
}

#[test]
fn anchors_and_aliases_expand() {
    let s = Scratch::with_members();
    let base = S1.split("reachability:").next().unwrap();
    let rules =
        "reachability:\n  - {from: planner, to: &c [coder]}\n  - {from: reviewer, to: *c}\n";
    let roster = s.ok(&format!("{base}{rules}"));
    assert_eq!(
        edges(&roster),
        [("planner", "coder"), ("reviewer", "coder")]
    );
}

#[test]
fn versions_keep_their_text_and_members_keep_their_source() {
    for (written, read) in [
        ("'1.10'", "1.10"),
        ("1.10", "1.1"),
        ("1.0", "1.0"),
        ("1", "1"),
        ("'1.2.0'", "1.2.0"),
        ("\"2.0\"", "2.0"),
        ("1.2.0-rc.1", "1.2.0-rc.1"),
    ] {
        let yaml = format!(
            "roster_version: 1\nmembers:\n  - name: a\n    capsule: local/a\n    version: {written}\n"
        );
        let declared = parse(&yaml).unwrap();
        assert_eq!(
            declared.0[0].source,
            Source::Capsule {
                capsule: "local/a".to_string(),
                version: read.to_string()
            },
            "{written}"
        );
    }
    let declared = parse(S1).unwrap();
    assert_eq!(declared.0[1].source, Source::Path("./coder".into()));
    assert_eq!(
        declared.1,
        Reachability::Rules(vec![
            Rule {
                from: "planner".into(),
                to: vec!["coder".into(), "reviewer".into()]
            },
            Rule {
                from: "reviewer".into(),
                to: vec!["coder".into()]
            },
        ])
    );
}

// The refusals: every fault of a roster, with its exact text.
mod refusals;
