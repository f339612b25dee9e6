use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use sift_core::Warnings;
use sift_generate::experiments::{self, Experiment, Template};
use sift_generate::{RunSummary, Sampling, generate_all};

use crate::cmd::report_warnings;
use crate::options::{CorpusFlags, GenerationFlags, domain_list, split_list};
use crate::progress::Bars;

/// Generate text for each query with a generator: captions of its images, a reformulated
/// query, or BRIGHT-style reasoning; or answer chats of your own (`chats --chats FILE`). Every generation is cached (`--cache`) under the model,
/// prompt template and version, sampling settings, query id and the images' hashes: a rerun
/// only generates what is missing, an interrupted run resumes, `--offline` fails on a
/// missing entry instead of generating. Writes `<out>/<domain>.jsonl`, one line per query
/// (`id`, `text`, and the captions or the whole generation), for `--query-augment`.
///
/// `chats` reads a JSONL file of OpenAI chat completion bodies (`messages` with system,
/// user and assistant turns, text and `image_url` parts: data: URLs or files relative to
/// the chats file; `max_tokens`, `temperature`, `top_p`, `seed`, `stop`), or OpenAI batch
/// lines (`custom_id`, `body`), and writes one answer a line in the file's order, as
/// `sift serve`'s `POST /v1/chat/completions` answers (batch lines: OpenAI's batch output
/// lines). A line's `model` is ignored: `--generator` answers.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  sift generate captions --corpus corpora/sample --generator http://127.0.0.1:8000/v1 \\
      --model Qwen/Qwen2-VL-7B-Instruct --out gen/captions
  OPENAI_API_KEY=... sift generate reasoning --corpus mm-bright --domains physics \\
      --generator https://api.openai.com/v1 --model gpt-4o --out gen/reasoning
  sift generate chats --chats chats.jsonl --generator Qwen/Qwen2-VL-2B-Instruct --out answers.jsonl")]
pub struct Args {
    /// What to generate.
    #[arg(value_enum)]
    experiment: ExperimentArg,
    /// Corpus directory (MM-BRIGHT or BEIR layout); not for chats.
    #[arg(long, required_unless_present = "chats")]
    corpus: Option<PathBuf>,
    /// The chats to answer (JSONL: OpenAI chat completion bodies or batch lines); for
    /// `chats` only.
    #[arg(long, value_name = "FILE")]
    chats: Option<PathBuf>,
    #[command(flatten)]
    corpus_flags: CorpusFlags,
    /// Comma-separated domains [default: all the corpus's].
    #[arg(long, value_parser = domain_list)]
    domains: Option<String>,
    /// The generator: an OpenAI-compatible endpoint's base URL (`http://host:port/v1`:
    /// vLLM, llama.cpp's server, Ollama, `transformers serve`, OpenAI), or a local
    /// Qwen2-VL- or Qwen2.5-VL-Instruct checkpoint (directory or hub id) run in Sift.
    #[arg(long)]
    generator: String,
    /// The model an endpoint serves (its `model` field); not for a local generator.
    #[arg(long)]
    model: Option<String>,
    /// Device of a local generator: cpu, cuda, cuda:N, metal or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Weights of a local generator: f32, or bf16 (on the CPU: linear layers packed for the
    /// processor's bfloat16 kernels, the rest in f32).
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16"])]
    dtype: String,
    /// A prompt template file of your own (with a `{query}` placeholder) instead of the
    /// committed one.
    #[arg(long)]
    prompt: Option<PathBuf>,
    /// Show the query images to the generator for reformulations and reasoning (the
    /// multimodal queries of Tasks 2-4); captions always do.
    #[arg(long)]
    with_images: bool,
    /// At most this many new tokens a generation.
    #[arg(long, default_value_t = 512, value_parser = crate::options::int_in::<u32>(1, 1 << 20))]
    max_new_tokens: u32,
    /// Sampling temperature (0: greedy; 0 to 2).
    #[arg(long, default_value_t = 0.0, value_parser = crate::options::f32_in(0.0, sift_generate::MAX_TEMPERATURE))]
    temperature: f32,
    /// Nucleus sampling's mass.
    #[arg(long, default_value_t = 1.0, value_parser = crate::options::f32_in(0.0, 1.0))]
    top_p: f32,
    /// The sampler's seed (sent to endpoints that take one).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    requests: GenerationFlags,
    /// Output directory: `<domain>.jsonl` per domain; for chats, the answers' file
    /// (JSONL; default: printed).
    #[arg(long, required_unless_present = "chats")]
    out: Option<PathBuf>,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum ExperimentArg {
    Captions,
    Reformulations,
    Reasoning,
    Chats,
}

impl ExperimentArg {
    /// The experiment (none for chats, which carry their own prompts).
    fn experiment(self) -> Option<Experiment> {
        match self {
            ExperimentArg::Captions => Some(Experiment::Captions),
            ExperimentArg::Reformulations => Some(Experiment::Reformulations),
            ExperimentArg::Reasoning => Some(Experiment::Reasoning),
            ExperimentArg::Chats => None,
        }
    }
}

#[derive(serde::Serialize)]
struct DomainReport {
    queries: usize,
    written: usize,
    jobs: usize,
    cached: usize,
    generated: usize,
    failed: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
    missing_images: usize,
    file: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    if a.requests.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let Some(experiment) = a.experiment.experiment() else {
        return run_chats(a);
    };
    if let Some(chats) = &a.chats {
        bail!("--chats {} is for `sift generate chats`", chats.display());
    }
    let (Some(corpus_dir), Some(out)) = (&a.corpus, &a.out) else {
        bail!("give --corpus and --out");
    };
    let template = match &a.prompt {
        Some(p) => Template::from_file(p)?,
        None => experiment.template(),
    };
    let corpus = a.corpus_flags.open(corpus_dir)?;
    let domains = corpus.select_domains(&split_list(&a.domains))?;
    let device = sift_embed::select_device(a.device.parse()?)?;
    let (generator, local) = sift_generate::open(
        &a.generator,
        a.model.as_deref(),
        &a.requests.remote(),
        &device,
        a.dtype == "bf16",
    )
    .with_context(|| format!("opening the generator {}", a.generator))?;
    let options = a.requests.run_options(local);
    let cache = a.requests.open_cache(out)?;
    let sampling = Sampling {
        max_new_tokens: a.max_new_tokens,
        temperature: a.temperature,
        top_p: a.top_p,
        seed: a.seed,
        stop: Vec::new(),
    };
    let images = experiment == Experiment::Captions || a.with_images;
    let bars = Bars::new(a.quiet || a.json);
    let mut warnings = Warnings::new();
    let mut report = BTreeMap::new();
    let mut failures = 0;
    for domain in &domains {
        let (queries, missing) = experiments::load_queries(&corpus, domain, images, &mut warnings)
            .with_context(|| format!("reading the queries of {domain}"))?;
        for m in missing.iter().take(5) {
            eprintln!("warning: {domain}: query image not found in examples_images: {m}");
        }
        let (jobs, slots) = experiments::plan(experiment, &template, &queries, &sampling);
        let bar = bars.bar(
            &format!("{domain} {}", experiment.name()),
            jobs.len() as u64,
        );
        let outcomes = generate_all(generator.as_ref(), &jobs, &cache, options, Some(&bar));
        bar.finish_and_clear();
        let (rows, failed) = experiments::assemble(experiment, &slots, &outcomes);
        for f in &failed {
            eprintln!("error: {domain}: {f}");
        }
        failures += failed.len();
        let file = out.join(format!("{domain}.jsonl"));
        experiments::write_augmentations(&file, &rows)?;
        let s = RunSummary::of(&outcomes);
        let r = DomainReport {
            queries: queries.len(),
            written: rows.len(),
            jobs: jobs.len(),
            cached: s.cached,
            generated: s.generated,
            failed: s.failed,
            prompt_tokens: s.prompt_tokens,
            completion_tokens: s.completion_tokens,
            missing_images: missing.len(),
            file,
        };
        if !a.json {
            println!(
                "{domain}: {} of {} queries written to {} ({} generated, {} cached, {} failed; {} + {} tokens)",
                r.written,
                r.queries,
                r.file.display(),
                r.generated,
                r.cached,
                r.failed,
                r.prompt_tokens,
                r.completion_tokens
            );
        }
        report.insert(domain.clone(), r);
    }
    report_warnings("queries", &warnings);
    if a.json {
        let out = serde_json::json!({
            "experiment": experiment.name(),
            "model": generator.model_id(),
            "generator": a.generator,
            "template": {"name": template.name, "version": template.version},
            "cache": cache.path(),
            "domains": report,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    if failures > 0 {
        bail!(
            "{failures} generation(s) failed (see above); rerun to retry them: the rest are cached"
        );
    }
    Ok(())
}

/// `sift generate chats`: the chats file's answers (see [`crate::cmd::chats`]).
fn run_chats(a: Args) -> Result<()> {
    let Some(chats) = &a.chats else {
        bail!("sift generate chats: give the chats file (--chats FILE)");
    };
    if let Some(c) = &a.corpus {
        bail!(
            "sift generate chats reads no corpus (--corpus {})",
            c.display()
        );
    }
    if a.prompt.is_some() || a.with_images {
        bail!(
            "sift generate chats: --prompt and --with-images are the experiments'; a chat carries its own"
        );
    }
    let device = sift_embed::select_device(a.device.parse()?)?;
    let (generator, local) = sift_generate::open(
        &a.generator,
        a.model.as_deref(),
        &a.requests.remote(),
        &device,
        a.dtype == "bf16",
    )
    .with_context(|| format!("opening the generator {}", a.generator))?;
    crate::cmd::chats::run(
        crate::cmd::chats::ChatsRun {
            chats,
            generator: &a.generator,
            model: a.model.as_deref(),
            out: a.out.as_deref(),
            requests: &a.requests,
            quiet: a.quiet,
            json: a.json,
        },
        generator.as_ref(),
        local,
    )
}
