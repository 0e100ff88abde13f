"""Third-party browser files the slides need, fetched once and pinned: reveal.js from the npm registry.

    .venv/bin/python tools/classroom/vendor.py          # fetch what is missing now (e.g. before teaching offline)

reveal.js is no Python package, so it is not in the lock. The pinned tarball is downloaded once from the npm
registry into build/vendor/ (or read from there: a copy put there by hand is used as it is), its sha256 is
checked, and only the files a deck loads are unpacked (dist/ without source maps, the speaker-notes plugin,
the licence). Later runs use the unpacked folder and need no network.

nbconvert 7.17's reveal template (share/jupyter/nbconvert/templates/reveal) loads ``dist/reveal.js``,
``dist/reveal.css``, ``dist/theme/<theme>.css`` and ``plugin/notes/notes.js``: the reveal.js 4 layout (its own
default is reveal.js@4.0.2 from a CDN), so the pin is the last 4.x release.
"""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "vendor"


class VendorError(RuntimeError):
    """A pinned file could not be had; the message says why and what to do."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str
    keep: tuple[str, ...]          # paths inside the tarball's package/ folder to unpack (a folder ends in /)
    drop: tuple[str, ...] = ()     # file name endings left out

    @property
    def tarball(self) -> str:
        return f"{self.name}-{self.version}.tgz"

    @property
    def url(self) -> str:
        return f"https://registry.npmjs.org/{self.name}/-/{self.tarball}"

    def wanted(self, member: str) -> bool:
        """Whether ``member`` (a path relative to package/) is one of the files to unpack."""
        return (any(member == k or (k.endswith("/") and member.startswith(k)) for k in self.keep)
                and not member.endswith(self.drop))


REVEAL = Package("reveal.js", "4.6.1", "4f4121ef2b8e7e9398bdecd7b3b6ce5e0ee3a2f5af221708eb6c4ce03bcae6be",
                 keep=("dist/", "plugin/notes/", "LICENSE"), drop=(".map", ".esm.js"))


def _download(package: Package, timeout: float, cache: Path) -> bytes:
    try:
        with urllib.request.urlopen(package.url, timeout=timeout) as response:
            return response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise VendorError(
            f"could not download {package.name} {package.version} from {package.url} ({reason}; waited at most "
            f"{timeout:.0f} s). It is needed once, then kept in {cache}/. Connect to the internet and run "
            f"this again, or copy {package.tarball} (sha256 {package.sha256}) from a machine that has it into "
            f"{cache}/ and run this again.") from None


def _unpack(package: Package, data: bytes, target: Path) -> None:
    """Unpack the wanted files of tarball ``data`` into ``target`` whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # as a plain mkdir makes it (mkdtemp gives 0o700)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("package/")
                if not member.isfile() or not package.wanted(name):
                    continue
                parts = Path(name).parts
                if Path(name).is_absolute() or ".." in parts:
                    raise VendorError(f"{package.tarball} holds an unsafe path {member.name!r}; not unpacked")
                dest = tmp.joinpath(*parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None  # a regular file
                dest.write_bytes(source.read())
        try:
            os.replace(tmp, target)
        except OSError:
            if not target.is_dir():  # not another process that unpacked it first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure(package: Package = REVEAL, *, cache: Path = CACHE, timeout: float = 60) -> Path:
    """The folder holding ``package``'s unpacked files, downloaded and checked first when missing.

    Raises :class:`VendorError` (what went wrong and what to do) when it cannot be downloaded or its sha256 is
    not the pinned one."""
    target = cache / f"{package.name}-{package.version}"
    if target.is_dir():
        return target
    tarball = cache / package.tarball
    if tarball.is_file():
        data, where = tarball.read_bytes(), str(tarball)
    else:
        print(f"[course] downloading {package.name} {package.version} from the npm registry (once) ...",
              file=sys.stderr)
        data, where = _download(package, timeout, cache), package.url
    digest = hashlib.sha256(data).hexdigest()
    if digest != package.sha256:
        raise VendorError(f"{where} has sha256 {digest}, not the pinned {package.sha256}: it is not "
                          f"{package.name} {package.version} (a proxy's error page, or a changed file); "
                          f"delete {tarball} if it is there and run this again")
    cache.mkdir(parents=True, exist_ok=True)
    if not tarball.is_file():
        tmp = tarball.with_name(f".{tarball.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, tarball)
    _unpack(package, data, target)
    return target


def main() -> int:
    try:
        print(ensure())
    except VendorError as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
