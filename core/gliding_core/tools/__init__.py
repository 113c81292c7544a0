"""Tools: what an agent's model calls, framework-neutral (the adapters wrap them).

``memory_tools`` (search and save memory), ``board_tools`` (read, write, query and lease
blackboard nodes) and ``arguments`` (a tool call's arguments checked before any parser sees
them, and refusals as text).
"""
