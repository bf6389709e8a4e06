#!/bin/bash
# Issues 27, 28 and 38: the GPU checks and figures on a lent GPU machine, in one call (docs/gpu.md,
# docs/performance.md). That machine has Python 3.12, torch 2.11 (CUDA 13), torchvision, OpenCV, pytest, no
# libjpeg headers, no nvImageCodec and no network. Here, first:
#   bash benchmarks/device_run.sh --prepare
# fills the ignored folder device/ with what it lacks: libjpeg-turbo's two Debian packages, a copy of imagenet-250,
# and wheels for Python 3.12: nvImageCodec for CUDA 13 (trimmed to the JPEG decoders and the two Pythons that run
# it), nvJPEG, gilknocker, tqdm and PyYAML. Then, as one `run` that carries device/ (timeout 600):
#   bash benchmarks/device_run.sh
# It builds picpac's C extensions in place against the unpacked packages, then runs, each step bounded and the next
# run whatever the last one gave: the CUDA tests (tests/device, tests/stream/test_device_job.py,
# tests/adapters/test_torch.py; PICPAC_TEST_DATA names the data), benchmarks/device_stage.py (the GPU decoder's
# pixels against the CPU path's, the batched warp's rate), benchmarks/gil.py --stage (the stage thread's GIL) and
# benchmarks/train_feed.py (decode-only img/s; ResNet-50 and -18 fed by the device stage against their synthetic
# rate, with the input wait). Each step's output goes to $OUT (or device/out) as it runs, and summary.txt lists
# each step's exit status and seconds. The bounds add up to 7.5 minutes: give the call timeout_s 600.
# DEVICE=cpu rehearses the same steps on a machine without a GPU, with small sizes (the CUDA tests skip there).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
    set -e
    rm -rf device/debs device/wheels device/data
    mkdir -p device/debs device/wheels device/data
    (cd device/debs && apt-get download libjpeg62-turbo libjpeg62-turbo-dev)
    cp -r ../shared/data/imagenet-250 device/data/imagenet-250
    platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
        -d device/wheels "nvidia-nvimgcodec-cu13==0.9.0.20" "nvidia-nvjpeg==13.0.*" "gilknocker==0.4.2" \
        "tqdm>=4.60" "pyyaml>=6"
    # nvImageCodec's wheel holds a module per Python (3.9 to 3.14t), TIFF, JPEG 2000 and OpenCV plug-ins: 69 MB
    # unpacked. The stage needs its JPEG decoders and the modules of Python 3.12 (the GPU machine) and of this
    # Python (the rehearsal); the rest goes, its RECORD with it.
    python3 - device/wheels/nvidia_nvimgcodec_cu13-*.whl <<'EOF'
import re, sys, zipfile
path = sys.argv[1]
tag = "cpython-%d%d-" % sys.version_info[:2]
unused = re.compile(r"nvimgcodec_impl\.cpython-(?!312-|%s)|_ext\.so|/include/|/tools/" % tag[8:])
keep = re.compile(r"lib(nvjpeg|jpeg_turbo)_ext\.so")
with zipfile.ZipFile(path) as whole:
    members = [(i, whole.read(i)) for i in whole.infolist() if keep.search(i.filename) or not unused.search(i.filename)]
kept = {i.filename for i, _ in members}
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as trimmed:
    for info, data in members:
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"".join(line + b"\n" for line in data.splitlines() if line.split(b",")[0].decode() in kept
                            or line.startswith(info.filename.encode()))
        trimmed.writestr(info, data)
EOF
    du -sh device/debs device/wheels device/data
    tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
    echo "what travels: device/ $(du -sb device | cut -f1) bytes + the working tree $tree bytes (at most 64 MiB)"
    exit 0
fi
out=${OUT:-device/out}
mkdir -p "$out"
: > "$out/summary.txt"
cpu=$([ "${DEVICE:-cuda}" = cpu ] && echo 1 || true)

step() {  # step NAME SECONDS COMMAND...: COMMAND's output to $OUT/NAME.txt, cut at SECONDS; its status noted
    local name=$1 limit=$2 start=$SECONDS status
    shift 2
    echo "== $name: $*" | tee "$out/$name.txt"
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$out/$name.txt"
    status=${PIPESTATUS[0]}
    echo "$name: exit $status after $((SECONDS - start)) s (bound $limit s)" | tee -a "$out/summary.txt"
}

jpeg=/tmp/jpeg-turbo
mkdir -p $jpeg
for deb in device/debs/*.deb; do dpkg -x "$deb" $jpeg; done
export CFLAGS="-I$jpeg/usr/include -I$jpeg/usr/include/x86_64-linux-gnu" LDFLAGS="-L$jpeg/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH=$jpeg/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
site=/tmp/picpac-site
rm -rf $site && mkdir -p $site
build() {  # the carried wheels (nvImageCodec and nvJPEG always, the others where this Python lacks them), picpac's
           # C extensions in place, and what runs
    python3 -m pip install -q --no-index --no-deps --no-compile --target $site device/wheels/nvidia_*.whl || return
    python3 -c "import gilknocker" 2>/dev/null ||
        python3 -m pip install -q --no-index --no-deps --target $site device/wheels/gilknocker-*.whl || true
    python3 -c "import tqdm, yaml" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target $site \
        device/wheels/tqdm-*.whl device/wheels/[pP]y[yY][aA][mM][lL]-*.whl || return
    python3 setup.py -q build_ext --inplace || return
    python3 - <<'EOF'
import os, sys, cv2, numpy, torch, picpac, picpac.image.decoding as d, picpac.image.kernels as k
from picpac.device.decoders import decoder
print("Python", sys.version.split()[0], "picpac", picpac.__version__, "OpenCV", cv2.__version__, "NumPy",
      numpy.__version__, "torch", torch.__version__, "fast path", d.REGION_DECODE, "kernels", k.variant())
import nvidia.nvimgcodec as nv
print("nvImageCodec", nv.__version__, "CUDA", nv.__cuda_version__, "from", os.path.dirname(nv.__file__))
if torch.cuda.is_available():
    print(torch.cuda.get_device_name(0), "- JPEGs decoded by", decoder(torch.device("cuda"), 3).name)
EOF
}
export -f build
export site PYTHONPATH=$PWD:$site PICPAC_TEST_DATA=$PWD/device/data PICPAC_BENCH_DATA=$PWD/device/data/imagenet-250
export PYTHONUNBUFFERED=1
step build 60 bash -c build
tests="tests/device tests/stream/test_device_job.py tests/adapters/test_torch.py"
step tests 120 python3 -m pytest -q -ra -p no:cacheprovider -o addopts= --timeout 120 $tests
if [ -n "$cpu" ]; then
    step device_stage 60 python3 benchmarks/device_stage.py --device cpu --samples 16 --batch 8 --repeats 1
    step gil 60 python3 benchmarks/gil.py --stage --device cpu --batch 16 --repeats 1
    step train_feed 120 python3 benchmarks/train_feed.py --model tiny --batch 16 --steps 2 --warm 1 --samples 64 \
        --decode-batches 2 --feeds synthetic,gpu,threads
else
    step device_stage 60 python3 benchmarks/device_stage.py
    step gil 30 python3 benchmarks/gil.py --stage --device cuda --batch 256 --repeats 8
    step train_feed 180 python3 benchmarks/train_feed.py --model resnet50,resnet18 --batch 256 --steps 40 \
        --samples 4000 --feeds synthetic,gpu,threads
fi
cat "$out/summary.txt"
