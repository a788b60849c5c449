"""sparkplay: serve big models on a pair (or more) of DGX Sparks, driven by recipes."""

__version__ = "0.1.0"
