#!/usr/bin/env bash
# The Keras layers GRU/CNN users combine, against Keras 3 itself (tests/e2e/keras_twin.py is
# Keras's side, the steps tests/e2e/keras_common.bash), on the functional models of
# tests/data/keras/ (written by make_models.py: a small U-Net with Conv2DTranspose, Cropping2D and
# UpSampling2D; a MobileNet-style block with DepthwiseConv2D, SeparableConv2D and ReLU(6);
# TimeDistributed + RepeatVector; the other image and sequence layers with Attention,
# AdditiveAttention and a causal MultiHeadAttention) and a GRU with attention over padded token
# ids, twice: gru-mha.mirror.json (whose masks are the batch's lengths) and Keras's own
# gru_mha.keras.json (Embedding(mask_zero=True): Keras's masks, its mask nodes read unchanged):
#  - each, trained one SGD step by mirror-train and exported with --keras-weights, loads into
#    Keras and predicts what mirror-predict does (within 1e-5 of the outputs' largest magnitude);
#  - Keras's initial weights given to --init-weights take one SGD step to Keras's own step's
#    weights (within 1e-4 per variable; LSTM biases aside, see keras_weights.sh);
#  - and at 2 and 3 ranks (synchronized BatchNorm) the same step gives the 1-rank weights.
# Skipped (exit 77) without Keras and h5py, or without HDF5 in the build.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash" "$@"
source "$(dirname "${BASH_SOURCE[0]}")/keras_common.bash"

python3 "$twin" data unet unet 24 8 && python3 "$twin" data seq2seq s2s 24 9 &&
  python3 "$twin" data mobilenet mobile 24 10 && python3 "$twin" data images12 img12 24 11 &&
  python3 "$twin" data seq86 seq86 24 12 && python3 "$twin" data words words 24 13 ||
  fail "data"

keras_model unet unet 0.1
keras_model seq2seq_repeat s2s 0.1
keras_model mobilenet_block mobile 0.1
keras_model image_layers img12 0.1
keras_model sequence_layers seq86 0.1
model gru-mha words 0.1 --model-spec "$root/tests/data/keras/gru-mha.mirror.json"
keras_model gru_mha words 0.1
[ ${#steps[@]} -eq 7 ] || fail "expected 7 models, got ${#steps[@]}"
keras_out
keras_in

echo "== 2 and 3 ranks reach the weights of 1 rank"
e2e_need_mpirun
# ranks NAME NP DATA FLAGS...: one step from Keras's initial weights at NP ranks.
ranks() {
  local name="$1" np="$2" data="$3"; shift 3
  mpirun -np "$np" --oversubscribe "$train" "${common[@]}" "$@" --train-x "${data}_x.npy" \
    --train-y "${data}_y.npy" --max-steps 1 --batch-size 24 --lr 0.1 \
    --init-weights "$name.k0.weights.h5" --checkpoint-dir "ranks$np-$name" >"$name.train$np" 2>&1 ||
    { cat "$name.train$np"; fail "$name at $np ranks"; return; }
  "$export_" --checkpoint "ranks$np-$name" --keras-weights "$name.r$np.weights.h5" 2>/dev/null ||
    { fail "$name: export of the $np-rank run"; return; }
  jobs+=("compare-weights 1e-5 $name:$np-ranks $name.r$np.weights.h5 $name.m1.weights.h5")
}
ranks unet 2 unet --model-spec unet.keras.json
ranks mobilenet_block 3 mobile --model-spec mobilenet_block.keras.json --sync-batchnorm
ranks sequence_layers 2 seq86 --model-spec sequence_layers.keras.json
ranks gru-mha 3 words --model-spec "$root/tests/data/keras/gru-mha.mirror.json"
keras_finish
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all keras_models checks passed"
