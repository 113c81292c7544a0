"""L2: the blackboard's coordination half: leases, tasks, agents and messages.

``database`` (the SQLite database they share, and the node mirror), ``leases`` (leases with
fencing tokens), ``tasks`` (the task tree), ``agents`` (registered agents and their
heartbeats), ``messages`` (the message board), gathered by ``registries`` (``Coordination``);
each module states its own invariants.
"""
