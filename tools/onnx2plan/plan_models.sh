#!/usr/bin/env bash
# Converts the nine CNNs of the onnx package (1x3x224x224, and densenet121 and squeezenet,
# the two whose shapes are not fixed inside, at 2x3x224x224 and 1x3x256x256) and the
# generated models (make_models.py, each at two input shapes; with --big the 5,000-tensor
# transformer and the deep U-Net too), each in file order and with --streams 2, into OUTDIR,
# then plans them all: tagalloc-bench plan OUTDIR --budget 1.
# Usage: bash tools/onnx2plan/plan_models.sh OUTDIR [--big]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: plan_models.sh OUTDIR [--big]}"
big="${2:-}"
mkdir -p "$out/models"
light="$(python3 -c 'import onnx, os; print(os.path.dirname(onnx.__file__))')/backend/test/data/light"
convert() { # MODEL NAME [--input ...]
    local model="$1" name="$2"
    shift 2
    python3 "$here/onnx2plan.py" "$model" "$@" --out "$out/$name.json"
    python3 "$here/onnx2plan.py" "$model" "$@" --streams 2 --out "$out/$name.s2.json"
}
for m in resnet50 densenet121 inception_v1 inception_v2 shufflenet squeezenet vgg19 bvlc_alexnet zfnet512; do
    convert "$light/light_$m.onnx" "$m"
done
for m in densenet121 squeezenet; do
    input="$(python3 -c "import onnx; g = onnx.load('$light/light_$m.onnx').graph; w = {i.name for i in g.initializer}; print([i.name for i in g.input if i.name not in w][0])")"
    convert "$light/light_$m.onnx" "$m-b2" --input "$input=2,3,224,224"
    convert "$light/light_$m.onnx" "$m-256" --input "$input=1,3,256,256"
done
python3 "$here/make_models.py" "$out/models" $big
convert "$out/models/transformer.onnx" transformer-1x128 --input tokens=1,128,512
convert "$out/models/transformer.onnx" transformer-4x384 --input tokens=4,384,512
convert "$out/models/unet.onnx" unet-256 --input image=1,3,256,256
convert "$out/models/unet.onnx" unet-320x480 --input image=1,3,320,480
convert "$out/models/mobilenet.onnx" mobilenet-224 --input image=1,3,224,224
convert "$out/models/mobilenet.onnx" mobilenet-192x320 --input image=1,3,192,320
if [ "$big" = --big ]; then
    convert "$out/models/transformer_big.onnx" transformer_big-1x128 --input tokens=1,128,512
    convert "$out/models/unet_big.onnx" unet_big-512 --input image=1,3,512,512
fi
bench="${CARGO_TARGET_DIR:-$here/../../target}/release/tagalloc-bench"
[ -x "$bench" ] || cargo build --release -p tagalloc-bench
"$bench" plan "$out" --budget 1
