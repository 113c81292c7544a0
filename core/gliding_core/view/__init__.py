"""View: what a model is shown each call, assembled from context sources within a budget.

``sources`` (the ``ContextSource`` protocol), ``memory_sources`` (a session's context and the
recall of L0), ``frame_source`` (a role's frame of its task), ``stale_turns`` (tool results
about shared nodes that another agent has since changed), ``conversation`` (the model view of
one agent's conversation), ``chatlog`` (the chat history archived in L0) and ``team`` (a team
of role agents on a task, and the conversation of each).

The view takes what it needs of a memory as protocols (``memory_sources.Searcher``,
``conversation.ViewMemory``, ``team.BoardMemory``): ``gliding_core.Memory`` satisfies them, and
sits above this layer.
"""
