//! What becomes of one request: its credentials are checked, its destination read and
//! put to the allow-list, and every refusal is reported before it is answered.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::sync::mpsc;

use super::Shared;
use super::answers::{Body, proxy_auth_required, text};
use super::credentials::{BAD_CREDENTIALS, authorized};
use super::destination::{NotProxyable, authority, parse_destination};
use super::forward::forward;
use super::listener::Job;
use super::tunnel::open_tunnel;

const NOT_ALLOWED: &str = "not in capabilities.network.allow";

pub(super) async fn handle(
    mut req: Request<Incoming>,
    shared: Arc<Shared>,
    jobs: mpsc::UnboundedSender<Job>,
) -> Result<Response<Body>, Infallible> {
    let parsed = parse_destination(req.method(), req.uri());
    if !authorized(req.headers(), &shared.credentials) {
        let destination = match parsed {
            Ok(destination) | Err(NotProxyable { destination, .. }) => destination,
        };
        shared.report(destination, false, Some(BAD_CREDENTIALS.to_owned()));
        return Ok(proxy_auth_required());
    }
    let destination = match parsed {
        Ok(destination) => destination,
        Err(NotProxyable {
            destination,
            reason,
        }) => {
            shared.report(destination, false, Some(reason.to_owned()));
            return Ok(text(StatusCode::BAD_REQUEST, format!("murmur: {reason}\n")));
        }
    };
    if !(shared.decide)(&destination) {
        let message = format!("murmur: {} is {NOT_ALLOWED}\n", authority(&destination));
        shared.report(destination, false, Some(NOT_ALLOWED.to_owned()));
        return Ok(text(StatusCode::FORBIDDEN, message));
    }
    let response = if req.method() == Method::CONNECT {
        let on_upgrade = hyper::upgrade::on(&mut req);
        open_tunnel(on_upgrade, destination, shared, &jobs).await
    } else {
        forward(req, destination, &shared, &jobs).await
    };
    Ok(response)
}
