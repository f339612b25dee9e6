//! Panics inside the file-format crates (parquet, tantivy, image decoders), turned into
//! errors at Sift's boundary: on some corrupt files they panic instead of returning an
//! error, and no input may crash Sift.
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// Depth of [`catch_panics`] calls on this thread: their panics are reported as
    /// errors, so the panic hook stays quiet for them.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
}

static QUIET_HOOK: Once = Once::new();

/// Runs `f`; a panic inside it becomes `Err(its message)`.
///
/// The first call installs a panic hook that stays silent for panics inside `catch_panics`
/// on the same thread and hands every other panic to the hook installed before.
pub fn catch_panics<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
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
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown failure".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_an_error_and_the_thread_is_unguarded_after() {
        let r: Result<(), String> = catch_panics(|| panic!("bad block {}", 7));
        assert_eq!(r.unwrap_err(), "bad block 7");
        assert_eq!(GUARDED.with(Cell::get), 0);
        assert_eq!(catch_panics(|| 3), Ok(3));
    }
}
