"""Deployment artefacts of retrieval-monitor and their generator (``python -m deploy.generate``)."""
