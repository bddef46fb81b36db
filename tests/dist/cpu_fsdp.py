"""Route accelerate's CPU processes to its FSDP path, for the FSDP cases of tests/test_distributed.py.

Why this is needed: accelerate 1.15 runs FSDP only on GPUs and other accelerators. With `ACCELERATE_USE_FSDP=true`
(what `accelerate launch --config_file configs/accelerate/fsdp.yaml` sets) on CPU it silently picks MULTI_CPU, i.e.
DDP over gloo: `AcceleratorState.__init__` considers FSDP only in its MULTI_GPU/NPU/XPU/... branch. PyTorch's FSDP2
(`fully_shard`) itself runs on CPU with gloo. So the accelerator state is switched to FSDP right after accelerate
built it, keeping the plugin accelerate built from fsdp.yaml; everything after that (fully_shard on each decoder
layer, the FSDP2 optimizer swap, generation, gathering state dicts to save) is accelerate's, TRL's and GAPO's own code.
The tests check that the LoRA weights really are sharded DTensors, so a patch that stopped working could not pass.
"""

from __future__ import annotations

from typing import Any


def route_cpu_to_fsdp() -> None:
    import accelerate.state as state
    from accelerate.utils import DistributedType

    original = state.AcceleratorState.__init__

    def init(self: Any, *args: Any, fsdp_plugin: Any = None, **kwargs: Any) -> None:
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if self.distributed_type == DistributedType.MULTI_CPU and fsdp_plugin is not None:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    state.AcceleratorState.__init__ = init
