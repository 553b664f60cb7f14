//! A built-in process driver is a [`Harness`] — what it drives, its command line, its
//! output's parser, its exits — and the kit around it: [`export_process_driver!`]
//! exports `murmur:process/harness` for a harness, keeping each run's parser between
//! `launch` and the `parse` calls that follow it.

use crate::event::{Event, Failure};
use crate::exit::Exit;
use crate::exports::murmur::process::harness as wit;
use crate::launch::{Plan, Request};
use std::sync::{Mutex, MutexGuard};

/// How the host stops a run before its end (the wit `interrupt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    Signal,
    CloseStdin,
}

/// What a driver drives (the wit `description`); fixed for a driver, so borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Description {
    pub harness: &'static str,
    pub binary: &'static str,
    pub version_args: &'static [&'static str],
    pub tested_versions: &'static [&'static str],
    pub interrupt: Interrupt,
    pub key_env: &'static str,
    /// The harness's usage counts are its whole session's, not this run's.
    pub usage_covers_session: bool,
}

/// What one harness asks of a driver.
pub trait Harness {
    /// Reads this harness's output; a run's earlier lines may change how a later one
    /// reads, so one parser serves one run.
    type Parser: Parse;

    fn describe() -> Description;

    /// Plans a run and the parser of its output; `Err` refuses the run, in words the
    /// task's failure carries.
    fn launch(request: &Request) -> Result<(Plan, Self::Parser), String>;

    /// Why a run whose output ended without an answer or a failure ended.
    fn classify_exit(exit: &Exit) -> Failure;
}

/// A harness's output parser. `Default` reads lines that come before any `launch`: the
/// world does not forbid them.
pub trait Parse: Default + Send + 'static {
    /// Reads one line of standard output, without its newline.
    fn parse(&mut self, line: &str) -> Vec<Event>;
}

/// Where a driver keeps its run's parser between calls. The host calls one instance one
/// call at a time; the mutex only makes the static sound and never contends.
pub struct Slot<P>(Mutex<Option<P>>);

impl<P> Slot<P> {
    pub const fn new() -> Slot<P> {
        Slot(Mutex::new(None))
    }

    fn lock(&self) -> MutexGuard<'_, Option<P>> {
        // A poisoned lock means a panic, which traps the instance; the data is still whole.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<P> Default for Slot<P> {
    fn default() -> Self {
        Slot::new()
    }
}

/// A driver's `describe`.
pub fn describe<H: Harness>() -> wit::Description {
    H::describe().into()
}

/// A driver's `launch`: the run planned, and its parser started afresh in `slot` (the
/// host runs one instance a task, but a parser must never carry one run into the next).
/// A refused run leaves the slot as it was.
pub fn launch<H: Harness>(
    slot: &Slot<H::Parser>,
    request: wit::LaunchRequest,
) -> Result<wit::LaunchPlan, String> {
    let (plan, parser) = H::launch(&request.into())?;
    *slot.lock() = Some(parser);
    Ok(plan.into())
}

/// A driver's `parse`, with the run's parser.
pub fn parse<H: Harness>(slot: &Slot<H::Parser>, line: &str) -> Vec<wit::Event> {
    slot.lock()
        .get_or_insert_with(H::Parser::default)
        .parse(line)
        .into_iter()
        .map(wit::Event::from)
        .collect()
}

/// A driver's `classify-exit`.
pub fn classify_exit<H: Harness>(status: wit::ExitStatus) -> wit::Failure {
    H::classify_exit(&status.into()).into()
}

/// Exports `murmur:process/harness` for a [`Harness`]: `export_process_driver!(Codex);` is
/// a driver crate's whole component.
#[macro_export]
macro_rules! export_process_driver {
    ($harness:ty) => {
        /// The run's parser; `launch` starts it afresh.
        static PARSER: $crate::harness::Slot<<$harness as $crate::harness::Harness>::Parser> =
            $crate::harness::Slot::new();

        struct Component;

        impl $crate::exports::murmur::process::harness::Guest for Component {
            fn describe() -> $crate::exports::murmur::process::harness::Description {
                $crate::harness::describe::<$harness>()
            }

            fn launch(
                request: $crate::exports::murmur::process::harness::LaunchRequest,
            ) -> Result<$crate::exports::murmur::process::harness::LaunchPlan, String> {
                $crate::harness::launch::<$harness>(&PARSER, request)
            }

            fn parse(line: String) -> Vec<$crate::exports::murmur::process::harness::Event> {
                $crate::harness::parse::<$harness>(&PARSER, &line)
            }

            fn classify_exit(
                status: $crate::exports::murmur::process::harness::ExitStatus,
            ) -> $crate::exports::murmur::process::harness::Failure {
                $crate::harness::classify_exit::<$harness>(status)
            }
        }

        $crate::export!(Component);
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Class;

    /// Counts the lines of its run and says which run it is.
    #[derive(Default)]
    struct Counter {
        run: String,
        lines: usize,
    }

    impl Parse for Counter {
        fn parse(&mut self, _line: &str) -> Vec<Event> {
            self.lines += 1;
            vec![Event::Note(format!("{} {}", self.run, self.lines))]
        }
    }

    struct Tester;

    impl Harness for Tester {
        type Parser = Counter;

        fn describe() -> Description {
            Description {
                harness: "tester",
                binary: "test",
                version_args: &["-V"],
                tested_versions: &["1.0"],
                interrupt: Interrupt::CloseStdin,
                key_env: "TEST_KEY",
                usage_covers_session: false,
            }
        }

        fn launch(request: &Request) -> Result<(Plan, Counter), String> {
            if request.task.is_empty() {
                return Err("no task".into());
            }
            let plan = Plan {
                args: vec![request.task.clone()],
                ..Plan::default()
            };
            let parser = Counter {
                run: request.task.clone(),
                lines: 0,
            };
            Ok((plan, parser))
        }

        fn classify_exit(exit: &Exit) -> Failure {
            Failure {
                class: Class::Refused,
                message: format!("{:?} {}", exit.code, exit.stderr_tail),
            }
        }
    }

    fn request(task: &str) -> wit::LaunchRequest {
        wit::LaunchRequest {
            task: task.into(),
            model: String::new(),
            endpoint: None,
            system_prompt: None,
            config: "{}".into(),
            resume: None,
            new_session: "s".into(),
            max_turns: 3,
            bridge: None,
            home: "/h".into(),
            workdir: "/w".into(),
            harness_version: None,
        }
    }

    fn notes(events: Vec<wit::Event>) -> Vec<String> {
        events
            .into_iter()
            .map(|event| match event {
                wit::Event::Note(note) => note,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn each_launch_starts_a_fresh_parser() {
        let slot = Slot::new();
        // Output before any launch is read by a default parser.
        assert_eq!(notes(parse::<Tester>(&slot, "x")), [" 1"]);
        let plan = launch::<Tester>(&slot, request("one")).unwrap();
        assert_eq!(plan.args, ["one"]);
        assert_eq!(plan.stdin, None);
        assert!(!plan.keep_stdin_open);
        assert_eq!(notes(parse::<Tester>(&slot, "x")), ["one 1"]);
        assert_eq!(notes(parse::<Tester>(&slot, "x")), ["one 2"]);
        // A refused run leaves the parser of the run before it.
        assert_eq!(launch::<Tester>(&slot, request("")).unwrap_err(), "no task");
        assert_eq!(notes(parse::<Tester>(&slot, "x")), ["one 3"]);
        launch::<Tester>(&slot, request("two")).unwrap();
        assert_eq!(notes(parse::<Tester>(&slot, "x")), ["two 1"]);
    }

    #[test]
    fn describe_and_classify_exit() {
        let description = describe::<Tester>();
        assert_eq!(description.harness, "tester");
        assert_eq!(description.version_args, ["-V"]);
        assert_eq!(description.tested_versions, ["1.0"]);
        assert_eq!(description.interrupt, wit::Interrupt::CloseStdin);
        assert_eq!(description.key_env, "TEST_KEY");
        let failure = classify_exit::<Tester>(wit::ExitStatus {
            code: Some(2),
            signal: None,
            stderr_tail: "bad".into(),
            interrupted: false,
        });
        assert_eq!(failure.class, wit::ExitClass::Refused);
        assert_eq!(failure.message, "Some(2) bad");
    }
}
