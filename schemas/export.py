"""Writes the JSON Schema of every wire model (``tessera schema --out DIR``)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from schemas import commands, events, job, node, queues

MODELS: dict[str, type[BaseModel]] = {
    "JobSpec": job.JobSpec,
    "NodeInventory": node.NodeInventory,
    "SubmitJob": commands.SubmitJob,
    "CancelJob": commands.CancelJob,
    "DrainNode": commands.DrainNode,
    "ApplyQueues": commands.ApplyQueues,
    "QueueTree": queues.QueueTreeSpec,
    **{
        cls.__name__: cls
        for cls in (
            events.JobAdmitted,
            events.JobRejected,
            events.JobPlaced,
            events.JobStarted,
            events.JobFinished,
            events.JobFailed,
            events.JobCancelled,
            events.PreemptionRequested,
            events.JobGrowRequested,
            events.JobReserved,
            events.ReservationReleased,
            events.QueuesApplied,
            events.JobPreempted,
            events.JobResized,
            events.NodeRegistered,
            events.NodeDrained,
            events.TelemetrySampled,
        )
    },
}


def write_schemas(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in MODELS.items():
        path = out / f"{name}.schema.json"
        path.write_text(json.dumps(model.model_json_schema(by_alias=True), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written
