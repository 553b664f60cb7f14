//! The WASI sandbox of one component instance: what it may see (the workdir or no
//! filesystem, only granted environment variables, no sockets) and the limits that keep
//! the host safe whatever it does (memory cap, wall-clock deadline).

use std::path::Path;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::filesystem::WasiFilesystemCtxView;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView};

use crate::error::Error;
use crate::guest_log::{self, Output};
use crate::memory::{Cap, Limiter};
use crate::meter::{Account, FsView};

/// What every guest store carries besides its own state.
pub struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limits: Limiter,
    /// Where the epoch deadline counts from: the call's (or the loop's task's) start.
    pub running_since: Instant,
    pub deadline: Duration,
    /// Ends the instance's last line in its log when the store goes.
    _output: Output,
    /// What the guest's writes to the workdir are counted against (`Sandbox::metered`).
    meter: Option<Account>,
    /// What the guest's CPU time is charged to, under `mur serve`.
    cpu: Option<crate::cpu::Meter>,
}

/// What a component is granted.
pub struct Grants<'a> {
    /// Preopened as `/`; `None` means no filesystem at all.
    pub workdir: Option<&'a Path>,
    pub env: Vec<(String, String)>,
    pub memory: Cap,
    pub deadline: Duration,
    /// Where the component's stdout and stderr go (`logs/<component>.log`).
    pub output: guest_log::Target,
    /// The capsule's CPU account, when it has one to be held to.
    pub cpu: Option<crate::cpu::Account>,
}

impl Sandbox {
    pub fn new(grants: &Grants<'_>) -> Result<Self, Error> {
        Self::build(grants, None)
    }

    /// [`Sandbox::new`], and `dir` preopened read-only at `guest` besides the workdir:
    /// an upstream capsule component's runtime directory (`murmur-runtime`, its task).
    pub fn with_read_only(grants: &Grants<'_>, dir: &Path, guest: &str) -> Result<Self, Error> {
        Self::build(grants, Some((dir, guest)))
    }

    fn build(grants: &Grants<'_>, read_only: Option<(&Path, &str)>) -> Result<Self, Error> {
        let mut builder = WasiCtxBuilder::new();
        // Guest panics and prints are diagnostics for the component's author: its log,
        // escaped, never our stdout (which `--json` keeps to one line) nor raw on our
        // stderr (where they could pass for mur's own lines).
        let output = Output::new(&grants.output);
        builder.stdout(output.stdout()).stderr(output.stderr());
        builder.envs(&grants.env);
        builder
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        builder.socket_addr_check(|_, _| Box::pin(async { false }));
        if let Some(dir) = grants.workdir {
            builder
                .preopened_dir(dir, "/", FsPerms::ReadWrite)
                .map_err(|e| {
                    Error::new(
                        "E-IO-003",
                        format!(
                            "could not open the workdir {} for a component: {e:#}",
                            dir.display()
                        ),
                    )
                })?;
        }
        if let Some((dir, guest)) = read_only {
            builder
                .preopened_dir(dir, guest, FsPerms::ReadOnly)
                .map_err(|e| {
                    Error::new(
                        "E-IO-003",
                        format!("could not open {} for a component: {e:#}", dir.display()),
                    )
                })?;
        }
        Ok(Sandbox {
            wasi: builder.build(),
            table: ResourceTable::new(),
            limits: Limiter::new(&grants.memory),
            running_since: Instant::now(),
            deadline: grants.deadline,
            _output: output,
            meter: None,
            cpu: grants.cpu.clone().map(crate::cpu::Meter::new),
        })
    }

    /// Counts the guest's writes to the workdir as they happen, through a linker of
    /// `meter::add_to_linker`: the write that would pass the quota fails.
    pub fn metered(mut self, account: Option<Account>) -> Self {
        self.meter = account;
        self
    }

    /// The filesystem as `meter::add_to_linker` serves it.
    pub fn files(&mut self) -> FsView<'_> {
        FsView {
            fs: WasiFilesystemCtxView {
                ctx: self.wasi.filesystem(),
                table: &mut self.table,
            },
            account: self.meter.as_ref(),
        }
    }

    /// The resource table, shared by WASI and wasi:http (their handles mix: a response
    /// body is a WASI stream).
    pub fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    pub fn view(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Store data that carries a sandbox.
pub trait Sandboxed: Send + 'static {
    fn sandbox(&mut self) -> &mut Sandbox;
}

/// Makes a sandboxed store type a WASI view (the orphan rule forbids a blanket impl).
macro_rules! wasi_view {
    ($ty:ty) => {
        impl wasmtime_wasi::WasiView for $ty {
            fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
                crate::sandbox::Sandboxed::sandbox(self).view()
            }
        }
    };
}
pub(crate) use wasi_view;

/// Applies the memory cap and the deadline to a store. The deadline counts from
/// `running_since` (a call's start; a loop's task start), and fires only while guest
/// code runs: it stops a spinning guest, while `crate::deadline::Clock` bounds the
/// same call in wall-clock time around host waits. Every tick the guest yields so it
/// never holds a runtime thread; a guest whose capsule has a CPU account charges it,
/// and pauses there while its capsule is past its allotment.
pub fn limit<T: Sandboxed>(store: &mut Store<T>) {
    store.limiter(|s| &mut s.sandbox().limits);
    // What one call may make the host allocate, from the capsule's own limits rather
    // than wasmtime's default of 128 MiB: past it the call fails before the host
    // builds anything.
    let fuel = store.data_mut().sandbox().limits.hostcall_bytes;
    store.set_hostcall_fuel(usize::try_from(fuel).unwrap_or(usize::MAX));
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut ctx| {
        let sandbox = ctx.data_mut().sandbox();
        if sandbox.running_since.elapsed() > sandbox.deadline {
            return Err(wasmtime::Error::msg(crate::deadline::exceeded(
                sandbox.deadline,
            )));
        }
        Ok(match &sandbox.cpu {
            Some(meter) => UpdateDeadline::YieldCustom(1, meter.tick()),
            None => UpdateDeadline::Yield(1),
        })
    });
}
