"""Values kept by the identity of the object they were derived from.

A daemon asks the same questions of the same objects at every check: the walk hands out the
same ``_File`` and ``_Subtree`` while nothing below them changed, a monitor's configuration
object and a check's grid stay the same from check to check. ``ByIdentity`` keeps a value under
``(id(obj), tag)`` and holds ``obj`` itself, so its id is not reused while the value is kept;
a hit is checked with ``is``. Bounded: cleared whole when ``most`` values are held (a daemon
refills what it still uses at its next check). Single dict operations only, so threads may
share one (a value a race loses is made again).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

_V = TypeVar("_V")


class ByIdentity(Generic[_V]):
    """Values by (object identity, tag); see the module docstring."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._held: dict[tuple[int, Hashable], tuple[object, _V]] = {}

    def get(self, obj: object, tag: Hashable = None) -> _V | None:
        """The value kept for ``obj`` and ``tag`` (None: none)."""
        held = self._held.get((id(obj), tag))
        if held is not None and held[0] is obj:
            return held[1]
        return None

    def put(self, obj: object, tag: Hashable, value: _V) -> None:
        if len(self._held) >= self.most:
            self._held.clear()
        self._held[(id(obj), tag)] = (obj, value)

    def clear(self) -> None:
        self._held.clear()

    def __len__(self) -> int:
        return len(self._held)
