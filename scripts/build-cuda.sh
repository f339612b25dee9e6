#!/usr/bin/env bash
# Builds `sift` with CUDA (and, with --flash-attn, flash attention) on a machine without a GPU
# or a system CUDA: CUDA's compiler and libraries come from PyPI into a virtual environment.
#
#   scripts/build-cuda.sh               # --features cuda
#   scripts/build-cuda.sh --flash-attn  # --features cuda,flash-attn (compiles ~50 large kernels)
#
# Result: target/cuda/sift-cuda, stripped. A build with flash-attn carries 53 kernels' device
# code uncompressed (280 MiB here): it is also written xz-compressed, target/cuda/sift-cuda.xz,
# small enough to carry to a GPU machine (benches/gpu/run.sh decompresses it). The binary needs,
# where it runs, an NVIDIA driver (libcuda, loaded at run time) and CUDA 13's runtime, cuBLAS,
# cuRAND and NVRTC libraries (a PyTorch CUDA 13 install has them: benches/gpu/run.sh points
# LD_LIBRARY_PATH there).
#
# Settings (environment):
#   CUDA_COMPUTE_CAP  the GPU generation the kernels are compiled for (default 90: Hopper, H100/H200)
#   SIFT_CUDA_VENV    where the CUDA wheels go (default target/cuda/venv)
#   CUDA_VERSION_PIN  the CUDA release of the wheels (default 13.0: the lent H200's driver runs
#                     CUDA 13.0, and PTX from a newer nvcc does not load on an older driver;
#                     candle's cudarc accepts 11.4 to 13.4)
set -euo pipefail
cd "$(dirname "$0")/.."

features=cuda
if [ "${1:-}" = "--flash-attn" ]; then
    features=cuda,flash-attn
elif [ -n "${1:-}" ]; then
    echo "usage: scripts/build-cuda.sh [--flash-attn]" >&2
    exit 2
fi

pin="${CUDA_VERSION_PIN:-13.0}"
venv="${SIFT_CUDA_VENV:-target/cuda/venv}"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"

if [ ! -x "$venv/bin/python" ]; then
    echo "== CUDA $pin toolkit from PyPI into $venv"
    python3 -m venv "$venv"
fi
# nvcc (with its nvvm and crt), the runtime, cuBLAS, cuRAND, NVRTC and CCCL (libcu++ headers)
# of one CUDA release
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "nvidia-cuda-nvcc==$pin.*" "nvidia-nvvm==$pin.*" "nvidia-cuda-crt==$pin.*" \
    "nvidia-cuda-runtime==$pin.*" "nvidia-cuda-nvrtc==$pin.*" "nvidia-cublas==$pin.*" \
    "nvidia-cuda-cccl==$pin.*" \
    "nvidia-curand==10.4.0.*"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cuda_home="$site/nvidia/cu13"
[ -x "$cuda_home/bin/nvcc" ] || { echo "no nvcc under $cuda_home" >&2; exit 1; }

# The wheels ship only versioned libraries (libcudart.so.13); the linker wants libcudart.so.
libdir="$(pwd)/target/cuda/lib"
mkdir -p "$libdir"
for lib in cudart cublas cublasLt curand nvrtc; do
    real="$(ls "$cuda_home"/lib/lib$lib.so.* 2>/dev/null | head -1)"
    [ -n "$real" ] || { echo "lib$lib not in the CUDA wheels ($cuda_home/lib)" >&2; exit 1; }
    ln -sf "$real" "$libdir/lib$lib.so"
done

# candle links the driver library (libcuda) at build time; it comes with the NVIDIA driver,
# not with the toolkit's wheels. As the toolkit's own stubs/libcuda.so does, a stub with the
# driver API's names (from cudarc's bindings) satisfies the linker; its soname is the
# driver's, libcuda.so.1, so the program loads the real driver where it runs.
if [ ! -f "$libdir/libcuda.so" ]; then
    grep -ho "pub unsafe fn cu[A-Z][A-Za-z0-9_]*" "$(scripts/crate-dir cudarc)/src/driver/sys/mod.rs" \
        | awk '{print "void " $4 "(void) {}"}' | sort -u >"$libdir/libcuda-stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$libdir/libcuda.so" "$libdir/libcuda-stub.c"
fi

export CUDA_HOME="$cuda_home" CUDA_PATH="$cuda_home"
export PATH="$cuda_home/bin:$PATH"
export LIBRARY_PATH="$libdir:$cuda_home/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$cuda_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RUSTFLAGS="${RUSTFLAGS:-} -L native=$libdir"
nvcc --version | tail -2

if [ "$features" = cuda,flash-attn ]; then
    # candle-flash-attn's build fetches CUTLASS with git from GitHub at a fixed commit. Where
    # GitHub cannot be reached, a CUTLASS release's headers come from PyPI's nvidia-cutlass,
    # placed where that build looks for its cached checkout (CUDAFORGE_HOME), marked with the
    # commit it asks. 4.2 by default: 3.5's headers do not compile with CUDA 13 (their
    # cuda_host_adapter.hpp names PFN_cuTensorMapEncodeTiled, which CUDA 13 only has
    # versioned); 4.2's compile the flash kernels with nvcc 13.0.
    cutlass="${SIFT_CUTLASS_VERSION:-4.2.0.0}"
    cutlass_commit="$(sed -n 's/^const CUTLASS_COMMIT: &str = "\([0-9a-f]*\)";/\1/p' \
        "$(scripts/crate-dir candle-flash-attn)/build.rs")"
    export CUDAFORGE_HOME="$(pwd)/target/cuda/cudaforge"
    checkout="$CUDAFORGE_HOME/git/checkouts/cutlass-${cutlass_commit:0:16}"
    if [ "$(cat "$checkout/.sift-cutlass-version" 2>/dev/null)" != "$cutlass" ]; then
        echo "== CUTLASS headers (PyPI nvidia-cutlass $cutlass) for commit $cutlass_commit"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
            "nvidia-cutlass==$cutlass"
        src="$site/cutlass_library/source"
        rm -rf "$checkout" && mkdir -p "$checkout/tools/util"
        cp -r "$src/include" "$checkout/include"
        cp -r "$src/tools/util/include" "$checkout/tools/util/include"
        git -C "$checkout" init -q
        echo "$cutlass_commit" >"$checkout/.git/HEAD"
        echo "$cutlass" >"$checkout/.sift-cutlass-version"
    fi
    # compile the kernels on every core (the crate's default is half), keeping them between
    # builds
    export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"
    export CANDLE_FLASH_ATTN_BUILD_DIR="$(pwd)/target/cuda/flash-attn"
    mkdir -p "$CANDLE_FLASH_ATTN_BUILD_DIR"
    # The crate's build records its kernels as done only once all 53 have compiled: a build
    # stopped part way (they take hours on a few cores) starts again from nothing. Where
    # ccache is installed, every nvcc call goes through it (cudaforge runs $NVCC), so each
    # kernel compiled is kept, keyed by its flags, its source and every header it includes,
    # and a build run again picks up where the last one stopped.
    if command -v ccache >/dev/null; then
        export CCACHE_DIR="${CCACHE_DIR:-$(pwd)/target/cuda/ccache}"
        export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
        # (cudaforge finds the toolkit's include and lib folders beside $NVCC's bin folder)
        wrap="$(pwd)/target/cuda/nvcc-ccache"
        mkdir -p "$wrap/bin"
        ln -sfn "$cuda_home/include" "$wrap/include"
        ln -sfn "$cuda_home/lib" "$wrap/lib64"
        printf '#!/bin/sh\nexec ccache "%s" "$@"\n' "$cuda_home/bin/nvcc" >"$wrap/bin/nvcc"
        chmod +x "$wrap/bin/nvcc"
        export NVCC="$wrap/bin/nvcc"
        echo "== nvcc through ccache ($CCACHE_DIR): kernels compiled before are reused"
    else
        echo "== no ccache: a build stopped before all kernels compile starts again from nothing"
    fi
fi

echo "== cargo build --release --features $features (CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP)"
start=$(date +%s)
cargo build --release --locked -p sift-cli --features "$features" --target-dir target/cuda
cp target/cuda/release/sift target/cuda/sift-cuda
strip target/cuda/sift-cuda
mib="$(du -m target/cuda/sift-cuda | cut -f1)"
echo "== built in $(( $(date +%s) - start )) s: target/cuda/sift-cuda ($mib MiB stripped)"
rm -f target/cuda/sift-cuda.xz
if [ "$mib" -gt 60 ]; then
    # too large to carry as it is (64 MiB for everything carried): the device code of the
    # kernels compresses about eightfold
    xz -T0 -6 -k target/cuda/sift-cuda
    echo "== target/cuda/sift-cuda.xz ($(du -m target/cuda/sift-cuda.xz | cut -f1) MiB) to carry"
fi
if [ -n "${NVCC:-}" ]; then ccache --show-stats | sed -n '/Hits:/,/Misses:/p' | head -2; fi
