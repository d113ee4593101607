"""vlmpack: exact offline packing of vision-language WebDataset shards.

Stages (each a module under ``vlmpack_offline.stages`` exposing ``run(config)``):
scan -> bucket -> plan -> write, plus the online loader in ``vlmpack_offline.loader``.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
