#!/usr/bin/env bash
# Property-based fuzzing of `sift serve`'s HTTP API from its own OpenAPI document
# (schemathesis): every operation gets generated valid and invalid requests; the check is
# that none gets a server error (5xx) and every answer matches the documented schema.
#
#   cargo build --release -p sift-cli
#   pip install -r benches/requirements-serve.txt
#   benches/serve_fuzz.sh [MAX_EXAMPLES_PER_OPERATION]      # default 300
#
# Writes eval/results/serve_fuzz.{md,junit.xml}.
set -euo pipefail
cd "$(dirname "$0")/.."
examples="${1:-300}"
sift="${SIFT:-target/release/sift}"
work=target/serve-fuzz
mkdir -p "$work"
if [ ! -f "$work/index/manifest.json" ]; then
    "$sift" index --corpus corpora/sample --index "$work/index" \
        --dense models/fixtures/vision/tiny-clip-quickgelu -q
fi
port=$((18800 + $$ % 100))
"$sift" serve --index "$work/index" --corpus corpora/sample --addr "127.0.0.1:$port" --json \
    2> "$work/access.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.2
done
set +e
schemathesis run "http://127.0.0.1:$port/openapi.json" \
    --checks not_a_server_error,response_schema_conformance,content_type_conformance \
    --max-examples "$examples" --workers 2 --seed 1 \
    --report junit --report-junit-path eval/results/serve_fuzz.junit.xml \
    > "$work/schemathesis.txt" 2>&1
rc=$?
set -e
kill -TERM $server
wait $server || true
server_errors=$(grep -c '"status":5' "$work/access.log" || true)
requests=$(grep -c '^{' "$work/access.log" || true)
# schemathesis exits 1 on a failure it found and also when it crashes itself (its coverage
# phase has raised Python-internal errors here); a found failure is listed under "Failures:"
failures=$(grep -c '^Failures:' "$work/schemathesis.txt" || true)
internal=$(grep -c 'Runtime Error' "$work/schemathesis.txt" || true)
statuses=$(grep -o '"status":[0-9]*' "$work/access.log" | sort | uniq -c | awk '{printf "%s %s; ", $2, $1}')
{
    echo "# \`sift serve\` fuzzed from its OpenAPI document"
    echo
    echo "\`benches/serve_fuzz.sh $examples\` ($(date -u '+%Y-%m-%d %H:%M UTC'), $(schemathesis --version 2>&1 | head -1))"
    echo
    echo "Checks: not_a_server_error, response_schema_conformance, content_type_conformance;"
    echo "up to $examples generated examples per operation, seed 1, over the sample index (BM25 +"
    echo "tiny CLIP). schemathesis exit status: $rc; failures found: $failures; runtime errors"
    echo "inside schemathesis (not answers of the server): $internal."
    echo
    echo "Requests the server logged: $requests; answers with a 5xx status: $server_errors."
    echo "Statuses: $statuses"
    echo
    echo '```'
    grep -v '^\s*$' "$work/schemathesis.txt" | tail -40
    echo '```'
} > eval/results/serve_fuzz.md
cat eval/results/serve_fuzz.md
[ "$failures" = 0 ] && [ "$server_errors" = 0 ]
