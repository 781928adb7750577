#!/usr/bin/env bash
# mirror-export's ONNX mapping of the Keras layers GRU/CNN users combine (tools/onnx_export_keras.cpp)
# on the functional fixtures of tests/data/keras/ (U-Net: Conv2DTranspose, Cropping2D,
# UpSampling2D; MobileNet block: DepthwiseConv2D, SeparableConv2D, ReLU(6); image layers: Reshape,
# Permute, GlobalMaxPooling2D, LeakyReLU, ELU, ReLU with threshold and slope, the merges;
# sequence layers: TimeDistributed, Attention, AdditiveAttention, causal MultiHeadAttention;
# seq2seq: RepeatVector) and a GRU with attention over padded token ids (masks from the lengths):
# each model is trained one step, predicted with mirror-predict, exported and run in onnxruntime;
# every output agrees within 1e-5 of the outputs' largest magnitude (onnx_compare.py). Skipped
# (exit 77) without onnxruntime or protobuf, as e2e.onnx_export.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
here="$root/tests/e2e"
python3 -c "import onnxruntime, numpy" 2>/dev/null ||
  { echo "SKIP: python modules onnxruntime/numpy not installed (pip install onnxruntime)"; exit 77; }
twin="$here/keras_twin.py"  # its data command needs numpy only
for d in "unet unet" "seq2seq s2s" "mobilenet mobile" "images12 img12" "seq86 seq86" "words words"; do
  read -r kind prefix <<<"$d"
  python3 "$twin" data "$kind" "$prefix" 16 3 || fail "data $kind"
done
triples=()
for m in unet:unet seq2seq_repeat:s2s mobilenet_block:mobile image_layers:img12 \
         sequence_layers:seq86 gru-mha:words; do
  name="${m%%:*}" data="${m##*:}"
  spec="$root/tests/data/keras/$name.keras.json"
  [ -f "$spec" ] || spec="$root/tests/data/keras/$name.mirror.json"
  "$train" --devices cpu --threads 1 --no-progress --seed 5 --batch-size 8 --max-steps 1 \
    --model-spec "$spec" --train-x "${data}_x.npy" --train-y "${data}_y.npy" \
    --checkpoint-dir "ck-$name" >"$name.train" 2>&1 || { cat "$name.train"; fail "$name: training"; continue; }
  "$build/bin/mirror-predict" --checkpoint "ck-$name" --input "${data}_x.npy" --output "$name.y.npy" \
    --devices cpu 2>"$name.predict" || { cat "$name.predict"; fail "$name: mirror-predict"; continue; }
  if ! "$build/bin/mirror-export" --checkpoint "ck-$name" --onnx "$name.onnx" 2>"$name.export"; then
    grep -q "needs a build with protobuf" "$name.export" && { echo "SKIP: built without protobuf"; exit 77; }
    cat "$name.export"; fail "$name: mirror-export"; continue
  fi
  triples+=("$name.onnx" "${data}_x.npy" "$name.y.npy")
done
[ ${#triples[@]} -eq $((3 * 6)) ] || fail "expected 6 exported models, got $((${#triples[@]} / 3))"
python3 "$here/onnx_compare.py" 1e-5 "${triples[@]}" || fail "onnxruntime disagrees with mirror-predict"
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all onnx_keras_layers checks passed"
