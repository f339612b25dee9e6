#!/usr/bin/env python3
"""Real Python clients against a running `sift serve` (called by tests/serve/).

- OpenAI's client (`openai`, base64 encoding as it asks by default) embeds texts through
  POST /v1/embeddings; the vectors must equal `sift embed`'s for the same model.
- MCP's client (`mcp`) connects over streamable HTTP to /mcp, lists the tools and calls
  `search`.

Prints one JSON line: {"openai_equal", "openai_max_abs_diff", "mcp_tools", "mcp_search_hits"}.

    python3 tests/serve_clients.py --base http://127.0.0.1:8080 --model tiny-clip-quickgelu \
        --sift target/debug/sift --model-dir models/fixtures/vision/tiny-clip-quickgelu
"""
import argparse
import asyncio
import json
import subprocess
import tempfile

import openai
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

TEXTS = ["how do plants make sugar", "map projection distortion", "x"]


def openai_check(base, model, sift, model_dir):
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
    got = [d.embedding for d in client.embeddings.create(model=model, input=TEXTS).data]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(TEXTS))
        f.flush()
        out = subprocess.run(
            [sift, "embed", "--model", model_dir, "--input", f.name, "--out", "-"],
            check=True, capture_output=True, text=True,
        ).stdout
    want = [json.loads(line)["vector"] for line in out.splitlines()]
    diff = max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w))
    equal = len(got) == len(want) and all(len(g) == len(w) for g, w in zip(got, want)) and diff == 0.0
    return equal, diff


async def mcp_check(base):
    async with streamable_http_client(f"{base}/mcp") as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            res = await session.call_tool(
                "search", {"query": "how do plants make sugar", "index_name": "biology", "k": 3}
            )
            if res.is_error:
                raise SystemExit(f"search failed: {res}")
            content = res.structured_content or json.loads(res.content[0].text)
            return len(tools), len(content["hits"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--sift", required=True)
    p.add_argument("--model-dir", required=True)
    a = p.parse_args()
    equal, diff = openai_check(a.base, a.model, a.sift, a.model_dir)
    tools, hits = asyncio.run(mcp_check(a.base))
    print(json.dumps({"openai_equal": equal, "openai_max_abs_diff": diff,
                      "mcp_tools": tools, "mcp_search_hits": hits}))


if __name__ == "__main__":
    main()
