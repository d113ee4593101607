"""Packed output in object storage: ``data.packed_wds_dir: s3://bucket/prefix`` (or ``gs://``, ``msc://``).

The write stage keeps its local code and runs it in a bounded local staging folder; what is
finished there is put under the prefix, through fsspec (the layer inputs are read through,
``tario.open_source``: s3fs for ``s3://``, gcsfs for ``gs://``, the Multi-Storage Client's own
fsspec filesystem for ``msc://``)::

    work_dir/write-staging/<sha of the URL>/            local; removed when the write completes
      .nv-meta/vlmpack-build/packs-*.bin                the pack descriptions (small: no media bytes)
      pretrain-000003.tar(.idx)                         a shard being written (one per writer thread),
                                                        deleted once uploaded
    s3://bucket/prefix/
      pretrain-000000.tar, pretrain-000000.tar.idx      each put once complete: the library's own upload,
                                                        multipart above its block size (s3fs: 50 MiB), so an
                                                        object exists only whole
      .nv-meta/dataset.yaml, split.yaml, .info.json,    after every shard is in place
               .info.yaml, vlmpack.json
      .nv-meta/vlmpack_write.json                       first with complete: false; complete: true last,
                                                        after a listing shows every shard and .nv-meta file

Resume reads the marker and one listing of the prefix: a shard whose ``.tar`` and ``.tar.idx``
are listed with their expected sizes is not written again. Deleting follows the local rules
(``stages/write.py``): only the object names the marker recorded, under the prefix.
Credentials and endpoints come the standard way (``AWS_*`` variables and ``~/.aws`` for s3fs,
an MSC profile for ``msc://``): nothing here names one. ``data.work_dir`` stays a POSIX path
(sqlite and renames).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ShardError
from ..kill_points import kill_point
from ..tario import is_url

__all__ = ["ObjectStoreOutput", "STAGING_DIR", "VERIFY_DIR", "object_store_output", "is_url"]

STAGING_DIR = "write-staging"  # under data.work_dir
VERIFY_DIR = "verify-staging"  # under data.work_dir: what `vlmpack verify` has downloaded, removed when it ends


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectStoreOutput:
    """Where a URL ``packed_wds_dir`` is written: the prefix, and the local folder shards are staged in."""

    url: str  # s3://bucket/prefix, without a trailing slash
    staging: Path  # local: the write stage's out_dir while it runs

    def _fs(self):
        import fsspec  # only for URLs, as for inputs (tario._fs)

        try:
            return fsspec.core.url_to_fs(self.url)
        except (ImportError, ValueError) as exc:  # no implementation installed for the protocol
            raise ConfigError(f"data.packed_wds_dir {self.url!r}: fsspec cannot write there ({exc})") from None

    @contextlib.contextmanager
    def _errors(self, doing: str, name: str = "") -> Iterator[None]:
        """Any failure of the store as one line naming the URL and what to do (never a traceback).

        A setup the user must fix (no bucket, no credentials, no MSC profile, a refusal) is a ``ConfigError``
        (exit 2); an endpoint that does not answer is a ``ShardError`` (exit 1): rerun once it is back.
        """
        where = f"{self.url}/{name}" if name else self.url
        head = f"data.packed_wds_dir {self.url!r}: {doing} {where}"
        try:
            yield
        except (ConfigError, ShardError):
            raise
        except Exception as exc:  # noqa: BLE001 - the store's own errors (botocore, aiohttp, MSC) have no common base
            if (profile := _missing_msc_profile(exc)) is not None:
                raise ConfigError(
                    f"{head} failed: the Multi-Storage Client has no profile {profile!r} ({_msc_config_said()}): "
                    f"add a profile named {profile!r} to that file (docs/format.md shows one), or set MSC_CONFIG "
                    "to the file that has it"
                ) from None
            if isinstance(exc, FileNotFoundError) or _named_in_chain(exc, ("NoSuchBucket",)):
                raise ConfigError(
                    f"{head} failed: the bucket does not exist or is not visible to these credentials "
                    f"({_first_line(exc)}): create it, or fix the URL{self._msc_hint('base_path')}"
                ) from None
            if isinstance(exc, PermissionError):
                raise ConfigError(
                    f"{head} was refused ({_first_line(exc)}): give these credentials read, write, list and delete "
                    "rights on the prefix (AWS_* variables, ~/.aws, an MSC profile)"
                ) from None
            if _named_in_chain(exc, ("NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError")):
                raise ConfigError(
                    f"data.packed_wds_dir {self.url!r}: no credentials for {self.scheme}:// "
                    f"({_first_line(exc)}): set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or a profile in "
                    "~/.aws/credentials; for msc:// the profile's credentials_provider)"
                ) from None
            raise ShardError(
                f"{head} failed ({type(exc).__name__}: {_first_line(exc)}): {self._endpoint_hint()}, then rerun "
                "`vlmpack write` (the dataset is not marked complete)"
            ) from None

    @property
    def scheme(self) -> str:
        return self.url.partition("://")[0]

    @property
    def _profile(self) -> str:
        return self.url.partition("://")[2].split("/")[0]

    def _msc_hint(self, option: str) -> str:
        if self.scheme != "msc":
            return ""
        return f" (or the {option} of MSC profile {self._profile!r}, {_msc_config_said()})"

    def _endpoint_hint(self) -> str:
        """Where the endpoint the store did not answer at comes from."""
        if self.scheme == "s3":
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            said = f"AWS_ENDPOINT_URL is {endpoint}" if endpoint else "AWS_ENDPOINT_URL is not set: AWS itself"
            return f"check the endpoint ({said}; set it for an S3-compatible store) and the network"
        if self.scheme == "msc":
            return f"check the endpoint_url of MSC profile {self._profile!r} ({_msc_config_said()}) and the network"
        return "check the network"

    def _key(self, name: str) -> str:
        return f"{self._fs()[1].rstrip('/')}/{name}"

    def listing(self) -> dict[str, int]:
        """Every object under the prefix: name relative to it -> size in bytes (one listing, paged by the store)."""
        fs, root = self._fs()
        root = root.rstrip("/")
        with self._errors("listing"):
            fs.invalidate_cache()  # fsspec caches listings: this one must see what another run wrote
            found = fs.find(root, detail=True)
        return {path[len(root) + 1 :]: int(info.get("size") or 0) for path, info in found.items()
                if path.startswith(root + "/")}  # fmt: skip

    def read_text(self, name: str) -> str | None:
        fs, _ = self._fs()
        with self._errors("reading", name):
            try:
                return fs.cat_file(self._key(name)).decode()
            except FileNotFoundError:
                return None

    def put_text(self, name: str, text: str) -> None:
        fs, _ = self._fs()
        with self._errors("writing", name):
            fs.pipe_file(self._key(name), text.encode())

    def upload(self, local: Path, name: str) -> None:
        """Put a finished local file under ``name``, then delete it locally (the staging folder stays small)."""
        fs, _ = self._fs()
        with self._errors("uploading", name):
            fs.put_file(str(local), self._key(name))
        local.unlink()
        kill_point("write:upload")

    def download(self, name: str, local: Path) -> None:
        """Copy the object ``name`` to the local file ``local`` (``vlmpack verify`` reads a copy, one shard at a time)."""
        fs, _ = self._fs()
        local.parent.mkdir(parents=True, exist_ok=True)
        with self._errors("downloading", name):
            fs.get_file(self._key(name), str(local))

    def remove(self, names: list[str]) -> None:
        """Delete these objects under the prefix (those that exist); nothing else."""
        fs, _ = self._fs()
        keys = [self._key(name) for name in names]
        with self._errors("deleting"):
            for key in keys:  # one by one: MSC's filesystem takes no list in rm
                if fs.exists(key):
                    fs.rm_file(key)


def object_store_output(packed_wds_dir: str, work_dir: Path) -> ObjectStoreOutput | None:
    """The object-store output for a URL ``packed_wds_dir``; None for a local path."""
    if not is_url(packed_wds_dir):
        return None
    url = packed_wds_dir.rstrip("/")
    scheme, _, rest = url.partition("://")
    if not rest.split("/")[0]:
        raise ConfigError(f"data.packed_wds_dir {packed_wds_dir!r} names no bucket: write it as {scheme}://BUCKET/PREFIX")
    if scheme == "file":
        raise ConfigError(f"data.packed_wds_dir {packed_wds_dir!r}: write a local folder as a path, not a file:// URL")
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return ObjectStoreOutput(url=url, staging=Path(work_dir) / STAGING_DIR / digest)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def _named_in_chain(exc: BaseException, names: tuple[str, ...]) -> bool:
    """An error of one of these class names in the chain, found by name: no botocore import here
    (botocore's ``NoCredentialsError``, its error factory's ``NoSuchBucket``, google-auth's credentials error)."""
    return any(type(link).__name__ in names for link in _chain(exc))


_MSC_NO_PROFILE = re.compile(r'Profile "(.*?)" not found in configuration files')  # multistorageclient/config.py


def _missing_msc_profile(exc: BaseException) -> str | None:
    """The profile name when MSC found no such profile (no configuration file, or one without it)."""
    for link in _chain(exc):
        if isinstance(link, ValueError) and (match := _MSC_NO_PROFILE.search(str(link))):
            return match.group(1)
    return None


def _msc_config_said() -> str:
    config = os.environ.get("MSC_CONFIG")
    return f"MSC_CONFIG is {config}" + ("" if Path(config).is_file() else ", which does not exist") if config else (
        "MSC_CONFIG is not set: ~/.msc_config.yaml and MSC's other default places")
