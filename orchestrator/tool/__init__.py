"""The exec tool, the Python API's engine room: one command from request to result (exec_tool),
its arm (arm) and its copies (copies), output streaming (stream)."""
