"""``python -m knowsphere_cli``: the same as ``ks``."""

from knowsphere_cli.app import main

main()
