"""Command-line entry points (``python -m cfl_lightning COMMAND``); each module has ``main(argv)``."""

__all__: list[str] = []
