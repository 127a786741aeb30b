"""conftest.py - makes `ringcc` importable from a checkout that did not
install it (python/ on sys.path; the library is then found in build/lib)."""

import os
import sys

try:
    import ringcc  # noqa: F401 - installed (make test-python installs it)
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
