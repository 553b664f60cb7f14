//! The process driver world's scenarios. A process driver only translates, so the
//! check calls it directly, without a harness: it must describe itself, plan a first run
//! and a resumed one within the rules the host holds every plan to, read lines it has
//! never seen (garbage, a huge one, unknown JSON) without trapping, and classify every
//! kind of exit. Each call has the capsule's default deadline and memory cap.

use std::time::Duration;

use super::Target;
use super::report::{Outcome, Scenario, Step, ensure, fail};
use crate::bindings::process::exports::murmur::process::harness::{
    Bridge, Description, ExitStatus, LaunchPlan, LaunchRequest,
};
use crate::engine::Engine;
use crate::harness::component::{Instance, Limits, ProcessDriver};

/// Lines a harness could print that no driver should trap on.
const ODD_LINES: &[&str] = &[
    "",
    "not json at all",
    "{\"type\":\"never-heard-of\",\"x\":[1,2,3]}",
    "{\"type\":",
    "[1,2,3]",
    "null",
    "\u{1b}[2J\u{1b}]0;title\u{7}",
];

pub fn scenarios(target: &Target) -> Vec<Scenario> {
    // The check may run inside mur's own runtime: the calls get a thread and a runtime
    // of their own.
    std::thread::scope(|scope| {
        scope
            .spawn(|| run(target))
            .join()
            .unwrap_or_else(|_| vec![Scenario::run("loads", || Err(fail("the check panicked")))])
    })
}

fn run(target: &Target) -> Vec<Scenario> {
    let driver = match load(target) {
        Ok(driver) => driver,
        Err(why) => return vec![Scenario::run("loads", || Err(fail(why)))],
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return vec![Scenario::run("loads", || Err(fail(e.to_string())))],
    };
    let mut described = None;
    let mut scenarios = vec![Scenario::run("describe names the harness", || {
        let description = runtime.block_on(driver.describe()).map_err(fail)?;
        let named = !description.harness.is_empty() && !description.binary.is_empty();
        ensure(named, || "describe names no harness or no binary".into())?;
        let reserved = crate::harness::reserved_env(&description.key_env);
        ensure(!reserved, || {
            format!(
                "its key-env '{}' is a name the host sets itself",
                description.key_env
            )
        })?;
        described = Some(description);
        Ok(())
    })];
    for (name, resume) in [
        ("plans a first run", None),
        (
            "plans a resumed run",
            Some("0b7c9c1e-2a52-4c39-9d5f-61f0e3c1a001"),
        ),
    ] {
        scenarios.push(Scenario::run(name, || {
            let mut instance = runtime.block_on(driver.instance()).map_err(fail)?;
            let plan = runtime
                .block_on(instance.launch(&request(resume)))
                .map_err(fail)?;
            let plan = plan.map_err(|why| fail(format!("it refused the run: {why}")))?;
            plan_holds(&plan, described.as_ref())
        }));
    }
    scenarios.push(Scenario::run("reads odd lines without trapping", || {
        let mut instance = launched(&runtime, &driver)?;
        let huge = "x".repeat(1024 * 1024);
        for line in ODD_LINES
            .iter()
            .copied()
            .chain(std::iter::once(huge.as_str()))
        {
            runtime
                .block_on(instance.parse(line))
                .map_err(|why| fail(format!("on a line of {} bytes: {why}", line.len())))?;
        }
        Ok(())
    }));
    scenarios.push(Scenario::run("classifies every exit", || {
        let mut instance = launched(&runtime, &driver)?;
        for (code, signal, interrupted) in [
            (Some(0), None, false),
            (Some(1), None, false),
            (None, Some(9), false),
            (None, Some(2), true),
        ] {
            let exit = ExitStatus {
                code,
                signal,
                stderr_tail: "Error: something went wrong\n".into(),
                interrupted,
            };
            let failure = runtime
                .block_on(instance.classify_exit(&exit))
                .map_err(fail)?;
            ensure(!failure.message.is_empty(), || {
                format!("classify-exit gave no words for {code:?}/{signal:?}")
            })?;
        }
        Ok(())
    }));
    scenarios
}

fn load(target: &Target) -> Result<ProcessDriver, String> {
    let engine = Engine::new().map_err(|e| e.message)?;
    let label = format!("process driver '{}'", target.name);
    let component = engine.load(&target.bytes, &label).map_err(|e| e.message)?;
    let defaults = crate::manifest::Capabilities::default();
    let limits = Limits {
        memory: crate::memory::Cap {
            each: defaults.memory_bytes,
            shared: None,
            hostcall_bytes: defaults.limits.hostcall_bytes(),
        },
        cpu: None,
        deadline: Duration::from_secs(defaults.deadline_seconds.min(30)),
        output: crate::guest_log::Target {
            label: label.clone(),
            path: std::env::temp_dir().join(format!("mur-check-{}.log", target.name)),
        },
    };
    ProcessDriver::new(&engine, &component, label, limits).map_err(|e| e.message)
}

/// An instance that has planned a first run, as `parse` always follows `launch`.
fn launched(
    runtime: &tokio::runtime::Runtime,
    driver: &ProcessDriver,
) -> Result<Instance, Outcome> {
    let mut instance = runtime.block_on(driver.instance()).map_err(fail)?;
    let _ = runtime
        .block_on(instance.launch(&request(None)))
        .map_err(fail)?;
    Ok(instance)
}

fn request(resume: Option<&str>) -> LaunchRequest {
    LaunchRequest {
        task: "Count the words of task.md.".into(),
        model: "test-model".into(),
        endpoint: Some("http://127.0.0.1:9".into()),
        system_prompt: Some("Be brief.".into()),
        config: "{}".into(),
        resume: resume.map(str::to_string),
        new_session: "11111111-2222-4333-8444-555555555555".into(),
        max_turns: 10,
        bridge: Some(Bridge {
            server_name: crate::harness::bridge::SERVER_NAME.into(),
            url: "http://127.0.0.1:9/mcp".into(),
            token_env: crate::harness::bridge::TOKEN_ENV.into(),
            tools: vec!["wordcount".into(), "bash".into()],
        }),
        home: "/nonexistent/harness-home".into(),
        workdir: "/nonexistent/workdir".into(),
        harness_version: None,
    }
}

/// What the host would refuse of a plan: a variable it sets itself, a file outside the
/// home.
fn plan_holds(plan: &LaunchPlan, described: Option<&Description>) -> Step {
    let key_env = described.map_or("", |d| d.key_env.as_str());
    if let Some((name, _)) = plan
        .env
        .iter()
        .find(|(n, _)| crate::harness::reserved_env(n) || n == key_env)
    {
        return Err(fail(format!("it sets '{name}', which only the host sets")));
    }
    if let Some(file) = plan
        .files
        .iter()
        .find(|f| !crate::harness::inside_home(&f.path))
    {
        return Err(fail(format!(
            "it writes '{}', outside the harness home",
            file.path
        )));
    }
    Ok(())
}
