//! Flags shared by several commands.
use clap::Args;
use sift_index::{
    AnalyzerConfig, AnalyzerPreset, Bm25Params, Bm25Scoring, Stemming, StopWords, TokenizerKind,
};

/// BM25 scoring flags; unset ones come from the index manifest.
#[derive(Args, Debug, Clone, Default)]
pub struct Bm25Flags {
    /// BM25 k1 (term-frequency saturation; finite, at least 0) [default: 0.9, or the
    /// index's]. Checked where the parameters are applied (`Bm25Params::validate`, which
    /// every door calls).
    #[arg(long)]
    pub k1: Option<f32>,
    /// BM25 b (length normalisation; 0 to 1) [default: 0.4, or the index's]. Checked as k1
    /// is.
    #[arg(long)]
    pub b: Option<f32>,
    /// BM25 formula [default: reference, or the index's]: `reference` is the BRIGHT /
    /// MM-BRIGHT reference code's (gensim LuceneBM25Model on passage and query, exact
    /// lengths); `lucene` is Lucene's BM25Similarity as Anserini / pyserini run it.
    #[arg(long = "bm25", value_enum, value_name = "SCORING")]
    pub scoring: Option<Bm25Scoring>,
}

impl Bm25Flags {
    /// `base` with the flags that were given applied.
    pub fn apply(&self, base: Bm25Params) -> Bm25Params {
        Bm25Params {
            k1: self.k1.unwrap_or(base.k1),
            b: self.b.unwrap_or(base.b),
            scoring: self.scoring.unwrap_or(base.scoring),
        }
    }
}

/// How dense indexes are searched.
#[derive(Args, Debug, Clone)]
pub struct SearchFlags {
    /// Dense search: exact, hnsw, or auto (exact up to 20,000 vectors, HNSW above).
    #[arg(long, value_enum, default_value = "auto")]
    pub ann: sift_retrieve::Ann,
    /// HNSW candidate list size at query time (`sift serve`: 1 to 100000).
    #[arg(long, default_value_t = 128, value_parser = crate::options::positive)]
    pub ef_search: usize,
}

/// Analyzer flags; at search time they are only checked against the index.
#[derive(Args, Debug, Clone, Default)]
pub struct AnalyzerFlags {
    /// Analyzer [default: lucene]: `lucene` is Lucene's English analysis as pyserini /
    /// Anserini run it (UAX#29 StandardTokenizer, possessives, lowercase, Lucene's 33 stop
    /// words, Porter stemmer), the MM-BRIGHT reference's; `snowball` is a simple
    /// letters-and-digits tokenizer with the same stop words and the Snowball English stemmer.
    #[arg(long, value_enum)]
    pub analyzer: Option<AnalyzerPreset>,
    /// Tokenizer, overriding the analyzer's.
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerKind>,
    /// Stemmer, overriding the analyzer's.
    #[arg(long, value_enum)]
    pub stemmer: Option<Stemming>,
    /// Stop-word list, overriding the analyzer's.
    #[arg(long, value_enum)]
    pub stopwords: Option<StopWords>,
}

impl AnalyzerFlags {
    /// True when any flag was given.
    pub fn any(&self) -> bool {
        self.analyzer.is_some()
            || self.tokenizer.is_some()
            || self.stemmer.is_some()
            || self.stopwords.is_some()
    }

    /// `base` with the flags that were given applied.
    pub fn apply(&self, base: &AnalyzerConfig) -> AnalyzerConfig {
        let mut c = self.analyzer.map_or(*base, AnalyzerPreset::config);
        c.tokenizer = self.tokenizer.unwrap_or(c.tokenizer);
        c.stemmer = self.stemmer.unwrap_or(c.stemmer);
        c.stopwords = self.stopwords.unwrap_or(c.stopwords);
        c
    }
}

/// Parses `a,b,c` into a list (empty entries dropped).
pub fn split_list(s: &Option<String>) -> Vec<String> {
    s.as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

/// Parses `--domains`: one or more names, comma-separated (`--domains ''` would otherwise
/// mean every domain).
pub fn domain_list(s: &str) -> Result<String, String> {
    if split_list(&Some(s.to_string())).is_empty() {
        return Err(
            "give one or more domain names, comma-separated (leave the flag out for every domain)"
                .into(),
        );
    }
    Ok(s.to_string())
}

/// Flags for reading a corpus.
#[derive(Args, Debug, Clone, Default)]
pub struct CorpusFlags {
    /// Read domains whose parquet shards are incomplete (e.g. `-00000-of-00002` without
    /// `-00001-`) as they are, with a warning; by default that is an error.
    #[arg(long)]
    pub allow_partial: bool,
}

impl CorpusFlags {
    /// Opens the corpus at `dir`; with --allow-partial, says on stderr which shard sets are
    /// incomplete.
    pub fn open(&self, dir: &std::path::Path) -> anyhow::Result<sift_core::Corpus> {
        let corpus = sift_core::Corpus::open(dir)?.allow_partial_shards(self.allow_partial);
        if self.allow_partial {
            for problem in corpus.shard_problems()? {
                eprintln!(
                    "warning: {}: {problem} (read as it is: --allow-partial)",
                    dir.display()
                );
            }
        }
        Ok(corpus)
    }
}

/// The domains and the qrels split a command reads (`sift eval`, `sift check`).
#[derive(clap::Args, Debug, Clone)]
pub struct DomainFlags {
    /// Comma-separated domains [default: all: the index's for `sift eval`, the corpus's for
    /// `sift check`].
    #[arg(long, value_parser = domain_list)]
    pub domains: Option<String>,
    /// Qrels split of a BEIR corpus.
    #[arg(long, default_value = "test")]
    pub split: String,
}

/// Limits on image files read from the command line or from a list (`sift search --image`,
/// `sift embed --image`), as `sift serve` limits request images.
#[derive(Args, Debug, Clone)]
pub struct ImageLimitFlags {
    /// Largest image file to read (bytes); larger files, and anything that is not a regular
    /// file (a FIFO, a device), are refused before they are read.
    #[arg(long, default_value_t = 64 << 20, value_parser = positive_u64)]
    pub max_image_bytes: u64,
    /// Largest image (pixels, width x height from its header, before decoding); the default
    /// is the size at which Pillow refuses an image as a decompression bomb.
    #[arg(long, default_value_t = 178_956_970, value_parser = positive_u64)]
    pub max_image_pixels: u64,
}

impl ImageLimitFlags {
    /// Reads the image file `path` within the limits.
    pub fn read(&self, path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
        let bytes = sift_core::read_regular_file(path, self.max_image_bytes)?;
        let reader = image::ImageReader::new(std::io::Cursor::new(&bytes))
            .with_guessed_format()
            .map_err(|e| anyhow::anyhow!("{}: cannot read the image: {e}", path.display()))?;
        // formats the header reader does not know are left to the decoder, which names them
        if reader.format().is_some()
            && let Ok((w, h)) = reader.into_dimensions()
        {
            let pixels = u64::from(w) * u64::from(h);
            if pixels > self.max_image_pixels {
                anyhow::bail!(
                    "{}: a {w}x{h} image ({pixels} pixels), over the limit of {} pixels (--max-image-pixels)",
                    path.display(),
                    self.max_image_pixels
                );
            }
        }
        Ok(bytes)
    }
}

/// Parses a number that must be at least 1 (byte and pixel limits).
pub fn positive_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The most threads `--threads` takes: more than any machine's cores by far, few enough that
/// starting them cannot exhaust the process's resources.
pub const MAX_THREADS: usize = 1024;

/// Parses `--threads`: 1 to [`MAX_THREADS`].
pub fn threads(s: &str) -> Result<usize, String> {
    match positive(s)? {
        n if n > MAX_THREADS => Err(format!("at most {MAX_THREADS} threads")),
        n => Ok(n),
    }
}

/// A parser for a whole-number flag from `min` to `max` (clap's error names the flag; this
/// names the range). Every numeric flag has one: unbounded values overflow durations and
/// capacities, or ask for work that never ends.
pub fn int_in<T>(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
{
    move |s: &str| {
        let v: u64 = s
            .trim()
            .parse()
            .map_err(|e| format!("{e}: give a whole number from {min} to {max}"))?;
        if !(min..=max).contains(&v) {
            return Err(format!("{v} is out of range: give {min} to {max}"));
        }
        T::try_from(v).map_err(|_| format!("{v} is out of range on this platform"))
    }
}

/// A parser for a number flag from `min` to `max` (finite: `NaN` and `inf` are refused).
pub fn float_in(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|e| format!("{e}: give a number from {min} to {max}"))?;
        if !(v.is_finite() && (min..=max).contains(&v)) {
            return Err(format!(
                "{v} is out of range: give a number from {min} to {max}"
            ));
        }
        Ok(v)
    }
}

/// [`float_in`] for an `f32` flag.
pub fn f32_in(
    min: f32,
    max: f32,
) -> impl Fn(&str) -> Result<f32, String> + Clone + Send + Sync + 'static {
    let parse = float_in(f64::from(min), f64::from(max));
    move |s: &str| parse(s).map(|v| v as f32)
}

/// Parses a count that must be at least 1 (`--top-k`, `--batch-size`, ...).
pub fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The most retries `--retries` and `--rerank-retries` take: each can wait up to 30 s
/// more, and an endpoint failing 20 times in a row is down.
pub const MAX_RETRIES: u64 = 20;

/// How `sift generate` and `sift rag` ask their generators: the endpoint's key, requests in
/// flight, timeout, retries, and the generation cache.
#[derive(Args, Debug, Clone)]
pub struct GenerationFlags {
    /// Environment variable holding the endpoint's bearer key.
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
    /// Requests in flight at once (a local generator takes one at a time).
    #[arg(long, default_value_t = 4, value_parser = crate::options::int_in::<usize>(1, 1024))]
    pub concurrency: usize,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 300, value_parser = crate::options::int_in::<u64>(1, 86_400))]
    pub timeout: u64,
    /// Retries of a request that failed with 429, 408 or 5xx, timed out or came back
    /// malformed (exponential backoff from 0.5 s, honouring Retry-After up to 30 s; 0 to
    /// 20).
    #[arg(long, default_value_t = 5, value_parser = crate::options::int_in::<u32>(0, MAX_RETRIES))]
    pub retries: u32,
    /// The generation cache (JSONL) [default: <out>/cache.jsonl].
    #[arg(long)]
    pub cache: Option<std::path::PathBuf>,
    /// Only read the cache: a generation it does not hold fails instead of being made.
    #[arg(long)]
    pub offline: bool,
}

impl GenerationFlags {
    /// How remote generators are reached.
    pub fn remote(&self) -> sift_generate::RemoteSettings {
        sift_generate::RemoteSettings {
            api_key_env: self.api_key_env.clone(),
            timeout: std::time::Duration::from_secs(self.timeout.max(1)),
            retry: sift_generate::RetryPolicy {
                max_retries: self.retries,
                ..sift_generate::RetryPolicy::default()
            },
        }
    }

    /// Opens the cache (`--cache`, else `out/cache.jsonl`), saying on stderr what it
    /// dropped or skipped.
    pub fn open_cache(
        &self,
        out: &std::path::Path,
    ) -> sift_generate::Result<sift_generate::GenerationCache> {
        let path = self
            .cache
            .clone()
            .unwrap_or_else(|| out.join("cache.jsonl"));
        let cache = sift_generate::GenerationCache::open(&path)?;
        let opened = cache.opened();
        if opened.truncated + opened.malformed > 0 {
            eprintln!(
                "warning: {}: {} unfinished last line dropped, {} malformed line(s) skipped",
                path.display(),
                opened.truncated,
                opened.malformed
            );
        }
        Ok(cache)
    }

    /// How `generate_all` runs, `local` when a generator runs in this process.
    pub fn run_options(&self, local: bool) -> sift_generate::RunOptions {
        sift_generate::RunOptions {
            concurrency: if local { 1 } else { self.concurrency },
            offline: self.offline,
        }
    }
}

/// Reranking flags (`sift eval`, `sift search`, `sift serve`).
#[derive(clap::Args, Debug, Clone)]
pub struct RerankFlags {
    /// A reranker (`sift eval`: each first-stage run reranked, reported as its own row
    /// `bm25 -> rerank:NAME`, repeat for several; `sift search`: the hits; `sift serve`:
    /// every search; one each there): a cross-encoder (a BERT / XLM-RoBERTa sequence classifier such as
    /// cross-encoder/ms-marco-MiniLM-L-6-v2 or BAAI/bge-reranker-v2-m3: query text and
    /// passage text; Tasks 1, 2, 4), `pointwise:MODEL` (a local Qwen2-VL / Qwen2.5-VL, or an
    /// OpenAI-compatible endpoint's URL with --rerank-model read through its top_logprobs,
    /// asked yes or no per candidate, query images and candidate image in the prompt: every
    /// task; a checkpoint with its own relevance head, jina-reranker-m0, scores with it)
    /// or `listwise:GENERATOR` (BRIGHT's listwise prompt to an OpenAI-compatible endpoint,
    /// with --rerank-model, or a local checkpoint; scores k - rank).
    #[arg(long, value_name = "MODEL")]
    pub rerank: Vec<String>,
    /// Candidates per query each reranker rescores (the rest stay below, in order).
    #[arg(long, default_value_t = 100, value_parser = crate::options::int_in::<usize>(1, 100_000))]
    pub rerank_depth: usize,
    /// Cross-encoder pairs per forward pass.
    #[arg(long, default_value_t = 32, value_parser = crate::options::int_in::<usize>(1, 65_536))]
    pub rerank_batch: usize,
    /// Cross-encoder tokens per query-passage pair [default: the model's].
    #[arg(long, value_parser = crate::options::int_in::<usize>(1, 1 << 20))]
    pub rerank_max_length: Option<usize>,
    /// The model a listwise or pointwise endpoint serves.
    #[arg(long)]
    pub rerank_model: Option<String>,
    /// Listwise: candidates per prompt, ranked window by window from the bottom up
    /// (RankGPT) [default: all in one prompt, as BRIGHT].
    #[arg(long, value_parser = crate::options::int_in::<usize>(1, 10_000))]
    pub rerank_window: Option<usize>,
    /// Listwise: how far each window moves.
    #[arg(long, default_value_t = 10, value_parser = crate::options::int_in::<usize>(1, 10_000))]
    pub rerank_step: usize,
    /// Listwise replies and pointwise scores cached here (JSONL) [default:
    /// <out>/rerank-cache.jsonl with sift eval --out].
    #[arg(long)]
    pub rerank_cache: Option<std::path::PathBuf>,
    /// Pointwise: the prompt, a text file: `{query}`, `{candidate}` (the candidate's text),
    /// `<query_images>` and `<candidate_image>` mark where each goes [default: Sift's].
    #[arg(long)]
    pub rerank_prompt: Option<std::path::PathBuf>,
    /// Pointwise: the two answer words scored, relevant first [default: yes,no;
    /// MonoQwen2-VL: True,False].
    #[arg(long, value_name = "YES,NO")]
    pub rerank_answers: Option<String>,
    /// Environment variable holding a listwise endpoint's bearer key.
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub rerank_api_key_env: String,
    /// Seconds one request to a listwise or pointwise endpoint may take (0.001 to 86400);
    /// `sift serve` also stops at its request's --timeout.
    #[arg(long, value_name = "SECS", default_value_t = 300.0, value_parser = crate::options::float_in(0.001, 86_400.0))]
    pub rerank_timeout: f64,
    /// Retries of a listwise or pointwise endpoint's request that failed with 429, 408 or
    /// 5xx, timed out or came back malformed (0 to 20).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = crate::options::int_in::<u32>(0, MAX_RETRIES))]
    pub rerank_retries: u32,
    /// Entries the rerank cache holds at most (1 to 100000000): past it new listwise
    /// replies and pointwise scores are not cached, so `sift serve`'s cache stops growing.
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = crate::options::int_in::<usize>(1, 100_000_000))]
    pub rerank_cache_max_entries: usize,
}

impl RerankFlags {
    /// The reranking stages these flags name, loaded with `models`' device and weights;
    /// listwise replies and pointwise scores cached under `out` unless --rerank-cache says
    /// where.
    pub fn stages(
        &self,
        models: &crate::models::ModelFlags,
        out: Option<&std::path::Path>,
    ) -> anyhow::Result<Vec<sift_retrieve::RerankStage>> {
        use anyhow::Context;
        if self.rerank.is_empty() {
            return Ok(Vec::new());
        }
        let options = sift_retrieve::RerankOptions {
            device: sift_embed::select_device(models.device.parse()?)?,
            dtype: models.dtype.dtype(),
            batch: self.rerank_batch.max(1),
            max_length: self.rerank_max_length,
            model: self.rerank_model.clone(),
            remote: sift_generate::RemoteSettings {
                api_key_env: self.rerank_api_key_env.clone(),
                timeout: std::time::Duration::from_secs_f64(self.rerank_timeout),
                retry: sift_generate::RetryPolicy {
                    max_retries: self.rerank_retries,
                    ..sift_generate::RetryPolicy::default()
                },
            },
            listwise: sift_retrieve::rerank::ListwiseSettings {
                window: self.rerank_window,
                step: self.rerank_step.max(1),
                ..Default::default()
            },
            pointwise_max_chars: 2000,
            pointwise_prompt: {
                let mut p = sift_retrieve::rerank::PointwisePrompt::default();
                if let Some(path) = &self.rerank_prompt {
                    p.template = sift_core::read_regular_text(path, sift_core::TEXT_FILE_LIMIT)
                        .with_context(|| format!("reading --rerank-prompt {}", path.display()))?;
                }
                if let Some(a) = &self.rerank_answers {
                    let (y, n) = a
                        .split_once(',')
                        .filter(|(y, n)| !y.trim().is_empty() && !n.trim().is_empty())
                        .with_context(|| format!("--rerank-answers {a:?}: give YES,NO"))?;
                    (p.yes, p.no) = (y.trim().to_string(), n.trim().to_string());
                }
                p
            },
            cache: self
                .rerank_cache
                .clone()
                .or_else(|| out.map(|d| d.join("rerank-cache.jsonl"))),
            cache_max_entries: self.rerank_cache_max_entries,
        };
        if let Some(p) = options.cache.as_ref().and_then(|p| p.parent())
            && !p.as_os_str().is_empty()
        {
            std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
        }
        self.rerank
            .iter()
            .map(|spec| {
                Ok(sift_retrieve::RerankStage {
                    reranker: sift_retrieve::open_reranker(spec, &options)
                        .with_context(|| format!("loading the reranker {spec}"))?,
                    depth: self.rerank_depth.max(1),
                })
            })
            .collect()
    }
}
