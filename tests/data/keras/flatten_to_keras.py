import numpy as np


def flatten_to_keras(tensors, c, h, w):
    """Mirror's tensors from a Flatten of (C, H, W) features up to the first Dense after it
    (inclusive), in Keras's (H, W, C) order. `tensors`: a list of numpy arrays, in model order:
    the [C*H*W] vectors of the layers between (LayerNormalization's gamma and beta,
    BatchNormalization's gamma, beta, moving mean and variance), then the Dense kernel
    [C*H*W, units]. The Dense's bias and every tensor after it are unchanged."""
    def permute(t):
        rest = t.shape[1:]
        return t.reshape((c, h, w) + rest).transpose((1, 2, 0) + tuple(
            range(3, 3 + len(rest)))).reshape((c * h * w,) + rest)
    return [permute(t) for t in tensors]
