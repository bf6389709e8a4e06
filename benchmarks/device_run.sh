#!/bin/bash
# Issues 27 and 28: the 16-core GPU figures on a lent GPU machine, in one call (docs/performance.md, docs/gpu.md).
# Here, first: bash benchmarks/device_run.sh --prepare   (fills the ignored folder device/: libjpeg-turbo's two
# Debian packages and a copy of imagenet-250, about 27 MiB). There, as one `run` that carries device/:
#   bash benchmarks/device_run.sh
# It builds picpac with its C extension into /tmp/site against the unpacked packages (the machine has no
# libjpeg headers and no network), then runs benchmarks/scaling.py, benchmarks/device_stage.py (nvJPEG's pixels
# against the CPU path's, the batched warp's rate) and benchmarks/train_feed.py (ResNet-50 and -18 on the GPU) and
# writes their output to $OUT (or ./device/out). SKIP_SCALING=1 leaves scaling.py out (issue 28's figures alone).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
    mkdir -p device/debs
    (cd device/debs && apt-get download libjpeg62-turbo libjpeg62-turbo-dev)
    rm -rf device/imagenet-250 && cp -r ../shared/data/imagenet-250 device/imagenet-250
    du -sh device
    exit 0
fi
out=${OUT:-device/out}
mkdir -p "$out"
jpeg=/tmp/jpeg-turbo
mkdir -p $jpeg
for deb in device/debs/*.deb; do dpkg -x "$deb" $jpeg; done
export CFLAGS="-I$jpeg/usr/include -I$jpeg/usr/include/x86_64-linux-gnu" LDFLAGS="-L$jpeg/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH=$jpeg/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site . > "$out/build.log" 2>&1
export PYTHONPATH=/tmp/site PICPAC_BENCH_DATA=$PWD/device/imagenet-250
(cd /tmp && python3 -c "import cv2, picpac, picpac.image.decoding as d, picpac.image.kernels as k
print('picpac', picpac.__version__, 'OpenCV', cv2.__version__, 'fast path', d.REGION_DECODE, 'kernels', k.variant())") \
    | tee "$out/versions.txt"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$out/versions.txt" 2>&1 || true
if [ -z "${SKIP_SCALING:-}" ]; then
    python3 benchmarks/scaling.py --samples 4000 --python 2>&1 | tee "$out/scaling.txt"
fi
python3 benchmarks/device_stage.py 2>&1 | tee "$out/device_stage.txt"
python3 benchmarks/train_feed.py --model resnet50,resnet18 --batch 256 --steps 40 --samples 4000 2>&1 | tee "$out/train_feed.txt"
