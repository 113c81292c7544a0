"""L2: the shared blackboard of the agents of a task (graph, tasks, agents, leases, messages).

The graph half: ``vocabulary`` (the one namespace, the context, graph naming), ``graph`` (the
RDF backends), ``nodes`` (cache, generations, single writer), ``permissions`` (the role matrix),
``writeback`` (flush to L0) and ``board`` (the ``Blackboard`` facade and ``AgentHandle``).
The coordination half lives in ``coordination`` (the SQLite database), ``leases``, ``tasks``,
``agents`` and ``messages``, gathered by ``registries``; each module states its own invariants.
"""
