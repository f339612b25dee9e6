use anyhow::Result;
use clap::Subcommand;
use sift_embed::{ModelFiles, registry};

/// List, inspect and download embedding models.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The supported models (the registry in models/registry.json).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Facts about a model: where its files are, its configuration, pooling and prefixes.
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

pub fn run(a: Args) -> Result<()> {
    match a.command {
        Cmd::List { json } => {
            if json {
                println!("{}", serde_json::to_string_pretty(registry::all())?);
            } else {
                println!(
                    "| id | alias | arch | pooling | dim | max tokens | query prefix | passage prefix | licence |"
                );
                println!("|---|---|---|---|---:|---:|---|---|---|");
                for m in registry::all() {
                    println!(
                        "| {} | {} | {} | {:?} | {} | {} | {:?} | {:?} | {} |",
                        m.id,
                        m.alias,
                        m.arch,
                        m.pooling,
                        m.dim,
                        m.max_seq_len,
                        m.query_prefix,
                        m.passage_prefix,
                        m.license
                    );
                }
            }
        }
        Cmd::Info { model, json } => {
            let files = ModelFiles::resolve(&model)?;
            let config: serde_json::Value = sift_embed::read_json(&files.config)?;
            let out = serde_json::json!({
                "name": files.name,
                "config": files.config,
                "tokenizer": files.tokenizer,
                "weights": files.weights,
                "sentence_transformers_pooling": files.pooling,
                "sentence_transformers_config": files.sentence_config,
                "model_type": config.get("model_type"),
                "hidden_size": config.get("hidden_size"),
                "num_hidden_layers": config.get("num_hidden_layers"),
                "max_position_embeddings": config.get("max_position_embeddings"),
                "registry": registry::find(&files.name),
            });
            if json {
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                for (k, v) in out.as_object().expect("object") {
                    println!("{k:<32} {v}");
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
