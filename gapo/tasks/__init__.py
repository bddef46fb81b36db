"""The tasks GAPO trains on, one module each: prompts, the valid answers, and the checks a dataset must pass.

- `lists`: the paper's "pick one item from this list" prompts (Appendix E), the frequency reward's task.
- `targets`: list prompts that state a target distribution ("Heads 70%"), for `target_distribution_reward`.
- `open_ended`: open prompts ("Name a country.") whose validity comes from a lexicon, for `ClassFrequencyReward`."""
