//! `wasi:filesystem/types` with the workdir's growth counted: wasmtime-wasi's own
//! implementation underneath, each operation that can add to the workdir taking its
//! cost from the guest's `Account` first, and each that can free space saying so.
//!
//! What an operation costs is what `quota::measure` would count it, never less: a
//! `write` at an offset costs the blocks it adds past the file's end (a hole counts, as
//! a sparse file's apparent size does), a stream write its length, and a stream's first
//! write one block more (the block its file's end may newly take; an overwrite through a
//! stream is counted as growth until the next measurement gives it back), a stream
//! opened past the file's end the hole, a new file, directory or symlink one block, a
//! hard link what its file holds (the walk counts every name), `set-size` the growth.

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, ErrorCode, Host, HostDescriptor, HostDirectoryEntryStream,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsError, FsResult};

use super::stream::Metered;
use super::{Account, Cost, ENTRY_BYTES, Refused};
use crate::sandbox::Sandboxed;

/// WASI for a sandboxed store, its filesystem metered when the sandbox has an account
/// (`Sandbox::metered`): wasmtime-wasi's interfaces, then `wasi:filesystem/types`
/// defined again over them.
pub fn add_to_linker<T: Sandboxed + wasmtime_wasi::WasiView>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    linker.allow_shadowing(true);
    let added = types::add_to_linker::<T, Files>(linker, |t| t.sandbox().files());
    linker.allow_shadowing(false);
    added
}

struct Files;

impl HasData for Files {
    type Data<'a> = FsView<'a>;
}

/// wasmtime-wasi's filesystem view, and the account its writes are taken from.
pub struct FsView<'a> {
    pub fs: WasiFilesystemCtxView<'a>,
    pub account: Option<&'a Account>,
}

/// What a refusal is to a filesystem call: "no space", as a full disk would answer.
fn refused(_: Refused) -> FsError {
    ErrorCode::InsufficientSpace.into()
}

/// The size of the file `fd` names; `None` when it is no file (the call underneath
/// reports that). A size that cannot be read counts as empty: the call is charged
/// all it could add.
fn file_size(table: &ResourceTable, fd: &Resource<Descriptor>) -> Option<u64> {
    match table.get(fd) {
        Ok(Descriptor::File(f)) => Some(f.file.metadata().map_or(0, |m| m.len())),
        _ => None,
    }
}

/// `bytes` rounded up to whole blocks, as a file's blocks on disk count.
fn blocks(bytes: u64) -> u64 {
    bytes.div_ceil(ENTRY_BYTES).saturating_mul(ENTRY_BYTES)
}

/// A second handle on a borrowed descriptor, for a look before the call that takes it.
fn again(fd: &Resource<Descriptor>) -> Resource<Descriptor> {
    Resource::new_borrow(fd.rep())
}

impl Host for FsView<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        Host::convert_error_code(&mut self.fs, err)
    }

    fn filesystem_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        Host::filesystem_error_code(&mut self.fs, err)
    }
}

impl HostDescriptor for FsView<'_> {
    async fn write(
        &mut self,
        fd: Resource<Descriptor>,
        buf: Vec<u8>,
        offset: types::Filesize,
    ) -> FsResult<types::Filesize> {
        let Some(account) = self.account else {
            return HostDescriptor::write(&mut self.fs, fd, buf, offset).await;
        };
        let len = buf.len() as u64;
        let end = offset.saturating_add(len);
        let growth = file_size(self.fs.table, &fd)
            .map_or(0, |size| blocks(end).saturating_sub(blocks(size)));
        let cost = Cost {
            bytes: growth,
            what: super::What::Write(len),
        };
        let _landing = account.take(cost).await.map_err(refused)?;
        HostDescriptor::write(&mut self.fs, fd, buf, offset).await
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        let Some(account) = self.account else {
            return HostDescriptor::write_via_stream(&mut self.fs, fd, offset);
        };
        let hole = file_size(self.fs.table, &fd).map_or(0, |size| offset.saturating_sub(size));
        let landing = account.take_now(Cost::grow(hole)).map_err(refused)?;
        let stream = HostDescriptor::write_via_stream(&mut self.fs, fd, offset)?;
        // The hole appears with the stream's first write: it lands with it.
        let hole = landing.defer();
        self.meter_stream(stream, account, hole)
    }

    fn append_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let stream = HostDescriptor::append_via_stream(&mut self.fs, fd)?;
        match self.account {
            Some(account) => self.meter_stream(stream, account, 0),
            None => Ok(stream),
        }
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: types::Filesize) -> FsResult<()> {
        let Some(account) = self.account else {
            return HostDescriptor::set_size(&mut self.fs, fd, size).await;
        };
        let before = file_size(self.fs.table, &fd);
        let growth = before.map_or(0, |b| size.saturating_sub(b));
        let _landing = account.take(Cost::grow(growth)).await.map_err(refused)?;
        HostDescriptor::set_size(&mut self.fs, fd, size).await?;
        if before.is_some_and(|b| size < b) {
            account.freed();
        }
        Ok(())
    }

    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        oflags: types::OpenFlags,
        flags: types::DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        let Some(account) = self.account else {
            return HostDescriptor::open_at(&mut self.fs, fd, path_flags, path, oflags, flags)
                .await;
        };
        // An existing file is charged too: the next measurement gives it back.
        let cost = if oflags.contains(types::OpenFlags::CREATE) {
            Cost::new_entry("file", ENTRY_BYTES)
        } else {
            Cost::write(0)
        };
        let _landing = account.take(cost).await.map_err(refused)?;
        let opened =
            HostDescriptor::open_at(&mut self.fs, fd, path_flags, path, oflags, flags).await?;
        if oflags.contains(types::OpenFlags::TRUNCATE) {
            account.freed();
        }
        Ok(opened)
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        if let Some(account) = self.account {
            let _landing = account
                .take(Cost::new_entry("directory", ENTRY_BYTES))
                .await
                .map_err(refused)?;
            return HostDescriptor::create_directory_at(&mut self.fs, fd, path).await;
        }
        HostDescriptor::create_directory_at(&mut self.fs, fd, path).await
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<Descriptor>,
        src_path: String,
        dest_path: String,
    ) -> FsResult<()> {
        if let Some(account) = self.account {
            // A link's size is its target's text.
            let cost = Cost::new_entry("link", src_path.len() as u64);
            let _landing = account.take(cost).await.map_err(refused)?;
            return HostDescriptor::symlink_at(&mut self.fs, fd, src_path, dest_path).await;
        }
        HostDescriptor::symlink_at(&mut self.fs, fd, src_path, dest_path).await
    }

    async fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path_flags: types::PathFlags,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let Some(account) = self.account else {
            return HostDescriptor::link_at(
                &mut self.fs,
                fd,
                old_path_flags,
                old_path,
                new_descriptor,
                new_path,
            )
            .await;
        };
        // The walk counts each name of a file in full, so a hard link costs its file.
        let no_follow = types::PathFlags::empty();
        let size = HostDescriptor::stat_at(&mut self.fs, again(&fd), no_follow, old_path.clone())
            .await
            .map_or(0, |stat| stat.size);
        let cost = Cost::new_entry("link", size);
        let _landing = account.take(cost).await.map_err(refused)?;
        HostDescriptor::link_at(
            &mut self.fs,
            fd,
            old_path_flags,
            old_path,
            new_descriptor,
            new_path,
        )
        .await
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_fd: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        HostDescriptor::rename_at(&mut self.fs, fd, old_path, new_fd, new_path).await?;
        // It may have replaced a file.
        self.freed();
        Ok(())
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        HostDescriptor::unlink_file_at(&mut self.fs, fd, path).await?;
        self.freed();
        Ok(())
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        HostDescriptor::remove_directory_at(&mut self.fs, fd, path).await?;
        self.freed();
        Ok(())
    }

    // Everything else only reads, or changes no size: wasmtime-wasi's, as it is.

    async fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
        len: types::Filesize,
        advice: types::Advice,
    ) -> FsResult<()> {
        HostDescriptor::advise(&mut self.fs, fd, offset, len, advice).await
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        HostDescriptor::sync_data(&mut self.fs, fd).await
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorFlags> {
        HostDescriptor::get_flags(&mut self.fs, fd).await
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorType> {
        HostDescriptor::get_type(&mut self.fs, fd).await
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        HostDescriptor::set_times(&mut self.fs, fd, atim, mtim).await
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        len: types::Filesize,
        offset: types::Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        HostDescriptor::read(&mut self.fs, fd, len, offset).await
    }

    async fn read_directory(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<types::DirectoryEntryStream>> {
        HostDescriptor::read_directory(&mut self.fs, fd).await
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        HostDescriptor::sync(&mut self.fs, fd).await
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<types::DescriptorStat> {
        HostDescriptor::stat(&mut self.fs, fd).await
    }

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::DescriptorStat> {
        HostDescriptor::stat_at(&mut self.fs, fd, path_flags, path).await
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        HostDescriptor::set_times_at(&mut self.fs, fd, path_flags, path, atim, mtim).await
    }

    fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        HostDescriptor::drop(&mut self.fs, fd)
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        HostDescriptor::readlink_at(&mut self.fs, fd, path).await
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        HostDescriptor::read_via_stream(&mut self.fs, fd, offset)
    }

    async fn is_same_object(
        &mut self,
        a: Resource<Descriptor>,
        b: Resource<Descriptor>,
    ) -> wasmtime::Result<bool> {
        HostDescriptor::is_same_object(&mut self.fs, a, b).await
    }

    async fn metadata_hash(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<types::MetadataHashValue> {
        HostDescriptor::metadata_hash(&mut self.fs, fd).await
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::MetadataHashValue> {
        HostDescriptor::metadata_hash_at(&mut self.fs, fd, path_flags, path).await
    }
}

impl HostDirectoryEntryStream for FsView<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<types::DirectoryEntryStream>,
    ) -> FsResult<Option<types::DirectoryEntry>> {
        HostDirectoryEntryStream::read_directory_entry(&mut self.fs, stream).await
    }

    fn drop(&mut self, stream: Resource<types::DirectoryEntryStream>) -> wasmtime::Result<()> {
        HostDirectoryEntryStream::drop(&mut self.fs, stream)
    }
}

impl FsView<'_> {
    /// Swaps the stream the call underneath made for a metered one.
    fn meter_stream(
        &mut self,
        stream: Resource<DynOutputStream>,
        account: &Account,
        unlanded: u64,
    ) -> FsResult<Resource<DynOutputStream>> {
        let inner = match self.fs.table.delete(stream) {
            Ok(inner) => inner,
            Err(e) => {
                account.land(unlanded);
                return Err(e.into());
            }
        };
        let metered: DynOutputStream = Box::new(Metered::new(inner, account.clone(), unlanded));
        Ok(self.fs.table.push(metered)?)
    }

    fn freed(&self) {
        if let Some(account) = self.account {
            account.freed();
        }
    }
}
