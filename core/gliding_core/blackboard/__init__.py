"""L2: the shared blackboard of the agents of a task (graph, tasks, agents, leases, messages).

The graph half: ``vocabulary`` (the one namespace, the context, graph naming), ``graph`` (the
RDF backends), ``rdf`` (a node's quads), ``validation`` (a node checked before it is written),
``records`` (what the store holds under an IRI, the bookkeeping layout), ``nodes`` (cache,
generations, single writer), ``permissions`` (the role matrix), ``writeback`` (flush to L0),
``sparql`` (the graphs a task's queries read), ``sparql_tokens`` (SPARQL's terminals: the
tokenizer and the canonical rewrite), ``sparql_check`` (what a query may hold, its size limits),
``board`` (the ``Blackboard`` facade) and ``handle``
(``AgentHandle``, an agent's checked identity).
Beside them: ``writes`` (every write and delete, decided in one place, its order in its
docstring), ``shared_cache`` (the node cache checked against the coherence directory),
``groupcommit`` (the commit queue), ``writeids`` (write identities), ``lease_rights`` (what a
lease needs). The coordination
half lives in the ``coordination`` package (``database``, ``leases``, ``tasks``, ``agents`` and
``messages``, gathered by ``registries``); each module states its own invariants.
"""
