//! The OCI distribution API, as far as mur speaks it: manifests, blobs, uploads and
//! the tags list, with the registry's challenge answered once per client. Every answer
//! is hostile input: bodies are read only up to a bound, each within a time, and a
//! registry's own words reach an error escaped and cut.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;

use super::auth::{Challenge, Credential, Found};
use super::reference::Reference;
use crate::error::Error;
use crate::outbound::reply::{Unread, read_bounded, said, transport};
use crate::outbound::{self, PooledBody, Waits};

/// A manifest or an index is a few KiB; a registry sending more is not answering.
const MAX_MANIFEST: usize = 4 * 1024 * 1024;
/// A page of tags, a token, an error body.
const MAX_SMALL: usize = 1024 * 1024;
/// How many pages of tags are followed.
const MAX_PAGES: usize = 100;
/// How many redirects of one blob are followed.
const MAX_REDIRECTS: usize = 3;

const WAITS: Waits = Waits {
    connect: Duration::from_secs(10),
    first_byte: Duration::from_secs(60),
    between_bytes: Duration::from_secs(60),
};

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// One registry, as one command talks to it.
pub struct Client {
    /// `http://host:port` or `https://host`.
    base: String,
    registry: String,
    /// The user's credential for it, looked up when the registry first asks (a lookup
    /// may run a Docker credential helper; an anonymous registry never needs one).
    found: std::sync::OnceLock<Option<Found>>,
    /// The `Authorization` header that last worked, per scope it was got for.
    authorization: Mutex<Option<String>>,
}

/// A response whose status was read and whose body is still to read.
pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: PooledBody,
}

impl Client {
    pub fn new(reference: &Reference, insecure: &[String]) -> Client {
        let scheme = if reference.plain_http(insecure) {
            "http"
        } else {
            "https"
        };
        Client {
            base: format!("{scheme}://{}", reference.registry),
            registry: reference.registry.clone(),
            found: std::sync::OnceLock::new(),
            authorization: Mutex::new(None),
        }
    }

    /// The manifest `key` (a tag or a digest) of `repository`: its bytes and the digest
    /// the registry gave it.
    pub async fn manifest(&self, repository: &str, key: &str) -> Result<(Vec<u8>, String), Error> {
        let path = format!("/v2/{repository}/manifests/{key}");
        let headers = [(header::ACCEPT, OCI_MANIFEST)];
        let mut answer = self
            .send(Method::GET, &path, &headers, Bytes::new())
            .await?;
        self.expect(
            &mut answer,
            &[StatusCode::OK],
            &format!("{repository}:{key}"),
        )
        .await?;
        let digest = answer
            .headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = self
            .read(&mut answer.body, MAX_MANIFEST, "a manifest")
            .await?;
        let digest = digest.unwrap_or_else(|| super::store::digest_of(&bytes));
        Ok((bytes, digest))
    }

    /// The blob `digest` of `repository`, its body to read. A registry that keeps its
    /// blobs elsewhere (a CDN, object storage) redirects there; the redirect is followed
    /// without the registry's credentials, at most `MAX_REDIRECTS` times.
    pub async fn blob(&self, repository: &str, digest: &str) -> Result<Answer, Error> {
        let path = format!("/v2/{repository}/blobs/{digest}");
        let mut answer = self.send(Method::GET, &path, &[], Bytes::new()).await?;
        for _ in 0..MAX_REDIRECTS {
            if !answer.status.is_redirection() {
                break;
            }
            let location = answer
                .headers
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| self.garbled("it redirected a blob to no Location"))?;
            let url = self.redirect_target(location)?;
            answer = self
                .once(&Method::GET, &url, &[], Bytes::new(), None)
                .await?;
        }
        self.expect(
            &mut answer,
            &[StatusCode::OK],
            &format!("{repository}@{digest}"),
        )
        .await?;
        Ok(answer)
    }

    /// Where a blob redirect leads: this registry, or any https URL (plain http only
    /// where this registry itself is reached over it).
    fn redirect_target(&self, location: &str) -> Result<String, Error> {
        if location.starts_with('/') {
            return Ok(format!("{}{location}", self.base));
        }
        let secure = location.starts_with("https://");
        let plain_ok = location.starts_with("http://") && self.base.starts_with("http://");
        if (secure || plain_ok) && location.parse::<http::Uri>().is_ok() {
            return Ok(location.to_string());
        }
        Err(self.garbled("it redirected a blob to a URL mur will not fetch from"))
    }

    /// Whether the registry holds the blob already (a push then skips it).
    pub async fn has_blob(&self, repository: &str, digest: &str) -> Result<bool, Error> {
        let path = format!("/v2/{repository}/blobs/{digest}");
        let answer = self.send(Method::HEAD, &path, &[], Bytes::new()).await?;
        Ok(answer.status == StatusCode::OK)
    }

    /// Uploads `bytes` as the blob `digest`: one POST for the upload, one PUT of the
    /// whole body.
    pub async fn push_blob(
        &self,
        repository: &str,
        digest: &str,
        bytes: Bytes,
    ) -> Result<(), Error> {
        let path = format!("/v2/{repository}/blobs/uploads/");
        let mut started = self.send(Method::POST, &path, &[], Bytes::new()).await?;
        self.expect(&mut started, &[StatusCode::ACCEPTED], repository)
            .await?;
        let location = started
            .headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| self.garbled("its upload answer has no Location"))?;
        let upload = self.same_origin(location)?;
        let sep = if upload.contains('?') { '&' } else { '?' };
        let put = format!("{upload}{sep}digest={digest}");
        let headers = [(header::CONTENT_TYPE, "application/octet-stream")];
        let mut done = self.send(Method::PUT, &put, &headers, bytes).await?;
        self.expect(&mut done, &[StatusCode::CREATED], repository)
            .await
    }

    /// Puts the manifest `bytes` under `tag`.
    pub async fn put_manifest(
        &self,
        repository: &str,
        tag: &str,
        bytes: Bytes,
    ) -> Result<(), Error> {
        let path = format!("/v2/{repository}/manifests/{tag}");
        let headers = [(header::CONTENT_TYPE, OCI_MANIFEST)];
        let mut answer = self.send(Method::PUT, &path, &headers, bytes).await?;
        self.expect(
            &mut answer,
            &[StatusCode::CREATED],
            &format!("{repository}:{tag}"),
        )
        .await
    }

    /// Every tag of `repository`, page after page.
    pub async fn tags(&self, repository: &str) -> Result<Vec<String>, Error> {
        let mut tags = Vec::new();
        let mut next = Some(format!("/v2/{repository}/tags/list?n=1000"));
        let mut pages = 0;
        while let Some(path) = next.take() {
            pages += 1;
            if pages > MAX_PAGES {
                return Err(self.garbled(&format!("its tags list runs past {MAX_PAGES} pages")));
            }
            let mut answer = self.send(Method::GET, &path, &[], Bytes::new()).await?;
            self.expect(&mut answer, &[StatusCode::OK], repository)
                .await?;
            next = answer
                .headers
                .get(header::LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(next_page)
                .map(|link| self.same_origin(&link))
                .transpose()?;
            let body = self
                .read(&mut answer.body, MAX_SMALL, "a tags list")
                .await?;
            let page: TagList = serde_json::from_slice(&body)
                .map_err(|_| self.garbled("its tags list is not the distribution API's JSON"))?;
            tags.extend(page.tags.unwrap_or_default());
        }
        Ok(tags)
    }

    /// Sends a request, answering the registry's challenge once when it makes one.
    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(header::HeaderName, &str)],
        body: Bytes,
    ) -> Result<Answer, Error> {
        let held = self.held();
        let answer = self
            .once(&method, path, headers, body.clone(), held.as_deref())
            .await?;
        if answer.status != StatusCode::UNAUTHORIZED {
            return Ok(answer);
        }
        let challenge = answer
            .headers
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(Challenge::parse);
        drop(answer);
        let Some(challenge) = challenge else {
            return Err(self.refused(held.is_some()));
        };
        let authorization = self.answer(&challenge).await?;
        if let Ok(mut slot) = self.authorization.lock() {
            *slot = Some(authorization.clone());
        }
        let answer = self
            .once(&method, path, headers, body, Some(&authorization))
            .await?;
        if answer.status == StatusCode::UNAUTHORIZED || answer.status == StatusCode::FORBIDDEN {
            return Err(self.refused(true));
        }
        Ok(answer)
    }

    fn found(&self) -> Option<&Found> {
        self.found
            .get_or_init(|| super::auth::find(&self.registry))
            .as_ref()
    }

    fn held(&self) -> Option<String> {
        self.authorization.lock().ok().and_then(|a| a.clone())
    }

    /// The `Authorization` a challenge asks for, from the user's credential.
    async fn answer(&self, challenge: &Challenge) -> Result<String, Error> {
        match challenge.scheme.as_str() {
            "basic" => self
                .found()
                .as_ref()
                .and_then(|f| f.credential.basic())
                .ok_or_else(|| self.refused(false)),
            "bearer" => self.token(challenge).await,
            other => Err(self.garbled(&format!(
                "it asks for the '{}' authentication scheme, which mur does not speak",
                said(other)
            ))),
        }
    }

    /// A bearer token from the challenge's realm, asked with the user's credential when
    /// there is one (anonymous pulls get a token without).
    async fn token(&self, challenge: &Challenge) -> Result<String, Error> {
        let realm = challenge
            .param("realm")
            .ok_or_else(|| self.garbled("its bearer challenge names no realm"))?;
        let mut url = realm.to_string();
        let mut sep = if url.contains('?') { '&' } else { '?' };
        for key in ["service", "scope"] {
            if let Some(value) = challenge.param(key) {
                url.push(sep);
                url.push_str(key);
                url.push('=');
                url.push_str(&query_escape(value));
                sep = '&';
            }
        }
        let uri: http::Uri = url
            .parse()
            .map_err(|_| self.garbled("its token realm is not a URL"))?;
        if uri.scheme_str() != Some("https") && !self.base.starts_with("http://") {
            return Err(self.garbled("its token realm is not https"));
        }
        let mut request = Request::get(uri);
        let credential = self.found().map(|f| &f.credential);
        if let Some(basic) = credential.and_then(Credential::basic) {
            request = request.header(header::AUTHORIZATION, basic);
        }
        if let Some(Credential::Identity(token)) = credential {
            request = request.header("x-identity-token", token.as_str());
        }
        let request = request
            .body(Full::new(Bytes::new()))
            .map_err(|_| self.garbled("its token realm is not a URL"))?;
        let response = outbound::send_own(request, WAITS)
            .await
            .map_err(|e| self.unreachable(&transport(&e)))?;
        let (parts, mut body) = response.into_parts();
        if parts.status == StatusCode::UNAUTHORIZED || parts.status == StatusCode::FORBIDDEN {
            return Err(self.refused(self.found().is_some()));
        }
        let bytes = self.read(&mut body, MAX_SMALL, "a token").await?;
        if !parts.status.is_success() {
            return Err(self.garbled(&format!("its token realm answered {}", parts.status)));
        }
        let token: Token = serde_json::from_slice(&bytes)
            .map_err(|_| self.garbled("its token realm's answer is not a token"))?;
        token
            .token
            .or(token.access_token)
            .filter(|t| !t.is_empty() && http::HeaderValue::from_str(t).is_ok())
            .map(|t| format!("Bearer {t}"))
            .ok_or_else(|| self.garbled("its token realm's answer holds no token"))
    }

    async fn once(
        &self,
        method: &Method,
        path: &str,
        headers: &[(header::HeaderName, &str)],
        body: Bytes,
        authorization: Option<&str>,
    ) -> Result<Answer, Error> {
        let url = if path.starts_with("http://") || path.starts_with("https://") {
            path.to_string()
        } else {
            format!("{}{path}", self.base)
        };
        let mut request = Request::builder().method(method.clone()).uri(url);
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        if let Some(authorization) = authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let request = request
            .header(header::CONTENT_LENGTH, body.len())
            .body(Full::new(body))
            .map_err(|_| {
                Error::new(
                    "E-REG-001",
                    format!("a request to {} could not be formed", self.registry),
                )
            })?;
        let response: Response<PooledBody> = outbound::send_own(request, WAITS)
            .await
            .map_err(|e| self.unreachable(&transport(&e)))?;
        let (parts, body) = response.into_parts();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// Fails unless the answer has one of the statuses `want`, with the registry's own
    /// error (code and message) in words.
    async fn expect(
        &self,
        answer: &mut Answer,
        want: &[StatusCode],
        what: &str,
    ) -> Result<(), Error> {
        if want.contains(&answer.status) {
            return Ok(());
        }
        let body = read_bounded(&mut answer.body, MAX_SMALL)
            .await
            .unwrap_or_default();
        let detail = registry_error(&body);
        let status = answer.status;
        if status == StatusCode::NOT_FOUND {
            return Err(Error::new(
                "E-REG-005",
                format!("{}/{what} is not in the registry{detail}", self.registry),
            )
            .hint(format!(
                "check the name and version; `mur ls {}/{}` lists the versions there are",
                self.registry,
                what.split([':', '@']).next().unwrap_or(what)
            )));
        }
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(self.refused(true));
        }
        Err(Error::new(
            "E-REG-007",
            format!("{} answered {status} for {what}{detail}", self.registry),
        )
        .hint("the registry refused the request; its own words are above"))
    }

    /// A body read whole up to `max`.
    pub async fn read(
        &self,
        body: &mut PooledBody,
        max: usize,
        what: &str,
    ) -> Result<Vec<u8>, Error> {
        read_bounded(body, max).await.map_err(|e| match e {
            Unread::TooBig { max } => self.garbled(&format!("{what} larger than {max} bytes came")),
            Unread::Transport(why) => self.unreachable(&why),
            Unread::NotUtf8 => self.garbled(&format!("{what} came garbled")),
        })
    }

    /// An upload location or a next page, which must stay on this registry.
    fn same_origin(&self, location: &str) -> Result<String, Error> {
        if location.starts_with('/') {
            return Ok(format!("{}{location}", self.base));
        }
        if location.starts_with(&format!("{}/", self.base)) {
            return Ok(location.to_string());
        }
        Err(self.garbled("it sent mur to another host"))
    }

    pub fn unreachable(&self, why: &str) -> Error {
        Error::new(
            "E-REG-002",
            format!("the registry {} could not be reached: {why}", self.registry),
        )
        .hint(format!(
            "check that it runs and that {} is its address; a registry other than a loopback \
             one is reached over https unless insecure_registries in $MURMUR_HOME/config.yaml \
             names it",
            self.base
        ))
    }

    pub fn garbled(&self, why: &str) -> Error {
        Error::new(
            "E-REG-007",
            format!(
                "the registry {} answered in a way mur cannot use: {why}",
                self.registry
            ),
        )
        .hint("check that the address is an OCI registry (distribution API v2)")
    }

    /// The registry wants credentials: none were found, or those found were refused.
    fn refused(&self, presented: bool) -> Error {
        match (self.found(), presented) {
            (Some(found), true) => Error::new(
                "E-REG-004",
                format!(
                    "the registry {} refused the credentials from {}",
                    self.registry, found.from
                ),
            )
            .hint(format!(
                "check the user name and password (`docker login {}` writes new ones)",
                self.registry
            )),
            _ => Error::new(
                "E-REG-003",
                format!(
                    "the registry {} asks for credentials and mur has none for it",
                    self.registry
                ),
            )
            .hint(format!(
                "run `docker login {}`, or set {} and {}",
                self.registry,
                super::auth::USER_VAR,
                super::auth::PASSWORD_VAR
            )),
        }
    }
}

#[derive(serde::Deserialize)]
struct TagList {
    tags: Option<Vec<String>>,
}

#[derive(serde::Deserialize)]
struct Token {
    token: Option<String>,
    access_token: Option<String>,
}

/// `: CODE: message` from a distribution error body, escaped and cut; empty when the
/// body says nothing usable.
fn registry_error(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<One>,
    }
    #[derive(serde::Deserialize)]
    struct One {
        code: Option<String>,
        message: Option<String>,
    }
    let Ok(errors) = serde_json::from_slice::<Errors>(body) else {
        return String::new();
    };
    let Some(first) = errors.errors.first() else {
        return String::new();
    };
    let text = match (&first.code, &first.message) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(one), None) | (None, Some(one)) => one.clone(),
        (None, None) => return String::new(),
    };
    format!(" ({})", said(&text))
}

/// The target of a `Link: <…>; rel="next"` header.
fn next_page(link: &str) -> Option<String> {
    let (target, params) = link.split_once(';')?;
    params.contains("rel=\"next\"").then_some(())?;
    let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
    Some(target.to_string())
}

fn query_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_header_gives_the_next_page() {
        assert_eq!(
            next_page(r#"</v2/a/tags/list?last=b&n=2>; rel="next""#).as_deref(),
            Some("/v2/a/tags/list?last=b&n=2")
        );
        assert_eq!(next_page(r#"</x>; rel="prev""#), None);
    }

    #[test]
    fn a_registry_error_is_quoted_escaped() {
        let body =
            br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown\u001b[2J"}]}"#;
        let said = registry_error(body);
        assert!(
            said.starts_with(" (MANIFEST_UNKNOWN: manifest unknown"),
            "{said}"
        );
        assert!(!said.contains('\u{1b}'), "{said}");
        assert_eq!(registry_error(b"<html>"), "");
    }

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(
            query_escape("repository:a/b:pull,push"),
            "repository%3Aa%2Fb%3Apull%2Cpush"
        );
    }
}
