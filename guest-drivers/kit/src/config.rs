//! The `config` object the host hands both built-in drivers in their settings.

use serde_json::Value;

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
}

fn number(map: &serde_json::Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
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
