//! The call chain: every capsule waiting on a peer task, oldest first. It travels with
//! each peer task (the `x-murmur-call-chain` header, or the member call itself), so a
//! call back into a capsule already waiting, or a chain past [`MAX_DEPTH`] calls, is
//! refused as it arrives instead of deadlocking: a capsule waiting on its callee
//! cannot also answer it.

use std::fmt;

/// The most calls one chain may hold: `a → b → c → d → e` is four.
pub const MAX_DEPTH: usize = 4;

/// A header longer than this is refused before it is read.
const MAX_HEADER: usize = 2048;

/// One capsule of a chain: its name, and the session that tells two runs of one
/// capsule apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    pub session: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain(Vec<Link>);

impl Chain {
    /// The chain a task that no peer sent starts: nobody waits on it.
    pub fn empty() -> Self {
        Chain(Vec::new())
    }

    /// This chain with `link` (the capsule about to call) at its end.
    pub fn then(&self, link: Link) -> Self {
        let mut links = self.0.clone();
        links.push(link);
        Chain(links)
    }

    /// The header's value: `name/session` links joined by commas.
    pub fn header(&self) -> String {
        let links: Vec<String> = self
            .0
            .iter()
            .map(|l| format!("{}/{}", l.name, l.session))
            .collect();
        links.join(",")
    }

    /// The chain a header carries. Anything that is not a well-formed chain is refused
    /// with what the caller is told.
    pub fn parse(header: &str) -> Result<Chain, String> {
        if header.len() > MAX_HEADER {
            return Err(format!(
                "refused: the {} header is longer than {MAX_HEADER} bytes",
                super::CHAIN_HEADER
            ));
        }
        if header.trim().is_empty() {
            return Ok(Chain::empty());
        }
        let mut links = Vec::new();
        for part in header.split(',') {
            let Some((name, session)) = part.trim().split_once('/') else {
                return Err(malformed());
            };
            if !word(name) || !word(session) {
                return Err(malformed());
            }
            links.push(Link {
                name: name.to_string(),
                session: session.to_string(),
            });
        }
        Ok(Chain(links))
    }

    /// Whether `callee` may take a task this chain sends: not when it already waits in
    /// the chain, nor when the chain already holds [`MAX_DEPTH`] calls.
    pub fn admits(&self, callee: &Link) -> Result<(), String> {
        if self.0.iter().any(|l| l.session == callee.session) {
            return Err(format!(
                "refused: calling {} would form a cycle: {}; a capsule waiting on a call cannot take a task that call sent",
                callee.name,
                self.shown_to(&callee.name)
            ));
        }
        if self.0.len() > MAX_DEPTH {
            return Err(format!(
                "refused: the call chain {} is deeper than {MAX_DEPTH} calls",
                self.shown_to(&callee.name)
            ));
        }
        Ok(())
    }

    /// `a → b → callee`, as refusals show it.
    fn shown_to(&self, callee: &str) -> String {
        let mut names: Vec<&str> = self.0.iter().map(|l| l.name.as_str()).collect();
        names.push(callee);
        names.join(" → ")
    }
}

impl fmt::Display for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|l| l.name.as_str()).collect();
        f.write_str(&names.join(" → "))
    }
}

/// A name or a session id: what a link may hold, so a header can smuggle nothing into
/// a trace line or a refusal.
fn word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn malformed() -> String {
    format!(
        "refused: the {} header is not a list of name/session links",
        super::CHAIN_HEADER
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str) -> Link {
        Link {
            name: name.into(),
            session: format!("ses_{name}"),
        }
    }

    #[test]
    fn a_chain_travels_as_a_header_and_back() {
        let chain = Chain::empty().then(link("lead")).then(link("worker"));
        assert_eq!(chain.header(), "lead/ses_lead,worker/ses_worker");
        assert_eq!(Chain::parse(&chain.header()), Ok(chain));
        assert_eq!(Chain::parse(""), Ok(Chain::empty()));
    }

    #[test]
    fn a_call_back_into_a_waiting_capsule_is_a_cycle_named_whole() {
        let chain = Chain::empty().then(link("a")).then(link("b"));
        assert_eq!(
            chain.admits(&link("a")),
            Err("refused: calling a would form a cycle: a → b → a; a capsule waiting on a call cannot take a task that call sent".into())
        );
        assert_eq!(chain.admits(&link("c")), Ok(()));
    }

    #[test]
    fn a_chain_past_the_depth_is_refused_naming_it() {
        let mut chain = Chain::empty();
        for name in ["a", "b", "c", "d"] {
            chain = chain.then(link(name));
        }
        assert_eq!(
            chain.admits(&link("e")),
            Ok(()),
            "a → b → c → d → e is four calls"
        );
        let chain = chain.then(link("e"));
        assert_eq!(
            chain.admits(&link("f")),
            Err("refused: the call chain a → b → c → d → e → f is deeper than 4 calls".into())
        );
    }

    #[test]
    fn a_header_that_is_not_a_chain_is_refused() {
        for bad in [
            "lead",
            "lead/",
            "Lead/ses_1",
            "a/b\nc/d",
            "a/b,,c/d",
            "a/b c",
        ] {
            assert!(Chain::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Chain::parse(&"a/b,".repeat(1000)).is_err());
    }
}
