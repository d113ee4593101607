"""The energon dataset class named in our ``.nv-meta/dataset.yaml``: energon's ``CrudeWebdataset``
that also accepts the ``sample_type`` entry ``energon info`` reads.

energon 7's ``energon info`` reads ``dataset.yaml``'s ``sample_type: {__module__, __class__}``
(``KeyError: 'sample_type'`` without it, also on the crude datasets energon's own prepare
writes), while its loader passes every ``dataset.yaml`` key to the dataset class: plain
``CrudeWebdataset`` rejects ``sample_type``. This subclass takes it as plain data (a
``Dict[str, str]`` annotation, so energon's parser does not instantiate it) and drops it::

    __module__: vlmpack_offline.output.energon_dataset
    __class__: PackedCrudeWebdataset
    sample_type: {__module__: megatron.energon, __class__: CrudeSample}
    subflavors: {sample_type: vlmpack_packed}

Loading therefore imports this module (vlmpack must be installed where energon loads the
packs; its cooker is needed there anyway). No ``from __future__ import annotations``:
energon's parser reads the annotations at run time.
"""

from typing import Dict, Optional  # noqa: UP035 - energon parses these at run time (not X | None)

from megatron.energon import CrudeWebdataset
from megatron.energon.epathlib import EPath

__all__ = ["PackedCrudeWebdataset"]


class PackedCrudeWebdataset(CrudeWebdataset):
    """``CrudeWebdataset`` + an ignored ``sample_type`` (for ``energon info``); samples are ``CrudeSample``."""

    def __init__(self, path: EPath, *, sample_type: Optional[Dict[str, str]] = None, **kwargs) -> None:  # noqa: UP006, UP045
        super().__init__(path, **kwargs)
