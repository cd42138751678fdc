pytest_plugins = ["tests.harness"]
