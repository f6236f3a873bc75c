"""reportgen: where a transformer's time goes, measured and published."""

__version__ = "0.2.0"
