#!/usr/bin/env python3
"""The official `openai` client sending one chat completion: reads {base_url, model, body}
as JSON on stdin (`body` is what Sift's client sent: messages, max_tokens, temperature,
top_p), prints {text, finish_reason, prompt_tokens, completion_tokens} as JSON. Used by
tests/transformers_serve.rs to cross-check Sift's OpenAI-compatible back end."""
import json
import sys

import openai


def main():
    spec = json.load(sys.stdin)
    body = spec["body"]
    client = openai.OpenAI(base_url=spec["base_url"], api_key="sk-test")
    r = client.chat.completions.create(
        model=spec["model"],
        messages=body["messages"],
        max_tokens=body["max_tokens"],
        temperature=body["temperature"],
        top_p=body["top_p"],
    )
    c = r.choices[0]
    json.dump({"text": c.message.content, "finish_reason": c.finish_reason,
               "prompt_tokens": r.usage.prompt_tokens, "completion_tokens": r.usage.completion_tokens},
              sys.stdout)


if __name__ == "__main__":
    main()
