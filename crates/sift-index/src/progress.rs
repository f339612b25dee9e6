/// Receives progress of long operations; the CLI draws bars with it.
pub trait Progress: Sync {
    /// A new phase starts (`len` items when known).
    fn start(&self, _label: &str, _len: Option<u64>) {}
    /// `n` more items are done.
    fn inc(&self, _n: u64) {}
    /// The phase is over.
    fn finish(&self) {}
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}
