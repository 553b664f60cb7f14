//! The proxy's credentials: `murmur:<token>` as Basic auth, compared in constant time, and
//! the token written into the proxy URL.

use http::HeaderMap;
use http::header::PROXY_AUTHORIZATION;

pub(super) const BAD_CREDENTIALS: &str = "missing or wrong proxy credentials";

/// Whether any `Proxy-Authorization` header carries the proxy's own credentials.
pub(super) fn authorized(headers: &HeaderMap, credentials: &[u8]) -> bool {
    headers
        .get_all(PROXY_AUTHORIZATION)
        .iter()
        .any(|value| basic_matches(value.as_bytes(), credentials))
}

pub(super) fn basic_matches(value: &[u8], credentials: &[u8]) -> bool {
    let Some(space) = value.iter().position(|&b| b == b' ') else {
        return false;
    };
    let (scheme, rest) = value.split_at(space);
    scheme.eq_ignore_ascii_case(b"basic") && same_secret(rest.trim_ascii(), credentials)
}

/// Takes as long for a near miss as for a wild guess, so timing does not leak the token.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

pub(super) fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let bits = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                let index = (bits >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(ALPHABET[index as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Percent-encodes a token for the userinfo of a URL, so any token yields a URL that
/// clients split correctly (they decode it again before sending credentials).
pub(super) fn escape_userinfo(raw: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}
