//! The proxy's own answers, for requests that go no further: plain text, one line.

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE, PROXY_AUTHENTICATE};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use super::credentials::BAD_CREDENTIALS;
use super::destination::authority;
use super::{Destination, Shared};

pub(super) type Body = Either<Full<Bytes>, Incoming>;

/// The destination could not be reached or did not answer; reported as allowed but failed.
pub(super) fn bad_gateway(
    shared: &Shared,
    destination: Destination,
    reason: String,
) -> Response<Body> {
    let message = format!("murmur: {}: {reason}\n", authority(&destination));
    shared.report(destination, true, Some(reason));
    text(StatusCode::BAD_GATEWAY, message)
}

pub(super) fn proxy_auth_required() -> Response<Body> {
    let mut response = text(
        StatusCode::PROXY_AUTHENTICATION_REQUIRED,
        format!("murmur: {BAD_CREDENTIALS}\n"),
    );
    let headers = response.headers_mut();
    headers.insert(
        PROXY_AUTHENTICATE,
        HeaderValue::from_static(r#"Basic realm="murmur""#),
    );
    // Someone without the token gets one answer per connection, not a slot to sit on.
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

pub(super) fn text(status: StatusCode, message: String) -> Response<Body> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(message))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Only when the connection is already going away; nobody will read this.
pub(super) fn shutting_down() -> Response<Body> {
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        "murmur: shutting down\n".to_owned(),
    )
}
