//! Who mur is to a registry: credentials from the environment (`MUR_REGISTRY_USERNAME`
//! and `MUR_REGISTRY_PASSWORD`, for CI), else from the Docker `config.json` that
//! `docker login`, `oras` and `wkg` already write (`$DOCKER_CONFIG`, else `~/.docker`),
//! credential helpers included; and how a registry's challenge is answered.

use base64::Engine as _;

/// What mur presents when a registry asks.
#[derive(Clone)]
pub enum Credential {
    Basic {
        user: String,
        password: String,
    },
    /// A Docker identity token, exchanged for an access token at the realm.
    Identity(String),
}

/// Where a credential came from, for the error that says it was refused.
#[derive(Clone)]
pub struct Found {
    pub credential: Credential,
    pub from: &'static str,
}

pub const USER_VAR: &str = "MUR_REGISTRY_USERNAME";
pub const PASSWORD_VAR: &str = "MUR_REGISTRY_PASSWORD";

/// The credential for `registry` (`host[:port]`), if the user has one.
pub fn find(registry: &str) -> Option<Found> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let (Some(user), Some(password)) = (env(USER_VAR), env(PASSWORD_VAR)) {
        return Some(Found {
            credential: Credential::Basic { user, password },
            from: "MUR_REGISTRY_USERNAME and MUR_REGISTRY_PASSWORD",
        });
    }
    let credential = match docker_credential::get_credential(registry).ok()? {
        docker_credential::DockerCredential::UsernamePassword(user, password) => {
            Credential::Basic { user, password }
        }
        docker_credential::DockerCredential::IdentityToken(token) => Credential::Identity(token),
    };
    Some(Found {
        credential,
        from: "the Docker config.json",
    })
}

impl Credential {
    /// `Authorization: Basic …` for a registry, or a token realm, that takes it.
    pub fn basic(&self) -> Option<String> {
        match self {
            Credential::Basic { user, password } => {
                let pair = format!("{user}:{password}");
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ))
            }
            Credential::Identity(_) => None,
        }
    }
}

/// A `WWW-Authenticate` challenge: its scheme and parameters.
#[derive(Debug, PartialEq, Eq)]
pub struct Challenge {
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl Challenge {
    /// The first challenge of a header: `Scheme k="v", k2=v2`. Registries send one.
    pub fn parse(header: &str) -> Option<Challenge> {
        let header = header.trim();
        let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let mut params = Vec::new();
        let mut rest = rest.trim_start();
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=')?;
            let key = key.trim().to_ascii_lowercase();
            let after = after.trim_start();
            let (value, next) = match after.strip_prefix('"') {
                Some(quoted) => quoted_value(quoted)?,
                None => {
                    let end = after.find(',').unwrap_or(after.len());
                    (after[..end].trim().to_string(), &after[end..])
                }
            };
            params.push((key, value));
            rest = next.trim_start().trim_start_matches(',').trim_start();
        }
        Some(Challenge {
            scheme: scheme.to_ascii_lowercase(),
            params,
        })
    }

    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A quoted value up to its closing quote (a backslash escapes the next character),
/// and what follows it.
fn quoted_value(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => value.push(chars.next()?.1),
            '"' => return Some((value, &text[i + 1..])),
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_is_read_with_its_parameters() {
        let c = Challenge::parse(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.example/token"));
        assert_eq!(c.param("scope"), Some("repository:a/b:pull,push"));
        let c = Challenge::parse(r#"Basic realm="Registry Realm""#).unwrap();
        assert_eq!(
            (c.scheme.as_str(), c.param("realm")),
            ("basic", Some("Registry Realm"))
        );
        assert_eq!(Challenge::parse("Basic").unwrap().params, vec![]);
        assert!(Challenge::parse(r#"Bearer realm="unterminated"#).is_none());
        assert!(Challenge::parse("").is_none());
    }

    #[test]
    fn basic_credentials_are_base64_of_user_and_password() {
        let c = Credential::Basic {
            user: "alice".into(),
            password: "s3cret".into(),
        };
        assert_eq!(c.basic().as_deref(), Some("Basic YWxpY2U6czNjcmV0"));
        assert!(Credential::Identity("t".into()).basic().is_none());
    }
}
