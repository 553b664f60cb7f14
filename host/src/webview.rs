//! The live web view: one self-contained page a browser gets on `GET` with
//! `Accept: text/html` at a capsule's address (`/` under `mur run`, `/c/<id>/` under
//! `mur serve`), and at `mur serve`'s root, where it lists the capsules.
//!
//! The page's HTML, CSS and script are compiled into the binary and served as one
//! response, so there is no build step, no CDN and nothing else to fetch. The style and
//! the script are inline and admitted by their SHA-256 in the Content-Security-Policy:
//! nothing else runs, nothing else is styled, and the page talks only to its own
//! origin. The page itself carries no capsule data; everything it shows it reads with
//! the same JSON-RPC calls (and tokens) any other client uses.

use std::sync::LazyLock;

use sha2::{Digest, Sha256};

use crate::http1::{Reply, Request};

const HTML: &str = include_str!("webview/page.html");
const CSS: &str = include_str!("webview/page.css");
const SCRIPT: &str = include_str!("webview/page.js");

/// Which of the page's two views the browser gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// One capsule's tasks, watched live.
    Capsule,
    /// `mur serve`'s capsules, listed with the admin token.
    Fleet,
}

/// A page ready to send: its bytes and the headers that depend on them.
struct Page {
    body: Vec<u8>,
    policy: String,
    etag: String,
}

static CAPSULE: LazyLock<Page> = LazyLock::new(|| Page::build(View::Capsule));
static FLEET: LazyLock<Page> = LazyLock::new(|| Page::build(View::Fleet));

impl Page {
    fn build(view: View) -> Page {
        let name = match view {
            View::Capsule => "capsule",
            View::Fleet => "fleet",
        };
        // The view first: the style and script are inserted last, so nothing in them
        // is ever read as a placeholder.
        let body = HTML
            .replace("{{view}}", name)
            .replace("{{style}}", CSS)
            .replace("{{script}}", SCRIPT);
        let digest = Sha256::digest(body.as_bytes());
        let etag: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        Page {
            body: body.into_bytes(),
            policy: policy(),
            etag: format!("\"{etag}\""),
        }
    }
}

/// The Content-Security-Policy: the inline style and script by hash, requests to the
/// page's own origin only, no framing, no forms posted anywhere, no `<base>`.
fn policy() -> String {
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
         connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'",
        base64(&Sha256::digest(SCRIPT.as_bytes())),
        base64(&Sha256::digest(CSS.as_bytes())),
    )
}

/// Whether `request` is a browser asking for the page: a `GET` whose `Accept` names
/// `text/html` (with a non-zero quality). Every other request keeps its old answer,
/// so a client that sends `*/*` or nothing never gets HTML.
pub fn wants_page(request: &Request) -> bool {
    request.method == "GET" && request.header("accept").is_some_and(accepts_html)
}

fn accepts_html(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut params = range.split(';');
        let kind = params.next().unwrap_or_default().trim();
        let refused = params.any(|p| {
            let (key, value) = p.split_once('=').unwrap_or((p, ""));
            key.trim().eq_ignore_ascii_case("q") && value.trim().parse::<f32>().ok() == Some(0.0)
        });
        kind.eq_ignore_ascii_case("text/html") && !refused
    })
}

/// The page for `view`, or `304 Not Modified` when the browser already holds it.
pub fn reply(view: View, request: &Request) -> Reply {
    let page = match view {
        View::Capsule => &*CAPSULE,
        View::Fleet => &*FLEET,
    };
    let headers = vec![
        ("content-security-policy", page.policy.clone()),
        ("x-content-type-options", "nosniff".to_string()),
        ("x-frame-options", "DENY".to_string()),
        ("referrer-policy", "no-referrer".to_string()),
        // Revalidated on every load (cheap, by its ETag): a new `mur` serves a new page
        // at the same address.
        ("cache-control", "no-cache".to_string()),
        ("etag", page.etag.clone()),
        // The same path answers JSON-RPC and the agent card: caches keep them apart.
        ("vary", "accept".to_string()),
    ];
    let held = request
        .header("if-none-match")
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == page.etag));
    if held {
        return Reply {
            headers,
            ..Reply::status("304 Not Modified")
        };
    }
    Reply {
        status: "200 OK",
        content_type: "text/html; charset=utf-8",
        headers,
        body: page.body.clone(),
    }
}

/// Standard base64 with padding, as CSP hash sources are written.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(accept: Option<&str>) -> Request {
        Request {
            method: "GET".into(),
            path: "/".into(),
            headers: accept
                .map(|a| vec![("Accept".to_string(), a.to_string())])
                .unwrap_or_default(),
            body: Vec::new(),
        }
    }

    #[test]
    fn only_an_explicit_text_html_gets_the_page() {
        let chromium =
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";
        assert!(wants_page(&get(Some(chromium))));
        assert!(wants_page(&get(Some("TEXT/HTML"))));
        assert!(wants_page(&get(Some("application/json, text/html;q=0.5"))));
        assert!(!wants_page(&get(Some("*/*"))));
        assert!(!wants_page(&get(Some("text/*"))));
        assert!(!wants_page(&get(Some("text/html;q=0"))));
        assert!(!wants_page(&get(Some("application/json"))));
        assert!(!wants_page(&get(None)));
        let mut post = get(Some("text/html"));
        post.method = "POST".into();
        assert!(!wants_page(&post));
    }

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn the_policy_admits_exactly_the_inline_style_and_script() {
        let page = Page::build(View::Capsule);
        let body = String::from_utf8(page.body).unwrap();
        let inline = |open: &str, close: &str| {
            let start = body.find(open).unwrap() + open.len();
            let end = start + body[start..].find(close).unwrap();
            body[start..end].to_string()
        };
        let script = inline("<script>", "</script>");
        let style = inline("<style>", "</style>");
        assert_eq!(script, SCRIPT);
        assert_eq!(style, CSS);
        let hash = |text: &str| base64(&Sha256::digest(text.as_bytes()));
        assert!(
            page.policy
                .contains(&format!("script-src 'sha256-{}'", hash(&script)))
        );
        assert!(
            page.policy
                .contains(&format!("style-src 'sha256-{}'", hash(&style)))
        );
        // One script and one style element, and nothing that would run outside them.
        assert_eq!(body.matches("<script").count(), 1);
        assert_eq!(body.matches("<style").count(), 1);
        assert!(!SCRIPT.contains("innerHTML") && !SCRIPT.contains("eval("));
        assert!(!SCRIPT.contains("</script"));
        assert!(body.contains(r#"data-view="capsule""#));
        let fleet = String::from_utf8(Page::build(View::Fleet).body).unwrap();
        assert!(fleet.contains(r#"data-view="fleet""#));
    }

    #[test]
    fn a_held_page_is_not_sent_again() {
        let mut request = get(Some("text/html"));
        let first = reply(View::Capsule, &request);
        assert_eq!(first.status, "200 OK");
        let etag = first
            .headers
            .iter()
            .find(|(n, _)| *n == "etag")
            .unwrap()
            .1
            .clone();
        request.headers.push(("If-None-Match".into(), etag));
        let again = reply(View::Capsule, &request);
        assert_eq!(again.status, "304 Not Modified");
        assert!(again.body.is_empty());
    }
}
