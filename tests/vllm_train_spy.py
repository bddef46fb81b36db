"""`gapo train ARGS...` whose group rewards are replaced by one that is spread on a random model, and recorded.

Every call of gapo.trainer.compute_group_rewards (the whole-group path of GAPOTrainer._calculate_rewards) scores with
`token_sum_rank` instead of the task's reward, and appends the group size it was given to the file named by
$GAPO_GROUP_SIZES, one line per group. Why: a random model never writes a valid `<answer>`, so the list reward is -1
everywhere, every advantage is 0 and the adapter cannot move; the rank is always spread (as in
tests/gpu/train_backend.py). Everything else is `gapo train` as users run it.

A script of its own because TRL's colocated vLLM engine lives in the training process and holds its threads and memory
(vLLM drops torch to one thread): the tests run it in a child process.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def token_sum_rank(completions: list, completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
    """Each completion's rank within its group by the sum of its token ids, in [0, 1]; records the group size."""
    with open(os.environ["GAPO_GROUP_SIZES"], "a") as out:
        out.write(f"{len(completions)}\n")
    order = sorted(range(len(completion_ids)), key=lambda i: (sum(completion_ids[i]), i))
    return [order.index(i) / (len(order) - 1) for i in range(len(order))]


if __name__ == "__main__":
    import gapo.trainer as trainer

    original = trainer.compute_group_rewards

    def ranked(reward_func: Any, name: str, *args: Any, **kwargs: Any) -> list[float]:
        return original(token_sum_rank, name, *args, **kwargs)

    trainer.compute_group_rewards = ranked
    from gapo.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
