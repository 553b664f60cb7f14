//! The `config` object the host hands both built-in drivers in their settings.

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

    /// Puts the sampling settings that were given, then `stream`, into a request body:
    /// both APIs name them alike.
    pub fn write_to(&self, body: &mut Map<String, Value>) {
        if let Some(temperature) = self.temperature {
            body.insert("temperature".into(), temperature.into());
        }
        if let Some(top_p) = self.top_p {
            body.insert("top_p".into(), top_p.into());
        }
        body.insert("stream".into(), self.stream.into());
    }
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
    fn only_the_given_settings_are_written_then_stream() {
        let mut body = Map::new();
        let config = Config {
            stream: false,
            temperature: None,
            top_p: Some(0.5),
        };
        config.write_to(&mut body);
        assert_eq!(
            Value::Object(body).to_string(),
            r#"{"top_p":0.5,"stream":false}"#
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
