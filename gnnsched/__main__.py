import sys

from gnnsched.cli import main

sys.exit(main())
