"""pejax.provenance: the commit, dirtiness, versions and command every result record carries."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import jax
import pytest

from pejax import provenance

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _git(repo, *args):
  subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)


@pytest.fixture(name="repo")
def _repo(tmp_path):
  """A git checkout with a package, a results tree and one commit."""
  if shutil.which("git") is None:
    pytest.skip("git is not installed")
  repo = tmp_path / "checkout"
  (repo / "pkg").mkdir(parents=True)
  (repo / "pkg" / "__init__.py").write_text("")
  (repo / "pkg" / "code.py").write_text("X = 1\n")
  (repo / "experiments" / "results").mkdir(parents=True)
  (repo / "experiments" / "results" / "report.md").write_text("old\n")
  _git(repo, "init", "-q")
  _git(repo, "add", "-A")
  _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
  return repo


def test_a_clean_checkout_gives_its_commit(repo):
  head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                        capture_output=True, text=True).stdout.strip()
  assert provenance.code_version(repo) == {"commit": head, "dirty": False, "dirty_files": [],
                                           "code": "git checkout"}


def test_changed_or_new_code_makes_it_dirty_and_is_named(repo):
  (repo / "pkg" / "code.py").write_text("X = 2\n")
  version = provenance.code_version(repo)
  assert version["dirty"] is True and version["dirty_files"] == ["pkg/code.py"]
  _git(repo, "checkout", "--", "pkg/code.py")
  (repo / "pkg" / "new_module.py").write_text("Y = 1\n")  # Untracked code counts.
  assert provenance.code_version(repo)["dirty_files"] == ["pkg/new_module.py"]


def test_results_trees_and_untracked_notes_do_not_make_it_dirty(repo):
  (repo / "experiments" / "results" / "report.md").write_text("rewritten by the study\n")
  (repo / "runs" / "run1").mkdir(parents=True)
  (repo / "runs" / "run1" / "results.py").write_text("")
  (repo / "notes.txt").write_text("a user's notes\n")
  assert provenance.code_version(repo)["dirty"] is False


def test_many_dirty_files_are_listed_up_to_twenty(repo):
  for i in range(25):
    (repo / "pkg" / f"m{i:02d}.py").write_text("")
  files = provenance.code_version(repo)["dirty_files"]
  assert len(files) == 21 and files[-1] == "... and 5 more"


def test_outside_a_checkout_there_is_no_commit(tmp_path):
  version = provenance.code_version(tmp_path)  # A folder git does not know.
  assert version["commit"] is None and version["dirty"] is None
  (tmp_path / "pejax").mkdir()
  assert provenance.checkout_root(str(tmp_path / "pejax" / "x.py")) is None  # No .git above.


def test_this_checkout_is_found_from_the_package():
  if not (ROOT / ".git").exists() or shutil.which("git") is None:
    pytest.skip("not a git checkout")
  assert provenance.checkout_root() == ROOT
  head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                        text=True, check=False)
  if head.returncode != 0:  # e.g. git refuses a checkout owned by another user.
    assert provenance.code_version()["commit"] is None
    return
  assert provenance.code_version()["commit"] == head.stdout.strip()


def test_versions_are_the_running_ones():
  versions = provenance.package_versions()
  assert versions["jax"] == jax.__version__
  assert versions["python"].count(".") == 2
  assert provenance.package_versions(("no-such-distribution",))["no-such-distribution"] is None


@pytest.mark.parametrize("argv, expected", [
    (["launch.py", "--pe=alibi"], "python launch.py --pe=alibi"),
    ([str(ROOT / "pejax" / "sample.py"), "runs/x", "--prompt", "a b"],
     "python -m pejax.sample runs/x --prompt 'a b'"),
    ([str(ROOT / "pejax" / "__main__.py"), "--steps=3"], "python -m pejax --steps=3"),
    ([str(ROOT / "pejax" / "hf" / "export.py"), "r", "o"], "python -m pejax.hf.export r o"),
    (["/usr/local/bin/pejax-launch", "--pe=rope"], "/usr/local/bin/pejax-launch --pe=rope"),
    ([], "python"),
])
def test_the_command_is_one_that_can_be_typed_again(argv, expected):
  assert provenance.command_line(argv) == expected


def test_a_record_and_its_report_lines():
  record = provenance.provenance(command="python launch.py", started=1.0e9, machine="m")
  assert record["command"] == "python launch.py" and record["machine"] == "m"
  assert record["started"] == "2001-09-09 01:46:40 UTC"
  assert record["wall_time_s"] > 0
  lines = provenance.describe(record)
  assert lines[1].startswith("- versions: python ") and f"jax {jax.__version__}" in lines[1]
  dirty = dict(record, commit="a" * 40, dirty=True, dirty_files=["pejax/x.py"])
  assert provenance.describe(dirty)[0] == (
      "- code: commit `aaaaaaaaaaaa`, with uncommitted changes to 1 file(s): `pejax/x.py`")
  assert provenance.describe(dict(record, commit="b" * 40, dirty=False))[0] == (
      "- code: commit `bbbbbbbbbbbb` (clean tree)")
  installed = dict(record, commit=None, dirty=None, code="installed package, pejax 0.1.0")
  assert provenance.describe(installed)[0] == "- code: installed package, pejax 0.1.0"
