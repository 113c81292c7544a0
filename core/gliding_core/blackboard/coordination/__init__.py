"""L2: the blackboard's coordination half: leases, tasks, agents and messages.

``protocol`` (``CoordinationStore``: where the rows live, one transaction at a time, and the
graph mirror), ``records`` (the values it holds), ``checks`` (what callers may pass),
``sqlite`` (``CoordinationDB``, the store in SQLite), and the registries that decide over the
rows on every backend alike: ``leases`` (leases with fencing tokens), ``tasks`` (the task tree),
``agents`` (registered agents and their heartbeats), ``messages`` (the message board), gathered
by ``registries`` (``Coordination``); each module states its own invariants.
"""
