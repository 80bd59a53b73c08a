#!/usr/bin/env python3
"""Builds a platform wheel of dsh-tools that carries a `dsh-host` binary.

    python scripts/build_platform_wheel.py BINARY [--out DIR]

The package's ordinary wheel (pure Python, `py3-none-any`) is built from this checkout with pip
and the pinned build backend, then made into a platform wheel: the binary is added as
`dsh_tools/bin/dsh-host` (mode 0755), the wheel is marked as not pure (`Root-Is-Purelib: false`)
and retagged for the binary's architecture (`py3-none-linux_x86_64` for an x86-64 binary,
`py3-none-linux_aarch64` for an arm64 one). Installed, `default_executor()` serves the executor
with that binary when `$DSH_HOST` is not set, before any `dsh-host` on `PATH`.

The interpreter running this script builds the wheel: it needs pip, setuptools 84.2.1 (the
build backend, used without build isolation) and the `wheel` tool, as pinned with hashes in
tests/polyglot/python/requirements.txt. The package's sources are copied to a temporary
directory first, so the checkout is left as it was. The path of the wheel is printed.
"""

from __future__ import annotations

import argparse
import email.parser
import email.policy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent

# ELF `e_machine` values and the platform tag of each.
ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64"}

# What of the package's directory the build needs; build output and caches are left out.
SOURCES = ("pyproject.toml", "README.md", "src")
SKIPPED = shutil.ignore_patterns("build", "__pycache__", "*.egg-info", "bin")


def architecture(binary: Path) -> str:
    """The architecture of a Linux executable, from its ELF header."""
    with open(binary, "rb") as f:
        header = f.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        sys.exit(f"{binary} is not an ELF executable")
    # EI_DATA: 1 little-endian, 2 big-endian; e_machine is the half-word at offset 18.
    order = "little" if header[5] == 1 else "big"
    machine = int.from_bytes(header[18:20], order)
    if machine not in ELF_MACHINES:
        sys.exit(f"{binary} is built for ELF machine {machine:#x}, which has no platform tag here")
    return ELF_MACHINES[machine]


def run(*args: str) -> None:
    subprocess.run([sys.executable, *args], check=True, stdout=sys.stderr)


def not_pure(wheel_file: Path) -> None:
    """Marks an unpacked wheel as one to install into platlib (it carries a native binary)."""
    with open(wheel_file, "rb") as f:
        info = email.parser.BytesParser(policy=email.policy.compat32).parse(f)
    if info["Root-Is-Purelib"] is None:
        sys.exit(f"{wheel_file} has no Root-Is-Purelib field")
    info.replace_header("Root-Is-Purelib", "false")
    wheel_file.write_bytes(info.as_bytes())


def build(binary: Path, out: Path) -> Path:
    arch = architecture(binary)
    with tempfile.TemporaryDirectory(prefix="dsh-platform-wheel-") as tmp:
        work = Path(tmp)
        source = work / "source"
        source.mkdir()
        for name in SOURCES:
            path = PACKAGE_DIR / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=SKIPPED)
            else:
                shutil.copy2(path, source / name)

        pure = work / "pure"
        run("-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--no-build-isolation", "--wheel-dir", str(pure), str(source))
        [wheel] = pure.glob("*.whl")

        unpacked = work / "unpacked"
        run("-m", "wheel", "unpack", "--dest", str(unpacked), str(wheel))
        [root] = unpacked.iterdir()
        bin_dir = root / "dsh_tools" / "bin"
        bin_dir.mkdir()
        carried = bin_dir / "dsh-host"
        shutil.copyfile(binary, carried)
        os.chmod(carried, 0o755)
        [dist_info] = root.glob("*.dist-info")
        not_pure(dist_info / "WHEEL")

        packed = work / "packed"
        packed.mkdir()
        run("-m", "wheel", "pack", "--dest-dir", str(packed), str(root))
        [repacked] = packed.glob("*.whl")
        run("-m", "wheel", "tags", "--platform-tag", f"linux_{arch}", "--remove", str(repacked))
        [platform_wheel] = packed.glob("*.whl")

        out.mkdir(parents=True, exist_ok=True)
        target = out / platform_wheel.name
        shutil.move(str(platform_wheel), target)
        return target


def main() -> None:
    parser = argparse.ArgumentParser(description="Build a dsh-tools platform wheel carrying a dsh-host binary.")
    parser.add_argument("binary", type=Path, help="the dsh-host binary to carry")
    parser.add_argument("--out", type=Path, default=Path("dist"), help="where to put the wheel (default: dist)")
    options = parser.parse_args()
    if not options.binary.is_file():
        sys.exit(f"{options.binary} is not a file")
    print(build(options.binary, options.out.resolve()))


if __name__ == "__main__":
    main()
