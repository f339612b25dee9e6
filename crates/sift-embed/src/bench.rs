//! Embedding throughput of a model on this machine ([`measure`]): items per second per batch
//! size, batch latency, the time split between preparation (tokenising, or decoding and
//! preprocessing images) and the model, and peak host and GPU memory.
use std::time::Instant;

use serde::Serialize;

use crate::{Embedder, Error, Result, Role};

/// What to embed.
#[derive(Debug, Clone)]
pub enum BenchInputs {
    /// Texts, embedded as passages.
    Texts(Vec<String>),
    /// Encoded images.
    Images(Vec<Vec<u8>>),
}

impl BenchInputs {
    fn len(&self) -> usize {
        match self {
            BenchInputs::Texts(t) => t.len(),
            BenchInputs::Images(i) => i.len(),
        }
    }

    /// `texts` or `images`.
    pub fn modality(&self) -> &'static str {
        match self {
            BenchInputs::Texts(_) => "text",
            BenchInputs::Images(_) => "image",
        }
    }
}

/// How to measure.
#[derive(Debug, Clone)]
pub struct BenchSettings {
    /// Batch sizes, measured in turn.
    pub batch_sizes: Vec<usize>,
    /// Items timed per batch size (the inputs are cycled through).
    pub items: usize,
    /// Items embedded, untimed, before each measurement.
    pub warmup: usize,
}

/// The measurement at one batch size.
#[derive(Debug, Clone, Serialize)]
pub struct BatchResult {
    /// Items per forward pass.
    pub batch_size: usize,
    /// Items timed.
    pub items: usize,
    /// Wall time.
    pub seconds: f64,
    /// Items per second.
    pub items_per_s: f64,
    /// Time spent preparing inputs.
    pub prepare_seconds: f64,
    /// Time spent in the model.
    pub model_seconds: f64,
    /// `prepare / (prepare + model)`.
    pub prepare_share: f64,
    /// `model / wall time`: the share of the run the model was computing (preparation runs
    /// one batch ahead on another thread, so this nears 1 unless preparation is the
    /// bottleneck).
    pub model_busy: f64,
    /// Median batch latency.
    pub batch_latency_ms_p50: f64,
    /// 99th-percentile batch latency.
    pub batch_latency_ms_p99: f64,
}

/// A whole measurement.
#[derive(Debug, Clone, Serialize)]
pub struct EmbedBench {
    /// `sift`.
    pub engine: &'static str,
    /// Sift's version.
    pub version: &'static str,
    /// The model's name.
    pub model: String,
    /// `text` or `image`.
    pub modality: &'static str,
    /// Dimension of the vectors.
    pub dim: usize,
    /// The device asked for.
    pub device: String,
    /// `f32`, `f16` or `bf16`: the precision the model ran at (`--dtype auto` resolved).
    pub dtype: &'static str,
    /// The kernel of the linear layers ([`crate::Precision::linear_kernel`]:
    /// `packed-bf16-amx`, `packed-bf16-avx512`, `packed-bf16-widened`, `fused-f32`, `candle-<dtype>`).
    pub linear_kernel: &'static str,
    /// CPU threads of the kernels.
    pub threads: usize,
    /// Where the inputs came from (`file`, `generated`).
    pub inputs: &'static str,
    /// Model loading time.
    pub load_seconds: f64,
    /// One result per batch size.
    pub results: Vec<BatchResult>,
    /// The fastest batch size.
    pub best: BatchResult,
    /// Peak resident memory of the process (MB), where the OS says.
    pub peak_rss_mb: Option<f64>,
    /// Peak used memory of the GPU (MB) while measuring, from `nvidia-smi`.
    pub gpu_memory_mb: Option<f64>,
    /// Mean GPU utilisation (percent) while measuring, from `nvidia-smi`.
    pub gpu_utilization_pct: Option<f64>,
    /// The kernels that ran (`auto`, or `generic` under `SIFT_KERNELS=generic`).
    pub kernels: &'static str,
    /// Hours MM-BRIGHT's ~2.5 million passages would take at the best rate (texts).
    pub mm_bright_passages_hours: Option<f64>,
}

/// MM-BRIGHT's corpus holds about 2.5 million passages (protocol notes).
pub const MM_BRIGHT_PASSAGES: f64 = 2_500_000.0;

/// Where the model runs and where the inputs came from, for [`run`]'s report.
#[derive(Debug, Clone)]
pub struct BenchContext {
    /// The device the model was loaded on (`cpu`, `cuda:0`, ...): GPU memory is sampled
    /// for CUDA devices.
    pub device: String,
    /// How long loading the model took.
    pub load_seconds: f64,
    /// `file` or `generated`.
    pub inputs: &'static str,
}

/// Measures `embedder` on `inputs` at each batch size and reports it with the memory used.
pub fn run(
    embedder: &Embedder,
    inputs: &BenchInputs,
    settings: &BenchSettings,
    context: &BenchContext,
) -> Result<EmbedBench> {
    let gpu = GpuMemory::start(&context.device);
    let results = measure(embedder, inputs, settings)?;
    let gpu = gpu.finish();
    let best = best(&results).expect("one result per batch size").clone();
    let mm_bright_passages_hours = matches!(inputs, BenchInputs::Texts(_))
        .then(|| MM_BRIGHT_PASSAGES / best.items_per_s / 3600.0);
    Ok(EmbedBench {
        engine: "sift",
        version: env!("CARGO_PKG_VERSION"),
        model: embedder.name().to_string(),
        modality: inputs.modality(),
        dim: embedder.dim(),
        device: context.device.clone(),
        dtype: embedder.precision().name(),
        linear_kernel: embedder.linear_kernel(),
        threads: candle_core::utils::get_num_threads(),
        inputs: context.inputs,
        load_seconds: context.load_seconds,
        results,
        best,
        peak_rss_mb: peak_rss_mb(),
        gpu_memory_mb: gpu.memory_mb,
        gpu_utilization_pct: gpu.utilization_pct,
        kernels: crate::Kernels::current().name(),
        mm_bright_passages_hours,
    })
}

/// Measures `embedder` on `inputs` at each batch size.
pub fn measure(
    embedder: &Embedder,
    inputs: &BenchInputs,
    settings: &BenchSettings,
) -> Result<Vec<BatchResult>> {
    let pool = inputs.len();
    if pool == 0 || settings.items == 0 || settings.batch_sizes.contains(&0) {
        return Err(Error::Capability {
            model: embedder.name().to_string(),
            message: "benchmark needs inputs, items and batch sizes above 0".into(),
        });
    }
    let mut results = Vec::new();
    for &b in &settings.batch_sizes {
        let warm: Vec<usize> = (0..settings.warmup).collect();
        pipeline(embedder, inputs, &warm, b)?;
        let timed: Vec<usize> = (settings.warmup..settings.warmup + settings.items).collect();
        let start = Instant::now();
        let batches = pipeline(embedder, inputs, &timed, b)?;
        let seconds = start.elapsed().as_secs_f64();
        let prep: f64 = batches.iter().map(|t| t.prepare).sum();
        let fwd: f64 = batches.iter().map(|t| t.model).sum();
        let mut lat: Vec<f64> = batches
            .iter()
            .map(|t| (t.prepare + t.model) * 1000.0)
            .collect();
        lat.sort_by(f64::total_cmp);
        results.push(BatchResult {
            batch_size: b,
            items: settings.items,
            seconds,
            items_per_s: settings.items as f64 / seconds,
            prepare_seconds: prep,
            model_seconds: fwd,
            prepare_share: prep / (prep + fwd),
            model_busy: (fwd / seconds).min(1.0),
            batch_latency_ms_p50: percentile(&lat, 0.5),
            batch_latency_ms_p99: percentile(&lat, 0.99),
        });
    }
    Ok(results)
}

/// Seconds one batch spent in preparation and in the model.
struct BatchTimes {
    prepare: f64,
    model: f64,
}

/// A batch as the preparing thread hands it to the model.
enum Ready {
    Texts(crate::PreparedTexts),
    Images(Vec<crate::PreparedImage>),
}

/// Embeds the items at `idx` (cycling through the inputs) in batches of `b` as indexing does:
/// a thread tokenises, or decodes and preprocesses, batch i + 1 while the model runs on batch
/// i, so a GPU does not wait for the CPU's part.
fn pipeline(
    embedder: &Embedder,
    inputs: &BenchInputs,
    idx: &[usize],
    b: usize,
) -> Result<Vec<BatchTimes>> {
    let pool = inputs.len();
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(Ready, f64)>>(1);
        scope.spawn(move || {
            for chunk in idx.chunks(b) {
                let t0 = Instant::now();
                let ready = (|| -> Result<Ready> {
                    Ok(match inputs {
                        BenchInputs::Texts(texts) => {
                            let batch: Vec<&str> =
                                chunk.iter().map(|&i| texts[i % pool].as_str()).collect();
                            Ready::Texts(embedder.prepare_texts(&batch, Role::Passage)?)
                        }
                        BenchInputs::Images(images) => {
                            let batch: Vec<&[u8]> =
                                chunk.iter().map(|&i| images[i % pool].as_slice()).collect();
                            Ready::Images(
                                embedder
                                    .prepare_images(&batch)
                                    .into_iter()
                                    .collect::<std::result::Result<Vec<_>, _>>()?,
                            )
                        }
                    })
                })();
                let failed = ready.is_err();
                if tx
                    .send(ready.map(|r| (r, t0.elapsed().as_secs_f64())))
                    .is_err()
                    || failed
                {
                    return;
                }
            }
        });
        let mut times = Vec::new();
        for ready in rx {
            let (ready, prepare) = ready?;
            let t1 = Instant::now();
            match &ready {
                Ready::Texts(t) => drop(embedder.embed_prepared_texts(t)?),
                Ready::Images(i) => drop(embedder.embed_images(i)?),
            }
            times.push(BatchTimes {
                prepare,
                model: t1.elapsed().as_secs_f64(),
            });
        }
        Ok(times)
    })
}

/// The fastest of `results`.
pub fn best(results: &[BatchResult]) -> Option<&BatchResult> {
    results
        .iter()
        .max_by(|x, y| x.items_per_s.total_cmp(&y.items_per_s))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Peak resident memory of this process (MB), from /proc; `None` elsewhere.
pub fn peak_rss_mb() -> Option<f64> {
    rss_mb("VmHWM:")
}

/// Resident memory of this process now (MB), from /proc; `None` elsewhere.
pub fn current_rss_mb() -> Option<f64> {
    rss_mb("VmRSS:")
}

fn rss_mb(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Samples an NVIDIA GPU with `nvidia-smi` every 250 ms while a benchmark runs: the largest
/// used memory (MB of the whole device, this process's allocations included) and the mean
/// utilisation (the share of time a kernel was running). Nothing is sampled for other
/// devices or when `nvidia-smi` is not there.
pub struct GpuMemory {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<GpuUsage>>,
}

/// What [`GpuMemory`] sampled.
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuUsage {
    /// Peak used memory (MB).
    pub memory_mb: Option<f64>,
    /// Mean utilisation (percent).
    pub utilization_pct: Option<f64>,
}

impl GpuMemory {
    /// Starts sampling for `device` (`cuda`, `cuda:N`; anything else samples nothing).
    pub fn start(device: &str) -> GpuMemory {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handle = cuda_index(device).map(|index| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut peak, mut util, mut n) = (None::<f64>, 0.0, 0usize);
                loop {
                    let sample = std::process::Command::new("nvidia-smi")
                        .args([
                            "--query-gpu=memory.used,utilization.gpu",
                            "--format=csv,noheader,nounits",
                            &format!("--id={index}"),
                        ])
                        .output()
                        .ok()
                        .filter(|o| o.status.success())
                        .and_then(|o| {
                            let text = String::from_utf8_lossy(&o.stdout).into_owned();
                            let mut f = text.trim().split(',').map(|v| v.trim().parse::<f64>());
                            Some((f.next()?.ok()?, f.next()?.ok()?))
                        });
                    match sample {
                        Some((used, busy)) => {
                            peak = Some(peak.map_or(used, |p| p.max(used)));
                            util += busy;
                            n += 1;
                        }
                        None => break,
                    }
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(250));
                }
                GpuUsage {
                    memory_mb: peak,
                    utilization_pct: (n > 0).then(|| util / n as f64),
                }
            })
        });
        GpuMemory { stop, handle }
    }

    /// Stops sampling: what was sampled.
    pub fn finish(mut self) -> GpuUsage {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// The GPU index of `cuda` (0) or `cuda:N`; `None` for other devices.
fn cuda_index(device: &str) -> Option<u32> {
    match device.strip_prefix("cuda") {
        Some("") => Some(0),
        Some(rest) => rest.strip_prefix(':').and_then(|n| n.parse().ok()),
        None => None,
    }
}

/// Deterministic texts of 20 to 200 words.
pub fn generated_texts(n: usize) -> Vec<String> {
    const WORDS: [&str; 24] = [
        "pressure",
        "boundary",
        "layer",
        "flow",
        "the",
        "of",
        "heat",
        "transfer",
        "shock",
        "wave",
        "laminar",
        "turbulent",
        "plate",
        "velocity",
        "and",
        "in",
        "a",
        "model",
        "retrieval",
        "image",
        "question",
        "answer",
        "theory",
        "measured",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let len = 20 + (next() % 181) as usize;
            (0..len)
                .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Deterministic 800x600 PNG images (gradients and stripes, so encoders do real work), at
/// most 64 of them (benchmarks cycle through them).
pub fn generated_images(n: usize) -> Vec<Vec<u8>> {
    (0..n.min(64))
        .map(|k| {
            let img = image::RgbImage::from_fn(800, 600, |x, y| {
                let k = k as u32;
                image::Rgb([
                    ((x * 255 / 800 + k * 37) % 256) as u8,
                    ((y * 255 / 600 + k * 91) % 256) as u8,
                    (((x / (8 + k % 16)) + (y / 12)) % 2 * 200) as u8,
                ])
            });
            let mut out = std::io::Cursor::new(Vec::new());
            img.write_to(&mut out, image::ImageFormat::Png)
                .expect("writing a PNG to memory");
            out.into_inner()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_memory_is_sampled_for_cuda_devices_only() {
        assert_eq!(cuda_index("cuda"), Some(0));
        assert_eq!(cuda_index("cuda:3"), Some(3));
        assert_eq!(cuda_index("cuda:x"), None);
        assert_eq!(cuda_index("cpu"), None);
        assert_eq!(cuda_index("metal"), None);
        assert_eq!(GpuMemory::start("cpu").finish().memory_mb, None);
    }
}
