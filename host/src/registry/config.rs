//! Which registry an artifact's name is looked up in, and how upstream Murmur's scoped
//! names (`murmur/driver-anthropic`) map to OCI references: documented settings, never
//! a guess.
//!
//! An artifact `name` at `version` is `<registry>/<name>:<version>`, where `<registry>`
//! is the manifest's top-level `registry:` or else `registry` in
//! `$MURMUR_HOME/config.yaml` (`host[:port]/namespace`). A scoped name `scope/bare`
//! whose scope `registry_scopes` names is `<registry_scopes[scope]>/<bare>:<version>`
//! instead.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::reference::Reference;
use crate::error::Error;
use crate::home_config::bad;

/// The machine's registry settings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Registries {
    /// `registry`: `host[:port]/namespace`.
    pub default: Option<String>,
    /// `insecure_registries`: `host[:port]` reached over plain HTTP.
    pub insecure: Vec<String>,
    /// `registry_scopes`: scope → `host[:port]/namespace`.
    pub scopes: BTreeMap<String, String>,
}

impl Registries {
    /// The three keys of the config file's top level.
    pub fn read(top: &serde_json::Map<String, Value>, path: &Path) -> Result<Registries, Error> {
        let default = match top.get("registry") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(checked_prefix(s).map_err(|why| {
                bad(
                    path,
                    "registry",
                    &why,
                    "write it as host[:port]/namespace, e.g. 127.0.0.1:5000/team",
                )
            })?),
            Some(_) => {
                return Err(bad(
                    path,
                    "registry",
                    "is not a string",
                    "write it as host[:port]/namespace, e.g. 127.0.0.1:5000/team",
                ));
            }
        };
        let insecure = match top.get("insecure_registries") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(hosts)) => hosts
                .iter()
                .map(|h| h.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    bad(
                        path,
                        "insecure_registries",
                        "holds something that is not a host",
                        "list hosts as host[:port] strings",
                    )
                })?,
            Some(_) => {
                return Err(bad(
                    path,
                    "insecure_registries",
                    "is not a list",
                    "write insecure_registries: [host:port, ...]",
                ));
            }
        };
        let scopes = match top.get("registry_scopes") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(map)) => {
                let mut scopes = BTreeMap::new();
                for (scope, target) in map {
                    let key = format!("registry_scopes.{scope}");
                    let target = target
                        .as_str()
                        .ok_or_else(|| "is not a string".to_string())
                        .and_then(checked_prefix)
                        .map_err(|why| {
                            bad(path, &key, &why, "write it as host[:port]/namespace")
                        })?;
                    scopes.insert(scope.clone(), target);
                }
                scopes
            }
            Some(_) => {
                return Err(bad(
                    path,
                    "registry_scopes",
                    "is not a mapping",
                    "write registry_scopes: followed by indented `scope: host[:port]/namespace` lines",
                ));
            }
        };
        Ok(Registries {
            default,
            insecure,
            scopes,
        })
    }

    /// The reference of artifact `name` at `version`, under `registry` (the manifest's
    /// own, else the machine's).
    pub fn reference(
        &self,
        registry: Option<&str>,
        name: &str,
        version: &str,
    ) -> Result<Reference, String> {
        let (prefix, repo) = match name.split_once('/') {
            Some((scope, bare)) => match self.scopes.get(scope) {
                Some(target) => (target.as_str(), bare.to_string()),
                None => (
                    registry
                        .or(self.default.as_deref())
                        .ok_or_else(no_registry)?,
                    name.to_string(),
                ),
            },
            None => (
                registry
                    .or(self.default.as_deref())
                    .ok_or_else(no_registry)?,
                name.to_string(),
            ),
        };
        let text = format!("{prefix}/{repo}:{version}");
        Reference::parse(&text).map_err(|e| e.message)
    }
}

fn no_registry() -> String {
    "no registry is named".to_string()
}

/// `host[:port]/namespace` (the namespace may have several parts), as a reference
/// prefix a registry accepts.
pub fn checked_prefix(text: &str) -> Result<String, String> {
    let text = text.trim_end_matches('/');
    match Reference::parse(&format!("{text}/x:1")) {
        Ok(r) if r.digest.is_none() => Ok(text.to_string()),
        _ => Err(format!(
            "'{}' is not host[:port]/namespace",
            crate::escape::cut(&crate::escape::line(text), 100)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<Registries, Error> {
        let doc = crate::manifest::yaml_to_json(yaml).unwrap();
        Registries::read(doc.as_object().unwrap(), Path::new("/h/config.yaml"))
    }

    #[test]
    fn names_map_to_references_through_the_registry_and_its_scopes() {
        let r = read(
            "registry: 127.0.0.1:5000/team\nregistry_scopes:\n  murmur: 127.0.0.1:5000/upstream\n",
        )
        .unwrap();
        let of = |registry, name| r.reference(registry, name, "1.0.0").map(|r| r.to_string());
        assert_eq!(of(None, "echo").unwrap(), "127.0.0.1:5000/team/echo:1.0.0");
        assert_eq!(
            of(None, "murmur/driver-anthropic").unwrap(),
            "127.0.0.1:5000/upstream/driver-anthropic:1.0.0"
        );
        assert_eq!(
            of(None, "acme/tool").unwrap(),
            "127.0.0.1:5000/team/acme/tool:1.0.0"
        );
        assert_eq!(
            of(Some("localhost:6000/mine"), "echo").unwrap(),
            "localhost:6000/mine/echo:1.0.0"
        );
        assert_eq!(
            Registries::default()
                .reference(None, "echo", "1")
                .unwrap_err(),
            "no registry is named"
        );
    }

    #[test]
    fn a_bad_setting_is_named() {
        let e = read("registry: 5000\n").unwrap_err();
        assert_eq!(e.message, "/h/config.yaml: registry is not a string");
        let e = read("registry: \"no host\"\n").unwrap_err();
        assert_eq!(e.code, "E-CFG-002");
        let e = read("registry_scopes:\n  murmur: [x]\n").unwrap_err();
        assert_eq!(
            e.message,
            "/h/config.yaml: registry_scopes.murmur is not a string"
        );
        assert_eq!(
            read("insecure_registries: [a:1]\n").unwrap().insecure,
            ["a:1"]
        );
    }
}
