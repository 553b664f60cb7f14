//! A tool built against this project's retired `murmur:tool@0.1.0` (`describe` +
//! `call`), which shares its name and version with upstream Murmur's tool interface
//! (`run`) but not its shape. The host serves upstream's shape and refuses this one
//! with the version error naming the served `murmur:tool/run@0.2.0`; this component
//! proves that it tells the two apart by what they export.
//!
//! Were it ever run, it would answer every call with `legacy`.

// The retired files, held to their released bytes by `wit/versions.lock`.
wit_bindgen::generate!({
    path: [
        "../../wit/retired/0.1.0/text.wit",
        "../../wit/retired/0.1.0/task.wit",
        "../../wit/retired/0.1.0/tool.wit",
    ],
    world: "murmur:tool/tool",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Spec, Status, ToolResult};

struct Component;

impl Guest for Component {
    fn describe() -> Spec {
        Spec {
            description: "A retired-world tool.".into(),
            input_schema: r#"{"type":"object","properties":{}}"#.into(),
        }
    }

    fn call(_input: String) -> ToolResult {
        ToolResult {
            status: Status::Passed,
            data: Some("legacy".into()),
            summary: None,
            truncated: false,
        }
    }
}

export!(Component);
