"""Which job-spec fields the scheduler honours today, and a reason naming each one it does not.

The spec accepts the whole resource chain the design plans (GPU memory and compute shares, MIG,
NUMA binding, rack affinity, tolerations); a user who writes one of those believes it works.
Until a field is honoured, admission rejects the job with code ``unsupported`` and a reason
that names the field, and ``tessera submit`` refuses it before anything is produced.  Each
entry leaves this list in the change that makes it work.
"""

from __future__ import annotations

from schemas.job import JobSpec

HONOURED_SELECTORS = frozenset({"gpu-type"})


def unhonoured(spec: JobSpec) -> list[str]:
    """One ``field: why`` per field set to something nothing carries out yet."""
    out: list[str] = []
    r = spec.resources
    if r.gpu_memory is not None:
        out.append("resources.gpu-memory: GPU memory isolation (HAMi-style) is not enforced yet")
    if r.gpu_compute is not None:
        out.append("resources.gpu-compute: compute-share isolation is not enforced yet")
    if r.mig:
        out.append(f"resources.nvidia.com/mig-{next(iter(r.mig))}: MIG slices are not scheduled yet")
    if spec.numa_binding != "none":
        out.append(f"numa-binding: {spec.numa_binding!r} is not honoured yet (only 'none')")
    if spec.rack_affinity != "none":
        out.append(f"rack-affinity: {spec.rack_affinity!r} needs the topology service, not there yet")
    for key in sorted(set(spec.node_selector) - HONOURED_SELECTORS):
        out.append(f"node-selector.{key}: only gpu-type is matched today")
    if spec.tolerations:
        out.append("tolerations: nodes carry no taints yet, so a toleration would mean nothing")
    return out
