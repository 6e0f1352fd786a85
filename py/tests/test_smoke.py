import pathlib
import re

import redmutex


def _workspace_version() -> str:
    cargo_toml = pathlib.Path(__file__).resolve().parents[2] / "Cargo.toml"
    section = None
    for line in cargo_toml.read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        elif section == "[workspace.package]":
            match = re.match(r'\s*version\s*=\s*"([^"]+)"', line)
            if match:
                return match.group(1)
    raise AssertionError("no [workspace.package] version in Cargo.toml")


def test_version_matches_cargo_toml():
    assert redmutex.__version__ == _workspace_version()


def test_native_module_is_private_and_reexported():
    from redmutex import _redmutex

    assert _redmutex.__version__ == redmutex.__version__
    for name in redmutex.__all__:
        assert getattr(redmutex, name) is getattr(_redmutex, name)
    assert set(redmutex.__all__) >= {"Client", "Lock", "LockError", "LockLostError"}


def test_public_classes_live_in_the_package():
    for name in redmutex.__all__:
        obj = getattr(redmutex, name)
        if isinstance(obj, type):
            assert obj.__module__ == "redmutex", name
            assert obj.__doc__, name


def test_package_is_typed():
    package_dir = pathlib.Path(redmutex.__file__).parent
    assert (package_dir / "py.typed").is_file()
    stubs = (package_dir / "_redmutex.pyi").read_text()
    for name in redmutex.__all__:
        assert re.search(rf"^(class {name}\b|{name}:)", stubs, re.M), name
