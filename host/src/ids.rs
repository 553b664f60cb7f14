//! Identifiers: a prefix and a UUIDv7 in simple form, so they sort by creation time.

use uuid::Uuid;

fn mint(prefix: &str) -> String {
    format!("{prefix}{}", Uuid::now_v7().simple())
}

pub fn session() -> String {
    mint("ses_")
}

/// A capsule hosted by `mur serve`: its address's path segment.
pub fn capsule() -> String {
    mint("cap_")
}

pub fn task() -> String {
    mint("tsk_")
}

pub fn context() -> String {
    mint("ctx_")
}

pub fn event() -> String {
    mint("evt_")
}

/// A detached shell command: the handle the model is told, and its log's name.
pub fn work() -> String {
    mint("wrk_")
}

/// A message the host adds to a conversation (a seed); never sent to the provider.
pub fn message() -> String {
    mint("msg_")
}

/// A secret for a local credential (the shell proxy's): random, not time-ordered.
pub fn token() -> String {
    Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefix_and_32_hex_of_a_v7_uuid() {
        for (id, prefix) in [
            (session(), "ses_"),
            (task(), "tsk_"),
            (context(), "ctx_"),
            (work(), "wrk_"),
        ] {
            let hex = id.strip_prefix(prefix).expect("prefix");
            assert_eq!(hex.len(), 32, "{id}");
            assert!(
                hex.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
            assert_eq!(Uuid::parse_str(hex).unwrap().get_version_num(), 7);
        }
    }

    #[test]
    fn ids_sort_by_creation() {
        let a = session();
        let b = session();
        assert!(a < b);
    }
}
