//! Progress bars on stderr (hidden when stderr is not a terminal or with `--quiet`).
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::Mutex;

/// An indicatif bar per phase.
pub struct Bars {
    quiet: bool,
    bar: Mutex<Option<ProgressBar>>,
}

impl Bars {
    pub fn new(quiet: bool) -> Self {
        Bars {
            quiet,
            bar: Mutex::new(None),
        }
    }

    fn make(&self, label: &str, len: Option<u64>) -> ProgressBar {
        let bar = match len {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(
                    "{prefix:>14} [{bar:30}] {human_pos}/{human_len} {per_sec} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            ),
            None => ProgressBar::no_length().with_style(
                ProgressStyle::with_template("{prefix:>14} {spinner} {human_pos} {per_sec}")
                    .expect("valid template"),
            ),
        };
        bar.set_draw_target(if self.quiet {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        });
        bar.set_prefix(label.to_string());
        bar
    }

    /// A standalone bar for loops in the CLI.
    pub fn bar(&self, label: &str, len: u64) -> ProgressBar {
        self.make(label, Some(len))
    }
}

impl sift_index::Progress for Bars {
    fn start(&self, label: &str, len: Option<u64>) {
        *self.bar.lock().expect("not poisoned") = Some(self.make(label, len));
    }
    fn inc(&self, n: u64) {
        if let Some(b) = self.bar.lock().expect("not poisoned").as_ref() {
            b.inc(n);
        }
    }
    fn finish(&self) {
        if let Some(b) = self.bar.lock().expect("not poisoned").take() {
            b.finish_and_clear();
        }
    }
}
