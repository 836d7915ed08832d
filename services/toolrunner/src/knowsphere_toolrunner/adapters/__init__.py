"""Outbound clients and stores of the toolrunner, one module per backend."""
