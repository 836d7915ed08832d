"""What the toolrunner is for: the tool catalogue, running a tool call, numbering its sources and
externalising large results. Pure logic over ports; the adapters do the I/O."""
