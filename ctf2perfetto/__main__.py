"""`python -m ctf2perfetto` is `memq`."""
import sys

from ctf2perfetto.cli.memq import main

sys.exit(main())
