"""A job that honours Tessera's checkpoint protocol: the smallest model of what a training job does.

* On start it resumes from ``$TESSERA_CHECKPOINT_DIR/state.json`` when ``TESSERA_RESUME=1``.
* It works in steps; on SIGTERM (an eviction: preemption, drain, a lost node's requeue) it
  finishes the step, writes its checkpoint and exits 0 before its grace runs out.  It is then
  ``checkpointed: true`` and its next attempt starts with ``TESSERA_RESUME=1``.
* Every start leaves ``attempt-<N>.json`` in the checkpoint folder (what it saw), so a test or an
  operator can check what each attempt was told.

Run by the process agent from a job spec, e.g.::

    command: [python, examples/checkpoint_job.py, --steps, "50", --step-s, "0.2"]
    checkpointable: true
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="steps of work in all")
    parser.add_argument("--step-s", type=float, default=0.2, help="seconds per step")
    parser.add_argument("--save-s", type=float, default=0.0, help="seconds a checkpoint takes to write")
    parser.add_argument(
        "--ignore-sigterm", action="store_true", help="misbehave: keep running when asked to stop"
    )
    args = parser.parse_args()
    folder = Path(os.environ.get("TESSERA_CHECKPOINT_DIR", "."))
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "state.json"
    resume = os.environ.get("TESSERA_RESUME") == "1"
    step = json.loads(state.read_text())["step"] if resume and state.exists() else 0
    attempt = os.environ.get("TESSERA_ATTEMPT", "0")
    seen = {"attempt": int(attempt), "resume": resume, "from_step": step, "pid": os.getpid()}
    seen["world_size"] = int(os.environ.get("TESSERA_WORLD_SIZE", "1"))
    (folder / f"attempt-{attempt}.json").write_text(json.dumps(seen))

    asked = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal asked
        asked = True

    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_sigterm else on_term)
    while step < args.steps:
        time.sleep(args.step_s)
        step += 1
        if asked:
            time.sleep(args.save_s)
            tmp = state.with_suffix(".tmp")
            tmp.write_text(json.dumps({"step": step}))
            tmp.replace(state)  # a whole checkpoint or none
            return
    (folder / "done.json").write_text(json.dumps({"step": step, "attempt": int(attempt)}))


if __name__ == "__main__":
    main()
