//! A component's WebAssembly as the engine is handed it: read from a file, or carried
//! in the binary (the built-ins), borrowed rather than copied and named by a digest
//! taken when `mur` was built, so a launch neither copies nor hashes it.

use std::borrow::Cow;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

pub struct Wasm {
    bytes: Cow<'static, [u8]>,
    /// The sha-256 (hex) of `bytes`, when known ahead.
    sha256: Option<&'static str>,
    /// Else taken once, when first asked: the engine's cache, a lock's check and the
    /// trace all name the component by it.
    taken: OnceLock<String>,
}

impl Wasm {
    /// A component read at run time: its digest is taken when it is loaded.
    pub fn read(bytes: Vec<u8>) -> Self {
        Wasm {
            bytes: Cow::Owned(bytes),
            sha256: None,
            taken: OnceLock::new(),
        }
    }

    /// A component the binary carries, with the digest the build took of it.
    pub const fn builtin(bytes: &'static [u8], sha256: &'static str) -> Self {
        Wasm {
            bytes: Cow::Borrowed(bytes),
            sha256: Some(sha256),
            taken: OnceLock::new(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The sha-256 (hex) that names the component in memory, in the binary and on disk.
    pub fn digest(&self) -> Cow<'static, str> {
        match self.sha256 {
            Some(known) => Cow::Borrowed(known),
            None => Cow::Owned(
                self.taken
                    .get_or_init(|| hex(&Sha256::digest(&self.bytes)))
                    .clone(),
            ),
        }
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
