#!/usr/bin/env python3
"""Writes tests/data/keras/layers.txt: every layer class keras.layers exports (by the class name
to_json() writes; aliases such as MaxPool2D are the same classes), for the coverage table of
docs/model-spec.md that tests/nn_spec_coverage_test.cpp generates. Run with Keras 3
(KERAS_BACKEND=jax python3 list_layers.py); the list is committed."""
import inspect
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402

names = sorted({o.__name__ for o in map(lambda n: getattr(keras.layers, n), dir(keras.layers))
                if inspect.isclass(o) and issubclass(o, keras.layers.Layer)})
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "layers.txt"), "w") as f:
    f.write("# keras.layers of Keras %s (list_layers.py)\n" % keras.__version__)
    f.write("\n".join(names) + "\n")
print(len(names), "classes, Keras", keras.__version__)
