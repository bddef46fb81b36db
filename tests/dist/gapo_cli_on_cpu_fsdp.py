"""`gapo ARGS...` with accelerate's CPU processes routed to FSDP (see cpu_fsdp.py); run by tests/test_distributed.py
under `accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 2`."""

from __future__ import annotations

import sys

from cpu_fsdp import route_cpu_to_fsdp

from gapo.cli import main

route_cpu_to_fsdp()
sys.exit(main(sys.argv[1:]))
