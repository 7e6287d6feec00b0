"""The attack suite: each test runs one attack from a stranger holding an API key, on this machine, and records
in the attack table what it tried and what held (tests/conftest.py prints the table after the run)."""
