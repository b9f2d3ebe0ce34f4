"""Pure statistics: numpy and scipy in, frozen result dataclasses out. No I/O, clock or global RNG."""

__all__: list[str] = []
