pytest_plugins = ["tests.harness", "tests.zkfront"]
