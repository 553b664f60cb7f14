//! What one run is planned from and into (the wit `launch-request` and `launch-plan`),
//! and the checks every harness's command line and config need.

use serde_json::{Map, Value};

/// The capsule's tools as an MCP server (the wit `bridge`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bridge {
    pub server_name: String,
    pub url: String,
    pub token_env: String,
    pub tools: Vec<String>,
}

/// Everything one run is planned from (the wit `launch-request`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    pub task: String,
    pub model: String,
    pub endpoint: Option<String>,
    pub system_prompt: Option<String>,
    pub config: String,
    pub resume: Option<String>,
    pub new_session: String,
    pub max_turns: u32,
    pub bridge: Option<Bridge>,
    pub home: String,
    pub workdir: String,
    pub harness_version: Option<String>,
}

/// A file written into the home (the wit `home-file`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct File {
    pub path: String,
    pub contents: String,
}

/// How to run the harness for one task (the wit `launch-plan`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub files: Vec<File>,
    pub stdin: Option<String>,
    pub keep_stdin_open: bool,
}

/// Refuses a `text` with a NUL: the host would fail to start the harness with it, in
/// words that do not say which part of the request it came from.
pub fn refuse_nul(what: &str, text: &str) -> Result<(), String> {
    if text.contains('\0') {
        Err(format!(
            "the {what} holds a NUL character, which no command line can carry"
        ))
    } else {
        Ok(())
    }
}

/// `inference.driver.config`: a JSON object of known keys. Every error names the driver
/// and the key, since the capsule's manifest is where a reader must mend it.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverConfig {
    driver: &'static str,
    map: Map<String, Value>,
}

impl DriverConfig {
    /// Reads `config` for the driver called `driver`, which takes only `keys`. An empty
    /// config is `{}`: the host may hand over a manifest's missing config as nothing.
    pub fn parse(
        driver: &'static str,
        config: &str,
        keys: &[&str],
    ) -> Result<DriverConfig, String> {
        let value: Value = if config.trim().is_empty() {
            Value::Object(Map::new())
        } else {
            crate::event::read_json(config)
                .map_err(|e| format!("the {driver} driver config is not JSON: {e}"))?
        };
        let Value::Object(map) = value else {
            return Err(format!("the {driver} driver config must be a JSON object"));
        };
        if let Some(key) = map.keys().find(|key| !keys.contains(&key.as_str())) {
            return Err(format!(
                "the {driver} driver config has an unknown key '{key}' (it takes {})",
                listed(keys)
            ));
        }
        Ok(DriverConfig { driver, map })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    /// `key`'s whole number, `default` when it is not given.
    pub fn whole_number(&self, key: &str, default: u64) -> Result<u64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(value) => value
                .as_u64()
                .ok_or_else(|| self.invalid(key, "must be a whole number, 0 or more")),
        }
    }

    /// The error for a `key` that is not `what` it should be.
    pub fn invalid(&self, key: &str, what: &str) -> String {
        format!("the {} driver config's '{key}' {what}", self.driver)
    }
}

/// `'a'`, `'a' and 'b'`, `'a', 'b' and 'c'`.
fn listed(keys: &[&str]) -> String {
    let quoted: Vec<String> = keys.iter().map(|key| format!("'{key}'")).collect();
    match quoted.split_last() {
        None => "no keys".into(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nuls_are_refused() {
        assert_eq!(refuse_nul("task", "a b"), Ok(()));
        assert_eq!(
            refuse_nul("task", "a\0b"),
            Err("the task holds a NUL character, which no command line can carry".into())
        );
    }

    #[test]
    fn configs() {
        let keys = ["a", "n"];
        let config = DriverConfig::parse("tester", r#"{"n": 3}"#, &keys).unwrap();
        assert_eq!(config.get("a"), None);
        assert_eq!(config.whole_number("n", 2), Ok(3));
        assert_eq!(config.whole_number("a", 2), Ok(2));
        let empty = DriverConfig::parse("tester", " ", &keys).unwrap();
        assert_eq!(empty, DriverConfig::parse("tester", "{}", &keys).unwrap());
        for bad in [r#"{"n": -1}"#, r#"{"n": "3"}"#, r#"{"n": 1.5}"#] {
            let config = DriverConfig::parse("tester", bad, &keys).unwrap();
            assert_eq!(
                config.whole_number("n", 2),
                Err("the tester driver config's 'n' must be a whole number, 0 or more".into())
            );
        }
        let parse = |text: &str, keys: &[&str]| DriverConfig::parse("tester", text, keys);
        assert_eq!(
            parse("[]", &keys),
            Err("the tester driver config must be a JSON object".into())
        );
        assert!(
            parse("nope", &keys)
                .unwrap_err()
                .starts_with("the tester driver config is not JSON: ")
        );
        assert_eq!(
            parse(r#"{"n": 1, "b": 2, "c": 3}"#, &keys),
            Err("the tester driver config has an unknown key 'b' (it takes 'a' and 'n')".into())
        );
        assert_eq!(
            parse(r#"{"b": 2}"#, &["n"]).unwrap_err(),
            "the tester driver config has an unknown key 'b' (it takes 'n')"
        );
        assert_eq!(
            parse(r#"{"b": 2}"#, &["x", "y", "z"]).unwrap_err(),
            "the tester driver config has an unknown key 'b' (it takes 'x', 'y' and 'z')"
        );
        assert_eq!(
            parse(r#"{"b": 2}"#, &[]).unwrap_err(),
            "the tester driver config has an unknown key 'b' (it takes no keys)"
        );
    }
}
