"""`python -m lltm info`: an alias of `python -m torch_fused_ops info`."""

import sys

from torch_fused_ops.__main__ import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
