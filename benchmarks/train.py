#!/usr/bin/env python
"""Benchmark the reference run: train the default ``Pipeline()`` and compare it with its baselines.

Prints the wall time, the final held-out loss against the language's loss floor (and the relative gap),
the parameter count, the unigram and bigram entropies, and whether a second identical run is
bit-identical. Asserts nothing: it reports.

    .venv/bin/python benchmarks/train.py              # torch's default number of threads
    .venv/bin/python benchmarks/train.py --threads 1  # one intra-op thread
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere without installing

import torch  # noqa: E402

from course import Pipeline  # noqa: E402
from course.reference.train import HISTORY_KEYS, train  # noqa: E402

TIMINGS = {"t_data", "t_fwd_bwd", "t_opt"}


def identical(a, b) -> bool:
    """Bit-identical parameters, optimizer state and (timing-free) histories."""
    sa, sb = a.model.state_dict(), b.model.state_dict()
    if not all(torch.equal(sa[k], sb[k]) for k in sa):
        return False
    oa, ob = a.optimizer.state_dict(), b.optimizer.state_dict()
    for k in oa["state"]:
        if not all(torch.equal(oa["state"][k][n], ob["state"][k][n]) for n in oa["state"][k]):
            return False
    same_history = all(a.history[k] == b.history[k] for k in HISTORY_KEYS if k not in TIMINGS)
    return same_history and a.val == b.val


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    pipe = Pipeline()
    lang = pipe.language()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s)")
    print(f"pipeline: {pipe.steps} steps, batch {pipe.batch_size}, seq_len {pipe.seq_len}, n_train {pipe.n_train}")

    pipe.windows("train"), pipe.windows("val")  # sample (and cache) the data outside the timed region
    t0 = time.perf_counter()
    run = train(pipe, seed=args.seed)
    wall = time.perf_counter() - t0

    floor = lang.loss_floor(pipe.seq_len)
    final = run.final_val_loss
    print(f"wall time (s):              {wall:.2f}")
    print(f"final held-out loss:        {final:.4f}")
    print(f"{f'loss floor (seq_len={pipe.seq_len}):':<28}{floor:.4f}")
    print(f"relative gap to floor (%):  {100 * (final - floor) / floor:.2f}")
    print(f"parameters:                 {run.model.num_params()}")
    print(f"uniform ln(V):              {lang.uniform_loss:.4f}")
    print(f"unigram entropy H(pi):      {lang.unigram_entropy:.4f}")
    print(f"bigram entropy:             {lang.bigram_entropy:.4f}")
    print(f"entropy rate:               {lang.entropy_rate:.4f}")
    if run.stopped:
        print(f"run stopped early:          {run.stopped}")

    t0 = time.perf_counter()
    again = train(pipe, seed=args.seed)
    print(f"second run wall time (s):   {time.perf_counter() - t0:.2f}")
    print(f"second run bit-identical:   {identical(run, again)}")


if __name__ == "__main__":
    main()
