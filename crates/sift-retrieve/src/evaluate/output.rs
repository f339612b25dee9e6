//! An evaluation's report as tables (Markdown, LaTeX), JSON, runs and qrels, and the
//! paired comparison of two of its retrievers.
use std::path::Path;

use sift_core::WarningKind;
use sift_eval::{Task, run_file_name};

use crate::{Error, Result};

use super::{Comparison, EvalReport, JobReport, RUN_TAG, TABLE_COLUMNS, io};

impl EvalReport {
    /// Paired comparisons of the jobs `a` and `b` (a job's label, or its retriever when
    /// that names one job of the task) on `metric`, for every task that has both: per
    /// domain with Holm-adjusted p-values, and pooled. Needs per-query metrics
    /// ([`EvalConfig::per_query`](super::EvalConfig::per_query)); an error names a retriever no task has.
    pub fn compare(
        &self,
        a: &str,
        b: &str,
        metric: &str,
        resamples: usize,
        seed: u64,
    ) -> Result<Vec<Comparison>> {
        let find = |task: Task, name: &str| -> Option<&JobReport> {
            let of_task = || self.jobs.iter().filter(move |j| j.task == task);
            of_task().find(|j| j.label == name).or_else(|| {
                let mut by_spec = of_task().filter(|j| j.retriever.to_string() == name);
                match (by_spec.next(), by_spec.next()) {
                    (Some(j), None) => Some(j),
                    _ => None,
                }
            })
        };
        let mut tasks: Vec<Task> = self.jobs.iter().map(|j| j.task).collect();
        tasks.dedup();
        let mut out = Vec::new();
        for task in tasks {
            let (Some(ja), Some(jb)) = (find(task, a), find(task, b)) else {
                continue;
            };
            if ja.per_query.is_empty() || jb.per_query.is_empty() {
                return Err(Error::Unsupported(
                    "comparing retrievers needs per-query metrics (EvalConfig::per_query)".into(),
                ));
            }
            out.push(Comparison {
                task: task.to_string(),
                a: ja.label.clone(),
                b: jb.label.clone(),
                metric: metric.to_string(),
                domains: sift_eval::stats::compare_domains(
                    &ja.per_query,
                    &jb.per_query,
                    metric,
                    resamples,
                    seed,
                ),
            });
        }
        if out.is_empty() {
            let labels: Vec<&str> = self.jobs.iter().map(|j| j.label.as_str()).collect();
            return Err(Error::Unsupported(format!(
                "no task has both {a:?} and {b:?} (jobs: {})",
                labels.join(", ")
            )));
        }
        Ok(out)
    }

    /// The per-domain tables as MM-BRIGHT's paper lays them out, in LaTeX: one `tabular`
    /// per task, a row per job, a column per domain and the unweighted mean ("Avg."),
    /// `metric` in % with one decimal; per column the best value in bold and the second
    /// best underlined (ties share the mark). Needs `booktabs`.
    pub fn to_latex(&self, metric: &str) -> String {
        let mut tasks: Vec<Task> = self.jobs.iter().map(|j| j.task).collect();
        tasks.dedup();
        let mut out = String::new();
        for task in tasks {
            let jobs: Vec<&JobReport> = self.jobs.iter().filter(|j| j.task == task).collect();
            let mut domains: Vec<String> = jobs
                .iter()
                .flat_map(|j| j.report.per_domain.iter().map(|d| d.domain.clone()))
                .collect();
            domains.sort();
            domains.dedup();
            // rows x (domains + mean), in % (None: not evaluated)
            let cells: Vec<Vec<Option<f64>>> = jobs
                .iter()
                .map(|j| {
                    let mut row: Vec<Option<f64>> = domains
                        .iter()
                        .map(|d| {
                            j.report
                                .per_domain
                                .iter()
                                .find(|r| &r.domain == d)
                                .and_then(|r| r.metrics.get(metric))
                                .map(|v| v * 100.0)
                        })
                        .collect();
                    row.push(j.report.mean().get(metric).map(|v| v * 100.0));
                    row
                })
                .collect();
            let rounded = |v: f64| (v * 10.0).round() / 10.0;
            let mut marks = vec![vec![""; domains.len() + 1]; jobs.len()];
            for c in 0..=domains.len() {
                let mut values: Vec<f64> = cells.iter().filter_map(|r| r[c]).map(rounded).collect();
                values.sort_by(|a, b| b.total_cmp(a));
                values.dedup();
                for (r, row) in cells.iter().enumerate() {
                    if let Some(v) = row[c].map(rounded) {
                        if values.first() == Some(&v) {
                            marks[r][c] = "bold";
                        } else if values.get(1) == Some(&v) {
                            marks[r][c] = "underline";
                        }
                    }
                }
            }
            out.push_str(&format!(
                "% Task {task}: {metric} (%), best in bold, second underlined\n\
                 \\begin{{tabular}}{{l{}r}}\n\\toprule\nRetriever & {} & Avg. \\\\\n\\midrule\n",
                "r".repeat(domains.len()),
                domains
                    .iter()
                    .map(|d| latex_escape(d))
                    .collect::<Vec<_>>()
                    .join(" & ")
            ));
            for (r, job) in jobs.iter().enumerate() {
                let row: Vec<String> = cells[r]
                    .iter()
                    .zip(&marks[r])
                    .map(|(v, mark)| match (v, *mark) {
                        (None, _) => "--".to_string(),
                        (Some(v), "bold") => format!("\\textbf{{{v:.1}}}"),
                        (Some(v), "underline") => format!("\\underline{{{v:.1}}}"),
                        (Some(v), _) => format!("{v:.1}"),
                    })
                    .collect();
                out.push_str(&format!(
                    "{} & {} \\\\\n",
                    latex_escape(&job.label),
                    row.join(" & ")
                ));
            }
            out.push_str("\\bottomrule\n\\end{tabular}\n\n");
        }
        out
    }

    /// Positive images counted as Task 4 orphans (no gold passage of their page: no pair).
    pub fn orphans(&self) -> u64 {
        self.warnings.count(WarningKind::OrphanPositiveImage)
    }

    /// Queries dropped for want of judgements in `task`, over every domain.
    pub fn dropped_total(&self, task: Task) -> usize {
        self.dropped.get(&task).map_or(0, |d| d.values().sum())
    }

    /// Every table: one per job (metrics in %), then, with several jobs, the summary of mean
    /// nDCG@10 per task and retriever, and the notes.
    pub fn to_markdown(&self) -> String {
        let mut markdown = String::new();
        for job in &self.jobs {
            markdown.push_str(&format!(
                "Task {} — {} (metrics in %)\n\n{}\n",
                job.report.task,
                job.report.retriever,
                job.report.to_markdown(&TABLE_COLUMNS)
            ));
            let n = self.dropped_total(job.task);
            if n > 0 {
                markdown.push_str(&format!(
                    "{n} quer(y/ies) without judgements dropped before scoring\n"
                ));
            }
            markdown.push('\n');
        }
        if self.jobs.len() > 1 {
            markdown.push_str(&self.summary_table());
        }
        for n in &self.notes {
            markdown.push_str(&format!("\nNote: {n}\n"));
        }
        for f in &self.rerank_failures {
            markdown.push_str(&format!("\nPartial run: {f}\n"));
        }
        if !self.reference_rules.is_empty() {
            markdown.push_str(&self.reference_rules_table());
        }
        let orphans = self.orphans();
        if self.jobs.iter().any(|j| j.task == Task::Pairs) && orphans > 0 {
            markdown.push_str(&format!(
                "\nTask 4: {orphans} positive image(s) linked to no gold passage (orphans: no pair)\n"
            ));
        }
        if !self.links.is_empty() {
            markdown.push_str(&self.links_table());
        }
        markdown
    }

    /// The reference code's rules in force, per task and dense model.
    pub fn reference_rules_table(&self) -> String {
        let mut s = String::from(
            "\nReference code's rules in force (docs/src/reference-profile.md)\n\n\
             | task | retriever | profile | rules |\n|---|---|---|---|\n",
        );
        for r in &self.reference_rules {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                r.task,
                r.retriever,
                r.profile,
                r.rules.join("; ").replace('|', "\\|")
            ));
        }
        s
    }

    /// Task 4's linking per domain: pairs made, and what was left unlinked.
    pub fn links_table(&self) -> String {
        let link = self.links.values().next().map_or("", |s| s.link.as_str());
        let mut s = format!(
            "\nTask 4 links ({link}): passage+image pairs and what was left unlinked\n\n\
             | domain | passages | linked | unkeyed | images | unlinked | image pairs | unknown source passages |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n"
        );
        for (d, l) in &self.links {
            s.push_str(&format!(
                "| {d} | {} | {} | {} | {} | {} | {} | {} |\n",
                l.passages,
                l.passages_linked,
                l.passages_unkeyed,
                l.images,
                l.images_unlinked,
                l.image_pairs,
                l.unknown_source_passages
            ));
        }
        s
    }

    /// Mean nDCG@10 of every task (columns) and retriever (rows).
    pub fn summary_table(&self) -> String {
        let mut tasks: Vec<&str> = self.jobs.iter().map(|j| j.report.task.as_str()).collect();
        tasks.dedup();
        let mut labels: Vec<&str> = Vec::new();
        for j in &self.jobs {
            if !labels.contains(&j.label.as_str()) {
                labels.push(&j.label);
            }
        }
        let mut s = String::from("Mean nDCG@10 over domains (%)\n\n| retriever |");
        for t in &tasks {
            s.push_str(&format!(" task {t} |"));
        }
        s.push_str("\n|---|");
        s.push_str(&"---:|".repeat(tasks.len()));
        s.push('\n');
        for l in labels {
            s.push_str(&format!("| {l} |"));
            for t in &tasks {
                match self
                    .jobs
                    .iter()
                    .find(|j| j.label == l && j.report.task == *t)
                    .and_then(|j| j.report.mean().get("ndcg@10").copied())
                {
                    Some(v) => s.push_str(&format!(" {:.2} |", v * 100.0)),
                    None => s.push_str(" n/a |"),
                }
            }
            s.push('\n');
        }
        s
    }

    /// The JSON of one job: its report, label, dropped queries and (when kept) per-query
    /// metrics.
    pub fn job_json(&self, job: &JobReport) -> serde_json::Value {
        let mut out = job.report.to_json();
        out["label"] = job.label.clone().into();
        out["dropped_queries_without_qrels"] =
            serde_json::to_value(self.dropped.get(&job.task).cloned().unwrap_or_default())
                .unwrap_or_default();
        if !job.per_query.is_empty() {
            out["per_query"] = serde_json::to_value(&job.per_query).unwrap_or_default();
        }
        out
    }

    /// Everything as one JSON object: the job's object when there is one job, else
    /// `{"reports": [...], "not_applicable", "notes", "protocol", "orphan_positive_images",
    /// "pair_links", "warnings"}`.
    pub fn to_json(&self) -> serde_json::Value {
        if let [job] = self.jobs.as_slice() {
            let mut out = self.job_json(job);
            out["warnings"] = serde_json::to_value(self.warnings.to_map()).unwrap_or_default();
            out["notes"] = serde_json::to_value(&self.notes).unwrap_or_default();
            if !self.rerank_failures.is_empty() {
                out["rerank_failures"] =
                    serde_json::to_value(&self.rerank_failures).unwrap_or_default();
            }
            if !self.reference_rules.is_empty() {
                out["reference_rules"] =
                    serde_json::to_value(&self.reference_rules).unwrap_or_default();
            }
            if !self.links.is_empty() {
                out["pair_links"] = serde_json::to_value(&self.links).unwrap_or_default();
            }
            return out;
        }
        serde_json::json!({
            "reports": self.jobs.iter().map(|j| self.job_json(j)).collect::<Vec<_>>(),
            "not_applicable": self.not_applicable,
            "notes": self.notes,
            "reference_rules": self.reference_rules,
            "protocol": self.protocol.name(),
            "orphan_positive_images": self.orphans(),
            "pair_links": self.links,
            "warnings": self.warnings.to_map(),
            "rerank_failures": self.rerank_failures,
        })
    }

    /// Writes `dir/results.md`, `dir/results.json`, each job's TREC run in `dir/runs/` (from
    /// memory, unless the evaluation streamed it there: [`RunOutput::dir`](super::RunOutput::dir) = `dir/runs`)
    /// (`task<N>.<label>.trec`) and each task's qrels and exclusions in `dir/qrels/`.
    pub fn write_to(&self, dir: &Path) -> Result<()> {
        let runs = dir.join("runs");
        let qdir = dir.join("qrels");
        for d in [dir, runs.as_path(), qdir.as_path()] {
            std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
        }
        let md = dir.join("results.md");
        sift_core::write_output(&md, self.to_markdown().as_bytes())?;
        let js = dir.join("results.json");
        let json = serde_json::to_string_pretty(&self.to_json()).expect("JSON values serialise");
        sift_core::write_output(&js, json.as_bytes())?;
        for job in &self.jobs {
            let path = runs.join(run_file_name(job.task, &job.label));
            // a run streamed here during the evaluation is there already
            if !job.run_files.contains(&path) {
                sift_eval::write_run(&path, &job.run, RUN_TAG)?;
            }
        }
        for (task, (q, x)) in &self.qrels {
            sift_eval::write_qrels(&qdir.join(format!("task{task}.qrels")), q)?;
            sift_eval::write_exclusions(&qdir.join(format!("task{task}.exclusions")), x)?;
        }
        Ok(())
    }
}

/// `s` with LaTeX's special characters escaped.
fn latex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            _ => out.push(c),
        }
    }
    out
}
