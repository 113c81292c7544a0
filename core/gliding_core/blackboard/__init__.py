"""L2: the shared blackboard: JSON-LD nodes in named graphs over Oxigraph, for many agents.

The graph half: ``vocabulary`` (the one namespace, the context, graph naming), ``graph`` (the
RDF backends), ``nodes`` (cache, generations, single writer), ``permissions`` (the role matrix),
``writeback`` (flush to L0) and ``board`` (the ``Blackboard`` facade and ``AgentHandle``).
"""
