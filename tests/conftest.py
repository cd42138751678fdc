pytest_plugins = ["tests.harness", "tests.zkfront", "tests.zkjava", "tests.agent_processes"]
