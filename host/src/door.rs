//! The door of `mur run`'s address: who may call it. A capsule whose manifest declares
//! `network.authentication` mints one operator token at launch; every request to its
//! address then presents it as `Authorization: Bearer`, or is refused with the very
//! `401` `mur serve` answers for its capsules. A capsule that declares none keeps a
//! public door, which `mur run` opens only on loopback unless told `--open-door`.
//!
//! The token goes to one place: the session's registry entry (0600), where `mur token`,
//! `mur watch` and `mur stop` read it. It is never printed by `mur run`, and it is
//! registered as a secret, so no trace line, log or error body can carry it. Only its
//! hash is kept to check requests against, compared in constant time.

use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::a2a::is_card;
use crate::error::Error;
use crate::http1::{Reply, Request};
use crate::token::{self, Hash};

/// The flag that opens a public door on an address other than loopback.
pub const OPEN_DOOR_FLAG: &str = "--open-door";

/// The variable `mur watch` and `mur stop` read a token from when given an address.
pub const TOKEN_ENV: &str = "MURMUR_DOOR_TOKEN";

/// An operator token's text. `Debug` never shows it and there is no `Display`: the text
/// is read only through [`DoorToken::expose`]. It serializes as the bare string, for
/// the registry entry, the one file that holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct DoorToken(String);

impl DoorToken {
    /// A fresh token, hidden from every output of this process from now on.
    pub fn mint() -> DoorToken {
        let text = token::mint();
        crate::secret::set(&text);
        DoorToken(text)
    }

    /// The text, for an `Authorization` header, the registry entry or `mur token`.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DoorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorToken(<redacted>)")
    }
}

impl Serialize for DoorToken {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DoorToken {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(DoorToken)
    }
}

/// Who the address lets in.
pub enum Door {
    /// Anyone who can reach it.
    Public,
    /// Holders of the token with this hash.
    Bearer(Hash),
}

impl Door {
    /// Whether `request` may go on to the capsule. As under `mur serve`, the agent card
    /// (how a client learns that the door wants a token) and the web view's page (which
    /// holds no capsule data and asks for the token itself) need none.
    pub fn admits(&self, request: &Request) -> bool {
        match self {
            Door::Public => true,
            Door::Bearer(hash) => {
                is_card(request)
                    || crate::webview::wants_page(request)
                    || hash.admits(request.header("authorization"))
            }
        }
    }
}

/// The body every refused token gets, whatever was wrong with it.
const UNAUTHORIZED: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Unauthorized"}}"#;

/// The refusal of a request without the token, the same from `mur run` and `mur serve`.
pub fn unauthorized() -> Reply {
    Reply {
        status: "401 Unauthorized",
        content_type: "application/json",
        headers: vec![("www-authenticate", "Bearer".to_string())],
        body: UNAUTHORIZED.as_bytes().to_vec(),
    }
}

/// How the address is exposed, as the launch line tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Posture {
    /// No token, on loopback: only this machine reaches it.
    Local,
    /// No token, bound beyond loopback because `--open-door` said so.
    Open,
    /// The token is asked of every caller.
    Bearer,
}

impl Posture {
    /// The word of the `--json` launch line's `door`.
    pub fn word(self) -> &'static str {
        match self {
            Posture::Local | Posture::Open => "public",
            Posture::Bearer => "bearer",
        }
    }

    /// The human launch line's `door:` line, when there is one (a loopback public door,
    /// the common case, keeps the launch lines as they always were).
    pub fn line(self, bind: IpAddr, port: &str, session_id: &str) -> Option<String> {
        match self {
            Posture::Local => None,
            Posture::Open => Some(format!(
                "door:    open to anyone who can reach {} ({OPEN_DOOR_FLAG}): no token is asked",
                socket(bind, port)
            )),
            Posture::Bearer => Some(format!(
                "door:    bearer token (mur token {session_id} prints it)"
            )),
        }
    }
}

/// The door a run gets, its token, and how it is exposed.
pub struct Planned {
    pub door: Door,
    pub token: Option<DoorToken>,
    pub posture: Posture,
}

/// The door of a capsule that declares `network.authentication` (`authenticated`) or
/// not, bound to `bind`. A public door beyond loopback is refused unless `open_door`.
///
/// # Errors
///
/// `E-RUN-064` for a public door on an address other than loopback, without
/// `--open-door`.
pub fn plan(authenticated: bool, bind: IpAddr, open_door: bool) -> Result<Planned, Error> {
    if authenticated {
        let token = DoorToken::mint();
        return Ok(Planned {
            door: Door::Bearer(Hash::of(token.expose())),
            token: Some(token),
            posture: Posture::Bearer,
        });
    }
    let posture = if is_loopback(bind) {
        Posture::Local
    } else if open_door {
        Posture::Open
    } else {
        return Err(Error::new(
            "E-RUN-064",
            format!(
                "--bind {bind} would open this capsule's door to anyone who can reach that address, and its manifest declares no network.authentication"
            ),
        )
        .hint(format!(
            "declare network.authentication (scheme: bearer) to have the door ask for a token that mur token prints, or pass {OPEN_DOOR_FLAG} to open it anyway"
        )));
    };
    Ok(Planned {
        door: Door::Public,
        token: None,
        posture,
    })
}

/// 127.0.0.0/8 and ::1, also written as an IPv4-mapped IPv6 address.
fn is_loopback(bind: IpAddr) -> bool {
    bind.to_canonical().is_loopback()
}

/// `ADDRESS:PORT`, an IPv6 address in brackets.
fn socket(bind: IpAddr, port: &str) -> String {
    match bind {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: path.into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }

    #[test]
    fn only_loopback_keeps_a_public_door_without_the_flag() {
        for local in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            let planned = plan(false, local.parse().unwrap(), false).unwrap();
            assert_eq!(planned.posture, Posture::Local, "{local}");
            assert!(planned.token.is_none());
        }
        for wide in ["0.0.0.0", "::", "10.1.2.3", "::ffff:10.0.0.1"] {
            let e = plan(false, wide.parse().unwrap(), false).err().unwrap();
            assert_eq!(e.code, "E-RUN-064", "{wide}");
            assert!(e.message.starts_with(&format!("--bind {wide} ")), "{e}");
            assert!(e.hint.as_deref().unwrap().contains("--open-door"));
            let opened = plan(false, wide.parse().unwrap(), true).unwrap();
            assert_eq!(opened.posture, Posture::Open);
        }
        let authenticated = plan(true, "0.0.0.0".parse().unwrap(), false).unwrap();
        assert_eq!(authenticated.posture, Posture::Bearer);
        assert!(authenticated.token.is_some());
    }

    #[test]
    fn a_bearer_door_admits_its_token_the_card_and_the_page_only() {
        let planned = plan(true, "127.0.0.1".parse().unwrap(), false).unwrap();
        let token = planned.token.unwrap();
        let door = planned.door;
        let good = format!("Bearer {}", token.expose());
        assert!(door.admits(&request("/", &[("Authorization", &good)])));
        assert!(!door.admits(&request("/", &[])));
        assert!(!door.admits(&request("/", &[("Authorization", "Bearer mur_x")])));
        assert!(door.admits(&request("/.well-known/agent-card.json", &[])));
        let mut page = request("/", &[("Accept", "text/html")]);
        page.method = "GET".into();
        assert!(door.admits(&page));
        assert!(Door::Public.admits(&request("/", &[])));
    }

    #[test]
    fn a_token_shows_in_no_debug_output_and_serializes_bare() {
        let token = DoorToken::mint();
        assert_eq!(format!("{token:?}"), "DoorToken(<redacted>)");
        let json = serde_json::to_string(&token).unwrap();
        assert_eq!(json, format!("\"{}\"", token.expose()));
        let back: DoorToken = serde_json::from_str(&json).unwrap();
        assert!(back == token);
        // Registered as a secret: nothing this process writes can carry it.
        let scrubbed = crate::secret::scrub(&format!("x {} y", token.expose())).into_owned();
        assert_eq!(scrubbed, "x [redacted] y");
    }
}
