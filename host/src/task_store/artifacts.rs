//! The artifacts a task keeps: a tool call's result, the streamed reply and the answer,
//! each cut to its bound with the cut said in `metadata.murmur`.

use std::collections::HashMap;

use ::a2a::{Artifact, Part, PartContent, Task};
use serde_json::{Value, json};

use super::META;
use crate::frames::ArtifactFrame;

/// A tool call's result as a v1 artifact: the exact content the model received, and
/// the facts of the seed's `artifact` frame under `metadata.murmur`.
pub(super) fn tool_artifact(n: u64, frame: &ArtifactFrame<'_>) -> Artifact {
    let facts: Value = json!({
        "toolName": frame.tool_name,
        "toolCallId": frame.tool_call_id,
        "isError": frame.is_error,
        "durationMs": frame.duration_ms,
        "exitCode": frame.exit_code,
        "truncated": frame.truncated,
        "fenceSource": frame.fence_source,
    });
    Artifact {
        artifact_id: format!("tool-{n}"),
        name: Some(frame.tool_name.to_string()),
        description: None,
        parts: vec![Part::text(frame.content)],
        metadata: Some(HashMap::from([(META.to_string(), facts)])),
        extensions: None,
    }
}

/// How much of one streamed reply the task keeps (a tool may stream without end; the
/// stream carries every piece, and the answer is kept whole in `response`).
pub(super) const REPLY_KEEP: usize = 1024 * 1024;

/// Appends `piece` to a kept reply, up to [`REPLY_KEEP`]; past it, the artifact says it
/// was cut (`metadata.murmur.truncated`).
pub(super) fn keep_piece(artifact: &mut Artifact, piece: &str) -> usize {
    let Some(PartContent::Text(kept)) = artifact.parts.first_mut().map(|p| &mut p.content) else {
        return 0;
    };
    if kept.len() + piece.len() <= REPLY_KEEP {
        kept.push_str(piece);
        return piece.len();
    }
    if artifact.metadata.is_some() {
        return 0;
    }
    let cut = boundary(piece, REPLY_KEEP - kept.len());
    kept.push_str(&piece[..cut]);
    artifact.metadata = Some(HashMap::from([(
        META.to_string(),
        json!({"truncated": true}),
    )]));
    cut
}

/// The longest prefix of `text` of at most `room` bytes that ends between characters.
pub(super) fn boundary(text: &str, room: usize) -> usize {
    (0..=room.min(text.len()))
        .rev()
        .find(|&n| text.is_char_boundary(n))
        .unwrap_or(0)
}

/// A tool result as the task keeps it: whole if `room` holds it, else its first `room`
/// bytes and `metadata.murmur.keptTruncated` (its stream event had it whole).
pub(super) fn cut_to(artifact: &mut Artifact, room: usize) {
    if text_size(&artifact.parts) <= room {
        return;
    }
    let mut left = room;
    for part in &mut artifact.parts {
        if let PartContent::Text(text) = &mut part.content {
            let keep = boundary(text, left);
            text.truncate(keep);
            left -= keep;
        }
    }
    let facts = artifact
        .metadata
        .get_or_insert_with(HashMap::new)
        .entry(META.to_string())
        .or_insert_with(|| json!({}));
    if let Value::Object(facts) = facts {
        facts.insert("keptTruncated".into(), Value::Bool(true));
    }
}

pub(super) fn text_size(parts: &[Part]) -> usize {
    parts.iter().filter_map(Part::as_text).map(str::len).sum()
}

pub(super) fn task_size(task: &Task) -> usize {
    let artifacts = task.artifacts.iter().flatten().map(|a| text_size(&a.parts));
    let history = task.history.iter().flatten().map(|m| text_size(&m.parts));
    artifacts.chain(history).sum()
}

/// A turn's streamed reply, or one piece of it.
pub(super) fn reply_artifact(id: &str, text: &str) -> Artifact {
    Artifact {
        artifact_id: id.to_string(),
        name: Some("reply".to_string()),
        description: None,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
    }
}

/// The id and name of the task's answer.
pub(super) const RESPONSE: &str = "response";

/// The task's answer, as upstream Murmur hands it to v1 clients.
pub(super) fn response_artifact(text: &str) -> Artifact {
    Artifact {
        artifact_id: RESPONSE.to_string(),
        name: Some(RESPONSE.to_string()),
        description: None,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::Tasks;
    use super::*;

    #[test]
    fn a_reply_streamed_without_end_is_kept_up_to_its_ceiling() {
        let tasks = Tasks::new(10);
        tasks.submitted("tsk_1", "ctx_1", None);
        tasks.begin("tsk_1", "ctx_1");
        let piece = "é".repeat(100_000);
        for _ in 0..10 {
            tasks.chunk("tsk_1", &piece);
        }
        let (task, seq) = tasks.snapshot("tsk_1").unwrap();
        assert_eq!(seq, 11, "every piece is an event");
        let artifact = &task.artifacts.unwrap()[0];
        let kept = artifact.parts[0].as_text().unwrap();
        assert!(
            kept.len() <= REPLY_KEEP && kept.len() > REPLY_KEEP - 2,
            "{}",
            kept.len()
        );
        assert_eq!(
            artifact.metadata,
            Some(HashMap::from([(
                META.to_string(),
                json!({"truncated": true})
            )]))
        );
    }
}
