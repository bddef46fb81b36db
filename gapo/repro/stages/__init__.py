"""One module per DVC stage (dvc.yaml), each with `run(P) -> StageResult`: the notebooks call it, plot and write
`result.write()`; tests/test_stages.py runs each on tiny-random. `P` is
`gapo.repro.profiles.stage_params(<stage>, ...)`.

| module         | stage (notebook)          | paper                       |
|----------------|---------------------------|-----------------------------|
| `generate`     | 00_data (also `gapo data`)| Appendix E, training data   |
| `bias`         | 01_bias                   | section 2, Figure 2         |
| `train_gapo`   | 02_train_gapo             | section 5, GAPO training    |
| `train_sft`    | 03_train_sft              | Appendix G, SFT baseline    |
| `open_set`     | 04_open_set               | 6.2, Figures 5 and 9        |
| `uniformity`   | 05_uniformity             | 6.1, Figures 4 and 8, Table 8 |
| `creativity`   | 06_creativity             | 6.3, Table 1, Figure 6      |
| `benchmarks`   | 07_benchmarks             | 6.4, Table 2                |
| `coherence`    | 08_coherence              | 6.5, Figure 7               |
| `open_ended`   | 09_open_ended             | issue 13, open categories   |
| `targets`      | 10_targets                | issue 13, target lists      |

`common` holds what they share: `StageResult`, model specs and samplers, training runs.
"""
