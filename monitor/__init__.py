"""retrieval-monitor: tells data drift from model decay in search and retrieval systems.

Data flows one way: ``config -> sources -> stats -> verdict -> exporter / cli``.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
