"""``metashift bench copy`` as a script of the checkout: the benchmark is
``metashift_lab.benchmarks.copy`` (see there), so that it runs from an installed package too.

    .venv/bin/python bench/copy_bench.py --topics 17000      # ~100k nodes
"""

import sys

if __name__ == "__main__":
    from metashift import grpc_env

    grpc_env.configure()  # before the benchmark's imports load gRPC
    from metashift_lab.benchmarks.copy import main

    sys.exit(main())
