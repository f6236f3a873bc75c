"""reportgen: where a transformer's time goes, measured and published."""

__version__ = "0.1.0"
