//! A session loop built against `murmur:session@0.9.0`, a version of the session
//! interface this host does not serve (its loops export `murmur:session/loop@0.2.0`). It exists so the host can prove
//! that it refuses such a component up front, by its version, before linking anything.
//!
//! Its world is the smallest that still names the version: it exports the `loop`
//! interface and imports nothing, so it has no way to take a task. Were it ever run, it
//! would end the session at once with an error saying so.

// The WIT is inlined rather than read from `wit/session` because that directory is the
// version the host serves, and a released version is never edited in place.
wit_bindgen::generate!({
    world: "session-loop",
    inline: r#"
package murmur:session@0.9.0;

/// Exported by a session loop.
interface %loop {
    record config {
        /// `inference.max_turns`.
        max-turns: u32,
    }

    /// Runs the whole session.
    run: func(config: config) -> result<_, string>;
}

world session-loop {
    export %loop;
}
"#,
});

use exports::murmur::session::loop_::{Config, Guest};

struct Component;

impl Guest for Component {
    fn run(_config: Config) -> Result<(), String> {
        Err("the future loop only exists to be refused: it cannot take tasks".into())
    }
}

export!(Component);
