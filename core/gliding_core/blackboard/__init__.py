"""L2: the shared blackboard of the agents of a task (graph, tasks, agents, leases, messages).

The coordination half lives in ``coordination`` (the SQLite database), ``leases``, ``tasks``,
``agents`` and ``messages``; each module states its own invariants.
"""
