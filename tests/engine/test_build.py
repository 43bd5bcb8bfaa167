"""Finding and building llama-server: the override, the cache, the key, the lock, and every failure
as one line. The build itself is played by fake ``pip``/``cmake`` scripts: the real one takes many
minutes and runs in the real-engine tests' fixture."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.engine import build
from gymbench.errors import GymbenchError

REAL_PYTHON = sys.executable


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user cache, no override."""
    monkeypatch.delenv(build.SERVER_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # the XDG fallback, whatever is installed
    return tmp_path / "cache" / "gymbench" / "llama-cpp"


def test_the_cache_is_under_the_user_cache_directory(cache: Path) -> None:
    assert build.cache_root() == cache
    assert build.cached_server() == cache / build.build_key() / "llama-server"


def test_the_key_is_the_version_and_a_hash_of_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    key = build.build_key()
    version, digest = key.rsplit("-", 1)
    assert version == build.LLAMA_CPP_PYTHON_VERSION == "0.3.36"
    assert len(digest) == 10 and int(digest, 16) >= 0
    assert build.build_key() == key  # stable
    monkeypatch.setattr(build, "CMAKE_FLAGS", (*build.CMAKE_FLAGS, "-DGGML_AVX512=OFF"))
    assert build.build_key() != key


def test_the_flags_are_the_issues_plus_a_static_binary() -> None:
    assert "-DGGML_NATIVE=ON" in build.CMAKE_FLAGS and "-DLLAMA_CURL=OFF" in build.CMAKE_FLAGS
    assert "-DBUILD_SHARED_LIBS=OFF" in build.CMAKE_FLAGS


def test_the_override_is_used_as_it_is(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = executable(tmp_path / "bin" / "my-llama-server", "#!/bin/sh\n")
    monkeypatch.setenv(build.SERVER_ENV, str(binary))
    assert build.find_server() == binary.resolve()
    assert not cache.exists()  # nothing built, nothing cached


@pytest.mark.parametrize("kind", ["missing", "not executable"])
def test_a_bad_override_is_one_clear_error(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = tmp_path / "llama-server"
    if kind == "not executable":
        path.write_text("")
    monkeypatch.setenv(build.SERVER_ENV, str(path))
    with pytest.raises(GymbenchError, match="GYMBENCH_LLAMA_SERVER=.*(does not exist|is not an executable file)"):
        build.find_server()
    assert main(["engine", "llama-cpp", "--build-only"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gymbench: error: GYMBENCH_LLAMA_SERVER=")


def test_a_cached_binary_is_reused(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = executable(build.cached_server(), "#!/bin/sh\n")
    assert build.find_server() == binary
    assert main(["engine", "llama-cpp", "--build-only"]) == 0
    assert capsys.readouterr().out.strip() == str(binary)


def test_no_build_asked_and_none_cached(cache: Path) -> None:
    with pytest.raises(GymbenchError, match="no llama-server in the cache"):
        build.find_server(build=False)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only fake ninja and g++ (and this Python's folder replaced by an empty one)."""
    folder = tmp_path / "tools"
    for name in ("ninja", "g++"):
        executable(folder / name, "#!/bin/sh\n")
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here" / "python"))
    return folder


def test_missing_cmake_is_one_line_saying_how_to_install_it(
    cache: Path, tools: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert build.missing_tools() == ["cmake"]
    assert main(["engine", "llama-cpp", "--build-only"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cmake not found" in err and "apt-get install -y cmake ninja-build g++" in err and "pip install" in err
    assert not list(cache.glob("*/llama-server"))


def _fake_pip_and_cmake(tools: Path, tmp_path: Path, cmake_body: str) -> None:
    """``python -m pip download`` leaves an sdist-shaped archive; ``cmake`` runs ``cmake_body``."""
    fake_python = textwrap.dedent(f"""\
        #!{REAL_PYTHON}
        import sys, tarfile, io, pathlib
        dest = pathlib.Path(sys.argv[sys.argv.index("-d") + 1]); dest.mkdir(parents=True)
        with tarfile.open(dest / "llama_cpp_python-0.3.36.tar.gz", "w:gz") as tar:
            data = b"project(fake)\\n"
            info = tarfile.TarInfo("llama_cpp_python-0.3.36/vendor/llama.cpp/CMakeLists.txt"); info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        """)
    executable(Path(sys.executable), fake_python)
    executable(tools / "cmake", "#!/bin/sh\n" + cmake_body)


def test_a_failed_build_is_one_line_with_its_last_log_line_and_the_log(
    cache: Path, tools: Path, tmp_path: Path
) -> None:
    _fake_pip_and_cmake(
        tools, tmp_path, 'case "$1" in --build) echo "[1/212] cc a.c"; echo "error: boom"; exit 1;; esac\n'
    )
    with pytest.raises(GymbenchError) as caught:
        build.find_server()
    message = str(caught.value)
    assert "\n" not in message
    assert "failed while compiling (exit 1): error: boom" in message
    log = cache / f"{build.build_key()}.build.log"
    assert f"full log: {log}" in message and "[1/212] cc a.c" in log.read_text()
    assert not (cache / build.build_key()).exists()  # nothing half-made in the cache
    assert not list(cache.glob("*.building-*"))  # the temporary folder is gone


def test_a_build_lands_in_the_cache_with_its_record(cache: Path, tools: Path, tmp_path: Path) -> None:
    script = textwrap.dedent("""\
        case "$1" in
          -S) echo "configured $*" ;;
          --build) for i in 1 2 3; do echo "[$i/3] Building CXX object x$i.o"; done
                   /bin/mkdir -p "$2/bin"; printf '#!/bin/sh\\necho fake server\\n' > "$2/bin/llama-server"
                   /bin/chmod +x "$2/bin/llama-server" ;;
        esac
        """)
    _fake_pip_and_cmake(tools, tmp_path, script)
    steps: list[tuple[int, int]] = []
    binary = build.find_server(progress=lambda done, total: steps.append((done, total)))
    assert binary == build.cached_server() and os.access(binary, os.X_OK)
    assert steps == [(1, 3), (2, 3), (3, 3)]
    info = build.build_info(binary)
    assert info["llama_cpp_python"] == "0.3.36" and info["cmake_flags"] == list(build.CMAKE_FLAGS)
    assert info["binary_bytes"] == binary.stat().st_size and isinstance(info["build_seconds"], float)
    log = (cache / f"{build.build_key()}.build.log").read_text()
    assert "-G Ninja" in log and "-DGGML_NATIVE=ON" in log and "--target llama-server" in log
    assert build.find_server() == binary  # the second time: from the cache
    assert json.loads((binary.parent / "build.json").read_text()) == info


def test_the_server_binary_setting_wins_over_the_environment(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = executable(tmp_path / "mine" / "llama-server", "#!/bin/sh\n")
    monkeypatch.setenv(build.SERVER_ENV, str(tmp_path / "missing"))
    assert main(["engine", "llama-cpp", f"+server_binary={mine}", "--build-only"]) == 0
    assert capsys.readouterr().out.strip() == str(mine.resolve())
    assert main(["engine", "llama-cpp", "--build-only", "--server-binary", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith(f"gymbench: error: +server_binary={tmp_path / 'nope'}: does not exist")


def test_an_empty_override_is_an_error_not_a_build(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read as unset, GYMBENCH_LLAMA_SERVER="" started a build of several minutes."""
    monkeypatch.setenv(build.SERVER_ENV, "")
    with pytest.raises(GymbenchError, match=r"^GYMBENCH_LLAMA_SERVER is set but empty; .*unset it"):
        build.find_server()
    assert not cache.exists()
