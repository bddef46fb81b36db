"""One function per DVC stage (dvc.yaml): the notebooks call these and plot, the tests run them on tiny-random.

- `generate`: the synthetic training set (`gapo data`).
- `extensions`: the issue-13 stages (open-ended GAPO, target distributions).
"""
