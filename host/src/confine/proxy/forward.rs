//! Plain http: a proxy request rewritten into the origin's form, sent on a connection of
//! its own, and the answer streamed back without the headers of either hop.

use http::header::{CONNECTION, HOST};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::Either;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

use super::answers::{Body, bad_gateway, shutting_down, text};
use super::destination::{authority, bracketed};
use super::listener::Job;
use super::upstream::connect;
use super::{Destination, Shared};

/// Headers that describe one hop, not the message; passing them on would let the client
/// steer our upstream connection or leak the proxy token to the destination.
const HOP_BY_HOP: [&str; 9] = [
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Sends a plain-http request on to its destination and streams the answer back.
pub(super) async fn forward(
    mut req: Request<Incoming>,
    destination: Destination,
    shared: &Shared,
    jobs: &mpsc::UnboundedSender<Job>,
) -> Response<Body> {
    if let Err(reason) = to_origin_form(&mut req, &destination) {
        shared.report(destination, true, Some(reason.clone()));
        return text(StatusCode::BAD_REQUEST, format!("murmur: {reason}\n"));
    }
    let upstream = match connect(&destination).await {
        Ok(upstream) => upstream,
        Err(reason) => return bad_gateway(shared, destination, reason),
    };
    let (mut sender, conn) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return bad_gateway(shared, destination, format!("forward failed: {e}")),
        };
    // The upstream connection must keep running after we return, to stream the body.
    if jobs
        .send(Box::pin(async move {
            let _ = conn.await;
        }))
        .is_err()
    {
        return shutting_down();
    }
    match sender.send_request(req).await {
        Ok(mut response) => {
            shared.report(destination, true, None);
            strip_hop_by_hop(response.headers_mut());
            response.map(Either::Right)
        }
        Err(e) => bad_gateway(shared, destination, format!("forward failed: {e}")),
    }
}

/// Rewrites a proxy request into the request the origin server expects from a client.
fn to_origin_form(req: &mut Request<Incoming>, destination: &Destination) -> Result<(), String> {
    let target = req.uri().path_and_query().map_or_else(
        || "/".to_owned(),
        |pq| match pq.query() {
            Some(query) => format!("{}?{query}", pq.path()),
            None => pq.path().to_owned(),
        },
    );
    *req.uri_mut() = target
        .parse()
        .map_err(|e| format!("bad request target: {e}"))?;
    *req.version_mut() = Version::HTTP_11;
    // The default port is left out, as clients do, since some servers compare Host literally.
    let host = if destination.port == 80 {
        bracketed(&destination.host)
    } else {
        authority(destination)
    };
    let host = HeaderValue::from_str(&host).map_err(|e| format!("bad host: {e}"))?;
    let headers = req.headers_mut();
    strip_hop_by_hop(headers);
    headers.insert(HOST, host);
    Ok(())
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Connection may name further headers that are just as local to this hop.
    let named: Vec<String> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect();
    for name in &named {
        headers.remove(name.as_str());
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}
