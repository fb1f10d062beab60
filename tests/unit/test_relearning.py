"""``loadtests/relearning.py``: a worker that relearns its workload when a job needs nodes no
learnt shape needs keeps room for the next such job; one that waits for fourfold growth does not."""

from loadtests.relearning import replay
from shared.core.cluster import ClusterState
from shared.sim.trace import TracePod
from tests.unit.builders import node, task

# Six 96-core and two 128-core 8-GPU nodes.  The small pods bring 24 cores per GPU: the stranding
# term sends them to the 128-core nodes (16 cores per GPU) unless something protects those.
NODES = [node(f"g2-{i}", cpu=96_000, mem=786_432, model="G2") for i in range(6)] + [
    node(f"g3-{i}", cpu=128_000, mem=786_432, model="G3") for i in range(2)
]
SMALL = task(cpu=24_000, mem=8_192, gpus=1)
LARGE = task(cpu=120_000, mem=8_192, gpus=8)  # only the 128-core nodes hold it
ORDER = [SMALL] * 10 + [LARGE] + [SMALL] * 10 + [LARGE]
PODS = [TracePod(name=f"p{i}", shape=s) for i, s in enumerate(ORDER)]


def _run(schedule: str) -> dict[str, object]:
    return replay("tessera", schedule, ClusterState(NODES), PODS, narrow_share=0.25)


def test_relearning_on_a_new_reach_keeps_room_for_the_next_large_pod() -> None:
    fourfold, reach, clairvoyant = _run("fourfold"), _run("reach"), _run("clairvoyant")
    assert fourfold["narrow_pods"] == reach["narrow_pods"] == 2
    assert fourfold["rebuilds"] == 1 and fourfold["narrow_failed"] == 1  # learnt from small pods only
    assert reach["rebuilds"] == 2 and reach["narrow_failed"] == 0  # relearnt at the first large pod
    assert clairvoyant["narrow_failed"] == 0
