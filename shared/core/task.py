"""What a task asks for and what a node offers, in the core's own integer units.

The wire schemas (``schemas/``) speak Kubernetes quantities; the shell converts them into these
small frozen dataclasses so the hot path never parses strings.  CPU is in milli-cores, memory in
MiB and GPU in milli-GPU (1000 = one whole device), as in the Alibaba openb traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MILLI = 1000
"""One whole GPU, in milli-GPU."""


@dataclass(frozen=True, slots=True)
class TaskShape:
    """The resources one task (one pod of a job) needs on one node.

    A task takes either a fraction of one GPU (``num_gpu == 1`` and ``gpu_milli < 1000``: a shared
    task) or ``num_gpu`` whole GPUs (``gpu_milli == 1000``), never fractions of several GPUs.
    ``gpu_models`` lists the GPU models the task accepts; empty means any model.
    """

    cpu_milli: int
    memory_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: tuple[str, ...] = ()
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        # Shapes key the scorers' caches and every per-shape shortcut of a cycle, millions of
        # lookups in a long simulation: the generated hash rebuilt a tuple each time.
        return self._hash

    def __reduce__(self) -> tuple[type[TaskShape], tuple[int, int, int, int, tuple[str, ...]]]:
        # Rebuilt (and re-hashed) on unpickling: string hashes differ between processes.
        return (TaskShape, (self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_models))

    def __post_init__(self) -> None:
        key = (self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_models)
        object.__setattr__(self, "_hash", hash(key))
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.num_gpu < 0 or self.gpu_milli < 0:
            raise ValueError(f"negative request in {self!r}")
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise ValueError(f"gpu_milli={self.gpu_milli} without a GPU (num_gpu=0)")
        if self.num_gpu > 0 and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"gpu_milli must be in 1..{MILLI} when num_gpu > 0, got {self.gpu_milli}")
        if self.num_gpu > 1 and self.gpu_milli != MILLI:
            raise ValueError("a task on several GPUs must take them whole (gpu_milli=1000)")

    @property
    def is_shared(self) -> bool:
        """True when the task takes a fraction of a single GPU."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def affinity_class(self) -> int:
        """GPU-clustering class: -1 no GPU, 0 shared GPU, k for k whole GPUs."""
        if self.num_gpu == 0:
            return -1
        return 0 if self.is_shared else self.num_gpu


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """The inventory of one node.

    ``rack``, ``switch``, ``numa_nodes`` and ``mig_profiles`` are carried for the topology-, NUMA-
    and MIG-aware plugins that later work adds; the fragmentation scorers ignore them.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_model: str = ""
    rack: str = ""
    switch: str = ""
    numa_nodes: int = 1
    mig_profiles: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.gpu_count < 0:
            raise ValueError(f"negative capacity in node {self.name!r}")
        if self.gpu_count > 0 and not self.gpu_model:
            raise ValueError(f"node {self.name!r} has GPUs but no gpu_model")
