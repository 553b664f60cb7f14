//! Bearer tokens: the operator's admin token and each capsule's own. Only a token's
//! SHA-256 is kept in memory and on disk (the admin token file excepted: the operator
//! reads it), and a presented token is compared by its hash in constant time, so
//! neither the body nor the timing of a refusal says how close a guess came.

use sha2::{Digest, Sha256};

/// A token's hash, as kept.
#[derive(Clone, PartialEq, Eq)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    pub fn of(token: &str) -> Hash {
        Hash(Sha256::digest(token.as_bytes()).into())
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(hex: &str) -> Option<Hash> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Hash(out))
    }

    /// Whether `presented` (an `Authorization` header's value) carries this token.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let token = authorization.and_then(bearer);
        // Hashing something even when no token was sent keeps every refusal alike.
        let presented = Hash::of(token.unwrap_or_default());
        let mut diff = 0u8;
        for (a, b) in presented.0.iter().zip(self.0.iter()) {
            diff |= a ^ b;
        }
        token.is_some() && std::hint::black_box(diff) == 0
    }
}

/// The token of `Bearer <token>` (the scheme is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// A fresh capsule token: `mur_` and 244 random bits.
pub fn mint() -> String {
    format!("mur_{}{}", crate::ids::token(), crate::ids::token())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let hash = Hash::of("mur_abc");
        assert!(hash.admits(Some("Bearer mur_abc")));
        assert!(hash.admits(Some("bearer  mur_abc ")));
        for refused in [
            None,
            Some(""),
            Some("Bearer"),
            Some("Bearer mur_ab"),
            Some("Basic mur_abc"),
            Some("mur_abc"),
        ] {
            assert!(!hash.admits(refused), "{refused:?}");
        }
        assert!(!Hash::of("").admits(Some("Bearer ")));
    }

    #[test]
    fn hashes_round_trip_through_hex() {
        let hash = Hash::of("x");
        assert!(Hash::from_hex(&hash.to_hex()) == Some(hash));
        assert!(Hash::from_hex("zz").is_none());
    }
}
