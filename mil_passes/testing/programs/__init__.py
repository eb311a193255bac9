"""Random MIL programs: a drawn program as data (``recipe``), grown op by op (``grower``, ``growth``)
from the op table (``ops``: its index; ``ops_base``: helpers; ``ops_<family>``: entries)."""
