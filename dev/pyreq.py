"""pyreq.py: the one place a Python entry point of this project makes sure
its interpreter has the modules it needs. Machines often have two Pythons:
the first `python3` on PATH (e.g. a pyenv build) may lack numpy, torch or
matplotlib, which Debian's /usr/bin/python3 has (python3-numpy,
python3-torch, python3-matplotlib: `make deps` installs them).

    from pyreq import require
    if __name__ == "__main__":
        require("numpy", "torch")     # before the imports that need them

require() returns when every module can be imported; otherwise it runs the
script again under /usr/bin/python3 (same arguments, once), or, when that
interpreter lacks them too, exits with one line naming the interpreter to
use and the packages. It never re-runs a script that was imported.
"""

import importlib.util
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"


def require(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    here = os.path.realpath(sys.executable)
    if (os.path.exists(DEBIAN_PYTHON) and os.path.realpath(DEBIAN_PYTHON) != here
            and not os.environ.get("LLMC_PYREQ_REEXEC")):
        os.environ["LLMC_PYREQ_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)
    if here == os.path.realpath(DEBIAN_PYTHON):
        sys.exit("error: %s: %s has no %s: install Debian's python3-numpy, python3-torch, python3-matplotlib "
                 "(make deps)" % (os.path.basename(sys.argv[0]), sys.executable, ", ".join(missing)))
    sys.exit("error: %s: the Python at %s has no %s; run it with %s (Debian's python3-numpy, python3-torch, "
             "python3-matplotlib: make deps installs them)" % (os.path.basename(sys.argv[0]), sys.executable,
                                                                ", ".join(missing), DEBIAN_PYTHON))
