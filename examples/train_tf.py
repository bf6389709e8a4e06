"""Train a small CNN on the digits database with Keras' ``fit`` on picpac's ``tf_dataset``.

    python examples/train_tf.py                 # 12 epochs, CPU
    python examples/train_tf.py --epochs 1      # one short epoch

The database is examples/digits.py's (built on the first run, kept in --db). Each Keras epoch is one
pass of the stream (epoch 0, 1, ...: a new order and new augmentation each time). The last line
printed is ``held-out accuracy A``.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digits

STREAM = digits.STREAM


def main(argv=None) -> float:
    parser = digits.arguments(__doc__)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="TensorFlow's CPU threads (default: half the cores; the loader's decoding threads use the rest)")
    args = parser.parse_args(argv)
    digits.build(args.db)

    import keras
    import tensorflow as tf

    from picpac.adapters.tf import tf_dataset

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(0)

    @tf.autograph.experimental.do_not_convert
    def without_pad(images, labels, pad):
        return images, labels

    train = tf_dataset(args.db, **STREAM, **digits.TRAIN).map(without_pad)   # (B, 32, 32, 1) float32, int64
    held_out = tf_dataset(args.db, **STREAM, **digits.HELD_OUT).map(without_pad)

    def block(filters):
        return [keras.layers.Conv2D(filters, 3, padding="same", use_bias=False), keras.layers.BatchNormalization(momentum=0.9),
                keras.layers.ReLU(), keras.layers.MaxPooling2D()]
    model = keras.Sequential([keras.Input((digits.SIZE, digits.SIZE, 1)), *block(16), *block(32), *block(64),
                              keras.layers.Flatten(), keras.layers.Dropout(0.2), keras.layers.Dense(digits.CLASSES)])
    steps = args.epochs * int(train.cardinality())
    schedule = keras.optimizers.schedules.CosineDecay(args.lr, steps, warmup_target=None)
    model.compile(optimizer=keras.optimizers.Adam(schedule),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(train, epochs=args.epochs, validation_data=held_out, shuffle=False, verbose=2)  # picpac shuffles
    _, accuracy = model.evaluate(held_out, verbose=0)
    print(f"held-out accuracy {accuracy:.4f}", flush=True)
    return accuracy


if __name__ == "__main__":
    main()
