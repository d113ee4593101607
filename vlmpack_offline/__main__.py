"""``python -m vlmpack_offline ...``: the ``vlmpack`` command without its console script on PATH."""

from .cli import main

if __name__ == "__main__":
    main()
