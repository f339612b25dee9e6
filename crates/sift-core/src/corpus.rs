use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::beir::{self, JsonlPassages};
use crate::kb::{self, KbFile, KbImages, KbPassages};
use crate::mmbright::{self, ParquetPassages, Table};
use crate::paths::normalize_image_path;
use crate::types::{Example, Passage, Qrels};
use crate::warnings::{WarningKind, Warnings};
use crate::{Error, Result};

/// How a corpus is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// BEIR: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv`; one domain.
    Beir,
    /// MM-BRIGHT hub layout: one parquet per domain under each config directory.
    MmBright,
    /// A knowledge base: one JSONL or Parquet file of rows `{"id" or "qid", "text",
    /// "image_path"}` (image paths relative to the file); one domain, named after the file's
    /// stem; no queries.
    Kb,
}

impl Layout {
    /// Name used in manifests and output.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Beir => "beir",
            Layout::MmBright => "mm-bright",
            Layout::Kb => "kb",
        }
    }
}

/// A corpus on disk.
#[derive(Debug, Clone)]
pub struct Corpus {
    root: PathBuf,
    layout: Layout,
    /// Read a domain whose parquet shards are incomplete instead of refusing it.
    allow_partial: bool,
    /// The file of a knowledge base ([`Layout::Kb`]).
    kb: Option<KbFile>,
}

/// Which MM-BRIGHT example set to read.
const EXAMPLES: &str = "examples";
const EXAMPLES_MULTIMODAL: &str = "examples_multimodal";

impl Corpus {
    /// Opens a corpus, detecting its layout: a directory (BEIR when it holds `corpus.jsonl`,
    /// MM-BRIGHT when it holds `documents/`, else a knowledge base when it holds exactly one
    /// of `kb.jsonl` and `kb.parquet`), or a knowledge-base file (`.jsonl` or `.parquet`;
    /// [`Layout::Kb`]).
    pub fn open(root: impl AsRef<Path>) -> Result<Corpus> {
        let root = root.as_ref().to_path_buf();
        let corpus = |root, layout, kb| Corpus {
            root,
            layout,
            allow_partial: false,
            kb,
        };
        let meta = fs::metadata(&root).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::io(
                    &root,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "corpus not found (a corpus directory, or a knowledge-base .jsonl / \
                         .parquet file)",
                    ),
                )
            } else {
                Error::io(&root, e)
            }
        })?;
        if !meta.is_dir() {
            let kb = KbFile::open(&root)?;
            return Ok(corpus(root, Layout::Kb, Some(kb)));
        }
        if root.join("corpus.jsonl").is_file() {
            return Ok(corpus(root, Layout::Beir, None));
        }
        if root.join("documents").is_dir() {
            return Ok(corpus(root, Layout::MmBright, None));
        }
        let files: Vec<PathBuf> = kb::DIR_FILES
            .iter()
            .map(|f| root.join(f))
            .filter(|f| f.exists())
            .collect();
        match files.as_slice() {
            [] => Err(Error::UnknownLayout { path: root }),
            [file] => {
                let kb = KbFile::open(file)?;
                Ok(corpus(file.clone(), Layout::Kb, Some(kb)))
            }
            _ => Err(Error::AmbiguousKb { path: root }),
        }
    }

    /// Whether a domain whose parquet shards are incomplete (`x-00000-of-00002.parquet`
    /// without `-00001-`, or shards disagreeing on the total) is read as it is. By default
    /// that is an error ([`Error::IncompleteShards`]): half a domain would be evaluated as if
    /// it were the whole. [`Corpus::shard_problems`] lists what is incomplete.
    pub fn allow_partial_shards(mut self, allow: bool) -> Self {
        self.allow_partial = allow;
        self
    }

    /// Every incomplete shard set of the corpus, as `config/domain: what is wrong`.
    pub fn shard_problems(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if self.layout != Layout::MmBright {
            return Ok(out);
        }
        for config in [
            "documents",
            EXAMPLES,
            EXAMPLES_MULTIMODAL,
            "document_images",
            "examples_images",
        ] {
            for (domain, files) in self.shard_files(config)? {
                if let Some(problem) = shard_problem(&files) {
                    out.push(format!("{config}/{domain}: {problem}"));
                }
            }
        }
        Ok(out)
    }

    /// The corpus directory; for a knowledge base, its file (also when it was opened through
    /// its directory).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The detected layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Domain names, sorted. A BEIR corpus has one, named after its directory; a knowledge
    /// base one, named after its file's stem (`kb.jsonl` -> `kb`).
    pub fn domains(&self) -> Result<Vec<String>> {
        match self.layout {
            Layout::Beir => Ok(vec![self.beir_domain()]),
            Layout::MmBright => Ok(self.shards("documents")?.into_keys().collect()),
            Layout::Kb => Ok(vec![self.kb_file()?.domain.clone()]),
        }
    }

    /// The knowledge-base file (an error for other layouts, which no caller asks it of).
    fn kb_file(&self) -> Result<&KbFile> {
        self.kb.as_ref().ok_or_else(|| Error::UnknownLayout {
            path: self.root.clone(),
        })
    }

    /// The knowledge-base file, checked to be `domain`'s.
    fn kb_domain(&self, domain: &str) -> Result<&KbFile> {
        let kb = self.kb_file()?;
        if kb.domain != domain {
            return Err(Error::UnknownDomain {
                path: self.root.clone(),
                domain: domain.to_string(),
                available: kb.domain.clone(),
            });
        }
        Ok(kb)
    }

    /// The domains named in `wanted` (all when empty), checked to exist.
    pub fn select_domains(&self, wanted: &[String]) -> Result<Vec<String>> {
        let all = self.domains()?;
        if wanted.is_empty() {
            if all.is_empty() {
                return Err(Error::EmptyCorpus {
                    path: self.root.join("documents"),
                });
            }
            return Ok(all);
        }
        let mut out = Vec::new();
        for w in wanted {
            if !all.contains(w) {
                return Err(Error::UnknownDomain {
                    path: self.root.clone(),
                    domain: w.clone(),
                    available: all.join(", "),
                });
            }
            if !out.contains(w) {
                out.push(w.clone());
            }
        }
        Ok(out)
    }

    fn beir_domain(&self) -> String {
        self.root
            .canonicalize()
            .unwrap_or_else(|_| self.root.clone())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "corpus".to_string())
    }

    /// Parquet files of an MM-BRIGHT config, grouped by domain: `{domain}.parquet` or shards
    /// `{domain}-00000-of-00002.parquet`, which must be complete (unless allowed otherwise).
    fn shards(&self, config: &str) -> Result<BTreeMap<String, Vec<PathBuf>>> {
        let shards = self.shard_files(config)?;
        let mut out = BTreeMap::new();
        for (domain, files) in shards {
            if !self.allow_partial
                && let Some(problem) = shard_problem(&files)
            {
                return Err(Error::IncompleteShards {
                    path: self.root.join(config),
                    domain,
                    problem,
                });
            }
            out.insert(domain, files.into_iter().map(|f| f.path).collect());
        }
        Ok(out)
    }

    fn shard_files(&self, config: &str) -> Result<BTreeMap<String, Vec<ShardFile>>> {
        let dir = self.root.join(config);
        let mut out: BTreeMap<String, Vec<ShardFile>> = BTreeMap::new();
        if !dir.is_dir() {
            return Ok(out);
        }
        for entry in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let path = entry.map_err(|e| Error::io(&dir, e))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("parquet") {
                continue;
            }
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            let (domain, shard) = parse_shard(stem);
            if let Some(problem) = crate::paths::domain_problem(domain) {
                return Err(Error::BadDomain {
                    domain: domain.to_string(),
                    path,
                    problem,
                });
            }
            out.entry(domain.to_string())
                .or_default()
                .push(ShardFile { path, shard });
        }
        for files in out.values_mut() {
            files.sort_by(|a, b| a.path.cmp(&b.path));
        }
        Ok(out)
    }

    fn domain_files(&self, config: &str, domain: &str) -> Result<Vec<PathBuf>> {
        Ok(self.shards(config)?.remove(domain).unwrap_or_default())
    }

    /// Files holding the passages of `domain`.
    pub fn passage_files(&self, domain: &str) -> Result<Vec<PathBuf>> {
        match self.layout {
            Layout::Beir => Ok(vec![self.root.join("corpus.jsonl")]),
            Layout::Kb => Ok(vec![self.kb_domain(domain)?.path.clone()]),
            Layout::MmBright => {
                let files = self.domain_files("documents", domain)?;
                if files.is_empty() {
                    return Err(Error::UnknownDomain {
                        path: self.root.clone(),
                        domain: domain.to_string(),
                        available: self.domains()?.join(", "),
                    });
                }
                Ok(files)
            }
        }
    }

    /// Streams the passages of `domain`. Duplicate ids are an error. A knowledge base's
    /// passages are its rows with text (rows with neither text nor image are skipped and
    /// counted, [`WarningKind::EmptyRow`]).
    pub fn passages(&self, domain: &str) -> Result<Passages> {
        let files = self.passage_files(domain)?;
        let (inner, len_hint) = match self.layout {
            Layout::Beir => (PassagesInner::Jsonl(JsonlPassages::open(&files[0])?), None),
            Layout::Kb => (
                PassagesInner::Kb(KbPassages::open(self.kb_domain(domain)?)?),
                None,
            ),
            Layout::MmBright => {
                let mut rows = 0;
                for f in &files {
                    rows += Table::open(f, &["id", "content"], &[], 1)?.num_rows;
                }
                (
                    PassagesInner::Parquet(ParquetPassages::open(files)?),
                    Some(rows),
                )
            }
        };
        Ok(Passages { inner, len_hint })
    }

    /// A stable fingerprint of `domain`'s passage files (xxh3-128 of their names and bytes):
    /// a knowledge base's file, which holds its image paths too. Image files are not in it
    /// (nor are an MM-BRIGHT corpus's `document_images`); image vectors are cached by the
    /// images' bytes, so a changed image is embedded again by the next build.
    pub fn fingerprint(&self, domain: &str) -> Result<String> {
        let mut hasher = twox_hash::XxHash3_128::new();
        let mut buf = vec![0u8; 1 << 20];
        for file in self.passage_files(domain)? {
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
            hasher.write(name.unwrap_or_default().as_bytes());
            hasher.write(&[0]);
            let mut f = crate::open_regular_file(&file)?;
            loop {
                let n = f.read(&mut buf).map_err(|e| Error::io(&file, e))?;
                if n == 0 {
                    break;
                }
                hasher.write(&buf[..n]);
            }
        }
        Ok(format!("xxh3-128:{:032x}", hasher.finish_128()))
    }

    /// Queries of `domain`. MM-BRIGHT: the `examples` rows (Task 1), or the
    /// `examples_multimodal` rows (Tasks 2-4) when `multimodal`. BEIR: `queries.jsonl`.
    /// Queries with empty text are skipped and counted. A knowledge base has none
    /// ([`Error::NoQueries`]).
    pub fn examples(
        &self,
        domain: &str,
        multimodal: bool,
        warnings: &mut Warnings,
    ) -> Result<Vec<Example>> {
        match self.layout {
            Layout::Beir => beir::read_queries(&self.root.join("queries.jsonl"), warnings),
            Layout::Kb => Err(Error::NoQueries {
                path: self.root.clone(),
            }),
            Layout::MmBright => {
                let config = if multimodal {
                    EXAMPLES_MULTIMODAL
                } else {
                    EXAMPLES
                };
                let files = self.domain_files(config, domain)?;
                if files.is_empty() {
                    return Err(Error::io(
                        self.root.join(config).join(format!("{domain}.parquet")),
                        std::io::Error::new(std::io::ErrorKind::NotFound, "no examples for domain"),
                    ));
                }
                mmbright::read_examples(&files, multimodal, warnings)
            }
        }
    }

    /// BEIR qrels of `split` (`qrels/<split>.tsv`), graded. Entries naming queries not in
    /// `known_queries` are skipped and counted. A knowledge base has none
    /// ([`Error::NoQueries`]).
    pub fn beir_qrels(
        &self,
        split: &str,
        known_queries: Option<&HashSet<&str>>,
        warnings: &mut Warnings,
    ) -> Result<Qrels> {
        if self.layout == Layout::Kb {
            return Err(Error::NoQueries {
                path: self.root.clone(),
            });
        }
        let path = self.root.join("qrels").join(format!("{split}.tsv"));
        beir::read_qrels(&path, known_queries, warnings)
    }

    /// Streams the corpus images of `domain` (`document_images`), a few at a time.
    /// BEIR corpora have none. A knowledge base's are the files its rows name, each once, in
    /// the order of the first row naming it; rows naming a file that is missing, outside the
    /// file's directory, not a regular file, too large or empty are skipped and counted.
    pub fn images(&self, domain: &str) -> Result<Images> {
        self.image_config("document_images", domain, true)
    }

    /// The passage-image links of a knowledge base's `domain`: (passage id, image id) of each
    /// row with both text and an image path, in file order (an image several rows name is
    /// linked to each of their passages). `None` for the other layouts, which link passages
    /// and images by id (`sift_eval::PairLink`). Image files are not examined here: pairs
    /// naming an image that [`Corpus::images`] skips link to nothing.
    pub fn row_links(&self, domain: &str) -> Result<Option<Vec<(String, String)>>> {
        match self.layout {
            Layout::Kb => Ok(Some(kb::row_links(self.kb_domain(domain)?)?)),
            Layout::Beir | Layout::MmBright => Ok(None),
        }
    }

    /// The corpus images of `domain` without their bytes ([`ImageRecord::bytes`] is empty):
    /// the same ids, in the same order, with the same rows skipped and counted as
    /// [`Corpus::images`] (no bytes, repeated paths), but nothing is copied (parquet) or read
    /// (folders: the file size is enough). For listing candidates.
    pub fn image_paths(&self, domain: &str) -> Result<Images> {
        self.image_config("document_images", domain, false)
    }

    /// Streams the query images of `domain` (`examples_images`); none for BEIR corpora and
    /// knowledge bases.
    pub fn query_images(&self, domain: &str) -> Result<Images> {
        if self.layout == Layout::Kb {
            self.kb_domain(domain)?;
            return Ok(Images::empty());
        }
        self.image_config("examples_images", domain, true)
    }

    /// Images of `config` for `domain`: its parquet files (`path`, `bytes`), or else a folder
    /// `<config>/<domain>/` of image files, each named by its path below `<config>/`
    /// (`physics/physics_2e6f8c35_0001/image_1.png`), the form the parquet paths take.
    fn image_config(&self, config: &str, domain: &str, with_bytes: bool) -> Result<Images> {
        let files = match self.layout {
            Layout::Beir => Vec::new(),
            Layout::MmBright => self.domain_files(config, domain)?,
            Layout::Kb => {
                let mut images = Images::empty();
                images.kb = Some(KbImages::open(self.kb_domain(domain)?)?);
                images.with_bytes = with_bytes;
                return Ok(images);
            }
        };
        let mut folder = Vec::new();
        let mut warnings = Warnings::new();
        let dir = self.root.join(config).join(domain);
        if files.is_empty() && dir.is_dir() {
            let mut walk = FolderWalk {
                base: self.root.join(config),
                root: self
                    .root
                    .canonicalize()
                    .map_err(|e| Error::io(&self.root, e))?,
                visited: HashSet::new(),
                out: &mut folder,
                warnings: &mut warnings,
            };
            walk.dir(&dir)?;
            folder.sort();
        }
        Ok(Images {
            files: files.into(),
            folder: folder.into(),
            kb: None,
            table: None,
            seen: HashSet::new(),
            pending: Default::default(),
            warnings,
            with_bytes,
        })
    }
}

/// Largest image file read from an image folder; bigger files are skipped and counted.
pub const MAX_IMAGE_FILE_BYTES: u64 = 256 << 20;

/// Lists the image files of a folder: regular, non-hidden files, as (id relative to `base`
/// with `/`, path). Symbolic links are followed only when they lead to a place inside the
/// corpus, each directory is entered once (so link loops end), and links out of the corpus,
/// dangling links, FIFOs, devices, sockets and oversized files are skipped and counted.
struct FolderWalk<'a> {
    base: PathBuf,
    /// The corpus directory, canonical.
    root: PathBuf,
    /// Canonical directories entered so far.
    visited: HashSet<PathBuf>,
    out: &'a mut Vec<(String, PathBuf)>,
    warnings: &'a mut Warnings,
}

impl FolderWalk<'_> {
    fn skip(&mut self, path: &Path, why: &str) {
        self.warnings.push(
            WarningKind::SkippedImageFile,
            path,
            String::new(),
            format!("{why}: skipped"),
        );
    }

    fn dir(&mut self, dir: &Path) -> Result<()> {
        let canonical = dir.canonicalize().map_err(|e| Error::io(dir, e))?;
        if !self.visited.insert(canonical) {
            self.skip(
                dir,
                "directory already listed (a link loop or a second link to it)",
            );
            return Ok(());
        }
        let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .collect::<std::io::Result<_>>()
            .map_err(|e| Error::io(dir, e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
            let meta = if kind.is_symlink() {
                let Ok(target) = path.canonicalize() else {
                    self.skip(&path, "symbolic link to nothing (or in a loop)");
                    continue;
                };
                if !target.starts_with(&self.root) {
                    self.skip(&path, "symbolic link to a place outside the corpus");
                    continue;
                }
                std::fs::metadata(&target).map_err(|e| Error::io(&path, e))?
            } else {
                entry.metadata().map_err(|e| Error::io(&path, e))?
            };
            if meta.is_dir() {
                self.dir(&path)?;
            } else if !meta.is_file() {
                self.skip(&path, "not a regular file");
            } else if meta.len() > MAX_IMAGE_FILE_BYTES {
                self.skip(
                    &path,
                    &format!("{} bytes, more than {MAX_IMAGE_FILE_BYTES}", meta.len()),
                );
            } else {
                let rel = path.strip_prefix(&self.base).unwrap_or(&path);
                let id: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                let id = normalize_image_path(&id.join("/"));
                Error::check_id(&path, String::new, "image file name", &id)?;
                self.out.push((id, path));
            }
        }
        Ok(())
    }
}

/// One parquet file of a domain.
#[derive(Debug)]
struct ShardFile {
    path: PathBuf,
    /// (index, total) of `{domain}-{index}-of-{total}`; `None` for `{domain}.parquet`.
    shard: Option<(u64, u64)>,
}

/// `physics-00000-of-00002` -> (`physics`, Some((0, 2))); `physics` -> (`physics`, None).
fn parse_shard(stem: &str) -> (&str, Option<(u64, u64)>) {
    let parts: Vec<&str> = stem.rsplitn(4, '-').collect();
    if parts.len() == 4
        && parts[1] == "of"
        && !parts[0].is_empty()
        && !parts[2].is_empty()
        && parts[0].bytes().all(|b| b.is_ascii_digit())
        && parts[2].bytes().all(|b| b.is_ascii_digit())
        && let (Ok(index), Ok(total)) = (parts[2].parse(), parts[0].parse())
    {
        (parts[3], Some((index, total)))
    } else {
        (stem, None)
    }
}

/// What is wrong with the files of one domain, if anything: shards that disagree on their
/// total, a total no file list matches (missing or extra indexes), or a whole file beside
/// shards.
fn shard_problem(files: &[ShardFile]) -> Option<String> {
    let sharded: Vec<(u64, u64)> = files.iter().filter_map(|f| f.shard).collect();
    if sharded.is_empty() {
        return None;
    }
    if sharded.len() != files.len() {
        return Some("both an unsharded file and shards".into());
    }
    let totals: BTreeSet<u64> = sharded.iter().map(|s| s.1).collect();
    if totals.len() > 1 {
        return Some(format!(
            "shards disagree on their number (-of-{})",
            totals
                .iter()
                .map(|t| format!("{t:05}"))
                .collect::<Vec<_>>()
                .join(", -of-")
        ));
    }
    let total = *totals.first().expect("one");
    let have: BTreeSet<u64> = sharded.iter().map(|s| s.0).collect();
    let missing: Vec<String> = (0..total)
        .filter(|i| !have.contains(i))
        .take(10)
        .map(|i| format!("{i:05}"))
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "{} of {total} shards present; missing {}{}",
            have.len(),
            missing.join(", "),
            if total as usize - have.len() > missing.len() {
                ", ..."
            } else {
                ""
            }
        ));
    }
    if let Some(extra) = have.iter().find(|&&i| i >= total) {
        return Some(format!("shard {extra:05} is beyond -of-{total:05}"));
    }
    None
}

enum PassagesInner {
    Jsonl(JsonlPassages),
    Parquet(ParquetPassages),
    Kb(KbPassages),
}

/// A stream of passages; iterate it, then read [`Passages::warnings`].
pub struct Passages {
    inner: PassagesInner,
    len_hint: Option<u64>,
}

impl Passages {
    /// Number of passages when the format says it up front (parquet row counts).
    pub fn len_hint(&self) -> Option<u64> {
        self.len_hint
    }

    /// Warnings counted so far (empty passages).
    pub fn warnings(&self) -> &Warnings {
        match &self.inner {
            PassagesInner::Jsonl(p) => &p.warnings,
            PassagesInner::Parquet(p) => &p.warnings,
            PassagesInner::Kb(p) => &p.warnings,
        }
    }
}

impl Iterator for Passages {
    type Item = Result<Passage>;
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            PassagesInner::Jsonl(p) => p.next_passage().transpose(),
            PassagesInner::Parquet(p) => p.next_passage().transpose(),
            PassagesInner::Kb(p) => p.next_passage().transpose(),
        }
    }
}

/// One corpus or query image.
#[derive(Debug, Clone)]
pub struct ImageRecord {
    /// Normalised path (the image id).
    pub path: String,
    /// The encoded image file.
    pub bytes: Vec<u8>,
    /// Parquet file it came from; for an image file (a folder's, a knowledge base's), that
    /// file (a knowledge base's: its canonical path).
    pub file: PathBuf,
    /// 0-based row in that parquet file; 0 for a folder's image file; for a knowledge base,
    /// the 0-based row (JSONL: line - 1) of the first row naming the image.
    pub row: u64,
}

/// A stream of images, read in small batches so that only a few images' bytes are held in
/// memory at once. Rows with no bytes and repeated paths are skipped and counted.
pub struct Images {
    files: std::collections::VecDeque<PathBuf>,
    /// image files of a folder: (id, path)
    folder: std::collections::VecDeque<(String, PathBuf)>,
    /// the rows of a knowledge base
    kb: Option<KbImages>,
    table: Option<Table>,
    seen: HashSet<String>,
    pending: std::collections::VecDeque<ImageRecord>,
    warnings: Warnings,
    /// Whether records carry their bytes.
    with_bytes: bool,
}

/// Reads an image file of a folder, or `None` when it is not a regular file (any more): it
/// is opened without blocking and checked through the open handle, so a FIFO put in its
/// place cannot hang the reader.
pub(crate) fn read_image_file(path: &Path) -> Result<Option<Vec<u8>>> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let mut file = options.open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() || meta.len() > MAX_IMAGE_FILE_BYTES {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(Some(bytes))
}

/// Rows per batch when reading images.
const IMAGE_BATCH: usize = 32;

impl Images {
    /// No images.
    fn empty() -> Images {
        Images {
            files: Default::default(),
            folder: Default::default(),
            kb: None,
            table: None,
            seen: HashSet::new(),
            pending: Default::default(),
            warnings: Warnings::new(),
            with_bytes: true,
        }
    }

    /// Warnings counted so far.
    pub fn warnings(&self) -> &Warnings {
        &self.warnings
    }

    fn next_image(&mut self) -> Result<Option<ImageRecord>> {
        if let Some(kb) = &mut self.kb {
            return kb.next_image(self.with_bytes, &mut self.warnings);
        }
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Ok(Some(r));
            }
            if self.table.is_none() && self.files.is_empty() {
                let Some((id, path)) = self.folder.pop_front() else {
                    return Ok(None);
                };
                let (bytes, empty) = if self.with_bytes {
                    let Some(b) = read_image_file(&path)? else {
                        self.warnings.push(
                            WarningKind::SkippedImageFile,
                            &path,
                            String::new(),
                            "no longer a regular file: skipped",
                        );
                        continue;
                    };
                    let empty = b.is_empty();
                    (b, empty)
                } else {
                    let len = std::fs::metadata(&path)
                        .map_err(|e| Error::io(&path, e))?
                        .len();
                    (Vec::new(), len == 0)
                };
                if empty {
                    self.warnings.push(
                        WarningKind::MissingImageBytes,
                        &path,
                        String::new(),
                        format!("image {id:?} is an empty file: skipped"),
                    );
                    continue;
                }
                return Ok(Some(ImageRecord {
                    path: id,
                    bytes,
                    file: path,
                    row: 0,
                }));
            }
            if self.table.is_none() {
                let Some(file) = self.files.pop_front() else {
                    return Ok(None);
                };
                self.table = Some(Table::open(&file, &["path", "bytes"], &[], IMAGE_BATCH)?);
            }
            let table = self.table.as_mut().expect("set above");
            let Some((first_row, batch)) = table.next_batch()? else {
                self.table = None;
                continue;
            };
            for (i, cells) in batch.iter().enumerate() {
                let row = first_row + i as u64;
                let path_cell = table.column(cells, "path").expect("projected");
                let bytes_cell = table.column(cells, "bytes").expect("projected");
                let path = match mmbright::string_at(path_cell) {
                    Ok(Some(p)) if !p.trim().is_empty() => {
                        let p = normalize_image_path(p);
                        Error::check_id(&table.path, || format!("row {row}"), "image path", &p)?;
                        p
                    }
                    Ok(_) => {
                        return Err(Error::row(&table.path, row, "image path is null or empty"));
                    }
                    Err(e) => {
                        return Err(Error::row(
                            &table.path,
                            row,
                            format!("column \"path\": {e}"),
                        ));
                    }
                };
                let data = match mmbright::binary_at(bytes_cell) {
                    Ok(Some(b)) if !b.is_empty() => b,
                    Ok(_) => {
                        self.warnings.push(
                            WarningKind::MissingImageBytes,
                            &table.path,
                            format!("row {row}"),
                            format!("image {path:?} has no bytes: skipped"),
                        );
                        continue;
                    }
                    Err(e) => {
                        return Err(Error::row(
                            &table.path,
                            row,
                            format!("column \"bytes\": {e}"),
                        ));
                    }
                };
                if !self.seen.insert(path.clone()) {
                    self.warnings.push(
                        WarningKind::DuplicateImage,
                        &table.path,
                        format!("row {row}"),
                        format!("image {path:?} appears twice: later row skipped"),
                    );
                    continue;
                }
                self.pending.push_back(ImageRecord {
                    path,
                    bytes: if self.with_bytes {
                        data.to_vec()
                    } else {
                        Vec::new()
                    },
                    file: table.path.clone(),
                    row,
                });
            }
        }
    }
}

impl Iterator for Images {
    type Item = Result<ImageRecord>;
    fn next(&mut self) -> Option<Self::Item> {
        let r = self.next_image().transpose();
        if matches!(r, Some(Err(_))) {
            self.files.clear();
            self.folder.clear();
            self.kb = None;
            self.table = None;
        }
        r
    }
}

#[cfg(test)]
#[path = "corpus_tests.rs"]
mod tests;
