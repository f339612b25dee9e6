use anyhow::Result;
use clap::Subcommand;
use sift_embed::{ModelFiles, registry};

#[derive(Subcommand)]
pub enum Cmd {
    /// The supported models: embedders (models/registry.json), rerankers and generators
    /// (models/rerankers-and-generators.json), each with its kind. Any other checkpoint of
    /// a supported architecture works too, by directory or hub id.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Facts about a model: its prompt formats (prefixes, the query format with an
    /// instruction, BRIGHT's instruction), maximum lengths, and, when its files are here or
    /// on the hub, where they are and its configuration.
    Info {
        /// Directory, hub id or alias.
        model: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Download a model into the Hugging Face cache (hf-hub; later runs work offline).
    Pull {
        /// Hub id or alias.
        model: String,
    },
}

pub fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::List { json } => list(json)?,
        Cmd::Info { model, json } => {
            // the registry's facts (prompt formats, lengths) need no files; the files'
            // facts are added when the model resolves
            let (files, missing) = match ModelFiles::resolve(&model) {
                Ok(f) => (Some(f), None),
                Err(e) if registry::find(&model).is_some() => (None, Some(e.to_string())),
                Err(e) => return Err(e.into()),
            };
            let name = files.as_ref().map_or(model.as_str(), |f| f.name.as_str());
            let entry = registry::find(name);
            let mut out = serde_json::json!({ "name": name, "registry": entry });
            if let Some(m) = entry {
                out["prompts"] = serde_json::json!({
                    "query_prefix": m.query_prefix,
                    "passage_prefix": m.passage_prefix,
                    "query_with_instruction": m.query_template,
                    "bright_instruction": m.bright_instruction,
                    "max_tokens": m.max_seq_len,
                    "query_max_tokens": m.query_max_seq_len.unwrap_or(m.max_seq_len),
                    "passage_max_chars": m.passage_max_chars,
                    // decoders' attention: the registry's, else what the pooling implies
                    "attention": m.attention.or_else(|| {
                        sift_embed::DECODER_MODEL_TYPES
                            .contains(&m.arch.as_str())
                            .then_some(if m.pooling == registry::Pooling::Mean {
                                registry::Attention::Bidirectional
                            } else {
                                registry::Attention::Causal
                            })
                    }),
                });
            }
            match &files {
                Some(files) => {
                    let config: serde_json::Value = sift_embed::read_json(&files.config)?;
                    for (k, v) in [
                        ("config", serde_json::json!(files.config)),
                        ("tokenizer", serde_json::json!(files.tokenizer)),
                        ("weights", serde_json::json!(files.weights)),
                        (
                            "sentence_transformers_pooling",
                            serde_json::json!(files.pooling),
                        ),
                        (
                            "sentence_transformers_config",
                            serde_json::json!(files.sentence_config),
                        ),
                    ] {
                        out[k] = v;
                    }
                    for k in [
                        "model_type",
                        "hidden_size",
                        "num_hidden_layers",
                        "max_position_embeddings",
                    ] {
                        out[k] = config.get(k).cloned().unwrap_or_default();
                    }
                }
                None => out["files"] = serde_json::json!(missing),
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                for (k, v) in out.as_object().expect("object") {
                    match (k.as_str(), v) {
                        ("registry", _) => {}
                        ("prompts", serde_json::Value::Object(p)) => {
                            for (pk, pv) in p {
                                println!("{:<32} {pv}", format!("prompts.{pk}"));
                            }
                        }
                        _ => println!("{k:<32} {v}"),
                    }
                }
            }
        }
        Cmd::Pull { model } => {
            let files = ModelFiles::resolve(&model)?;
            println!("{} is available:", files.name);
            for p in std::iter::once(&files.config)
                .chain([&files.tokenizer])
                .chain(&files.weights)
            {
                println!("  {}", p.display());
            }
        }
    }
    Ok(())
}

/// `sift models list`: embedders, rerankers and generators.
fn list(json: bool) -> Result<()> {
    if json {
        let out = serde_json::json!({
            "embedders": registry::all(),
            "rerankers": registry::rerankers(),
            "generators": registry::generators(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("Embedders (sift index --dense, sift embed):\n");
    println!(
        "| id | alias | arch | pooling | dim | max tokens | query prefix | passage prefix | query with an instruction | licence |"
    );
    println!("|---|---|---|---|---:|---:|---|---|---|---|");
    for m in registry::all() {
        println!(
            "| {} | {} | {} | {:?} | {} | {} | {:?} | {:?} | {} | {} |",
            m.id,
            m.alias,
            m.arch,
            m.pooling,
            m.dim,
            m.max_seq_len,
            m.query_prefix,
            m.passage_prefix,
            m.query_template
                .as_ref()
                .map_or("-".to_string(), |t| format!("{t:?}")),
            m.license
        );
    }
    for (title, models) in [
        (
            "Rerankers (--rerank, sift rerank, sift serve --rerank)",
            registry::rerankers(),
        ),
        (
            "Generators (--generator: sift generate, sift rag, sift serve)",
            registry::generators(),
        ),
    ] {
        println!("\n{title}:\n");
        println!("| id | alias | kind | arch | images | give it as | licence |");
        println!("|---|---|---|---|---|---|---|");
        for m in models {
            println!(
                "| {} | {} | {} | {} | {} | `{}` | {} |",
                m.id,
                m.alias,
                m.kind,
                m.arch,
                if m.images { "yes" } else { "no" },
                m.spec,
                m.license
            );
        }
    }
    Ok(())
}
