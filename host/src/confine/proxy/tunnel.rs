//! CONNECT: a byte tunnel between the command and the destination, closed when the
//! connection ends or once nothing has moved through it for a while.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::{Either, Full};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::answers::{Body, bad_gateway, shutting_down};
use super::listener::Job;
use super::upstream::connect;
use super::{Destination, Shared};

/// Long enough for slow downloads and long polls, short enough that forgotten tunnels free their slot.
pub(super) const TUNNEL_IDLE_TIMEOUT: Duration = Duration::from_mins(5);

/// Connects to the destination and, once hyper hands over the client's socket, joins the
/// two; the `200` goes out as soon as the destination is reached.
pub(super) async fn open_tunnel(
    on_upgrade: OnUpgrade,
    destination: Destination,
    shared: Arc<Shared>,
    jobs: &mpsc::UnboundedSender<Job>,
) -> Response<Body> {
    let upstream = match connect(&destination).await {
        Ok(upstream) => upstream,
        Err(reason) => return bad_gateway(&shared, destination, reason),
    };
    let job = Box::pin(run_tunnel(on_upgrade, upstream, destination, shared));
    if jobs.send(job).is_err() {
        return shutting_down();
    }
    Response::new(Either::Left(Full::new(Bytes::new())))
}

async fn run_tunnel(
    on_upgrade: OnUpgrade,
    upstream: TcpStream,
    destination: Destination,
    shared: Arc<Shared>,
) {
    let upgraded = match on_upgrade.await {
        Ok(upgraded) => upgraded,
        Err(e) => {
            shared.report(
                destination,
                true,
                Some(format!("tunnel not established: {e}")),
            );
            return;
        }
    };
    shared.report(destination, true, None);
    let mut client = TokioIo::new(upgraded);
    let activity = Arc::new(Activity::new());
    let mut upstream = Watched {
        inner: upstream,
        activity: Arc::clone(&activity),
    };
    // Every byte either way passes through `upstream`, so watching it alone sees all traffic.
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        () = activity.idle_for(shared.tunnel_idle) => {}
    }
}

/// When a tunnel last carried a byte, shared between the stream and the idle watchdog.
struct Activity {
    origin: Instant,
    last_millis: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            origin: Instant::now(),
            last_millis: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_millis.store(elapsed, Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let last = Duration::from_millis(self.last_millis.load(Ordering::Relaxed));
            let Some(deadline) = last
                .checked_add(limit)
                .and_then(|quiet| self.origin.checked_add(quiet))
            else {
                return;
            };
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that records in `activity` whenever bytes move through it.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
