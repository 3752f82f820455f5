"""Three distributions from one repository, each built as a wheel the way a release would be: the
provider's wheel holds the provider only (no local platform, harness or DAG file, no web stack or
scikit-learn among its requirements), the local platform's brings its command, and the harness
is marked never to be uploaded."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(project: Path, out: Path) -> zipfile.ZipFile:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv (installed by `make test`) builds the wheels"
    # sdist first, then the wheel from it, as a release is built (no stale build/ directory leaks in)
    subprocess.run([uv, "build", "-q", "--out-dir", str(out), str(project)], check=True, timeout=300)
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


def metadata(wheel: zipfile.ZipFile) -> dict:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    message = Parser().parsestr(wheel.read(name).decode())
    return {
        "requires": message.get_all("Requires-Dist") or [],
        "classifiers": message.get_all("Classifier") or [],
    }


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheels")
    return {
        name: build_wheel(project, out / name)
        for name, project in {
            "provider": ROOT,
            "platform": ROOT / "local-platform",
            "devel": ROOT / "devel",
        }.items()
    }


def test_the_provider_wheel_holds_the_provider_only(wheels):
    files = [n for n in wheels["provider"].namelist() if ".dist-info/" not in n]
    assert files and all(n.startswith("airflow_training_provider/") for n in files), files
    assert "airflow_training_provider/testing/inprocess.py" in files  # users test their DAGs with it
    assert "airflow_training_provider/ui/static/view.js" in files  # the plugin's page
    for unwanted in ("local_platform", "killpaths", "/stack.py", "/devstack.py", "/postgres.py", "dags/"):
        assert not [n for n in files if unwanted in n], unwanted


def test_the_provider_requires_no_web_stack_or_scikit_learn_without_extras(wheels):
    requires = metadata(wheels["provider"])["requires"]
    plain = [r for r in requires if "extra ==" not in r]
    names = {r.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in plain}
    assert names == {
        "apache-airflow",
        "apache-airflow-providers-http",
        "pydantic",
        "aiohttp",
        "tenacity",
        "requests",
    }
    assert 'airflow-training-platform; extra == "local-platform"' in requires


def test_the_local_platform_brings_its_command_and_nothing_of_the_provider(wheels):
    platform = wheels["platform"]
    files = [n for n in platform.namelist() if ".dist-info/" not in n]
    assert files and all(n.startswith("airflow_training_platform/") for n in files), files
    entry_points = next(n for n in platform.namelist() if n.endswith("entry_points.txt"))
    assert (
        "airflow-training-platform = airflow_training_platform.cli:main"
        in platform.read(entry_points).decode()
    )
    assert not [r for r in metadata(platform)["requires"] if r.startswith("airflow-training-provider")]


def test_the_harness_is_never_uploaded_and_carries_its_dag_file(wheels):
    devel = wheels["devel"]
    assert "Private :: Do Not Upload" in metadata(devel)["classifiers"]
    assert "airflow_training_devel/killpaths/dags/kp_dags.py" in devel.namelist()
