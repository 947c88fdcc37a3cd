import sys

from spag.cli import main

sys.exit(main())
