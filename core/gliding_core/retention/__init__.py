"""Memory: what a memory keeps, for how long, and what leaves it: forgetting on request and the
expiry sweep (``erasure``), export and import (``transfer``), and copying a memory from one
place to another (``copying``, which the command line calls). The facade's layer: these work
across every layer, and ``Memory`` calls the first two."""
