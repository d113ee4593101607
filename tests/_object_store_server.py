"""A real S3-compatible server on 127.0.0.1 for the object-store tests: moto's server mode.

Not a test module. ``ThreadedMotoServer`` serves the S3 REST API over HTTP in a thread of the
test process (``moto/server.py``); s3fs, boto3 and the Multi-Storage Client talk to it as to any
S3 endpoint: credentials and endpoint through the standard variables (``AWS_ENDPOINT_URL``,
honoured by botocore and so by s3fs), an MSC profile for ``msc://`` (``msc_config``).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

moto_server = pytest.importorskip(
    "moto.server", reason="moto[server] is not installed (requirements/core.txt pins it: make install)"
)
boto3 = pytest.importorskip("boto3", reason="boto3 is not installed (requirements/core.txt pins it: make install)")

KEY_ID, SECRET = "vlmpack-test-key", "vlmpack-test-secret"  # moto accepts any pair; real ones never reach a test


@dataclass(frozen=True, slots=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT
    server: object  # the ThreadedMotoServer

    def stop(self) -> None:
        """Stop answering and close the listening socket: a request then fails as at an endpoint that went away
        (connection refused), not as one that hangs. The buckets stay in this process's memory."""
        self.server.stop()
        self.server._server.server_close()

    def stopped(self) -> bool:
        return self.server._server.socket.fileno() == -1  # stop() leaves the socket open: connects would queue, unanswered

    def restart(self, monkeypatch: pytest.MonkeyPatch) -> S3Server:
        """The endpoint back, on a new port, with the same buckets (moto's backend lives in this process)."""
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        _forget_cached_filesystems()
        return S3Server(endpoint=f"http://{host}:{port}", server=server)

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY_ID,
                            aws_secret_access_key=SECRET, region_name="us-east-1")  # fmt: skip

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix``: key -> bytes (read with boto3, not with the code under test)."""
        client = self.client()
        keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for o in page.get("Contents", [])]  # fmt: skip
        return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}

    def msc_config(self, path: Path, profile: str, bucket: str) -> Path:
        """An MSC configuration file with one S3 profile for this server (the format docs/format.md shows)."""
        body = {"profiles": {profile: {
            "storage_provider": {"type": "s3", "options": {
                "base_path": bucket, "endpoint_url": self.endpoint, "region_name": "us-east-1"}},
            "credentials_provider": {"type": "S3Credentials", "options": {"access_key": KEY_ID, "secret_key": SECRET}},
        }}}  # fmt: skip
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        return path


def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """Start the server on a free port of 127.0.0.1 and point the standard AWS variables at it."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto keeps its buckets in this process's memory: each test starts from an empty server
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")  # nothing from this machine's ~/.aws
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    _forget_cached_filesystems()
    try:
        yield S3Server(endpoint=endpoint, server=server)
    finally:
        _forget_cached_filesystems()
        server.stop()


def _forget_cached_filesystems() -> None:
    """fsspec keeps one S3FileSystem per set of arguments: a new server (or new variables) needs a new one."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
