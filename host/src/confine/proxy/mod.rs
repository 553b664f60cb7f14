//! The loopback HTTP proxy that is a sandboxed command's only way out to the network.
//! The OS sandbox can only pin commands to one local port, not to host names, so this
//! proxy is where `capabilities.network.allow` is actually enforced, and where every
//! attempt is seen so the host can trace it.
//!
//! A connection is taken by the `listener` (at most so many at once); each request on it goes
//! through a `decision` (its `credentials`, its `destination`, the allow-list), then through a
//! CONNECT `tunnel` or a plain-http `forward` to the `upstream` host, and is answered with
//! the proxy's own `answers` when it goes no further.

mod answers;
mod credentials;
mod decision;
mod destination;
mod forward;
mod listener;
#[cfg(test)]
mod tests;
mod tunnel;
mod upstream;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use credentials::{base64, escape_userinfo};
use listener::accept_loop;
use tunnel::TUNNEL_IDLE_TIMEOUT;

/// Where a command asked to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `"CONNECT"` for a tunnel (HTTPS and anything else), otherwise the HTTP method of a forwarded plain-http request.
    pub method: String,
    /// `"https"` for CONNECT, `"http"` for an absolute-form request.
    pub scheme: &'static str,
    /// As the client named it, lowercased, IPv6 without brackets.
    pub host: String,
    pub port: u16,
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub destination: Destination,
    pub allowed: bool,
    /// Why it was refused or failed, in words for a trace line (None when it went through).
    pub reason: Option<String>,
}

pub type Decide = Arc<dyn Fn(&Destination) -> bool + Send + Sync>;
pub type Report = Arc<dyn Fn(Verdict) + Send + Sync>;

/// The session's proxy; dropping it stops the listener and every connection it serves.
pub struct Proxy {
    addr: SocketAddr,
    url: String,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Binds 127.0.0.1 on an OS-assigned port and serves until dropped.
    ///
    /// # Errors
    /// When the loopback listener cannot be bound.
    pub async fn start(token: String, decide: Decide, report: Report) -> io::Result<Proxy> {
        Self::start_with_idle(token, decide, report, TUNNEL_IDLE_TIMEOUT).await
    }

    /// `start`, with the tunnel idle limit short enough for a test to watch it fire.
    async fn start_with_idle(
        token: String,
        decide: Decide,
        report: Report,
        tunnel_idle: Duration,
    ) -> io::Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            credentials: base64(format!("murmur:{token}").as_bytes()).into_bytes(),
            decide,
            report,
            tunnel_idle,
        });
        let url = format!("http://murmur:{}@{addr}", escape_userinfo(&token));
        let accept = tokio::spawn(accept_loop(listener, shared));
        Ok(Proxy { addr, url, accept })
    }

    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://murmur:<token>@127.0.0.1:<port>`, the value for `HTTP_PROXY` and `HTTPS_PROXY`.
    #[must_use]
    pub fn url(&self) -> String {
        self.url.clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The accept loop owns the JoinSet of connections, which owns their jobs, so
        // dropping this one future tears down everything the proxy ever started.
        self.accept.abort();
    }
}

impl std::fmt::Debug for Proxy {
    // By hand, so the token in `url` never ends up in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// `base64("murmur:" + token)`, precomputed so checking a request needs no decoding.
    credentials: Vec<u8>,
    decide: Decide,
    report: Report,
    tunnel_idle: Duration,
}

impl Shared {
    fn report(&self, destination: Destination, allowed: bool, reason: Option<String>) {
        (self.report)(Verdict {
            destination,
            allowed,
            reason,
        });
    }
}
