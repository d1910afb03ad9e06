"""The small pipeline the unit tests train: one layer, short windows, a few hundred windows, so a
whole run takes a fraction of a second. Built from the reference ``Pipeline``, so every part that is
not resized here is the one the notebooks use."""

from course import ModelConfig, Pipeline

SMALL = Pipeline().replace(
    seq_len=16,
    model=ModelConfig(n_ctx=16, d_model=32, n_head=2, n_layer=1, d_mlp=64),
    n_train=256,
    n_val=64,
    batch_size=16,
    steps=30,
    warmup=5,
)
