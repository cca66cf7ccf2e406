"""The manual pages format without a warning at 80 columns (as `man --warnings`
checks in the container test), so a line too long to break is caught here."""
import glob
import os
import subprocess

from conftest import ROOT


def test_manual_pages_format_without_warnings():
    pages = sorted(glob.glob(os.path.join(ROOT, "man", "*.[0-9]")))
    assert len(pages) == 4
    for page in pages:
        run = subprocess.run(["groff", "-mandoc", "-ww", "-Tutf8", "-rLL=78n", page], capture_output=True, text=True)
        assert run.returncode == 0 and run.stderr == "", f"{page}: {run.stderr}"
