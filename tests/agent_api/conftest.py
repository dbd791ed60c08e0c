from tests.invocations.conftest import _fast_password_hashing, agent, weather  # noqa: F401 - the same fixtures here
