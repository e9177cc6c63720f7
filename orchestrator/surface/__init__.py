"""What every command-line surface shares, below the CLI and the image admin alike.

`sprawl-orch image` (images/cli.py) and the main CLI (cli/) take the same -C/--config options,
find the config the same way and say a refusal the same way; this room holds those so neither
surface imports the other (the layer rule, tests/unit/test_layers.py). Only click, the config
and the error fields: no result, run or arm.
"""
