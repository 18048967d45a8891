"""tcjit's version number (its own module, so that the modules that key caches by it need not
import the package)."""

__version__ = "0.1.0"
