//! A formation's `roster.yaml`: its members, the one entry member, and which members may
//! call which. Loading reads the roster and looks at each member's folder; it launches
//! nothing and writes nothing.
//!
//! The format is upstream Murmur 0.8.0's, refusal texts and `E-ROS` codes included, so a
//! roster written for Murmur reads the same here. One extension: a member may name the
//! folder holding its `murmur.yaml` with `path`. Upstream's `capsule` + `version` keep their
//! shape checks, but a registry here holds components, not whole capsules, so admission
//! refuses such a member (E-ROS-007) rather than guessing where it lives.
//!
//! The parse is strict: an unknown key is refused, not warned about as `murmur.yaml` does,
//! because a roster authorizes peer traffic and a misspelt `reachability` must not read as a
//! closed roster. The checks run in upstream's order and the first refusal wins: the file's
//! shape (E-ROS-001), unique names (E-ROS-003), one entry member (E-ROS-002), rules that name
//! members (E-ROS-004), no rule into the entry member (E-ROS-008), and only then each
//! member's folder (E-ROS-007), so a structurally broken roster is refused before the disk is
//! looked at.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Display;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Node};

use crate::error::Error;

/// The roster's file name inside a formation's folder.
pub const ROSTER_FILE: &str = "roster.yaml";
/// A roster is a short list; anything this big is the wrong file or an attack on the parser.
pub const MAX_ROSTER_BYTES: u64 = 1 << 20;
/// Every member is a capsule the host may run side by side, so the formation is bounded.
pub const MAX_MEMBERS: usize = 64;

const MALFORMED: &str = "E-ROS-001";
const ENTRY: &str = "E-ROS-002";
const DUPLICATE: &str = "E-ROS-003";
const UNKNOWN_MEMBER: &str = "E-ROS-004";
const UNRESOLVABLE: &str = "E-ROS-007";
const CALLS_ENTRY: &str = "E-ROS-008";

const MAX_NAME_LEN: usize = 32;
const NAME_PATTERN: &str = "^[a-z][a-z0-9-]{0,31}$";
/// Upstream's limit on each part of a `<scope>/<name>` artifact name.
const MAX_ARTIFACT_PART_LEN: usize = 100;
/// Upstream's version aliases, which move and so cannot pin what a member runs.
const RESERVED_VERSIONS: [&str; 3] = ["latest", "stable", "edge"];
const ALL: &str = "all";

const TOP_KEYS: &[&str] = &["roster_version", "members", "reachability"];
const MEMBER_KEYS: &[&str] = &["name", "path", "capsule", "version", "entry"];
const RULE_KEYS: &[&str] = &["from", "to"];

const PATH_HINT: &str = "give the member `path: <folder holding its murmur.yaml>`";

/// An admitted roster: every check passed and every member's folder holds a `murmur.yaml`.
#[derive(Debug, Clone)]
pub struct Roster {
    /// The folder holding the roster file, absolute; member paths resolve against it.
    pub dir: PathBuf,
    /// In the order the file lists them.
    pub members: Vec<Member>,
    /// Index into `members` of the one `entry: true` member.
    pub entry: usize,
    /// Every edge once, ordered by the roster index of `from`, then of `to`. No edge leads
    /// into the entry member.
    pub edges: Vec<Edge>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// The absolute path of the member's `murmur.yaml`.
    pub manifest: PathBuf,
    pub entry: bool,
}

/// `from` may call `to`; both are member names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
}

impl Roster {
    /// `arg` is a directory holding roster.yaml, or the roster.yaml file itself.
    pub fn load(arg: &Path) -> Result<Roster, Error> {
        let file = if arg.is_dir() {
            arg.join(ROSTER_FILE)
        } else {
            arg.to_path_buf()
        };
        // Messages name the file the user gave, which is roster.yaml unless they chose
        // otherwise.
        let label = file
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or(ROSTER_FILE)
            .to_string();
        let cx = Cx { file: &label };
        let text = cx.read(&file)?;
        let declared = cx.parse(&text)?;
        let absolute = std::path::absolute(&file).unwrap_or(file);
        let parent = absolute.parent().unwrap_or(Path::new("/"));
        // The file was just read, so its folder exists; canonical keeps member paths clean.
        let dir = fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
        cx.admit(declared, dir)
    }

    /// The member that takes the formation's task; no member may call it.
    pub fn entry(&self) -> &Member {
        &self.members[self.entry]
    }

    #[cfg(test)]
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|member| member.name == name)
    }

    /// The members `from` may call, in roster order.
    #[cfg(test)]
    pub fn callees(&self, from: &str) -> Vec<&str> {
        self.edges
            .iter()
            .filter(|edge| edge.from == from)
            .map(|edge| edge.to.as_str())
            .collect()
    }
}

/// The roster as written, its shape checked and nothing across members.
type Declared = (Vec<Declaration>, Reachability);

#[derive(Debug)]
struct Declaration {
    name: String,
    source: Source,
    entry: bool,
}

#[derive(Debug, PartialEq)]
enum Source {
    /// As written; relative to the roster's folder unless absolute.
    Path(String),
    /// Upstream's form. Only a quoted `version` keeps its exact text; see `Cx::version`.
    Capsule { capsule: String, version: String },
}

#[derive(Debug, PartialEq)]
enum Reachability {
    /// No key, `reachability:` with nothing after it, or `[]`: nobody calls anybody.
    Closed,
    All,
    Rules(Vec<Rule>),
}

#[derive(Debug, PartialEq)]
struct Rule {
    from: String,
    to: Vec<String>,
}

/// What every message needs: the name of the file it is about.
struct Cx<'a> {
    file: &'a str,
}

type Fields = Map<String, Node>;

impl Cx<'_> {
    fn read(&self, path: &Path) -> Result<String, Error> {
        let (file, shown) = (self.file, path.display());
        let mut bytes = Vec::new();
        // Read one byte past the limit rather than trust a size that can change under us.
        let read =
            fs::File::open(path).and_then(|f| f.take(MAX_ROSTER_BYTES + 1).read_to_end(&mut bytes));
        match read {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let hint = format!("write a {file} there, or pass the folder that holds one");
                let msg = format!("{file} not found at {shown}");
                return Err(Error::new(MALFORMED, msg).hint(hint));
            }
            Err(e) => {
                let msg = format!("failed to read {file} at {shown}: {e}");
                return Err(Error::new(MALFORMED, msg).hint("check that the file is readable"));
            }
            Ok(_) => {}
        }
        if bytes.len() as u64 > MAX_ROSTER_BYTES {
            let msg = format!("{file} at {shown} is larger than 1 MiB");
            let hint = "a roster lists at most 64 members and fits in a few kilobytes; check \
                        that this is the formation's roster";
            return Err(Error::new(MALFORMED, msg).hint(hint));
        }
        String::from_utf8(bytes).map_err(|_| {
            let msg = format!("failed to read {file} at {shown}: it is not UTF-8 text");
            Error::new(MALFORMED, msg).hint("save the roster as UTF-8")
        })
    }

    /// A shape fault: `roster.yaml: <key path> (member 'x'): <problem>`.
    fn fault(&self, key: &str, member: Option<&str>, problem: impl Display) -> Error {
        let member = member
            .map(|m| format!(" (member '{m}')"))
            .unwrap_or_default();
        let msg = format!("{}: {key}{member}: {problem}", self.file);
        let hint = format!("correct the key named above in {}", self.file);
        Error::new(MALFORMED, msg).hint(hint)
    }

    fn wrong(&self, key: &str, member: Option<&str>, want: &str, node: &Node) -> Error {
        let found = shape(node);
        self.fault(key, member, format_args!("must be {want}, found {found}"))
    }

    /// `fields[key]`, which must be a string; `want` names what kind in the refusal.
    fn string<'n>(
        &self,
        fields: &'n Fields,
        path: &str,
        key: &str,
        member: Option<&str>,
        want: &str,
    ) -> Result<&'n str, Error> {
        let at = format!("{path}.{key}");
        match present(fields, key) {
            None => Err(self.fault(&at, member, "is required")),
            Some(node) => node
                .as_str()
                .ok_or_else(|| self.wrong(&at, member, want, node)),
        }
    }

    fn parse(&self, text: &str) -> Result<Declared, Error> {
        let file = self.file;
        // The manifest's own reader: nesting, aliases and duplicate keys are already bounded
        // there, and its errors read `line N: why`.
        let document = crate::manifest::yaml_to_json(text).map_err(|why| {
            let why = match why.strip_prefix("line ") {
                Some(at) => format!("at line {at}"),
                None => format!(": {why}"),
            };
            let msg = format!("{file}: YAML syntax error {why}");
            Error::new(MALFORMED, msg).hint("check the indentation and quoting on that line")
        })?;
        let Node::Object(top) = &document else {
            let found = shape(&document);
            let msg = format!(
                "{file}: must be a mapping with `roster_version` and `members`, found {found}"
            );
            let hint = "start the file with `roster_version: 1` and a `members:` list";
            return Err(Error::new(MALFORMED, msg).hint(hint));
        };
        self.unknown_keys(top, TOP_KEYS, "", None)?;

        match present(top, "roster_version") {
            None => return Err(self.fault("roster_version", None, "is required")),
            Some(node) if node.as_u64() == Some(1) => {}
            Some(node) => {
                let found = shape(node);
                let problem =
                    format!("must be 1, the only roster format this build reads; found {found}");
                return Err(self.fault("roster_version", None, problem));
            }
        }

        let entries = match present(top, "members") {
            None => return Err(self.fault("members", None, "is required")),
            Some(Node::Array(entries)) if entries.is_empty() => {
                return Err(self.fault("members", None, "must list at least one member"));
            }
            Some(Node::Array(entries)) if entries.len() > MAX_MEMBERS => {
                let count = entries.len();
                let problem =
                    format!("lists {count} members; a roster holds at most {MAX_MEMBERS}");
                let hint = "split the work across formations of at most 64 members each";
                return Err(self.fault("members", None, problem).hint(hint));
            }
            Some(Node::Array(entries)) => entries,
            Some(other) => return Err(self.wrong("members", None, "a list", other)),
        };
        let members = entries
            .iter()
            .enumerate()
            .map(|(i, entry)| self.member(i, entry));
        let members = members.collect::<Result<Vec<_>, _>>()?;

        let reachability = match present(top, "reachability") {
            None => Reachability::Closed,
            Some(Node::String(word)) if word == ALL => Reachability::All,
            Some(Node::String(word)) => {
                let word = show(word);
                let problem =
                    format!("'{word}' is not a reachability; write `{ALL}` or a list of rules");
                return Err(self.fault("reachability", None, problem));
            }
            Some(Node::Array(rules)) if rules.is_empty() => Reachability::Closed,
            Some(Node::Array(rules)) => {
                let rules = rules.iter().enumerate().map(|(i, rule)| self.rule(i, rule));
                Reachability::Rules(rules.collect::<Result<Vec<_>, _>>()?)
            }
            Some(other) => {
                let want = format!("`{ALL}` or a list of rules");
                return Err(self.wrong("reachability", None, &want, other));
            }
        };
        Ok((members, reachability))
    }

    fn member(&self, index: usize, node: &Node) -> Result<Declaration, Error> {
        let path = format!("members[{index}]");
        let at = |key: &str| format!("{path}.{key}");
        let Node::Object(fields) = node else {
            return Err(self.wrong(&path, None, "a mapping", node));
        };
        // Once the member's name is usable, it labels every later fault in its entry.
        let label = present(fields, "name").and_then(Node::as_str);
        let label = label.filter(|name| name_error(name).is_none());
        self.unknown_keys(fields, MEMBER_KEYS, &path, label)?;

        let name = self.string(fields, &path, "name", None, "a string")?;
        if let Some(problem) = name_error(name) {
            let problem = format!(
                "'{}' {problem}; a member name matches {NAME_PATTERN}",
                show(name)
            );
            return Err(self.fault(&at("name"), None, problem));
        }
        let label = Some(name);

        let (dir, capsule) = (present(fields, "path"), present(fields, "capsule"));
        let version = present(fields, "version");
        let source = match (dir, capsule, version) {
            (Some(dir), None, None) => Source::Path(self.folder(&at("path"), label, dir)?),
            (Some(_), _, _) => {
                let problem = "cannot be given with `capsule` or `version`; a member is found \
                               by its `path`, or by its `capsule` and `version`";
                let hint = "keep `path` and remove `capsule` and `version`";
                return Err(self.fault(&at("path"), label, problem).hint(hint));
            }
            (None, None, None) => {
                let problem = "is required: the folder holding the member's murmur.yaml";
                return Err(self.fault(&at("path"), label, problem).hint(PATH_HINT));
            }
            (None, _, version) => Source::Capsule {
                capsule: self.capsule(fields, &path, label)?,
                version: self.version(&at("version"), label, version)?,
            },
        };

        let entry = match present(fields, "entry") {
            None => false,
            Some(Node::Bool(flag)) => *flag,
            Some(other) => return Err(self.wrong(&at("entry"), label, "true or false", other)),
        };
        let name = name.to_string();
        Ok(Declaration {
            name,
            source,
            entry,
        })
    }

    fn folder(&self, key: &str, label: Option<&str>, node: &Node) -> Result<String, Error> {
        // A folder may well be named `2024`: a plain number is a path by its text.
        match node {
            Node::String(text) if text.trim().is_empty() => {
                Err(self.fault(key, label, "must not be blank").hint(PATH_HINT))
            }
            Node::String(text) => Ok(text.clone()),
            Node::Number(number) => Ok(number.to_string()),
            _ => Err(self
                .wrong(key, label, "a folder path", node)
                .hint(PATH_HINT)),
        }
    }

    fn capsule(&self, fields: &Fields, path: &str, label: Option<&str>) -> Result<String, Error> {
        let capsule = self.string(fields, path, "capsule", label, "a string")?;
        let Some((problem, hint)) = artifact_name_error(capsule) else {
            return Ok(capsule.to_string());
        };
        let mut error = self.fault(&format!("{path}.capsule"), label, problem);
        error.hint = hint.or(error.hint);
        Err(error)
    }

    fn version(
        &self,
        key: &str,
        label: Option<&str>,
        node: Option<&Node>,
    ) -> Result<String, Error> {
        let reserved = |v: &str| RESERVED_VERSIONS.iter().any(|r| v.eq_ignore_ascii_case(r));
        match node {
            None => Err(self.fault(key, label, "is required")),
            Some(Node::String(version)) if version.trim().is_empty() => {
                let problem = "must not be blank; a member pins an exact version";
                Err(self.fault(key, label, problem))
            }
            Some(Node::String(version)) if reserved(version) => {
                let problem = format!(
                    "'{}' is a reserved alias, not an exact version; pin the version the member \
                     runs",
                    show(version)
                );
                Err(self.fault(key, label, problem))
            }
            Some(Node::String(version)) => Ok(version.clone()),
            // Upstream takes a number or a boolean as a version by its text. The shared YAML
            // reader has already made an unquoted `1.10` the number 1.1, so that one reads
            // back as `1.1`; quoted, it stays as written.
            Some(Node::Number(number)) => Ok(number.to_string()),
            Some(Node::Bool(flag)) => Ok(flag.to_string()),
            Some(other) => Err(self.wrong(key, label, "a version string", other)),
        }
    }

    fn rule(&self, index: usize, node: &Node) -> Result<Rule, Error> {
        let path = format!("reachability[{index}]");
        let Node::Object(fields) = node else {
            return Err(self.wrong(&path, None, "a mapping with `from` and `to`", node));
        };
        self.unknown_keys(fields, RULE_KEYS, &path, None)?;

        let from = self.string(fields, &path, "from", None, "a member name")?;
        let key = format!("{path}.to");
        let names = match present(fields, "to") {
            None => return Err(self.fault(&key, None, "is required")),
            Some(Node::Array(names)) if names.is_empty() => {
                let problem = format!("must name at least one member '{}' may call", show(from));
                return Err(self.fault(&key, None, problem));
            }
            Some(Node::Array(names)) => names,
            Some(other) => return Err(self.wrong(&key, None, "a list of member names", other)),
        };
        let names = names.iter().enumerate().map(|(position, name)| {
            let key = format!("{key}[{position}]");
            let text = name.as_str().map(str::to_string);
            text.ok_or_else(|| self.wrong(&key, None, "a member name", name))
        });
        let to = names.collect::<Result<Vec<_>, _>>()?;
        if to.iter().any(|name| name == from) {
            let problem = format!(
                "lists '{}', the rule's own `from`; a member never calls itself",
                show(from)
            );
            return Err(self.fault(&key, None, problem));
        }
        let from = from.to_string();
        Ok(Rule { from, to })
    }

    /// Refuses the alphabetically first unknown key, as upstream does, so the same file
    /// always gets the same refusal.
    fn unknown_keys(
        &self,
        fields: &Fields,
        known: &[&str],
        path: &str,
        member: Option<&str>,
    ) -> Result<(), Error> {
        let unknown = fields.iter().map(|(key, _)| key.as_str());
        let Some(first) = unknown.filter(|key| !known.contains(key)).min() else {
            return Ok(());
        };
        let (key, block) = match path {
            "" => (show(first), "the top level".to_string()),
            _ => (format!("{path}.{}", show(first)), format!("`{path}`")),
        };
        let accepted: Vec<String> = known.iter().map(|key| format!("`{key}`")).collect();
        let accepted = accepted.join(", ");
        let problem = format!("unknown key; {block} accepts only {accepted}");
        Err(self.fault(&key, member, problem))
    }

    fn admit(&self, declared: Declared, dir: PathBuf) -> Result<Roster, Error> {
        let file = self.file;
        let (declared, reachability) = declared;

        for (index, member) in declared.iter().enumerate() {
            if declared[..index].iter().any(|m| m.name == member.name) {
                let name = &member.name;
                let msg = format!("{file}: member name '{name}' is declared more than once");
                let hint = format!(
                    "give each member in {file} its own name and rename one '{name}'; two \
                     members may run the same capsule under different names"
                );
                return Err(Error::new(DUPLICATE, msg).hint(hint));
            }
        }

        let claimants: Vec<usize> = (0..declared.len()).filter(|&i| declared[i].entry).collect();
        let entry = match claimants.as_slice() {
            [only] => *only,
            [] => {
                let msg = format!(
                    "{file}: no member is marked `entry: true`; a roster designates exactly one \
                     entry member"
                );
                let hint = format!(
                    "mark the member that receives the formation's task with `entry: true` in \
                     {file}"
                );
                return Err(Error::new(ENTRY, msg).hint(hint));
            }
            several => {
                let names: Vec<String> = several
                    .iter()
                    .map(|&i| format!("'{}'", declared[i].name))
                    .collect();
                let msg = format!(
                    "{file}: members {} are each marked `entry: true`; a roster designates \
                     exactly one entry member",
                    names.join(", ")
                );
                let hint = format!(
                    "keep `entry: true` in {file} on the one member that receives the \
                     formation's task, and remove it from the others"
                );
                return Err(Error::new(ENTRY, msg).hint(hint));
            }
        };

        let index_of: HashMap<&str, usize> = declared
            .iter()
            .enumerate()
            .map(|(index, member)| (member.name.as_str(), index))
            .collect();
        let rules = match &reachability {
            Reachability::Rules(rules) => rules.as_slice(),
            _ => &[],
        };
        for rule in rules {
            let mut named = std::iter::once(&rule.from).chain(&rule.to);
            if let Some(unknown) = named.find(|n| !index_of.contains_key(n.as_str())) {
                let (from, unknown) = (show(&rule.from), show(unknown));
                let msg = format!(
                    "{file}: the reachability rule from '{from}' names '{unknown}', which is not \
                     a member of this roster"
                );
                let hint = format!(
                    "add '{unknown}' to {file}'s members, or correct the name in the \
                     reachability rule"
                );
                return Err(Error::new(UNKNOWN_MEMBER, msg).hint(hint));
            }
        }
        let entry_name = &declared[entry].name;
        if let Some(rule) = rules.iter().find(|rule| rule.to.contains(entry_name)) {
            return Err(calls_entry(file, &rule.from, entry_name));
        }

        let mut members = Vec::with_capacity(declared.len());
        for member in &declared {
            let manifest = self.resolve(member, &dir)?;
            let (name, entry) = (member.name.clone(), member.entry);
            members.push(Member {
                name,
                manifest,
                entry,
            });
        }

        let count = members.len();
        let pairs: BTreeSet<(usize, usize)> = match &reachability {
            Reachability::Closed => BTreeSet::new(),
            Reachability::All => (0..count)
                .flat_map(|from| (0..count).map(move |to| (from, to)))
                .filter(|&(from, to)| from != to && to != entry)
                .collect(),
            // Every name was checked above, so `get` drops nothing.
            Reachability::Rules(rules) => rules
                .iter()
                .flat_map(|rule| rule.to.iter().map(|to| (&rule.from, to)))
                .filter_map(|(from, to)| {
                    Some((*index_of.get(from.as_str())?, *index_of.get(to.as_str())?))
                })
                .collect(),
        };
        let edges = pairs.into_iter().map(|(from, to)| {
            let (from, to) = (members[from].name.clone(), members[to].name.clone());
            Edge { from, to }
        });
        let edges = edges.collect();
        Ok(Roster {
            dir,
            members,
            entry,
            edges,
        })
    }

    /// The absolute path of `member`'s murmur.yaml, or why there is none.
    fn resolve(&self, member: &Declaration, dir: &Path) -> Result<PathBuf, Error> {
        let (file, name) = (self.file, &member.name);
        let written = match &member.source {
            Source::Path(written) => written,
            Source::Capsule { capsule, version } => {
                let msg = format!(
                    "{file}: member '{name}' ({capsule}@{version}) cannot be admitted: mur \
                     resolves members by path: a registry holds components by name and \
                     version, not whole capsules"
                );
                return Err(Error::new(UNRESOLVABLE, msg).hint(PATH_HINT));
            }
        };
        let folder = dir.join(written);
        let shown = folder.display();
        let refuse = |reason: String| {
            let written = show(written);
            let msg = format!("{file}: member '{name}' ({written}) cannot be admitted: {reason}");
            let hint = format!(
                "set the member's `path` to the folder holding its murmur.yaml, relative to the \
                 folder holding {file} or absolute"
            );
            Error::new(UNRESOLVABLE, msg).hint(hint)
        };
        let canonical = fs::canonicalize(&folder).map_err(|e| {
            refuse(if e.kind() == io::ErrorKind::NotFound {
                format!("the folder {shown} does not exist")
            } else {
                format!("the folder {shown} cannot be read: {e}")
            })
        })?;
        if !canonical.is_dir() {
            return Err(refuse(format!("{shown} is not a folder")));
        }
        let manifest = canonical.join("murmur.yaml");
        if !fs::metadata(&manifest).is_ok_and(|meta| meta.is_file()) {
            return Err(refuse(format!("the folder {shown} holds no murmur.yaml")));
        }
        Ok(manifest)
    }
}

fn calls_entry(file: &str, from: &str, entry: &str) -> Error {
    let msg = format!(
        "{file}: the reachability rule from '{from}' lists the entry member '{entry}' in `to`, \
         but the entry member is never called by a peer: it takes the formation's tasks from \
         the launch or from a client at its door"
    );
    let hint = format!(
        "remove '{entry}' from that rule's `to` in {file}. For '{from}' to report to \
         '{entry}', write the edge the other way — `- from: {entry}` with `to: [{from}]` — so \
         '{entry}' hands '{from}' its work and '{from}''s answer comes back into '{entry}''s \
         own task; '{from}' then needs exports.peer_tasks.accept: true in its murmur.yaml"
    );
    Error::new(CALLS_ENTRY, msg).hint(hint)
}

/// Why `name` does not match `^[a-z][a-z0-9-]{0,31}$`, in upstream's words.
fn name_error(name: &str) -> Option<String> {
    if name.starts_with(|c: char| !c.is_ascii_lowercase()) {
        return Some("must start with a lowercase letter".to_string());
    }
    part_error(name, MAX_NAME_LEN, false)
}

/// Why `capsule` is not upstream's `<scope>/<name>`, with the hint when there is one.
fn artifact_name_error(capsule: &str) -> Option<(String, Option<String>)> {
    let shown = show(capsule);
    let malformed = |reason: String| {
        let problem = format!("'{shown}' is not a valid artifact name: {reason}");
        Some((problem, None))
    };
    let Some((scope, name)) = capsule.split_once('/') else {
        if let Some(reason) = part_error(capsule, MAX_ARTIFACT_PART_LEN, true) {
            return malformed(format!("the name {reason}"));
        }
        let problem =
            format!("'{shown}' is not a full artifact name: an artifact is named <scope>/<name>");
        let bare = capsule.strip_prefix("murmur-").unwrap_or(capsule);
        let hint = format!(
            "name it with its scope: 'murmur/{bare}' for a Murmur default artifact, \
             '<owner>/{capsule}' for one published from github.com/<owner>, or \
             'local/{capsule}' for one installed from a .mur.zip file"
        );
        return Some((problem, Some(hint)));
    };
    if name.contains('/') {
        return malformed("expected exactly one '/', between the scope and the name".to_string());
    }
    if let Some(reason) = part_error(scope, MAX_ARTIFACT_PART_LEN, true) {
        return malformed(format!("the scope {reason}"));
    }
    part_error(name, MAX_ARTIFACT_PART_LEN, true)
        .and_then(|reason| malformed(format!("the name {reason}")))
}

/// Upstream's rule for a member name or one part of an artifact name, in its words.
fn part_error(part: &str, max: usize, dash_ends: bool) -> Option<String> {
    let bad = part
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'));
    Some(if part.is_empty() {
        "must not be empty".to_string()
    } else if part.chars().count() > max {
        format!("must be at most {max} characters")
    } else if let Some(c) = bad {
        format!("may contain only lowercase letters, digits and '-' (found {c:?})")
    } else if dash_ends && (part.starts_with('-') || part.ends_with('-')) {
        "must not start or end with '-'".to_string()
    } else {
        return None;
    })
}

/// Echoes user text on one line and at a bounded length.
fn show(text: &str) -> String {
    const MAX: usize = 80;
    let mut out = String::new();
    for c in text.chars().take(MAX) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if text.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}

/// A key whose value is YAML null reads as absent, so `entry:` alone is the default and
/// `name:` alone is missing.
fn present<'n>(fields: &'n Fields, key: &str) -> Option<&'n Node> {
    fields.get(key).filter(|node| !node.is_null())
}

/// In upstream's words, so a refusal reads the same in both.
fn shape(node: &Node) -> &'static str {
    match node {
        Node::Null => "an empty block",
        Node::Bool(_) => "a boolean",
        Node::Number(_) => "a number",
        Node::String(_) => "a string",
        Node::Array(_) => "a sequence",
        Node::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests;
