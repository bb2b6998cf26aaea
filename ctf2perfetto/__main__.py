"""`python -m ctf2perfetto` is `memq`."""
import sys

from .cli.memq import main

sys.exit(main())
