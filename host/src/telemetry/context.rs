//! W3C trace context: the `traceparent` a task may arrive with and every request the
//! host sends carries, and how the trace's own ids become trace and span ids.
//!
//! A session's trace id is its session id's 32 hex digits, and a line's span id the last
//! 16 of its event id, so `mur trace` and an OpenTelemetry backend name the same things
//! by the same ids, and `mur trace export` needs no table to find them again.

/// A span's place in a trace: 32 hex digits of trace id, 16 of span id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanRef {
    pub trace_id: String,
    pub span_id: String,
}

impl SpanRef {
    /// The `traceparent` header naming this span as the parent, sampled.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

/// A W3C `traceparent`: `version-traceid-parentid-flags` in lowercase hex, and nothing
/// else, so a header can smuggle nothing on to the next capsule. Version `ff` and the
/// all-zero ids are invalid, as the recommendation says.
pub fn is_traceparent(value: &str) -> bool {
    parse(value).is_some()
}

/// The span a well-formed `traceparent` names; `None` for anything else.
pub fn parse(value: &str) -> Option<SpanRef> {
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace_id, span_id, flags] = parts[..] else {
        return None;
    };
    let well_formed = hex(version, 2)
        && version != "ff"
        && hex(trace_id, 32)
        && hex(span_id, 16)
        && hex(flags, 2)
        && !zero(trace_id)
        && !zero(span_id);
    well_formed.then(|| SpanRef {
        trace_id: trace_id.to_string(),
        span_id: span_id.to_string(),
    })
}

fn hex(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn zero(s: &str) -> bool {
    s.bytes().all(|b| b == b'0')
}

/// The trace id of a session: its id's hex digits (a v7 UUID, random in its low bits).
pub fn trace_id_of_session(session_id: &str) -> String {
    digits(session_id, 32)
}

/// The span id of a trace line: the last 16 hex digits of its event id, the random
/// part of a v7 UUID.
pub fn span_id_of_event(event_id: &str) -> String {
    digits(event_id, 16)
}

/// The last `n` hex digits of an id (`prefix_` and 32 hex digits); an id of another
/// shape (a line written by hand) is hashed into as many, so it still names one span.
fn digits(id: &str, n: usize) -> String {
    let hex_part = id.rsplit('_').next().unwrap_or(id);
    if hex_part.len() >= n
        && hex(hex_part, hex_part.len())
        && !zero(&hex_part[hex_part.len() - n..])
    {
        return hex_part[hex_part.len() - n..].to_string();
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(id.as_bytes());
    let full: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    full[..n].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_traceparent_is_read() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(
            parse(good),
            Some(SpanRef {
                trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
                span_id: "b7ad6b7169203331".into()
            })
        );
        for bad in [
            "",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\nx: y",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ids_come_from_the_trace_s_own() {
        assert_eq!(
            trace_id_of_session("ses_01a250d9e9ca74ef9d9cc941daf035cc"),
            "01a250d9e9ca74ef9d9cc941daf035cc"
        );
        assert_eq!(
            span_id_of_event("evt_01a250d9e9d575818d6f0b12924c9bc2"),
            "8d6f0b12924c9bc2"
        );
        let odd = span_id_of_event("a line written by hand");
        assert_eq!(odd.len(), 16);
        assert_eq!(odd, span_id_of_event("a line written by hand"));
        let r = SpanRef {
            trace_id: "01a250d9e9ca74ef9d9cc941daf035cc".into(),
            span_id: "8d6f0b12924c9bc2".into(),
        };
        assert_eq!(
            r.traceparent(),
            "00-01a250d9e9ca74ef9d9cc941daf035cc-8d6f0b12924c9bc2-01"
        );
    }
}
