"""`python -m hack.image`: build the image offline and print its archive's path."""

import sys

from hack.image.build import main

sys.exit(main())
