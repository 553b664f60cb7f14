//! The `config` object the host hands both built-in drivers in their settings, and the
//! sampling settings of one call it and the loop's `params` make together.

use crate::types::Params;
use serde_json::{Map, Value};

/// `{"stream": bool, "temperature"?: number, "top_p"?: number}`; other keys belong to
/// the host or to later versions and are ignored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// Ask for the reply as server-sent events and pass its pieces on as they come.
    pub stream: bool,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
}

impl Config {
    /// Parses the settings' `config` string; an empty string means no settings.
    pub fn parse(config: &str) -> Result<Config, String> {
        if config.trim().is_empty() {
            return Ok(Config::default());
        }
        let value: Value = serde_json::from_str(config)
            .map_err(|e| format!("the driver config is not JSON: {e}"))?;
        let Value::Object(map) = value else {
            return Err("the driver config must be a JSON object".into());
        };
        let stream = match map.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err("the driver config's 'stream' must be true or false".into()),
        };
        Ok(Config {
            stream,
            temperature: number(&map, "temperature")?,
            top_p: number(&map, "top_p")?,
        })
    }

    /// The sampling settings of one call: the loop's `params` over this config's, so a
    /// key the loop set replaces the config's and one it left out keeps it.
    pub fn sampling<'a>(&self, params: &'a Params) -> Sampling<'a> {
        Sampling {
            temperature: params.temperature.or(self.temperature),
            top_p: params.top_p.or(self.top_p),
            stop: &params.stop,
        }
    }
}

/// What a request says about sampling; both APIs take these keys, after the tools and
/// before `stream`, and a `None` or empty one is left out of the body.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling<'a> {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Texts that end the answer (OpenAI's `stop`, Anthropic's `stop_sequences`).
    pub stop: &'a [String],
}

fn number(map: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("the driver config's '{key}' must be a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_are_read_and_others_ignored() {
        let config = Config::parse(r#"{"stream":true,"top_p":0.5,"later":1}"#).unwrap();
        assert_eq!(
            config,
            Config {
                stream: true,
                temperature: None,
                top_p: Some(0.5)
            }
        );
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn the_loop_s_params_override_the_config_key_by_key() {
        let config = Config {
            stream: false,
            temperature: Some(0.2),
            top_p: Some(0.5),
        };
        let none = Params {
            temperature: None,
            top_p: None,
            stop: vec![],
        };
        assert_eq!(
            config.sampling(&none),
            Sampling {
                temperature: Some(0.2),
                top_p: Some(0.5),
                stop: &[]
            }
        );
        let params = Params {
            temperature: Some(0.9),
            top_p: None,
            stop: vec!["END".into()],
        };
        assert_eq!(
            config.sampling(&params),
            Sampling {
                temperature: Some(0.9),
                top_p: Some(0.5),
                stop: &["END".to_string()]
            }
        );
    }

    #[test]
    fn wrong_types_are_refused() {
        assert!(
            Config::parse(r#"{"stream":"yes"}"#)
                .unwrap_err()
                .contains("stream")
        );
        assert!(
            Config::parse(r#"{"temperature":"hot"}"#)
                .unwrap_err()
                .contains("temperature")
        );
        assert!(Config::parse("[]").is_err());
    }
}
