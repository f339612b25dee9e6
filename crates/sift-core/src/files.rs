//! The one way Sift reads a file a user names and writes a file a user asks for.
//!
//! Reading: a FIFO, a device (`/dev/zero`) or a directory is refused before any byte is read
//! (the open does not block on a FIFO without a writer), a file longer than a limit is refused
//! without reading past it, and a line longer than a limit stops a line reader with an error
//! naming the file and line (a regular file without newlines, such as a sparse one, cannot grow
//! a line buffer without bound). Every file argument of every command goes through
//! [`read_regular_file`], [`read_regular_text`], [`open_regular_file`] or [`Lines`].
//!
//! Writing: [`OutputFile`] writes a file atomically (a temporary file beside it, synced and
//! renamed into place), and never replaces what is not a regular file.
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The limit [`read_regular_text`]'s callers use for small text inputs a person writes
/// (prompt templates, instruction maps): 64 MiB.
pub const TEXT_FILE_LIMIT: u64 = 64 << 20;

/// The longest line [`Lines`] reads by default: 256 MiB (a corpus line holding a whole book
/// fits; a file without newlines stops there with an error).
pub const LINE_LIMIT: u64 = 256 << 20;

/// Opens `path` for reading without blocking (a FIFO would wait for a writer) and checks,
/// through the open handle, that it is a regular file.
pub fn open_regular_file(path: &Path) -> Result<std::fs::File> {
    open_regular(path, true)
}

/// [`open_regular_file`], without following a symbolic link at the end of `path` (one there
/// is an error, `ELOOP`), for files whose path was resolved and vetted earlier
/// ([`VettedFile`]).
pub fn open_regular_file_no_follow(path: &Path) -> Result<std::fs::File> {
    open_regular(path, false)
}

fn open_regular(path: &Path, follow: bool) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let no_follow = if follow { 0 } else { libc::O_NOFOLLOW };
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | no_follow);
    }
    #[cfg(not(unix))]
    let _ = follow;
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

/// Like [`open_regular_file`], but a file that does not exist is `Ok(None)` (caches that
/// have not been written yet).
pub fn open_regular_file_if_exists(path: &Path) -> Result<Option<std::fs::File>> {
    match open_regular_file(path) {
        Ok(f) => Ok(Some(f)),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads the regular file `path` whole, refusing anything else ([`Error::NotAFile`]) and
/// files of more than `max_bytes` bytes ([`Error::FileTooLarge`]; nothing past the limit is
/// read, even when the file grows while being read).
pub fn read_regular_file(path: &Path, max_bytes: u64) -> Result<Vec<u8>> {
    read_open_file(path, open_regular_file(path)?, max_bytes)
}

/// [`read_regular_file`], with a file that does not exist read as `Ok(None)`.
pub fn read_regular_file_if_exists(path: &Path, max_bytes: u64) -> Result<Option<Vec<u8>>> {
    match open_regular_file_if_exists(path)? {
        Some(file) => read_open_file(path, file, max_bytes).map(Some),
        None => Ok(None),
    }
}

fn read_open_file(path: &Path, file: File, max_bytes: u64) -> Result<Vec<u8>> {
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let too_large = |size: u64| Error::FileTooLarge {
        path: path.to_path_buf(),
        size,
        limit: max_bytes,
    };
    if len > max_bytes {
        return Err(too_large(len));
    }
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len as usize).map_err(|_| {
        let e = std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("{len} bytes do not fit in memory"),
        );
        Error::io(path, e)
    })?;
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// A file read again and again (a served corpus image), vetted once: its path with every
/// symbolic link resolved then, and the identity (device, inode) of the regular file it was.
/// [`VettedFile::read`] reads it only while the same regular file is there: a path swapped
/// for a link (to `/etc/passwd`), a FIFO, a device or another file after vetting is refused,
/// never followed or waited on, and every read is bounded. (A deleted file whose inode
/// number is given to a new file in its place cannot be told from the original.)
#[derive(Debug, Clone)]
pub struct VettedFile {
    path: PathBuf,
    id: (u64, u64),
}

impl VettedFile {
    /// Vets `path`: links in it (set up with the corpus) are resolved here, once, and it must
    /// be a regular file now.
    pub fn vet(path: &Path) -> Result<VettedFile> {
        let resolved = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        let file = open_regular_file_no_follow(&resolved)?;
        Ok(VettedFile {
            id: file_id(&resolved, &file)?,
            path: resolved,
        })
    }

    /// The file's bytes, at most `max_bytes` ([`Error::FileTooLarge`]), when it is still the
    /// regular file vetted ([`Error::Replaced`] otherwise; a link in its place is an I/O
    /// error, a FIFO or device [`Error::NotAFile`]).
    pub fn read(&self, max_bytes: u64) -> Result<Vec<u8>> {
        let file = open_regular_file_no_follow(&self.path)?;
        if file_id(&self.path, &file)? != self.id {
            return Err(Error::Replaced {
                path: self.path.clone(),
            });
        }
        read_open_file(&self.path, file, max_bytes)
    }

    /// The resolved path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn file_id(path: &Path, file: &File) -> Result<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        Ok((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, file);
        Ok((0, 0))
    }
}

/// [`read_regular_file`] as UTF-8 text (a leading byte-order mark dropped); invalid UTF-8 is
/// an error naming the line and byte.
pub fn read_regular_text(path: &Path, max_bytes: u64) -> Result<String> {
    let bytes = read_regular_file(path, max_bytes)?;
    let bytes = match bytes.strip_prefix(crate::UTF8_BOM) {
        Some(rest) => rest.to_vec(),
        None => bytes,
    };
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let b = e.as_bytes();
        let line = 1 + b[..at].iter().filter(|&&c| c == b'\n').count() as u64;
        let col = at
            - b[..at]
                .iter()
                .rposition(|&c| c == b'\n')
                .map_or(0, |i| i + 1);
        Error::line(path, line, format!("invalid UTF-8 at byte {col}"))
    })
}

/// Reads a text file line by line as bytes, so invalid UTF-8 is reported with its line number
/// instead of aborting the whole read; opened with [`open_regular_file`], each line at most
/// [`LINE_LIMIT`] bytes (or [`Lines::with_line_limit`]).
pub struct Lines {
    path: PathBuf,
    reader: BufReader<File>,
    line: u64,
    buf: Vec<u8>,
    max_line: u64,
}

impl Lines {
    /// Opens `path` (a regular file).
    pub fn open(path: &Path) -> Result<Self> {
        let file = open_regular_file(path)?;
        Ok(Lines {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 20, file),
            line: 0,
            buf: Vec::new(),
            max_line: LINE_LIMIT,
        })
    }

    /// Sets the longest line read (bytes, without its newline).
    pub fn with_line_limit(mut self, max_bytes: u64) -> Self {
        self.max_line = max_bytes;
        self
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Next non-blank line as `(line number, text)`, its line ending removed (and, on the
    /// first line, a UTF-8 byte-order mark).
    pub fn next_line(&mut self) -> Result<Option<(u64, &str)>> {
        loop {
            self.buf.clear();
            // past the limit by more than a byte-order mark and "\r\n": a line cut here is
            // longer than the limit whatever is stripped below
            let n = (&mut self.reader)
                .take(self.max_line.saturating_add(6))
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| Error::io(&self.path, e))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
                self.buf.pop();
            }
            // a UTF-8 byte-order mark (written by some editors) is not part of the first line
            if self.line == 1 && self.buf.starts_with(crate::UTF8_BOM) {
                self.buf.drain(..crate::UTF8_BOM.len());
            }
            if self.buf.len() as u64 > self.max_line {
                return Err(Error::line(
                    &self.path,
                    self.line,
                    format!(
                        "a line of more than {} bytes (is this a text file?)",
                        self.max_line
                    ),
                ));
            }
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let line = self.line;
            let text = std::str::from_utf8(&self.buf).map_err(|e| {
                Error::line(
                    &self.path,
                    line,
                    format!("invalid UTF-8 at byte {}", e.valid_up_to()),
                )
            })?;
            return Ok(Some((line, text)));
        }
    }
}

/// A file a command writes (`--out`, a run, a report), made to appear whole or not at all.
///
/// - A path that does not exist, or names a regular file: the bytes go to a temporary file
///   beside it (`.NAME.tmp-PID`, created exclusively, so nothing planted under that name is
///   followed), which is synced and renamed over the path when [`OutputFile::commit`] is
///   called; dropped before, it leaves nothing. Temporary files of earlier runs that were
///   killed (their process gone) are removed.
/// - A symbolic link: written through to the file it points to, by the same rules (the link
///   stays a link).
/// - `-`: standard output. A FIFO or a character device (`/dev/stdout`, `/dev/null`, a
///   terminal): written straight, as a shell redirection would, never replaced.
/// - A directory, a block device or a socket: refused ([`Error::NotAFile`]).
pub struct OutputFile {
    path: PathBuf,
    sink: Sink,
}

enum Sink {
    Atomic { tmp: PathBuf, file: Option<File> },
    Direct(Box<dyn Write + Send>),
}

impl OutputFile {
    /// Opens `path` for writing by the rules above.
    pub fn create(path: &Path) -> Result<OutputFile> {
        if path.as_os_str() == "-" {
            return Ok(OutputFile {
                path: path.to_path_buf(),
                sink: Sink::Direct(Box::new(std::io::stdout())),
            });
        }
        let target = resolve_output(path)?;
        if let Ok(meta) = std::fs::metadata(&target)
            && !meta.is_file()
        {
            if !streams_into(&meta) {
                return Err(Error::NotAFile {
                    path: path.to_path_buf(),
                    kind: file_kind(&meta),
                });
            }
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&target)
                .map_err(|e| Error::io(path, e))?;
            return Ok(OutputFile {
                path: path.to_path_buf(),
                sink: Sink::Direct(Box::new(f)),
            });
        }
        remove_stale_temporaries(&target);
        let tmp = temporary_name(&target, std::process::id());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            // named by the file asked for (its folder missing, not writable, ...)
            .map_err(|e| Error::io(path, e))?;
        Ok(OutputFile {
            path: target,
            sink: Sink::Atomic {
                tmp,
                file: Some(file),
            },
        })
    }

    /// Syncs the bytes and renames them into place (atomic), or flushes (direct).
    pub fn commit(mut self) -> Result<()> {
        let path = self.path.clone();
        match &mut self.sink {
            Sink::Atomic { tmp, file } => {
                let f = file.take().expect("committed once");
                let done = f
                    .sync_all()
                    .and_then(|()| std::fs::rename(&*tmp, &path))
                    .map_err(|e| Error::io(&path, e));
                if done.is_err() {
                    let _ = std::fs::remove_file(&*tmp);
                }
                // renamed: nothing left to remove on drop
                tmp.clear();
                done
            }
            Sink::Direct(w) => w.flush().map_err(|e| Error::io(&path, e)),
        }
    }

    /// The path the bytes end up under (a link's target for a symbolic link).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.sink {
            Sink::Atomic { file, .. } => file.as_mut().expect("open until commit").write(buf),
            Sink::Direct(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.sink {
            Sink::Atomic { file, .. } => file.as_mut().expect("open until commit").flush(),
            Sink::Direct(w) => w.flush(),
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Sink::Atomic { tmp, .. } = &self.sink
            && !tmp.as_os_str().is_empty()
        {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Writes `bytes` to `path` through an [`OutputFile`].
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut out = OutputFile::create(path)?;
    out.write_all(bytes).map_err(|e| Error::io(path, e))?;
    out.commit()
}

/// Where an output named `path` goes: `path`, or for a symbolic link the file it finally
/// points to (a link to nothing is refused: writing would create a file wherever it points).
fn resolve_output(path: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Ok(target) => Ok(target),
            Err(_) => Err(Error::NotAFile {
                path: path.to_path_buf(),
                kind: "a symbolic link to nothing",
            }),
        },
        _ => Ok(path.to_path_buf()),
    }
}

/// FIFOs and character devices are streams: written straight, never replaced.
fn streams_into(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        t.is_fifo() || t.is_char_device()
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

fn temporary_name(target: &Path, pid: u32) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.tmp-{pid}"))
}

/// Removes `.NAME.tmp-PID` files beside `target` whose process no longer runs (left by a run
/// that was killed before it could rename or remove them).
fn remove_stale_temporaries(target: &Path) {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && pid != std::process::id() && !process_runs(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn process_runs(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        Path::new("/proc").join(pid.to_string()).exists()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        true
    }
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

    #[test]
    fn a_line_reader_stops_at_a_line_over_its_limit_and_refuses_devices() {
        let dir = tempfile::tempdir().unwrap();
        // a sparse file of zeros without a newline: read whole, it would fill memory
        let sparse = dir.path().join("sparse");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let mut lines = Lines::open(&sparse).unwrap().with_line_limit(1 << 20);
        let err = lines.next_line().unwrap_err().to_string();
        assert!(
            err.contains("sparse:1") && err.contains("1048576 bytes"),
            "{err}"
        );
        let ok = dir.path().join("ok");
        std::fs::write(&ok, "\u{feff}a b\r\n\n  \nccc\n").unwrap();
        let mut lines = Lines::open(&ok).unwrap().with_line_limit(3);
        assert_eq!(lines.next_line().unwrap(), Some((1, "a b")));
        assert_eq!(lines.next_line().unwrap(), Some((4, "ccc")));
        assert_eq!(lines.next_line().unwrap(), None);
        let err = Lines::open(Path::new("/dev/zero"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("a character device"), "{err}");
    }

    #[test]
    fn text_files_are_checked_utf8_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, b"\xef\xbb\xbfone\ntwo \xff\n").unwrap();
        let err = read_regular_text(&f, 100).unwrap_err().to_string();
        assert!(err.contains("t:2") && err.contains("byte 4"), "{err}");
        std::fs::write(&f, b"\xef\xbb\xbfone\n").unwrap();
        assert_eq!(read_regular_text(&f, 100).unwrap(), "one\n");
        assert!(
            read_regular_file_if_exists(&dir.path().join("none"), 1)
                .unwrap()
                .is_none()
        );
    }

    #[cfg(unix)]
    #[test]
    fn outputs_replace_regular_files_only_and_write_through_links() {
        let dir = tempfile::tempdir().unwrap();
        // a regular file is replaced whole; a dropped output leaves nothing
        let out = dir.path().join("report.html");
        std::fs::write(&out, "old").unwrap();
        write_output(&out, b"new").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        let mut o = OutputFile::create(&out).unwrap();
        o.write_all(b"half").unwrap();
        drop(o);
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        let names = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(dir.path()), ["report.html"]);
        // a symbolic link: its target is written, the link stays
        let target = dir.path().join("target.html");
        std::fs::write(&target, "t").unwrap();
        let link = dir.path().join("link.html");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_output(&link, b"through").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"through");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let err = write_output(&dangling, b"x").unwrap_err().to_string();
        assert!(err.contains("a symbolic link to nothing"), "{err}");
        // a FIFO is written straight (read by a thread), never replaced by a file
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_output(&fifo, b"streamed").unwrap();
        assert_eq!(reader.join().unwrap(), b"streamed");
        assert!(!std::fs::metadata(&fifo).unwrap().is_file());
        // /dev/null stays a device; a directory is refused
        write_output(Path::new("/dev/null"), b"x").unwrap();
        assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
        let err = write_output(dir.path(), b"x").unwrap_err().to_string();
        assert!(err.contains("a directory"), "{err}");
        let missing = dir.path().join("no/such/folder/out.html");
        let err = write_output(&missing, b"x").unwrap_err().to_string();
        assert!(err.starts_with(missing.to_str().unwrap()), "{err}");
        // a temporary file of a killed run (its process gone) is removed by the next write
        let stale = dir.path().join(".report.html.tmp-4294967");
        std::fs::write(&stale, "stale").unwrap();
        write_output(&out, b"again").unwrap();
        assert!(!stale.exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_vetted_file_swapped_for_a_link_a_fifo_or_another_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.png");
        std::fs::write(&path, b"first").unwrap();
        let vetted = VettedFile::vet(&path).unwrap();
        assert_eq!(vetted.read(100).unwrap(), b"first");
        // rewritten in place: the same file, its new bytes
        std::fs::write(&path, b"second").unwrap();
        assert_eq!(vetted.read(100).unwrap(), b"second");
        assert!(matches!(
            vetted.read(3),
            Err(Error::FileTooLarge { limit: 3, .. })
        ));
        // a link to a file outside the corpus (the vetted file kept elsewhere, so that its
        // inode number is not reused)
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root:x:0:0").unwrap();
        std::fs::rename(&path, dir.path().join("kept")).unwrap();
        std::os::unix::fs::symlink(&secret, &path).unwrap();
        let e = vetted.read(100).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        // another regular file put in its place, or a directory above it swapped for a link
        std::fs::remove_file(&path).unwrap();
        std::fs::copy(&secret, &path).unwrap();
        let e = vetted.read(100).unwrap_err();
        assert!(matches!(e, Error::Replaced { .. }), "{e}");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("b.png"), b"img").unwrap();
        let in_sub = VettedFile::vet(&sub.join("b.png")).unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::copy(&secret, other.join("b.png")).unwrap();
        std::fs::rename(&sub, dir.path().join("sub.kept")).unwrap();
        std::os::unix::fs::symlink(&other, &sub).unwrap();
        let e = in_sub.read(100).unwrap_err();
        assert!(matches!(e, Error::Replaced { .. }), "{e}");
        // a FIFO: refused at once, not waited on
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let start = std::time::Instant::now();
        let e = vetted.read(100).unwrap_err();
        assert!(matches!(e, Error::NotAFile { kind: "a FIFO", .. }), "{e}");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[cfg(unix)]
    #[test]
    fn links_set_up_before_vetting_are_resolved_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/a.png"), b"img").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink("a.png", dir.path().join("real/b.png")).unwrap();
        let vetted = VettedFile::vet(&dir.path().join("linked/b.png")).unwrap();
        assert_eq!(vetted.read(100).unwrap(), b"img");
        assert!(vetted.path().ends_with("real/a.png"));
    }
}
