//! Progress of long calls, reported to a Python callable `progress(label, done, total)`
//! (`total` None when unknown) at the start and end of each phase and at most every
//! 200 ms in between, as the command line's bars would show it.
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// A phase in progress.
struct Phase {
    label: String,
    total: Option<u64>,
    done: u64,
    shown: Instant,
}

/// [`sift_index::Progress`] calling a Python callable; none: reports nothing.
pub struct Callback {
    callable: Option<Py<PyAny>>,
    phase: Mutex<Option<Phase>>,
}

impl Callback {
    /// Reports to `callable` when given.
    pub fn new(callable: Option<Py<PyAny>>) -> Callback {
        Callback {
            callable,
            phase: Mutex::new(None),
        }
    }

    fn call(&self, label: &str, done: u64, total: Option<u64>) {
        let Some(f) = &self.callable else { return };
        Python::attach(|py| {
            // a failing callback must not stop the work: Python prints it as unraisable
            if let Err(e) = f.call1(py, (label, done, total)) {
                e.write_unraisable(py, None);
            }
        });
    }
}

impl sift_index::Progress for Callback {
    fn start(&self, label: &str, len: Option<u64>) {
        if let Ok(mut p) = self.phase.lock() {
            *p = Some(Phase {
                label: label.to_string(),
                total: len,
                done: 0,
                shown: Instant::now(),
            });
        }
        self.call(label, 0, len);
    }

    fn inc(&self, n: u64) {
        let show = {
            let Ok(mut guard) = self.phase.lock() else {
                return;
            };
            let Some(p) = guard.as_mut() else { return };
            p.done += n;
            if p.shown.elapsed() >= Duration::from_millis(200) {
                p.shown = Instant::now();
                Some((p.label.clone(), p.done, p.total))
            } else {
                None
            }
        };
        if let Some((label, done, total)) = show {
            self.call(&label, done, total);
        }
    }

    fn finish(&self) {
        let last = self.phase.lock().ok().and_then(|mut p| p.take());
        if let Some(p) = last {
            self.call(&p.label, p.total.unwrap_or(p.done).max(p.done), p.total);
        }
    }
}
