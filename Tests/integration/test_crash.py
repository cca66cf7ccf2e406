"""The short kill -9 campaign (make test-crash runs 200 kills): with a grace
period longer than a restart, no session is lost and every state file stays
readable."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.alone("a kill -9 campaign whose kills must land inside refreshes (asserted): it runs tokend, "
                   "its clients and restarts flat out, and others beside it would change where the kills land")
def test_twenty_kills_lose_nothing(workdir):
    results = os.path.join(workdir, "crash.json")
    run = subprocess.run([sys.executable, os.path.join(ROOT, "Tests", "crash", "campaign.py"), "--kills", "20",
                          "--grace", "5", "--until-inside", "1", "--results", results], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    with open(results) as f:
        outcome = json.load(f)
    # Twenty, and up to 20 more random ones until one has landed inside a refresh (--until-inside).
    assert 20 <= outcome["kills"] <= 40 and sum(outcome["kills_by_kind"].values()) == outcome["kills"]
    assert outcome["sessions_lost"] == 0, outcome["losses"]
    assert outcome["unreadable_state_files"] == 0
    assert outcome["refresh_grants"] > 20, "tokend was refreshing while it was killed"
    # The random kills land while refreshes run (the campaign kills, then stops its clients).
    assert outcome["random_kills_inside_a_refresh"] >= 1, outcome["kills_by_kind"]
