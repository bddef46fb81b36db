# The environment of item 5's device scripts, leg.sh and beside.sh (sourced by both): the staged packages, gapo's
# cache and no hub, as tools/gpu_session.py's ENV gives the plan's other commands. GAPO_CACHE may come from outside
# (the CPU tests in tests/test_gpu_session.py).
export PYTHONPATH=$PWD:/tmp/gapo/site GAPO_CACHE=${GAPO_CACHE:-/tmp/gapo/cache} HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
