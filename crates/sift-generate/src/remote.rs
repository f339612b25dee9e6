//! Any OpenAI-compatible `/v1/chat/completions` endpoint: vLLM, llama.cpp's server, Ollama,
//! `transformers serve`, OpenAI.
use std::cell::Cell;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::request::{Generation, Message, Part, Request, Usage};
use crate::{Error, Generator, Result};

/// When and how long to wait before trying a request again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: none).
    pub max_retries: u32,
    /// The first wait; each retry doubles it.
    pub base: Duration,
    /// The longest wait (a server's `Retry-After` included).
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based), or the server's `Retry-After`
    /// ([`retry_after`]); never above [`RetryPolicy::cap`].
    fn wait(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self.base.saturating_mul(1u32 << retry.min(20));
        retry_after.unwrap_or(backoff).min(self.cap)
    }
}

/// The wait a `Retry-After` header `value` asks for, at most `cap`: delay-seconds (a
/// decimal is taken; "inf" or any number above `cap` is `cap`), or an HTTP-date (a date
/// passed is no wait). `None` for a value that is neither, negative or NaN: the backoff
/// applies. Every value a server can send gives a duration, never a panic.
pub fn retry_after(value: &str, now: SystemTime, cap: Duration) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        if secs.is_nan() || secs < 0.0 {
            return None;
        }
        // compared before converting: from_secs_f64 panics past u64::MAX seconds
        return Some(if secs >= cap.as_secs_f64() {
            cap
        } else {
            Duration::from_secs_f64(secs)
        });
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO).min(cap))
}

thread_local! {
    /// The deadline [`with_deadline`] set on this thread.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with every endpoint request it makes on this thread bound by `deadline`: each
/// attempt may take the endpoint's timeout or the time left, whichever is less, no retry
/// waits past it, and once it has passed a request fails at once ([`Error::Deadline`]). A
/// deadline already in force and earlier stays. A service sets its request's time limit
/// here so that a hung endpoint cannot keep a worker past it.
pub fn with_deadline<T>(deadline: Instant, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.with(|d| d.set(self.0));
        }
    }
    let before = DEADLINE.with(Cell::get);
    let _restore = Restore(before);
    let now = before.map_or(deadline, |b| b.min(deadline));
    DEADLINE.with(|d| d.set(Some(now)));
    f()
}

/// The deadline [`with_deadline`] put in force on this thread, if any.
pub fn current_deadline() -> Option<Instant> {
    DEADLINE.with(Cell::get)
}

/// An OpenAI-compatible chat-completions endpoint. Requests carry images as `data:` URLs;
/// 429, 408 and 5xx answers, timeouts, failed connections and 200 answers that are not a
/// chat completion are retried with exponential backoff (honouring `Retry-After`); other
/// statuses fail at once.
#[derive(Debug, Clone)]
pub struct OpenAiCompatible {
    url: String,
    model: String,
    api_key: Option<String>,
    retry: RetryPolicy,
    agent: ureq::Agent,
    timeout: Duration,
}

impl OpenAiCompatible {
    /// The endpoint under `base` (`http://host:port/v1`; `/chat/completions` is added) serving
    /// `model`; no key, a 120 s timeout per request, the default [`RetryPolicy`].
    pub fn new(base: &str, model: &str) -> OpenAiCompatible {
        let url = format!("{}/chat/completions", base.trim_end_matches('/'));
        let timeout = Duration::from_secs(120);
        OpenAiCompatible {
            url,
            model: model.to_string(),
            api_key: None,
            retry: RetryPolicy::default(),
            agent: agent(timeout),
            timeout,
        }
    }

    /// The bearer key read from environment variable `var` (none if unset or empty).
    pub fn with_api_key_from_env(mut self, var: &str) -> OpenAiCompatible {
        self.api_key = std::env::var(var).ok().filter(|k| !k.is_empty());
        self
    }

    /// This bearer key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> OpenAiCompatible {
        self.api_key = Some(key.into());
        self
    }

    /// The longest one request may take (connecting, sending and reading the answer).
    pub fn with_timeout(mut self, timeout: Duration) -> OpenAiCompatible {
        self.timeout = timeout;
        self.agent = agent(timeout);
        self
    }

    /// How failed requests are retried.
    pub fn with_retry(mut self, retry: RetryPolicy) -> OpenAiCompatible {
        self.retry = retry;
        self
    }

    /// The full chat-completions URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The request body sent for `request` (OpenAI's chat-completions shape).
    pub fn body(&self, request: &Request) -> Value {
        let s = &request.sampling;
        let mut body = json!({
            "model": self.model,
            "messages": request.messages.iter().map(message_json).collect::<Vec<_>>(),
            "max_tokens": s.max_new_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "stream": false,
        });
        if let Some(seed) = s.seed {
            body["seed"] = json!(seed);
        }
        if !s.stop.is_empty() {
            body["stop"] = json!(s.stop);
        }
        body
    }

    /// One attempt, allowed `timeout`: the generation, or the error and whether it is
    /// worth retrying (with the server's `Retry-After`).
    fn attempt<T>(
        &self,
        body: &str,
        attempts: u32,
        timeout: Duration,
        parse: &dyn Fn(&str) -> std::result::Result<T, String>,
    ) -> std::result::Result<T, Failure> {
        let mut req = self
            .agent
            .post(&self.url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json");
        if let Some(k) = &self.api_key {
            req = req.header("Authorization", format!("Bearer {k}"));
        }
        let transport = |e: ureq::Error| {
            let message = match e {
                ureq::Error::Timeout(_) => format!("timed out ({timeout:?} allowed)"),
                e => e.to_string(),
            };
            Failure::retry(Error::Transport {
                url: self.url.clone(),
                message,
                attempts,
            })
        };
        let mut resp = req.send(body.as_bytes()).map_err(transport)?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, SystemTime::now(), self.retry.cap));
        let text = resp.body_mut().read_to_string().map_err(transport)?;
        if status != 200 {
            let err = Error::Status {
                url: self.url.clone(),
                status,
                body: head(&text),
                attempts,
            };
            let again = status == 408 || status == 429 || status >= 500;
            return Err(Failure {
                error: Box::new(err),
                again,
                retry_after,
            });
        }
        parse(&text).map_err(|message| {
            Failure::retry(Error::Malformed {
                url: self.url.clone(),
                message,
                body: head(&text),
                attempts,
            })
        })
    }
}

impl Generator for OpenAiCompatible {
    fn model_id(&self) -> &str {
        &self.model
    }

    fn generate(&self, request: &Request) -> Result<Generation> {
        if request.messages.is_empty() {
            return Err(Error::Invalid("a chat needs at least one message".into()));
        }
        request.sampling.check()?;
        self.post(&self.body(request).to_string(), &parse_completion)
    }
}

impl OpenAiCompatible {
    /// Posts `body`, retrying as the policy says, and parses the answer with `parse`;
    /// within the thread's deadline ([`with_deadline`]) when one is in force.
    fn post<T>(
        &self,
        body: &str,
        parse: &dyn Fn(&str) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let deadline = current_deadline();
        let mut retry = 0;
        loop {
            let timeout = match deadline {
                None => self.timeout,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => self.timeout.min(left),
                    _ => {
                        return Err(Error::Deadline {
                            url: self.url.clone(),
                            attempts: retry,
                        });
                    }
                },
            };
            match self.attempt(body, retry + 1, timeout, parse) {
                Ok(g) => return Ok(g),
                Err(f) if f.again && retry < self.retry.max_retries => {
                    let wait = self.retry.wait(retry, f.retry_after);
                    // a wait that would end past the deadline is not worth starting
                    if deadline.is_some_and(|d| Instant::now() + wait >= d) {
                        return Err(*f.error);
                    }
                    std::thread::sleep(wait);
                    retry += 1;
                }
                Err(f) => return Err(*f.error),
            }
        }
    }

    /// The request body of [`Self::first_token_logprobs`]: `request`'s, greedy, one token,
    /// with `logprobs` and `top_logprobs` (OpenAI's chat-completions names).
    pub fn logprobs_body(&self, request: &Request, top: usize) -> Value {
        let mut body = self.body(request);
        body["max_tokens"] = json!(1);
        body["temperature"] = json!(0.0);
        body["top_p"] = json!(1.0);
        body["logprobs"] = json!(true);
        body["top_logprobs"] = json!(top);
        body
    }

    /// The `top` most likely first tokens of the answer to `request` with their log
    /// probabilities (`choices[0].logprobs.content[0].top_logprobs`, the chosen token added
    /// when the list lacks it), most likely first.
    pub fn first_token_logprobs(
        &self,
        request: &Request,
        top: usize,
    ) -> Result<Vec<(String, f64)>> {
        if request.messages.is_empty() {
            return Err(Error::Invalid("a chat needs at least one message".into()));
        }
        self.post(
            &self.logprobs_body(request, top).to_string(),
            &parse_first_token_logprobs,
        )
    }
}

/// `choices[0].logprobs.content[0]`'s top tokens and log probabilities (see
/// [`OpenAiCompatible::first_token_logprobs`]).
pub fn parse_first_token_logprobs(text: &str) -> std::result::Result<Vec<(String, f64)>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let first = v
        .pointer("/choices/0/logprobs/content/0")
        .ok_or("no choices[0].logprobs.content[0] (does the endpoint return logprobs?)")?;
    let pair = |x: &Value| -> Option<(String, f64)> {
        Some((
            x.get("token")?.as_str()?.to_string(),
            x.get("logprob")?.as_f64()?,
        ))
    };
    let mut out: Vec<(String, f64)> = first
        .get("top_logprobs")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(pair).collect())
        .unwrap_or_default();
    if let Some(chosen) = pair(first)
        && !out.iter().any(|(t, _)| *t == chosen.0)
    {
        out.push(chosen);
    }
    if out.is_empty() {
        return Err("choices[0].logprobs.content[0] has no token with a logprob".into());
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(out)
}

/// A failed attempt.
struct Failure {
    error: Box<Error>,
    again: bool,
    retry_after: Option<Duration>,
}

impl Failure {
    fn retry(error: Error) -> Failure {
        Failure {
            error: Box::new(error),
            again: true,
            retry_after: None,
        }
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// A message as OpenAI's API takes it: plain text as a string, text with images as a list
/// of `text` and `image_url` parts.
fn message_json(m: &Message) -> Value {
    let only_text = m.content.iter().all(|p| matches!(p, Part::Text(_)));
    let content = if only_text {
        let texts: Vec<&str> = m
            .content
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.as_str(),
                Part::Image { .. } => "",
            })
            .collect();
        json!(texts.concat())
    } else {
        json!(
            m.content
                .iter()
                .map(|p| match p {
                    Part::Text(t) => json!({"type": "text", "text": t}),
                    Part::Image { .. } => json!({
                        "type": "image_url",
                        "image_url": {"url": p.data_url().unwrap_or_default()},
                    }),
                })
                .collect::<Vec<_>>()
        )
    };
    json!({"role": m.role, "content": content})
}

/// The first choice's text, finish reason and usage of a chat-completions answer.
fn parse_completion(text: &str) -> std::result::Result<Generation, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or("no choices[0]")?;
    let content = choice
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .ok_or("no choices[0].message.content string")?;
    let usage = v.get("usage");
    let count = |k: &str| {
        usage
            .and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(Generation {
        text: content.to_string(),
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        usage: Usage {
            prompt_tokens: count("prompt_tokens"),
            completion_tokens: count("completion_tokens"),
        },
    })
}

/// The start of a body, for error messages.
fn head(text: &str) -> String {
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_values_are_clamped_never_a_panic() {
        let cap = Duration::from_secs(30);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37
        let ra = |v: &str| retry_after(v, now, cap);
        assert_eq!(ra("1e20"), Some(cap));
        assert_eq!(ra("inf"), Some(cap));
        assert_eq!(ra("18446744073709551616"), Some(cap));
        assert_eq!(ra(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(ra("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(ra("0"), Some(Duration::ZERO));
        assert_eq!(ra("NaN"), None);
        assert_eq!(ra("-3"), None);
        assert_eq!(ra("-inf"), None);
        assert_eq!(ra("soon"), None);
        assert_eq!(ra(""), None);
        // HTTP-dates: 10 s ahead, far ahead (capped), passed (no wait)
        assert_eq!(
            ra("Sun, 06 Nov 1994 08:49:47 GMT"),
            Some(Duration::from_secs(10))
        );
        assert_eq!(ra("Fri, 31 Dec 9999 23:59:59 GMT"), Some(cap));
        assert_eq!(ra("Sun, 06 Nov 1994 08:49:00 GMT"), Some(Duration::ZERO));
        // the policy's wait never passes its cap
        let p = RetryPolicy::default();
        assert_eq!(p.wait(40, None), p.cap);
        assert_eq!(p.wait(0, Some(Duration::MAX)), p.cap);
    }

    #[test]
    fn sampling_out_of_range_is_refused_before_anything_is_sent() {
        // nothing listens on port 9: a request that were sent would fail otherwise
        let g = OpenAiCompatible::new("http://127.0.0.1:9/v1", "m").with_retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        });
        for (t, p) in [
            (f32::NAN, 1.0),
            (f32::INFINITY, 1.0),
            (-0.5, 1.0),
            (2.5, 1.0),
            (0.7, f32::NAN),
            (0.7, 0.0),
            (0.7, 1.5),
        ] {
            let mut sampling = crate::Sampling::greedy(4);
            (sampling.temperature, sampling.top_p) = (t, p);
            let request = Request {
                messages: vec![Message::user(vec![Part::text("hi")])],
                sampling,
            };
            let e = g.generate(&request).unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "{t} {p}: {e}");
        }
        let mut ok = crate::Sampling::greedy(4);
        (ok.temperature, ok.top_p) = (2.0, 1.0);
        assert!(ok.check().is_ok());
    }

    #[test]
    fn deadlines_nest_to_the_earlier_and_are_restored() {
        assert_eq!(current_deadline(), None);
        let now = Instant::now();
        let (a, b) = (now + Duration::from_secs(5), now + Duration::from_secs(9));
        with_deadline(a, || {
            assert_eq!(current_deadline(), Some(a));
            with_deadline(b, || assert_eq!(current_deadline(), Some(a)));
            assert_eq!(current_deadline(), Some(a));
            let r = std::panic::catch_unwind(|| with_deadline(now, || panic!("inner")));
            assert!(r.is_err());
            assert_eq!(current_deadline(), Some(a));
        });
        assert_eq!(current_deadline(), None);
    }
}
