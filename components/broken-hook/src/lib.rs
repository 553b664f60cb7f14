//! A deliberately broken hook, a test fixture for `mur component check`: it answers
//! `none` to every event at once, except `on-task-end`, where it spins and never
//! answers, overrunning any deadline. The check's per-binding scenario for
//! `on-task-end` must fail with the host's timeout message; every other binding passes.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/hook"],
    world: "murmur:hook/hook",
    generate_all,
});

use exports::murmur::hook::lifecycle::{Event, Guest, Verdict};

struct Component;

impl Guest for Component {
    fn handle(event: Event) -> Result<Verdict, String> {
        if let Event::TaskEnd(_) = event {
            // The defect: busy work that never returns (the host's deadline stops it).
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        Ok(Verdict::None)
    }
}

export!(Component);
