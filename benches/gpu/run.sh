#!/usr/bin/env bash
# One-shot GPU benchmark: Sift against transformers (bf16, sdpa) on the same inputs, for a lent
# GPU machine (one H200, 16 cores, CUDA 13, PyTorch + transformers, no Rust, no network).
#
#   benches/gpu/run.sh            # on the GPU machine, with the carried binary
#   benches/gpu/run.sh --dry-run  # here: the CPU, the tiny fixture checkpoints (tests/gpu_bench.rs)
#
# It makes random-weight full-size checkpoints there with torch (benches/make_random_vision.py:
# CLIP ViT-L/14, SigLIP so400m-patch14-384, GME-Qwen2-VL-2B; benches/make_random_decoder.py:
# Mistral-7B) and synthetic StackExchange-like images, then for each model runs, alternating
# (Sift, transformers, transformers, Sift):
#   sift bench embed --device cuda:0 --dtype bf16 --batch-size B --items N --warmup W --json
#   python3 -m benches.gpu.peer  (the same inputs, the same precision)
# and writes under $OUT: raw/<model>.<engine>.<round>.json, results.json and results.md
# (items/s, GPU memory, GPU utilisation, Sift's model-busy share, the Sift/transformers ratio).
#
# Settings (environment):
#   OUT              results folder (default target/gpu-bench)
#   SIFT_BIN         the sift binary (default target/cuda/sift-cuda, or target/cuda/sift-cuda.xz where
#                    only that is there; the dry run: target/debug/sift); one ending in .xz (a
#                    flash-attn build is too large to carry as it is) is decompressed into
#                    SIFT_GPU_WORK first
#   SIFT_GPU_WORK    where checkpoints and images go (default /tmp/sift-gpu-bench)
#   SIFT_GPU_MODELS  comma-separated subset of clip-vit-large-patch14, siglip-so400m-patch14-384,
#                    gme-qwen2-vl-2b, mistral-7b (default: all four)
#   SIFT_GPU_BUDGET_S  seconds the whole run may take (default 450); a model that would not
#                    finish in what is left is skipped, and a run that fails or hangs is
#                    stopped; both are named in results.md, the other models still reported
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"

dry=0
case "${1:-}" in
    --dry-run) dry=1 ;;
    "") ;;
    *) echo "usage: benches/gpu/run.sh [--dry-run]" >&2; exit 2 ;;
esac
start=$(date +%s)
deadline=$((start + ${SIFT_GPU_BUDGET_S:-450}))
out="$(mkdir -p "${OUT:-target/gpu-bench}" && cd "${OUT:-target/gpu-bench}" && pwd)"
work="${SIFT_GPU_WORK:-/tmp/sift-gpu-bench}"
mkdir -p "$out/raw" "$work"
models="${SIFT_GPU_MODELS:-clip-vit-large-patch14,siglip-so400m-patch14-384,gme-qwen2-vl-2b,mistral-7b}"
log() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$out/log.txt" >&2; }

if [ "$dry" = 1 ]; then
    sift="${SIFT_BIN:-target/debug/sift}"
    device=cpu
    # tiny checkpoints, few items: this checks the script, not the speed
    items=8 batch=4 warmup=4 workers=0
else
    sift="${SIFT_BIN:-target/cuda/sift-cuda}"
    if [ -z "${SIFT_BIN:-}" ] && [ ! -e "$sift" ] && [ -e "$sift.xz" ]; then
        sift="$sift.xz"
    fi
    device=cuda:0
    items=1024 batch=64 warmup=64 workers=8
    # CUDA 13's runtime, cuBLAS, cuRAND and NVRTC from PyTorch's wheels (libcuda is the driver's)
    libs="$(python3 - <<'EOF'
import glob, os
dirs = []
try:
    import nvidia
    for base in nvidia.__path__:
        dirs += sorted(d for d in glob.glob(os.path.join(base, "**", "lib"), recursive=True) if os.path.isdir(d))
except ImportError:
    pass
import torch
dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
print(":".join(dirs))
EOF
)"
    export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
fi
if [[ "$sift" == *.xz ]] && [ -f "$sift" ]; then
    log "decompressing $sift"
    python3 - "$sift" "$work/sift" <<'EOF'
import lzma, os, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
os.chmod(sys.argv[2] + ".part", 0o755)
os.replace(sys.argv[2] + ".part", sys.argv[2])
EOF
    sift="$work/sift"
fi
[ -x "$sift" ] || { echo "no sift binary at $sift (set SIFT_BIN)" >&2; exit 1; }
sift="$(cd "$(dirname "$sift")" && pwd)/$(basename "$sift")"
{
    echo "sift: $sift ($("$sift" --version 2>&1))"
    python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.version.cuda)'
    echo "cores: $(nproc)"
} >"$out/versions.txt" 2>&1
cat "$out/versions.txt" >&2

# inputs: images, texts
log "images"
python3 -m benches.make_random_vision --models none --images "$work/images" \
    --n-images "$([ "$dry" = 1 ] && echo 12 || echo 256)" >>"$out/log.txt" 2>&1
python3 - "$work/texts.txt" <<'EOF'
import random, sys
random.seed(0)
words = ("pressure boundary layer flow heat transfer shock wave laminar turbulent plate velocity "
         "gradient integral matrix eigenvalue kernel proof lemma graph vertex edge circuit").split()
with open(sys.argv[1], "w") as f:
    for _ in range(512):
        f.write(" ".join(random.choice(words) for _ in range(random.randint(60, 300))) + "\n")
EOF

# name -> family, modality, tiny fixture
family() {
    case "$1" in
        clip-*) echo clip ;; siglip-*) echo siglip ;; gme-*) echo gme ;; mistral-*) echo decoder ;;
        *) echo "unknown model $1" >&2; exit 2 ;;
    esac
}
fixture() {
    case "$1" in
        clip-*) echo models/fixtures/vision/tiny-clip-quickgelu ;;
        siglip-*) echo models/fixtures/vision/tiny-siglip ;;
        gme-*) echo models/fixtures/gme/tiny-gme ;;
        mistral-*) echo models/fixtures/decoder/tiny-mistral ;;
    esac
}
make_model() { # name -> checkpoint directory on stdout
    local name="$1" dir="$work/models/$1"
    if [ "$dry" = 1 ]; then
        echo "$repo/$(fixture "$name")"
        return
    fi
    case "$name" in
        mistral-7b) [ -f "$dir/config.json" ] || python3 benches/make_random_decoder.py --out "$dir" >>"$out/log.txt" 2>&1 ;;
        *) python3 -m benches.make_random_vision --models "$name" --n-images 0 --out "$work/models" >>"$out/log.txt" 2>&1 ;;
    esac
    echo "$dir"
}

# seconds a model needs on the H200 (checkpoint + four runs), to skip what cannot finish
need() {
    case "$1" in
        mistral-*) echo 300 ;; gme-*) echo 150 ;; *) echo 90 ;;
    esac
}
skipped=() failed=()
IFS=, read -ra names <<<"$models"
for name in "${names[@]}"; do
    left=$((deadline - $(date +%s)))
    if [ "$dry" = 0 ] && [ "$left" -lt "$(need "$name")" ]; then
        log "SKIPPED $name: $left s of the budget left, it needs about $(need "$name") s"
        skipped+=("$name")
        continue
    fi
    fam="$(family "$name")"
    log "$name: checkpoint"
    if ! dir="$(make_model "$name")"; then
        log "FAILED $name: making the checkpoint (log.txt)"
        failed+=("$name (checkpoint)")
        continue
    fi
    if [ "$fam" = decoder ]; then
        modality=text input="$work/texts.txt" b=$([ "$dry" = 1 ] && echo 4 || echo 16)
    else
        modality=image input="$work/images" b=$batch
    fi
    n=$items w=$warmup
    if [ "$fam" = gme ]; then
        b=$([ "$dry" = 1 ] && echo 2 || echo 16)
    fi
    if [ "$dry" = 0 ] && { [ "$fam" = gme ] || [ "$fam" = decoder ]; }; then
        n=256 w=32 # a sequence of 1,000+ tokens each
    fi
    for round in 1 2; do
        order=(sift peer)
        [ "$round" = 2 ] && order=(peer sift)
        for engine in "${order[@]}"; do
            raw="$out/raw/$name.$engine.$round.json"
            log "$name: $engine, round $round"
            # a run that fails or hangs costs that run only: the others are still reported
            limit=$((deadline - $(date +%s)))
            [ "$limit" -gt 30 ] || limit=30
            if [ "$engine" = sift ]; then
                cmd=("$sift" bench embed --model "$dir" --modality "$modality" --input "$input"
                    --device "$device" --dtype bf16 --batch-size "$b" --items "$n"
                    --warmup "$w" --json)
            else
                cmd=(python3 -m benches.gpu.peer --family "$fam" --model "$dir" --input "$input"
                    --device "$device" --dtype bf16 --batch-size "$b" --items "$n"
                    --warmup "$w" --workers "$workers" --json)
            fi
            if ! timeout "$limit" "${cmd[@]}" >"$raw" 2>>"$out/log.txt"; then
                log "FAILED $name: $engine, round $round (log.txt)"
                failed+=("$name ($engine round $round)")
                rm -f "$raw"
            fi
        done
    done
done

python3 benches/gpu/summarise.py --raw "$out/raw" --out "$out" --device "$device" \
    --skipped "$(IFS=,; echo "${skipped[*]:-}")" --failed "$(IFS=,; echo "${failed[*]:-}")" \
    --seconds "$(($(date +%s) - start))" \
    $([ "$dry" = 1 ] && echo --dry-run)
log "done: $out/results.md"
[ ${#failed[@]} -eq 0 ]
