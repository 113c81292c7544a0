"""Memory: what a memory keeps, for how long, and what leaves it: forgetting on request and the
expiry sweep (``erasure``), export and import (``transfer``). The facade's layer: these work
across every layer, and ``Memory`` calls them."""
