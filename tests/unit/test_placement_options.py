"""A placement worker given a scorer option its policy does not take stops at start, saying which."""

import os
import subprocess
import sys


def test_a_wrong_scorer_option_stops_the_worker_at_start_with_its_name() -> None:
    env = {**os.environ, "TESSERA_SCORER_OPTIONS": '{"scarcty": false}'}
    done = subprocess.run(
        [sys.executable, "-m", "services.placement.app", "--name", "w"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    reason = "scarcty: Extra inputs are not permitted"
    assert done.stderr.strip() == f"placement: policy 'tessera' options: {reason}"
