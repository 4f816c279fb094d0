"""The `tiered` extra (obstore, boto3, cryptography, pycryptodome): whether it is installed, said in one line
naming what to install when it is not. A leaf: importable without the extra, and by every module here."""

from __future__ import annotations

from ...errors import MissingExtra

EXTRA_HINT = "pip install 'kafka-lookupd[tiered]' (obstore, boto3, cryptography, pycryptodome)"


def require() -> None:
    """Raise MissingExtra (one line naming the extra) unless the object-store packages import."""
    try:
        import boto3  # noqa: F401
        import Crypto  # noqa: F401 - pycryptodome
        import cryptography  # noqa: F401
        import obstore  # noqa: F401
    except ImportError as err:
        missing = "pycryptodome" if err.name == "Crypto" else err.name
        raise MissingExtra(f"tiered storage ([remote]) needs {missing}: {EXTRA_HINT}") from None
