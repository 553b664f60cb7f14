//! `$MURMUR_HOME/config.yaml`: what the user sets for every capsule they run on this
//! machine, whichever command hosts it:
//!
//! ```yaml
//! spend:
//!   machine_tokens_per_day: 2000000
//! registry: 127.0.0.1:5000/team          # where artifacts without `source:` are found
//! insecure_registries: [registry.lan:5000]  # reached over plain HTTP (loopback always is)
//! registry_scopes:                        # a scoped name `murmur/x` is found at
//!   murmur: 127.0.0.1:5000/upstream       #   <this>/x instead of <registry>/murmur/x
//! ```
//!
//! A key the file does not know is an error, not a warning: a misspelt ceiling that was
//! only warned about would let every capsule spend without one.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::Error;

/// Larger than any real config; reading stops there.
const MAX_BYTES: u64 = 64 * 1024;

const TOP: &[&str] = &[
    "spend",
    "registry",
    "insecure_registries",
    "registry_scopes",
];
const SPEND: &[&str] = &["machine_tokens_per_day"];

/// What the config file sets (all of it optional).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `spend.machine_tokens_per_day`.
    pub machine_tokens_per_day: Option<u64>,
    /// `registry`, `insecure_registries` and `registry_scopes`.
    pub registry: crate::registry::config::Registries,
}

pub fn path(home: &Path) -> PathBuf {
    home.join("config.yaml")
}

/// The config in `home`; no file is an empty config.
pub fn load(home: &Path) -> Result<Config, Error> {
    let path = path(home);
    let Some(text) = read(&path)? else {
        return Ok(Config::default());
    };
    parse(&text, &path)
}

/// The file's text, `None` when there is none.
fn read(path: &Path) -> Result<Option<String>, Error> {
    read_small(path, MAX_BYTES).map_err(|why| {
        Error::new(
            "E-CFG-001",
            format!("could not read {}: {why}", path.display()),
        )
        .hint("make it a readable YAML file, or remove it (no machine-wide settings)")
    })
}

/// A small text file the user keeps, `None` when there is none. It may be a link (a
/// config kept with the user's other dotfiles is), but it must lead to a regular file:
/// a FIFO there neither hangs the open nor the read, and at most `max` bytes are read.
pub(crate) fn read_small(path: &Path, max: u64) -> Result<Option<String>, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.file_type().is_file() {
        return Err("it is not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("it is larger than {} KiB", max / 1024));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "it is not UTF-8 text".into())
}

fn parse(text: &str, path: &Path) -> Result<Config, Error> {
    let shown = path.display();
    let doc = crate::manifest::yaml_to_json(text).map_err(|why| {
        Error::new("E-CFG-001", format!("{shown} is not valid YAML: {why}"))
            .hint("check the indentation and quoting there")
    })?;
    let top = match doc {
        Value::Null => return Ok(Config::default()),
        Value::Object(top) => top,
        _ => {
            return Err(
                Error::new("E-CFG-001", format!("{shown} is not a mapping of settings"))
                    .hint("write it as `spend:` followed by indented `key: value` lines"),
            );
        }
    };
    known(&top, TOP, "", path)?;
    Ok(Config {
        machine_tokens_per_day: spend(&top, path)?,
        registry: crate::registry::config::Registries::read(&top, path)?,
    })
}

/// `spend.machine_tokens_per_day`.
fn spend(top: &serde_json::Map<String, Value>, path: &Path) -> Result<Option<u64>, Error> {
    let spend = match top.get("spend") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(spend)) => spend,
        Some(_) => {
            return Err(bad(
                path,
                "spend",
                "is not a mapping",
                "write `spend:` followed by `  machine_tokens_per_day: N`",
            ));
        }
    };
    known(spend, SPEND, "spend.", path)?;
    let machine_tokens_per_day = match spend.get("machine_tokens_per_day") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            Some(_) => {
                return Err(bad(
                    path,
                    "spend.machine_tokens_per_day",
                    "is 0, which would refuse every inference call",
                    "leave it out for no machine-wide ceiling, or give a positive number",
                ));
            }
            None => {
                return Err(bad(
                    path,
                    "spend.machine_tokens_per_day",
                    &format!("is {v}, not a whole number of tokens"),
                    "give the tokens every capsule of this machine may use per UTC day, \
                     such as 2000000",
                ));
            }
        },
    };
    Ok(machine_tokens_per_day)
}

pub(crate) fn known(
    map: &serde_json::Map<String, Value>,
    keys: &[&str],
    prefix: &str,
    path: &Path,
) -> Result<(), Error> {
    match map.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(key) => Err(bad(
            path,
            &format!("{prefix}{key}"),
            "is not a setting mur knows",
            &format!(
                "the keys here are {}; a misspelt setting is refused rather than ignored",
                keys.iter()
                    .map(|k| format!("{prefix}{k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        None => Ok(()),
    }
}

pub(crate) fn bad(path: &Path, key: &str, why: &str, hint: &str) -> Error {
    Error::new("E-CFG-002", format!("{}: {key} {why}", path.display())).hint(hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Config, Error> {
        parse(text, Path::new("/home/u/.murmur/config.yaml"))
    }

    #[test]
    fn the_machine_ceiling_is_read_and_everything_is_optional() {
        assert_eq!(
            parsed("spend:\n  machine_tokens_per_day: 2000000\n").unwrap(),
            Config {
                machine_tokens_per_day: Some(2_000_000),
                ..Config::default()
            }
        );
        for empty in ["", "# nothing\n", "spend:\n", "spend: {}\n"] {
            assert_eq!(parsed(empty).unwrap(), Config::default(), "{empty:?}");
        }
    }

    #[test]
    fn a_wrong_key_or_value_is_an_error_naming_it() {
        let cases = [
            (
                "spend:\n  machine_token_per_day: 5\n",
                "E-CFG-002",
                "/home/u/.murmur/config.yaml: spend.machine_token_per_day is not a setting mur knows",
            ),
            (
                "spned:\n  machine_tokens_per_day: 5\n",
                "E-CFG-002",
                "/home/u/.murmur/config.yaml: spned is not a setting mur knows",
            ),
            (
                "spend:\n  machine_tokens_per_day: 0\n",
                "E-CFG-002",
                "/home/u/.murmur/config.yaml: spend.machine_tokens_per_day is 0, which would \
                 refuse every inference call",
            ),
            (
                "spend:\n  machine_tokens_per_day: lots\n",
                "E-CFG-002",
                "/home/u/.murmur/config.yaml: spend.machine_tokens_per_day is \"lots\", not a \
                 whole number of tokens",
            ),
            (
                "spend:\n  machine_tokens_per_day: -3\n",
                "E-CFG-002",
                "/home/u/.murmur/config.yaml: spend.machine_tokens_per_day is -3, not a whole \
                 number of tokens",
            ),
            (
                "spend: 5\n",
                "E-CFG-002",
                "/home/u/.murmur/config.yaml: spend is not a mapping",
            ),
            (
                "- a list\n",
                "E-CFG-001",
                "/home/u/.murmur/config.yaml is not a mapping of settings",
            ),
        ];
        for (text, code, message) in cases {
            let e = parsed(text).expect_err(text);
            assert_eq!((e.code, e.message.as_str()), (code, message), "{text:?}");
            assert!(e.hint.is_some(), "{text:?}");
        }
        let e = parsed("spend:\n\tmachine_tokens_per_day: 5\n").unwrap_err();
        assert_eq!(e.code, "E-CFG-001");
    }

    #[test]
    fn aliases_cannot_blow_the_config_up() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x]\n");
        for i in 1..30 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(parsed(&text).is_err());
    }

    #[test]
    fn the_file_is_read_within_bounds() {
        let home = std::env::temp_dir().join(format!("mur-config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        assert_eq!(load(&home).unwrap(), Config::default(), "no file");
        let file = std::fs::File::create(path(&home)).unwrap();
        file.set_len(1 << 40).unwrap();
        let e = load(&home).unwrap_err();
        assert_eq!(e.code, "E-CFG-001");
        assert!(e.message.ends_with("it is larger than 64 KiB"), "{e}");
        std::fs::remove_file(path(&home)).unwrap();
        let c = std::ffi::CString::new(path(&home).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = load(&home).unwrap_err();
        assert!(e.message.ends_with("it is not a regular file"), "{e}");
    }
}
