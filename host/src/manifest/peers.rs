//! The manifest's side of formations: `exports.peer_tasks.accept` (upstream Murmur's
//! consent to tasks from other capsules) and `peers[]`, the remote A2A agents a capsule
//! may call, each by its agent card's URL with a token from the environment.

use super::Result;
use super::fields::{Cx, Section};

/// A remote A2A agent the capsule may call by `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePeer {
    /// What the model calls it: `[a-z][a-z0-9-]{0,31}`, as a roster member's name.
    pub name: String,
    /// Its agent card's URL.
    pub card: String,
    /// The variable holding the bearer token its door wants, if any.
    pub token_env: Option<String>,
    pub line: usize,
}

/// `exports.peer_tasks.accept`; absent means no.
pub(super) fn accepts_peer_tasks(cx: &mut Cx, top: &Section) -> Result<bool> {
    let exports = top.sub(cx, "exports")?;
    let peer_tasks = exports.sub(cx, "peer_tasks")?;
    Ok(peer_tasks.opt_bool(cx, "accept")?.unwrap_or(false))
}

/// `peers[]`.
pub(super) fn remote_peers(cx: &mut Cx, top: &Section) -> Result<Vec<RemotePeer>> {
    let Some(items) = top.opt_list(cx, "peers")? else {
        return Ok(Vec::new());
    };
    let mut peers: Vec<RemotePeer> = Vec::with_capacity(items.len());
    for item in &items {
        let sec = item.section(cx, "peers[]")?;
        let (name, line) = sec.req_str(cx, "name")?;
        let path = format!("{}.name", item.path);
        if !member_name(&name) {
            let why = format!(
                "'{}' is not a peer name; a peer name matches ^[a-z][a-z0-9-]{{0,31}}$",
                super::tree::show(&name)
            );
            return Err(cx.invalid(line, &path, why));
        }
        if peers.iter().any(|p| p.name == name) {
            let why = format!("'{name}' is declared more than once");
            return Err(cx.invalid(line, &path, why));
        }
        let (card, card_line) = sec.req_str(cx, "card")?;
        if !(card.starts_with("http://") || card.starts_with("https://")) {
            let why = "expected the http:// or https:// URL of the agent's card";
            return Err(cx.invalid(card_line, &format!("{}.card", item.path), why));
        }
        let token_env = sec.opt_str(cx, "token_env")?.map(|(v, _)| v);
        peers.push(RemotePeer {
            name,
            card,
            token_env,
            line,
        });
    }
    Ok(peers)
}

/// A roster member's or a peer's name: what a model may write and a chain carry.
pub fn member_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && name.len() <= 32
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn peers_and_consent_are_read() {
        let s = Scratch::new();
        let m = s.ok(&base(
            "exports:\n  peer_tasks:\n    accept: true\npeers:\n  - name: weather\n    card: http://127.0.0.1:9/.well-known/agent-card.json\n    token_env: WEATHER_TOKEN\ncapabilities:\n  network:\n    allow: [\"http://127.0.0.1:9\"]\n",
        ))
        .manifest;
        assert!(m.accepts_peer_tasks);
        assert_eq!(m.peers.len(), 1);
        assert_eq!(m.peers[0].name, "weather");
        assert_eq!(m.peers[0].token_env.as_deref(), Some("WEATHER_TOKEN"));
        assert!(!s.ok(&base("")).manifest.accepts_peer_tasks);
        let e = s.err(&base(
            "peers:\n  - name: w\n    card: http://127.0.0.1:9/card.json\n",
        ));
        assert!(
            text(&e).contains("is not reached by capabilities.network.allow\n  hint: add \"http://127.0.0.1:9\" to capabilities.network.allow"),
            "{}",
            text(&e)
        );
    }

    #[test]
    fn a_bad_peer_name_or_card_is_refused_with_its_line() {
        let s = Scratch::new();
        let e = s.err(&base("peers:\n  - name: Weather\n    card: http://x/\n"));
        assert!(
            text(&e).contains("'peers[0].name': 'Weather' is not a peer name"),
            "{}",
            text(&e)
        );
        let e = s.err(&base("peers:\n  - name: w\n    card: ftp://x/\n"));
        assert!(text(&e).contains("'peers[0].card'"), "{}", text(&e));
        let e = s.err(&base(
            "peers:\n  - name: w\n    card: http://x/\n  - name: w\n    card: http://y/\n",
        ));
        assert!(
            text(&e).contains("'w' is declared more than once"),
            "{}",
            text(&e)
        );
    }
}
