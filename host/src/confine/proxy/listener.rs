//! The loopback listener: a bounded number of connections at once, each served by hyper
//! with the work it starts (tunnels, upstream connections) tied to its lifetime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;

use super::Shared;
use super::decision::handle;

/// More than this many sockets at once is a command misbehaving, not working; capping it
/// keeps a hostile command from exhausting the host's file descriptors.
pub(super) const MAX_CONNECTIONS: usize = 64;
/// Also bounds how long an idle keep-alive connection may hold one of the slots.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Accept errors such as EMFILE repeat at once; pausing keeps the loop from spinning a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Work that outlives the response that started it (a tunnel, an upstream connection
/// still streaming a body); run by the connection's task so it dies with it.
pub(super) type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Serves connections until the proxy is dropped, never more than [`MAX_CONNECTIONS`] at once.
pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        // Taking the slot before accepting leaves extra clients queued in the kernel's
        // backlog, costing us nothing until a slot frees up.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(serve_connection(stream, Arc::clone(&shared), slot));
            }
            Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, _slot: OwnedSemaphorePermit) {
    let _ = stream.set_nodelay(true);
    let (jobs, mut queued) = mpsc::unbounded_channel::<Job>();
    let service =
        hyper::service::service_fn(move |req| handle(req, Arc::clone(&shared), jobs.clone()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let mut running = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut conn => break,
            Some(job) = queued.recv() => { running.spawn(job); }
            Some(_) = running.join_next() => {}
        }
    }
    // A tunnel begins only once hyper hands over the socket, which is also when the
    // connection future ends, so its job may still be queued or running here.
    while let Ok(job) = queued.try_recv() {
        running.spawn(job);
    }
    while running.join_next().await.is_some() {}
}
