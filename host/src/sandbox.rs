//! The WASI sandbox of one component instance: what it may see (the workdir or no
//! filesystem, only granted environment variables, no sockets) and the limits that keep
//! the host safe whatever it does (memory cap, wall-clock deadline).

use std::path::Path;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView};

use crate::error::Error;
use crate::guest_log::{self, Output};
use crate::memory::{Cap, Limiter};

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
}

impl Sandbox {
    pub fn new(grants: &Grants<'_>) -> Result<Self, Error> {
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
        Ok(Sandbox {
            wasi: builder.build(),
            table: ResourceTable::new(),
            limits: Limiter::new(&grants.memory),
            running_since: Instant::now(),
            deadline: grants.deadline,
            _output: output,
        })
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
/// never holds a runtime thread.
pub fn limit<T: Sandboxed>(store: &mut Store<T>) {
    store.limiter(|s| &mut s.sandbox().limits);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut ctx| {
        let sandbox = ctx.data_mut().sandbox();
        if sandbox.running_since.elapsed() > sandbox.deadline {
            return Err(wasmtime::Error::msg(crate::deadline::exceeded(
                sandbox.deadline,
            )));
        }
        Ok(UpdateDeadline::Yield(1))
    });
}
