#!/usr/bin/env python3
"""Agent harnesses' search clients against a running `sift serve` (called by tests/serve/).

Each client sends what the harness's own code sends (tests/../shared notes: VisBrowse-Bench's
Serper tools and Jina Reader visits, MERRIN's smolagents GoogleSearchTool and its paged and image
searches, InterLV-Search's SerpAPI client and its BeautifulSoup page fetch, pyserini's MCP
bridge, the trainers' retrieval calls: Search-R1's batch `/retrieve` and the prompt its rollouts
make of it, verl's one-query call, BrowseComp-Plus's single query, R1-Searcher's `/queries`),
with `requests`, and reads what the harness reads. The service is expected to run
WITHOUT --domain over an index of several domains. Every call must answer 200 with non-empty
results in the exact field names, and every link and image URL must resolve.

Prints one JSON line: {"calls": n, "domains_seen": [...], "failures": [...]}; exits 1 on a
failure.

    python3 tests/harness_clients.py --base http://127.0.0.1:8080 --key k \
        --bridge tests/clients/pyserini_bridge.py
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile

import requests
from bs4 import BeautifulSoup

# a query with terms in every domain of the sample
BROAD = "surface area distance energy light water cell"
FAILURES = []
CALLS = [0]
DOMAINS = set()


def check(cond, what):
    if not cond:
        FAILURES.append(what)
    return cond


def ok_json(r, what):
    CALLS[0] += 1
    if not check(r.status_code == 200, f"{what}: status {r.status_code}: {r.text[:300]}"):
        return None
    try:
        data = r.json()
    except ValueError:
        check(False, f"{what}: not JSON: {r.text[:200]}")
        return None
    # InterLV-Search: a JSON `error` field means failure
    check(not (isinstance(data, dict) and "error" in data), f"{what}: error {data}")
    return data


def resolves(url, what, image=False):
    r = requests.get(url, timeout=30)
    CALLS[0] += 1
    if check(r.status_code == 200, f"{what}: GET {url}: {r.status_code}"):
        if image:
            check(r.headers.get("content-type", "").startswith("image/"),
                  f"{what}: {url} is {r.headers.get('content-type')}")
            check(len(r.content) > 0, f"{what}: {url}: empty image")
    return r


def readable(url, what):
    """InterLV-Search's fetch_webpage_text: a plain GET, parsed by BeautifulSoup."""
    r = resolves(url, what)
    if r.status_code != 200:
        return
    check(r.headers.get("content-type", "").startswith("text/html"),
          f"{what}: {url} is {r.headers.get('content-type')}, not HTML")
    soup = BeautifulSoup(r.text, "html.parser")
    check(soup.title is not None and soup.title.get_text().strip(), f"{what}: no <title>")
    text = soup.get_text(" ", strip=True)
    check(len(text) > 40, f"{what}: page text too short: {text!r}")
    for img in soup.find_all("img"):
        resolves(img["src"], f"{what} <img>", image=True)


def visbrowse(base, key):
    headers = {"X-API-KEY": key, "Content-Type": "application/json"}
    # text_search: POST /search {"q", "num": 5, "extendParams": {"country", "page"}}
    body = {"q": "how do plants make sugar", "num": 5, "extendParams": {"country": "us", "page": 1}}
    data = ok_json(requests.post(f"{base}/search", headers=headers, data=json.dumps(body)),
                   "visbrowse text_search")
    if data and check("organic" in data and data["organic"], "visbrowse text_search: no organic"):
        for item in data["organic"]:
            check(item.get("title") and item.get("link"), f"visbrowse text_search: {item}")
            item.get("date"), item.get("source"), item.get("snippet")
            DOMAINS.add(item.get("source"))
        readable(data["organic"][0]["link"], "visbrowse text_search link")
    # image_search: POST /images {"q"}; it downloads imageUrl
    data = ok_json(requests.post(f"{base}/images", headers=headers,
                                 data=json.dumps({"q": "leaf structure"})), "visbrowse image_search")
    image_url = None
    if data and check(data.get("images"), "visbrowse image_search: no images"):
        for item in data["images"]:
            check(item.get("title") and item.get("link") and item.get("imageUrl"),
                  f"visbrowse image_search: {item}")
            DOMAINS.add(item.get("source"))
        image_url = data["images"][0]["imageUrl"]
        resolves(image_url, "visbrowse image_search imageUrl", image=True)
        readable(data["images"][0]["link"], "visbrowse image_search link")
    # reverse_image_search: POST /lens {"url": image_url}; reads organic[].title/link/imageUrl
    if image_url:
        data = ok_json(requests.post(f"{base}/lens", headers=headers,
                                     data=json.dumps({"url": image_url})), "visbrowse lens")
        if data and check(data.get("organic"), "visbrowse lens: no organic"):
            for item in data["organic"]:
                check(item.get("title") and item.get("link") and item.get("imageUrl"),
                      f"visbrowse lens: {item}")
            check(data["organic"][0]["imageUrl"] == image_url,
                  "visbrowse lens: the image itself is not the first match")
            resolves(data["organic"][0]["imageUrl"], "visbrowse lens imageUrl", image=True)
    # webpage_visit: GET {reader}/{url} with Authorization and X-With-Generated-Alt
    if data and data.get("organic"):
        url = data["organic"][0]["link"]
        r = requests.get(f"{base}/r/{url}", headers={"Authorization": f"Bearer {key}",
                                                      "X-With-Generated-Alt": "true"}, timeout=30)
        CALLS[0] += 1
        if check(r.status_code == 200, f"visbrowse webpage_visit: {r.status_code} {r.text[:200]}"):
            check(r.text.startswith("Title: ") and "\nMarkdown Content:\n" in r.text,
                  f"visbrowse webpage_visit: not Jina's form: {r.text[:200]}")
            for src in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", r.text):
                resolves(src, "visbrowse webpage_visit image", image=True)


def merrin(base, key):
    # smolagents GoogleSearchTool(provider="serper"): GET /search?q=&api_key=[&tbs=]
    params = {"q": "map projection distortion", "api_key": key,
              "tbs": "cdr:1,cd_min:01/01/2020,cd_max:12/31/2020"}
    data = ok_json(requests.get(f"{base}/search", params=params), "merrin web_search (GET)")
    if data and check("organic" in data and data["organic"], "merrin web_search: no organic"):
        for item in data["organic"]:
            check(item["title"] and item["link"], f"merrin web_search: {item}")
            # smolagents reads these with .get / `in`
            item.get("date"), item.get("source"), item.get("snippet")
        readable(data["organic"][0]["link"], "merrin web_search link")
    headers = {"X-API-KEY": key, "Content-Type": "application/json"}
    # search_images: POST /images {"q", "num": 8}
    data = ok_json(requests.post(f"{base}/images", headers=headers,
                                 json={"q": "gravity waves", "num": 8}), "merrin search_images")
    if data and check(data.get("images"), "merrin search_images: no images"):
        check(len(data["images"]) == 8, f"merrin search_images: {len(data['images'])} of 8")
        for item in data["images"]:
            check(item["title"] and item["imageUrl"] and item["link"], f"merrin images: {item}")
            DOMAINS.add(item.get("source"))
    # paged web search: POST /search {"q", "page"}; page 2 follows page 1
    p1 = ok_json(requests.post(f"{base}/search", headers=headers,
                               json={"q": BROAD, "num": 3, "page": 1}), "merrin page 1")
    p2 = ok_json(requests.post(f"{base}/search", headers=headers,
                               json={"q": BROAD, "num": 3, "page": 2}), "merrin page 2")
    if p1 and p2 and check(p1["organic"] and p2["organic"], "merrin paging: empty page"):
        check([o["position"] for o in p2["organic"]] == [4, 5, 6],
              f"merrin paging: page 2 positions {[o['position'] for o in p2['organic']]}")
        check(not {o["link"] for o in p1["organic"]} & {o["link"] for o in p2["organic"]},
              "merrin paging: pages overlap")
    # videos: POST /videos {"q", "page"} answers Serper's shape (no videos here)
    data = ok_json(requests.post(f"{base}/videos", headers=headers, json={"q": "x", "page": 1}),
                   "merrin videos")
    if data:
        check(data.get("videos") == [] and data["searchParameters"]["type"] == "videos",
              f"merrin videos: {data}")
    # a broad query merges every domain
    data = ok_json(requests.post(f"{base}/search", headers=headers, json={"q": BROAD, "num": 30}),
                   "merrin broad")
    if data:
        DOMAINS.update(o["source"] for o in data["organic"])
        check(len({o["source"] for o in data["organic"]}) >= 3,
              f"merrin broad: one domain only: {[o['source'] for o in data['organic']]}")


def image_nodes(node, out):
    """InterLV-Search's image extraction: any node with an image URL, its title and page."""
    if isinstance(node, dict):
        url = next((node[k] for k in ("image_url", "imageUrl", "image", "original", "url")
                    if isinstance(node.get(k), str) and node[k].startswith("http")), None)
        if url:
            out.append((url, node.get("title") or node.get("name"),
                        node.get("link") or node.get("url") or node.get("source_page")))
        for v in node.values():
            image_nodes(v, out)
    elif isinstance(node, list):
        for v in node:
            image_nodes(v, out)
    return out


def interlv(base, key):
    # web_search: GET /search with engine=google, q, num, gl, hl, location, start
    params = {"engine": "google", "q": "enzyme kinetics", "num": 5, "gl": "us", "hl": "en",
              "location": "United States", "start": 0, "api_key": key}
    data = ok_json(requests.get(f"{base}/search", params=params), "interlv web_search")
    if data and check(data.get("organic_results"), "interlv web_search: no organic_results"):
        for item in data["organic_results"]:
            check(all(item.get(k) for k in ("position", "title", "link", "snippet")),
                  f"interlv organic_results: {item}")
        check(data["search_metadata"]["status"] == "Success", "interlv: metadata status")
        readable(data["organic_results"][0]["link"], "interlv fetch_webpage_text")
    # image_search: engine=google_images
    params = {"engine": "google_images", "q": "microscope cell", "api_key": key}
    data = ok_json(requests.get(f"{base}/search", params=params), "interlv image_search")
    image_url = None
    if data and check(data.get("images_results"), "interlv image_search: no images_results"):
        for item in data["images_results"]:
            check(all(item.get(k) for k in ("position", "title", "original", "thumbnail", "link",
                                             "source")), f"interlv images_results: {item}")
        nodes = image_nodes(data, [])
        check(nodes, "interlv image_search: no node with an image URL")
        image_url = nodes[0][0]
        resolves(image_url, "interlv image_search image", image=True)
    # lens_search: engine=google_lens (url, hl, gl)
    if image_url:
        params = {"engine": "google_lens", "url": image_url, "hl": "en", "gl": "us",
                  "api_key": key}
        data = ok_json(requests.get(f"{base}/search", params=params), "interlv lens_search")
        if data and check(data.get("visual_matches"), "interlv lens: no visual_matches"):
            for item in data["visual_matches"]:
                check(all(item.get(k) for k in ("position", "title", "link", "source",
                                                 "thumbnail", "image")),
                      f"interlv visual_matches: {item}")
            check(data["visual_matches"][0]["image"] == image_url, "interlv lens: not itself first")
    # search.json (SerpAPI's other path), and an unknown engine answered as SerpAPI does
    data = ok_json(requests.get(f"{base}/search.json",
                                params={"engine": "google", "q": "buffer polygon",
                                        "api_key": key}), "serpapi search.json")
    r = requests.get(f"{base}/search.json", params={"engine": "bing", "q": "x", "api_key": key})
    CALLS[0] += 1
    check(r.status_code == 400 and isinstance(r.json().get("error"), str),
          f"serpapi unknown engine: {r.status_code} {r.text[:200]}")


def local_tools(base):
    # InterLV-Search's local tools over every domain
    data = ok_json(requests.post(f"{base}/v1/local_text_search",
                                 json={"query": "photosynthesis", "top_k": 5}), "local_text_search")
    if data:
        check(data["source"] == "local_kb" and data["results"], f"local_text_search: {data}")
        for item in data["results"]:
            check(set(item) == {"rank", "entity_id", "score", "has_image", "text"},
                  f"local_text_search result: {item}")


def passages_as_prompt(result):
    """What Search-R1's rollout loop and verl's SearchTool put in the prompt: per hit, the title
    (the first line of `contents`) and the text after it."""
    lines = []
    for i, item in enumerate(result):
        contents = item["document"]["contents"]
        title, _, text = contents.partition("\n")
        lines.append(f"Doc {i + 1}(Title: {title}) {text}")
    return "\n".join(lines)


def trainers(base):
    # Search-R1's batch: one request with every active rollout's query
    queries = ["photosynthesis light reactions", "map projection area", "gravity waves energy"]
    data = ok_json(requests.post(f"{base}/retrieve", json={"queries": queries, "topk": 3,
                                                           "return_scores": True}),
                   "search-r1 retrieve")
    if data and check(len(data["result"]) == len(queries), f"retrieve: {len(data['result'])}"):
        for per_query in data["result"]:
            check(len(per_query) == 3, f"retrieve: {per_query}")
            for item in per_query:
                check(set(item) == {"document", "score"}, f"retrieve item: {item}")
                # Search-R1's fields, and ASearcher's url of the passage's page
                check(set(item["document"]) == {"id", "contents", "url"}, f"retrieve doc: {item}")
                DOMAINS.add(item["document"]["id"].split("/")[0])
            text = passages_as_prompt(per_query)
            check(text.startswith("Doc 1(Title: \"") and "Doc 3(" in text, f"prompt: {text[:200]}")
    # verl's SearchTool: one trajectory's query, scores asked for
    data = ok_json(requests.post(f"{base}/retrieve", json={"queries": ["cell membrane"],
                                                           "topk": 2, "return_scores": True},
                                 timeout=30), "verl retrieve")
    if data:
        check(len(data["result"]) == 1 and len(data["result"][0]) == 2, f"verl: {data}")
    # BrowseComp-Plus's adapter: one query, title and text per docid
    data = ok_json(requests.post(f"{base}/retrieve", json={"query": "surface water"}),
                   "browsecomp retrieve")
    if data:
        for item in data["result"]:
            check({"document", "docid"} <= set(item) and set(item["document"]) == {"title", "text"},
                  f"browsecomp item: {item}")
    asearcher(base)
    vrag(base)
    bing(base)
    # a text-embeddings-inference client (its README's request): one list of floats per input
    data = ok_json(requests.post(f"{base}/embed", json={"inputs": ["leaf cells", "map"], "truncate": True},
                                 headers={"Content-Type": "application/json"}), "tei embed")
    if data:
        check(len(data) == 2 and all(isinstance(x, float) for x in data[0])
              and abs(sum(x * x for x in data[0]) - 1) < 1e-3, f"tei embed: {str(data)[:200]}")
    # R1-Searcher: the texts per query
    data = ok_json(requests.post(f"{base}/queries", json={"queries": queries[:2], "k": 3}),
                   "r1-searcher queries")
    if data:
        check(data["queries"] == queries[:2] and all(len(a) == 3 and all(isinstance(t, str) for t in a)
                                                     for a in data["answers"]),
              f"r1-searcher: {data}")


def asearcher(base):
    """ASearcher's AsyncSearchBrowserClient (utils/search_utils.py): query_async and
    access_async as it parses them (aiohttp, `r["contents"]`, `r["url"]`, pages' `contents`)."""
    import asyncio

    import aiohttp

    async def query_async(req_meta):
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{base}/retrieve", json=req_meta,
                                    timeout=aiohttp.ClientTimeout(total=120)) as response:
                response.raise_for_status()
                res = await response.json()
                return [dict(documents=[r["contents"] for r in result],
                             urls=[r["url"] for r in result],
                             server_type="async-search-browser") for result in res["result"]]

    async def access_async(urls):
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{base}/access", json={"urls": urls},
                                    timeout=aiohttp.ClientTimeout(total=120)) as response:
                response.raise_for_status()
                res = await response.json()
                return [dict(page=result["contents"] if result is not None else "",
                             type="access", server_type="async-search-browser")
                        for result in res["result"]]

    async def run():
        found = await query_async({"queries": ["leaf cells"], "topk": 3, "return_scores": False})
        CALLS[0] += 1
        docs, urls = found[0]["documents"], found[0]["urls"]
        if not check(len(docs) == 3 and len(urls) == 3, f"asearcher search: {found}"):
            return
        pages = await access_async([urls[0], "https://en.wikipedia.org/wiki/Leaf"])
        CALLS[0] += 1
        check(pages[0]["page"].startswith(docs[0]) and pages[1]["page"] == "",
              f"asearcher access: {pages}")

    asyncio.run(run())


def vrag(base):
    """VRAG's search (vrag_agent/generation.py): GET /search with the batch's queries, then
    each result's `image_file` opened as a path or, for an image held in parquet, fetched."""
    from PIL import Image

    queries = ["leaf cells", "map projection"]
    r = requests.get(f"{base}/search", params={"queries": queries})
    CALLS[0] += 1
    results = ok_json(r, "vrag search")
    if not results or not check(len(results) == len(queries), f"vrag: {results}"):
        return
    for obs_item in results:
        check(isinstance(obs_item, list) and isinstance(obs_item[0], dict), f"vrag: {obs_item}")
        img_file_list = [item["image_file"] for item in obs_item]
        check([item["idx"] for item in obs_item] == list(range(len(obs_item))), f"vrag idx: {obs_item}")
        first = img_file_list[0]
        if first.startswith("http"):
            check(resolves(first, "vrag image", image=True), f"vrag image: {first}")
        else:
            Image.open(first).load()


def bing(base):
    """Search-o1's bing_web_search + extract_relevant_info: its key header, `mkt` and
    `setLang`, then webPages.value[].{name, url, snippet}."""
    headers = {"Ocp-Apim-Subscription-Key": "unused"}
    params = {"q": "photosynthesis light reactions", "mkt": "en-US", "setLang": "en"}
    r = requests.get(f"{base}/v7.0/search", headers=headers, params=params, timeout=20)
    CALLS[0] += 1
    search_results = ok_json(r, "bing search")
    if not search_results:
        return
    useful_info = []
    if "webPages" in search_results and "value" in search_results["webPages"]:
        for id, result in enumerate(search_results["webPages"]["value"]):
            useful_info.append({"id": id + 1, "title": result.get("name", ""),
                                "url": result.get("url", ""),
                                "site_name": result.get("siteName", ""),
                                "date": result.get("datePublished", "").split("T")[0],
                                "snippet": result.get("snippet", ""), "context": ""})
    check(1 <= len(useful_info) <= 10 and all(i["title"] and i["snippet"] for i in useful_info),
          f"bing: {useful_info[:2]}")
    if useful_info:
        readable(useful_info[0]["url"], "bing result page")


def bridge(base, script):
    """pyserini's MCP bridge, unchanged but for its host (a literal in the script)."""
    src = open(script).read()
    if not check("http://localhost:8000/mcp/" in src, "bridge: the script's URL changed"):
        return
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src.replace("http://localhost:8000/mcp/", f"{base}/mcp/"))
        path = f.name
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "search", "arguments": {"query": BROAD, "k": 3}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "get_document", "arguments": {"docid": "biology/a7beca61_0.txt"}}},
        # pyserini's own argument set: a text+image query, index_name, k, and its extras
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
         "params": {"name": "search", "arguments": {
             "query": {"query_txt": "leaf cells",
                       "query_img_path": "biology/biology_9d04c6e3_0003/image_1.png"},
             "index_name": "biology", "k": 2, "ef_search": 100, "encoder": "",
             "query_generator": "", "intruction_config": ""}}},
    ]
    out = subprocess.run([sys.executable, path], input="\n".join(json.dumps(m) for m in msgs),
                         capture_output=True, text=True, timeout=120)
    CALLS[0] += len(msgs) - 1
    replies = {r["id"]: r for r in map(json.loads, out.stdout.splitlines()) if "id" in r}
    check(set(replies) == {1, 2, 3, 4, 5}, f"bridge: replies {sorted(replies)}: {out.stderr[-800:]}")
    tools = replies.get(2, {}).get("result", {}).get("tools", [])
    check(len(tools) >= 11 and "search" in {t["name"] for t in tools},
          f"bridge tools/list: {len(tools)} tools: {out.stderr[-500:]}")
    for i in (3, 4, 5):
        res = replies.get(i, {}).get("result")
        check(res and res.get("content") and not res.get("isError"), f"bridge call {i}: {replies.get(i)}")
    if replies.get(3, {}).get("result"):
        hits = json.loads(replies[3]["result"]["content"][0]["text"])["hits"]
        check(len(hits) == 3, f"bridge search: {len(hits)} hits")
    if replies.get(5, {}).get("result"):
        res = json.loads(replies[5]["result"]["content"][0]["text"])
        check(len(res["hits"]) == 2 and res["domain"] == "biology"
              and res["retriever"].startswith("dense:"), f"bridge pyserini search: {res}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--key", default="unused")
    ap.add_argument("--bridge", required=True)
    a = ap.parse_args()
    visbrowse(a.base, a.key)
    merrin(a.base, a.key)
    interlv(a.base, a.key)
    local_tools(a.base)
    trainers(a.base)
    bridge(a.base, a.bridge)
    print(json.dumps({"calls": CALLS[0], "domains_seen": sorted(d for d in DOMAINS if d),
                      "failures": FAILURES}))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
