"""The `ray` extra of the Python package: `pip install './python[ray]'` installs Ray (issue 48:
pip warned that endless-env provides no extra `ray`). Resolved (a dry run) against this
interpreter's packages (scripts/test.sh installs ray there; pip fetches setuptools to build)."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_ray_extra_exists_and_asks_for_ray(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run",
         "--report", str(tmp_path / "report.json"), f"{ROOT / 'python'}[ray]"],
        capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "does not provide the extra" not in out, out
    report = json.loads((tmp_path / "report.json").read_text())
    ours = [i for i in report["install"] if i["metadata"]["name"] == "endless-env"]
    assert ours and ours[0]["requested_extras"] == ["ray"], report["install"]
    assert any(req.startswith("ray") and "extra == \"ray\"" in req
               for req in ours[0]["metadata"]["requires_dist"]), ours[0]["metadata"]
