use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;
use crate::quota::Quota;

const BLOCK: u64 = 4096;

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mur-meter-{}", crate::ids::event()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn meter(dir: &Path, limit: u64) -> Arc<Meter> {
    Meter::new(&Quota {
        root: dir.to_path_buf(),
        baseline: quota::measure(dir, u64::MAX).bytes,
        limit,
    })
}

/// What a guest appending `BLOCK` bytes at a time does: take, write, land.
fn append(account: &Account, file: &Path) -> Result<(), Refused> {
    let landing = account.take_now(Cost::write(BLOCK))?;
    let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    f.write_all(&[7u8; BLOCK as usize]).unwrap();
    drop(landing);
    Ok(())
}

fn create(account: &Account, file: &Path) {
    let landing = account.take_now(Cost::new_entry("file", 0)).unwrap();
    std::fs::write(file, b"").unwrap();
    drop(landing);
}

#[test]
fn writes_within_the_mark_need_no_walk_and_crossing_it_measures_again() {
    let dir = scratch();
    let meter = meter(&dir, 8 * BLOCK);
    let account = meter.account();
    // Nothing reaches the disk: every crossing's walk finds the workdir empty and gives
    // the whole quota back, so far more than the quota is taken in all.
    for _ in 0..100 {
        drop(account.take_now(Cost::write(BLOCK)).unwrap());
    }
    assert_eq!(meter.taken.load(SeqCst), 100 * BLOCK);
    // The first take measured (the mark starts at zero); the next 7 fitted under it.
    assert!(meter.mark.load(SeqCst) >= 100 * BLOCK);
    assert_eq!(account.refusal(), None);
}

#[test]
fn overwriting_one_file_again_and_again_is_not_refused() {
    let dir = scratch();
    let meter = meter(&dir, 8 * BLOCK);
    let account = meter.account();
    let file = dir.join("same.bin");
    for _ in 0..20 {
        create(&account, &file);
        let landing = account.take_now(Cost::write(4 * BLOCK)).unwrap();
        std::fs::write(&file, vec![1u8; 4 * BLOCK as usize]).unwrap();
        drop(landing);
    }
    assert_eq!(account.refusal(), None);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 4 * BLOCK);
}

#[test]
fn the_write_that_would_pass_the_quota_is_refused_naming_the_key() {
    let dir = scratch();
    let limit = 8 * BLOCK;
    let meter = meter(&dir, limit);
    let account = meter.account();
    let file = dir.join("flood.bin");
    create(&account, &file);
    let mut written = 0;
    let refused = loop {
        match append(&account, &file) {
            Ok(()) => written += 1,
            Err(refused) => break refused,
        }
        assert!(written < 100, "never refused");
    };
    let on_disk = quota::measure(&dir, u64::MAX).bytes;
    assert!(on_disk <= limit, "{on_disk} bytes on disk");
    // The charge for creating the file is given back by the walk: the file fills the
    // quota (unless the filesystem rounds its blocks up further).
    assert!(written >= 7, "only {written} writes fitted");
    assert!(
        refused.text.starts_with(
            "workdir size breach: a write of 4096 bytes was refused: the session workdir \
             would grow by "
        ) && refused
            .text
            .ends_with(" bytes, over capabilities.limits.workdir_bytes (32768)"),
        "{}",
        refused.text
    );
    assert!(refused.bytes > limit);
    // The first refusal is kept; a later one does not replace it.
    assert!(account.take_now(Cost::new_entry("directory", 0)).is_err());
    assert_eq!(account.refusal(), Some(refused));
}

#[test]
fn space_freed_by_the_guest_is_given_back() {
    let dir = scratch();
    let meter = meter(&dir, 4 * BLOCK);
    let account = meter.account();
    let file = dir.join("a.bin");
    create(&account, &file);
    while append(&account, &file).is_ok() {}
    assert!(append(&account, &file).is_err(), "refused again, no walk");
    std::fs::remove_file(&file).unwrap();
    account.freed();
    create(&account, &file);
    assert!(append(&account, &file).is_ok());
}

#[test]
fn writes_in_flight_elsewhere_count_when_the_host_measures() {
    let dir = scratch();
    let meter = meter(&dir, 2 * BLOCK);
    let one = meter.account();
    // Taken but not yet on disk when another guest makes the host look.
    let in_flight = one.take_now(Cost::write(BLOCK)).unwrap();
    let other = meter.account();
    let landing = other.take_now(Cost::write(BLOCK)).unwrap();
    std::fs::write(dir.join("other.bin"), [7u8; BLOCK as usize]).unwrap();
    drop(landing);
    // On disk: one block; in flight: one block. The quota holds no third.
    assert!(other.take_now(Cost::write(BLOCK)).is_err());
    drop(in_flight);
}

#[test]
fn the_async_path_measures_off_the_runtime_and_remembers_the_refusal() {
    let dir = scratch();
    let meter = meter(&dir, 2 * BLOCK);
    let account = meter.account();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let landing = account.take(Cost::write(2 * BLOCK)).await.unwrap();
        std::fs::write(dir.join("full.bin"), [7u8; 2 * BLOCK as usize]).unwrap();
        drop(landing);
        let refused = account.take(Cost::grow(1)).await.map(drop).unwrap_err();
        assert!(
            refused
                .text
                .starts_with("workdir size breach: growing a file by 1 bytes was refused")
        );
    });
    assert!(account.refusal().is_some());
}

#[test]
fn a_refusal_is_no_space_to_libc_and_names_the_key_in_its_text() {
    let err = stream::no_space(Refused {
        text: "workdir size breach: x, over capabilities.limits.workdir_bytes (1)".into(),
        bytes: 2,
    });
    let io = err.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(io.raw_os_error(), Some(libc::ENOSPC));
    // What `wasi:io/error.to-debug-string` shows the guest.
    let shown = format!("{err:?}");
    assert!(
        shown.starts_with("workdir size breach: x, over capabilities.limits.workdir_bytes (1)"),
        "{shown}"
    );
}

/// A file behind an output stream, as wasmtime-wasi's own but synchronous.
struct FileSink(std::fs::File);

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for FileSink {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::OutputStream for FileSink {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.0.write_all(&bytes).unwrap();
        Ok(())
    }

    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(BLOCK as usize)
    }
}

#[test]
fn a_metered_stream_fails_the_write_that_would_pass_with_the_limit_in_its_error() {
    use wasmtime_wasi::p2::{OutputStream, StreamError};
    let dir = scratch();
    let limit = 4 * BLOCK;
    let meter = meter(&dir, limit);
    let account = meter.account();
    let file = dir.join("flood.bin");
    create(&account, &file);
    let sink = FileSink(std::fs::File::create(&file).unwrap());
    let mut stream = stream::Metered::new(Box::new(sink), account.clone(), 0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let chunk = bytes::Bytes::from(vec![7u8; BLOCK as usize]);
    let failed = runtime.block_on(async {
        for _ in 0..100 {
            if let Err(e) = stream.blocking_write_and_flush(chunk.clone()).await {
                return e;
            }
        }
        panic!("never refused");
    });
    let StreamError::LastOperationFailed(e) = failed else {
        panic!("{failed:?}");
    };
    assert!(
        format!("{e:?}").contains("over capabilities.limits.workdir_bytes (16384)"),
        "{e:?}"
    );
    // The non-blocking path is refused too.
    assert!(stream.write(chunk).is_err());
    assert!(std::fs::metadata(&file).unwrap().len() <= limit);
    assert!(account.refusal().is_some());
}
