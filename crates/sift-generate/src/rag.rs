//! End-to-end RAG as MM-BRIGHT's Table 7 runs it (following BRIGHT and Su et al. 2024): a
//! generator answers each query from no evidence, from the oracle's gold passages or from a
//! retriever's top k, and a judge model scores each answer against the reference answer
//! from 0 to 100. The prompts are committed templates written for Sift in that spirit
//! (`templates/answer.txt`, `templates/judge.txt`).
use crate::experiments::Template;
use crate::request::{Message, Part, Request, Sampling};
use crate::run::Job;

/// The answering prompt.
pub fn answer_template() -> Template {
    Template {
        name: "rag-answer".into(),
        version: 1,
        text: include_str!("../templates/answer.txt").into(),
    }
}

/// The judging prompt.
pub fn judge_template() -> Template {
    Template {
        name: "rag-judge".into(),
        version: 1,
        text: include_str!("../templates/judge.txt").into(),
    }
}

/// A query to answer: its text and images, the reference answer, and the evidence given.
#[derive(Debug, Clone)]
pub struct RagQuery {
    /// Query id.
    pub id: String,
    /// Query text.
    pub text: String,
    /// Its images (path, encoded bytes), shown before the prompt.
    pub images: Vec<(String, Vec<u8>)>,
    /// The reference answer (MM-BRIGHT's `gold_answers`, joined).
    pub reference: String,
    /// The evidence: (passage id, text), best first; empty for none.
    pub evidence: Vec<(String, String)>,
}

/// The evidence section of the answering prompt: empty without evidence, else the passages
/// numbered `[1]`, `[2]`, ... each cut to `max_chars` characters.
pub fn evidence_text(evidence: &[(String, String)], max_chars: usize) -> String {
    if evidence.is_empty() {
        return String::new();
    }
    let mut s = String::from("\nDocuments that may help:\n");
    for (i, (_, text)) in evidence.iter().enumerate() {
        let t = text.trim();
        let cut = t.char_indices().nth(max_chars).map_or(t, |(b, _)| &t[..b]);
        s.push_str(&format!("[{}] {}\n", i + 1, cut));
    }
    s
}

/// One answering job per query.
pub fn answer_jobs(
    template: &Template,
    queries: &[RagQuery],
    sampling: &Sampling,
    max_evidence_chars: usize,
) -> Vec<Job> {
    queries
        .iter()
        .map(|q| {
            let prompt = template
                .text
                .replace(
                    "{evidence}",
                    &evidence_text(&q.evidence, max_evidence_chars),
                )
                .replace("{query}", q.text.trim());
            let mut content: Vec<Part> = q
                .images
                .iter()
                .map(|(_, b)| Part::image(b.clone()))
                .collect();
            content.push(Part::text(prompt));
            Job {
                query_id: q.id.clone(),
                template: (template.name.clone(), template.version),
                request: Request {
                    messages: vec![Message::user(content)],
                    sampling: sampling.clone(),
                },
            }
        })
        .collect()
}

/// One judging job per query that has an answer and a reference answer (text only); the
/// index of each job's query.
pub fn judge_jobs(
    template: &Template,
    queries: &[RagQuery],
    answers: &[Option<String>],
    sampling: &Sampling,
) -> (Vec<Job>, Vec<usize>) {
    let mut jobs = Vec::new();
    let mut which = Vec::new();
    for (i, (q, a)) in queries.iter().zip(answers).enumerate() {
        let Some(a) = a else { continue };
        if q.reference.trim().is_empty() {
            continue;
        }
        let prompt = template
            .text
            .replace("{reference}", q.reference.trim())
            .replace("{answer}", a.trim())
            .replace("{query}", q.text.trim());
        jobs.push(Job {
            query_id: q.id.clone(),
            template: (template.name.clone(), template.version),
            request: Request {
                messages: vec![Message::user(vec![Part::text(prompt)])],
                sampling: sampling.clone(),
            },
        });
        which.push(i);
    }
    (jobs, which)
}

/// The judge's score: the number after the last `Score:` (0 to 100; a fraction of 1 or a
/// `/100` suffix read as such), or `None` when there is none.
pub fn parse_score(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    let at = lower.rfind("score")?;
    let rest = &text[at + "score".len()..];
    let rest = rest.trim_start_matches(|c: char| c == ':' || c == '*' || c.is_whitespace());
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let v: f64 = num.trim_end_matches('.').parse().ok()?;
    (0.0..=100.0).contains(&v).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_read_from_the_last_score_line() {
        assert_eq!(parse_score("Good.\nScore: 85"), Some(85.0));
        assert_eq!(parse_score("score: 40/100"), Some(40.0));
        assert_eq!(parse_score("**Score:** 100."), Some(100.0));
        assert_eq!(parse_score("The score is high.\nScore: 7"), Some(7.0));
        assert_eq!(parse_score("Score: 250"), None);
        assert_eq!(parse_score("no number here"), None);
    }

    #[test]
    fn prompts_carry_evidence_reference_and_answer() {
        let q = RagQuery {
            id: "q1".into(),
            text: "Why is the sky blue?".into(),
            images: vec![],
            reference: "Rayleigh scattering.".into(),
            evidence: vec![("d1".into(), "Short wavelengths scatter more. ".repeat(10))],
        };
        let jobs = answer_jobs(
            &answer_template(),
            std::slice::from_ref(&q),
            &Sampling::greedy(8),
            40,
        );
        let Part::Text(p) = &jobs[0].request.messages[0].content[0] else {
            panic!()
        };
        assert!(
            p.contains("[1] Short wavelengths scatter more. Short wa")
                && p.contains("Why is the sky blue?")
        );
        assert!(!p.contains("{evidence}") && !p.contains("{query}"));
        let none = RagQuery {
            evidence: vec![],
            ..q.clone()
        };
        let jobs = answer_jobs(&answer_template(), &[none], &Sampling::greedy(8), 40);
        let Part::Text(p) = &jobs[0].request.messages[0].content[0] else {
            panic!()
        };
        assert!(!p.contains("Documents"));
        let (jobs, which) = judge_jobs(
            &judge_template(),
            &[q.clone(), q],
            &[None, Some("Scattering.".into())],
            &Sampling::greedy(8),
        );
        assert_eq!(which, [1]);
        let Part::Text(p) = &jobs[0].request.messages[0].content[0] else {
            panic!()
        };
        assert!(
            p.contains("Rayleigh scattering.")
                && p.contains("Scattering.")
                && p.contains("Score: N")
        );
    }
}
