from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gymbench import fingerprint as fp


def test_machine_has_the_documented_fields() -> None:
    machine = fp.machine_info()
    assert machine["cpu_count_logical"] >= 1
    assert machine["memory_total_bytes"] > 0
    assert isinstance(machine["gpus"], list)
    if not machine["gpus"]:
        assert machine["gpu_note"].startswith("none")


def test_machine_key_ignores_drifting_fields() -> None:
    machine = fp.machine_info()
    drifted = dict(machine, hostname="elsewhere", release="other", cpu_mhz=1234.0)
    assert fp.machine_key(drifted) == machine["key"]
    assert fp.machine_key(dict(machine, cpu_model="another cpu")) != machine["key"]


def test_gpu_probe_degrades_when_nvml_is_missing(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import now raises ImportError
    gpus, note = fp.gpu_info()
    assert gpus == []
    assert note == "none: nvidia-ml-py is not installed"


def test_gpu_probe_degrades_when_nvml_fails(monkeypatch) -> None:
    import pynvml

    def broken() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    gpus, note = fp.gpu_info()
    assert gpus == [] and note.startswith("none: NVML could not start")


def test_software_versions_do_not_import_torch() -> None:
    code = (
        "import sys; from gymbench.fingerprint import software_info; s = software_info(); "
        "print('torch' in sys.modules, s['packages']['torch'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    imported, version = out.split()
    assert imported == "False"
    assert version != "None"


def test_commit_info_in_and_outside_git(tmp_path: Path) -> None:
    assert fp.commit_info(tmp_path) == {"id": None, "dirty": None, "branch": None}
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("x")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    info = fp.commit_info(tmp_path)
    assert len(info["id"]) == 40 and info["dirty"] is False and info["branch"] == "trunk"
    (tmp_path / "f").write_text("changed")
    assert fp.commit_info(tmp_path)["dirty"] is True


X86 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 amx_tile\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd asimdhp bf16 sve\n"


def test_cpu_flags_read_x86_flags_and_arm_features() -> None:
    assert {"avx2", "avx512_bf16"} <= fp.cpu_flags(X86)
    assert {"bf16", "sve"} <= fp.cpu_flags(ARM)
    assert fp.cpu_flags("") == set()


def test_the_key_tells_a_cpu_with_bf16_kernels_from_one_without(monkeypatch) -> None:
    """Same model name, one with avx512_bf16 masked (a VM): bf16 runs ~9x slower there, another machine."""
    with_bf16 = fp.cpu_flags(X86)
    monkeypatch.setattr(fp, "cpu_flags", lambda: with_bf16)
    machine = fp.machine_info()
    assert machine["cpu_flags"] == ["amx_tile", "avx2", "avx512_bf16", "avx512f", "fma"]  # sse2, fpu: not speed
    monkeypatch.setattr(fp, "cpu_flags", lambda: with_bf16 - {"avx512_bf16"})
    assert fp.machine_info()["key"] != machine["key"]


def test_a_record_saved_before_cpu_flags_keeps_its_key() -> None:
    machine = fp.machine_info()
    old = {name: value for name, value in machine.items() if name != "cpu_flags"}
    assert fp.machine_key(old) == machine["key_without_cpu_flags"]
