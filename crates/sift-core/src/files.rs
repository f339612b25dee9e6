//! Reading a file named on the command line or in a list without the ways that can hang or
//! exhaust a process: a FIFO, a device (`/dev/zero`) or a directory is refused before any
//! byte is read, and a file longer than a limit is refused without reading past it.
use std::io::Read;
use std::path::Path;

use crate::{Error, Result};

/// Opens `path` for reading without blocking (a FIFO would wait for a writer) and checks,
/// through the open handle, that it is a regular file.
pub fn open_regular_file(path: &Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::NotAFile {
            path: path.to_path_buf(),
            kind: file_kind(&meta),
        });
    }
    #[cfg(unix)]
    {
        // back to blocking reads (O_NONBLOCK has no effect on regular files, but say so)
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor this function owns, with flags it read from it
        unsafe {
            let fd = file.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
    }
    Ok(file)
}

/// Reads the regular file `path` whole, refusing anything else ([`Error::NotAFile`]) and
/// files of more than `max_bytes` bytes ([`Error::FileTooLarge`]; nothing past the limit is
/// read, even when the file grows while being read).
pub fn read_regular_file(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    let file = open_regular_file(path)?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let too_large = |size: u64| Error::FileTooLarge {
        path: path.to_path_buf(),
        size,
        limit: max_bytes,
    };
    if len > max_bytes {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

pub(crate) fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO";
        } else if t.is_char_device() {
            return "a character device";
        } else if t.is_block_device() {
            return "a block device";
        } else if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_and_long_files_too() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_regular_file(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("a character device"), "{err}");
        let err = read_regular_file(dir.path(), 10).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
        #[cfg(unix)]
        {
            let fifo = dir.path().join("fifo");
            let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let err = read_regular_file(&fifo, 10).unwrap_err();
            assert!(err.to_string().contains("a FIFO"), "{err}");
        }
        let file = dir.path().join("f");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_regular_file(&file, 10).unwrap(), b"0123456789");
        let err = read_regular_file(&file, 9).unwrap_err();
        assert!(
            err.to_string().contains("10 bytes") && err.to_string().contains("9"),
            "{err}"
        );
    }
}
