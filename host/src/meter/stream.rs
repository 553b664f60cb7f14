//! A file's output stream with its writes counted: a write the meter refuses fails with
//! `last-operation-failed`, whose error says "no space" to `filesystem-error-code`
//! (what wasi-libc and Rust's std turn into `ENOSPC`) and names the quota to a guest
//! that reads its debug string.

use bytes::Bytes;
use wasmtime_wasi::async_trait;
use wasmtime_wasi::p2::{DynOutputStream, OutputStream, Pollable, StreamError, StreamResult};

use super::{Account, Cost, ENTRY_BYTES, Refused, What};

pub struct Metered {
    inner: DynOutputStream,
    account: Account,
    /// Bytes taken for writes the inner stream has not finished yet.
    unlanded: u64,
    /// What the next write costs besides its bytes: one block, until the first write
    /// is taken (the block the file's end may newly take: a file that existed at the
    /// last measurement is counted in whole blocks, which a write's bytes may not fill).
    first: u64,
}

impl Metered {
    /// `unlanded`: bytes already taken for this stream (a hole its first write leaves).
    pub fn new(inner: DynOutputStream, account: Account, unlanded: u64) -> Self {
        Metered {
            inner,
            account,
            unlanded,
            first: ENTRY_BYTES,
        }
    }

    /// The cost of a write of `n` bytes.
    fn cost(&self, n: u64) -> Cost {
        Cost {
            bytes: n.saturating_add(self.first),
            what: What::Write(n),
        }
    }

    fn land(&mut self) {
        if self.unlanded > 0 {
            self.account.land(std::mem::take(&mut self.unlanded));
        }
    }
}

/// The error a refused operation becomes: `ENOSPC` for the code a guest's libc reads,
/// the refusal's text for its debug string.
pub fn no_space(refused: Refused) -> wasmtime::Error {
    wasmtime::Error::new(std::io::Error::from_raw_os_error(libc::ENOSPC)).context(refused.text)
}

fn refused(refused: Refused) -> StreamError {
    StreamError::LastOperationFailed(no_space(refused))
}

#[async_trait]
impl OutputStream for Metered {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let cost = self.cost(bytes.len() as u64);
        let landing = self.account.take_now(cost).map_err(refused)?;
        self.first = 0;
        // A file stream's write runs in the background: it has finished once the
        // stream is ready again (`ready`, `check_write`).
        self.unlanded += landing.defer();
        self.inner.write(bytes)
    }

    /// The path wasi-libc takes for a blocking write: the inner stream's own, which
    /// skips a task per write.
    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> StreamResult<()> {
        let cost = self.cost(bytes.len() as u64);
        let landing = self.account.take(cost).await.map_err(refused)?;
        self.first = 0;
        let written = self.inner.blocking_write_and_flush(bytes).await;
        drop(landing);
        // It waited for the earlier writes too.
        self.land();
        written
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        let permit = self.inner.check_write();
        if !matches!(permit, Ok(0)) {
            self.land();
        }
        permit
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
        self.land();
    }
}

#[async_trait]
impl Pollable for Metered {
    async fn ready(&mut self) {
        self.inner.ready().await;
        self.land();
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.land();
    }
}
