//! Opening built indexes without write access, and tantivy's panics turned into errors.
//!
//! A built index is never changed again (a rebuild writes a new generation), so readers take
//! no locks and write nothing: an index on a read-only file system, or owned by another user,
//! can be searched.
use std::cell::Cell;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

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

thread_local! {
    /// Depth of [`guard`] calls on this thread: their panics are reported as errors, so the
    /// panic hook stays quiet.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
}

static QUIET_HOOK: Once = Once::new();

/// Runs `f`, turning a panic inside it (tantivy panics on some corrupt files instead of
/// returning an error) into [`Error::Corrupt`] naming `path`.
///
/// The first call installs a panic hook that stays silent for panics inside `guard` on the
/// same thread and hands every other panic to the hook that was installed before.
pub(crate) fn guard<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(Cell::get) == 0 {
                previous(info);
            }
        }));
    });
    GUARDED.with(|g| g.set(g.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    result.unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown failure".into());
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
        // and the guard is re-entrant / leaves the thread unguarded afterwards
        assert_eq!(GUARDED.with(Cell::get), 0);
        assert_eq!(guard(Path::new("x"), || Ok(3)).unwrap(), 3);
    }
}
