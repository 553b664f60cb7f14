//! The process driver component (`murmur:process/process-driver`): linked once, with
//! WASI granted nothing (no files, no environment, no sockets), and instantiated fresh
//! for each run, so what one run's `parse` kept never reaches the next. Every call has
//! the capsule's deadline and memory cap.

use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use crate::bindings::process::exports::murmur::process::harness::{
    Description, Event, ExitStatus, Failure, LaunchPlan, LaunchRequest,
};
use crate::bindings::process::{ProcessDriver as Bindings, ProcessDriverPre};
use crate::deadline::{self, Clock};
use crate::driver::trap_text;
use crate::engine::{self, Engine};
use crate::error::Error;
use crate::guest_log;
use crate::sandbox::{self, Grants, Sandbox, Sandboxed};

pub struct State {
    sandbox: Sandbox,
}

impl Sandboxed for State {
    fn sandbox(&mut self) -> &mut Sandbox {
        &mut self.sandbox
    }
}
sandbox::wasi_view!(State);

/// What a driver instance is held to.
#[derive(Clone)]
pub struct Limits {
    pub memory: crate::memory::Cap,
    pub cpu: Option<crate::cpu::Account>,
    pub deadline: Duration,
    /// Its own stdout and stderr (`logs/driver.log`).
    pub output: guest_log::Target,
}

/// A process driver, checked against its world and linked.
pub struct ProcessDriver {
    pre: ProcessDriverPre<State>,
    limits: Limits,
    pub label: String,
}

impl ProcessDriver {
    /// # Errors
    ///
    /// `E-RUN-030`/`E-RUN-031`: the component is not a process driver of the version
    /// this mur serves, or imports what the world does not give.
    pub fn new(
        engine: &Engine,
        component: &Component,
        label: String,
        limits: Limits,
    ) -> Result<Self, Error> {
        let pre = engine.linked(component, || link(engine, component, &label))?;
        Ok(ProcessDriver { pre, limits, label })
    }

    /// A fresh instance.
    ///
    /// # Errors
    ///
    /// Why it could not be started, in words.
    pub async fn instance(&self) -> Result<Instance, String> {
        let sandbox = Sandbox::new(&Grants {
            workdir: None,
            env: Vec::new(),
            memory: self.limits.memory.clone(),
            cpu: self.limits.cpu.clone(),
            deadline: self.limits.deadline,
            output: self.limits.output.clone(),
        })
        .map_err(|e| e.message)?;
        let mut store = Store::new(self.pre.engine(), State { sandbox });
        sandbox::limit(&mut store);
        let deadline = self.limits.deadline;
        let bindings = Clock::running(deadline)
            .bound(self.pre.instantiate_async(&mut store))
            .await
            .unwrap_or_else(|| Err(wasmtime::Error::msg(deadline::exceeded(deadline))))
            .map_err(|e| format!("{} could not be started: {}", self.label, trap_text(&e)))?;
        Ok(Instance {
            store,
            bindings,
            deadline,
            label: self.label.clone(),
        })
    }

    /// What the driver drives.
    ///
    /// # Errors
    ///
    /// The driver could not be started or trapped.
    pub async fn describe(&self) -> Result<Description, String> {
        let mut instance = self.instance().await?;
        let (deadline, label) = instance.begin();
        let call = instance
            .bindings
            .murmur_process_harness()
            .call_describe(&mut instance.store);
        bounded(deadline, &label, call).await
    }
}

/// One run's instance.
pub struct Instance {
    store: Store<State>,
    bindings: Bindings,
    deadline: Duration,
    label: String,
}

/// One call under the deadline; a trap is its cause in words.
async fn bounded<T>(
    deadline: Duration,
    label: &str,
    call: impl std::future::Future<Output = wasmtime::Result<T>>,
) -> Result<T, String> {
    let called = Clock::running(deadline)
        .bound(call)
        .await
        .unwrap_or_else(|| Err(wasmtime::Error::msg(deadline::exceeded(deadline))));
    called.map_err(|e| format!("{label} failed: {}", trap_text(&e)))
}

impl Instance {
    /// A call begins: the epoch deadline counts from now.
    fn begin(&mut self) -> (Duration, String) {
        self.store.data_mut().sandbox.running_since = std::time::Instant::now();
        (self.deadline, self.label.clone())
    }

    /// `Ok(Err)` is the driver's refusal of the run.
    pub async fn launch(
        &mut self,
        request: &LaunchRequest,
    ) -> Result<Result<LaunchPlan, String>, String> {
        let (deadline, label) = self.begin();
        let call = self
            .bindings
            .murmur_process_harness()
            .call_launch(&mut self.store, request);
        bounded(deadline, &label, call).await
    }

    pub async fn parse(&mut self, line: &str) -> Result<Vec<Event>, String> {
        let (deadline, label) = self.begin();
        let call = self
            .bindings
            .murmur_process_harness()
            .call_parse(&mut self.store, line);
        bounded(deadline, &label, call).await
    }

    pub async fn classify_exit(&mut self, exit: &ExitStatus) -> Result<Failure, String> {
        let (deadline, label) = self.begin();
        let call = self
            .bindings
            .murmur_process_harness()
            .call_classify_exit(&mut self.store, exit);
        bounded(deadline, &label, call).await
    }
}

/// Checks a process driver against its world and links it.
pub(crate) fn link(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<ProcessDriverPre<State>, Error> {
    engine::check_world(engine, component, &engine::PROCESS_DRIVER, label)?;
    let error = |e: wasmtime::Error| {
        Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}"))
            .hint("a process driver may import only WASI 0.2, and is granted nothing through it")
    };
    let mut linker = Linker::<State>::new(engine.wasmtime());
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(error)?;
    linker
        .instantiate_pre(component)
        .and_then(ProcessDriverPre::new)
        .map_err(error)
}
