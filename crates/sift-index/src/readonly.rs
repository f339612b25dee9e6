//! Opening built indexes without write access, and tantivy's panics turned into errors.
//!
//! A built index is never changed again (a rebuild writes a new generation), so readers take
//! no locks and write nothing: an index on a read-only file system, or owned by another user,
//! can be searched.
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, WatchCallback, WatchHandle, WritePtr,
};

use crate::{Error, Result};

/// tantivy's memory-mapped directory with every write refused and locks that are no-ops:
/// tantivy's reader takes its meta lock by creating a lock file, which fails on a read-only
/// file system ("Failed to acquire Lockfile: ReadOnlyFilesystem").
#[derive(Debug, Clone)]
pub(crate) struct ReadOnlyDirectory(MmapDirectory);

impl ReadOnlyDirectory {
    pub(crate) fn open(dir: &Path) -> Result<ReadOnlyDirectory> {
        MmapDirectory::open(dir)
            .map(ReadOnlyDirectory)
            .map_err(|e| Error::Corrupt {
                path: dir.to_path_buf(),
                message: format!("cannot open the BM25 index: {e}"),
            })
    }
}

fn read_only(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{}: the index is opened read-only", path.display()),
    )
}

impl Directory for ReadOnlyDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.0.get_file_handle(path)
    }
    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        Err(DeleteError::IoError {
            io_error: Arc::new(read_only(path)),
            filepath: path.to_path_buf(),
        })
    }
    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.0.exists(path)
    }
    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        Err(OpenWriteError::IoError {
            io_error: Arc::new(read_only(path)),
            filepath: path.to_path_buf(),
        })
    }
    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.0.atomic_read(path)
    }
    fn atomic_write(&self, path: &Path, _data: &[u8]) -> io::Result<()> {
        Err(read_only(path))
    }
    fn sync_directory(&self) -> io::Result<()> {
        Ok(())
    }
    fn acquire_lock(&self, _lock: &Lock) -> Result<DirectoryLock, LockError> {
        // nothing writes to a built index, so there is nothing to exclude
        Ok(DirectoryLock::from(Box::new(())))
    }
    fn watch(&self, _callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        Ok(WatchHandle::empty())
    }
}

/// Runs `f`, turning a panic inside it (tantivy panics on some corrupt files instead of
/// returning an error) into [`Error::Corrupt`] naming `path`.
pub(crate) fn guard<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    sift_core::catch_panics(f).unwrap_or_else(|what| {
        Err(Error::Corrupt {
            path: PathBuf::from(path),
            message: format!("reading it failed ({what}); rebuild the index"),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_guard_is_a_corrupt_index_error() {
        let r: Result<()> = guard(Path::new("x"), || panic!("bad block"));
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("x: index is corrupt") && msg.contains("bad block"),
            "{msg}"
        );
        assert_eq!(guard(Path::new("x"), || Ok(3)).unwrap(), 3);
    }
}
