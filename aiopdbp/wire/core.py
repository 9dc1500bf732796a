"""The data path's core as this process runs it: the compiled twin of
:mod:`aiopdbp.wire.blocks` where it is built and current, else the
Python source (:func:`aiopdbp.ext.choose` decides and records why).
Everything else imports the block writer and reader from here."""

from __future__ import annotations

from types import ModuleType

from aiopdbp import ext
from aiopdbp.wire import blocks as _pure

#: the module that runs: ``aiopdbp.wire.cblocks`` or ``aiopdbp.wire.blocks``
blocks: ModuleType = ext.twin("blocks", _pure, "aiopdbp.wire.cblocks")
BlockReader: type[_pure.BlockReader] = blocks.BlockReader
BlockWriter: type[_pure.BlockWriter] = blocks.BlockWriter
#: whether the compiled core runs
COMPILED: bool = blocks is not _pure

__all__ = ["COMPILED", "BlockReader", "BlockWriter", "blocks"]
