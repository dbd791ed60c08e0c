from tests.invocations.conftest import _fast_password_hashing, agent, weather  # noqa: F401 - the same fixtures here
from tests.approvals.conftest import calendar, pending  # noqa: F401 - the approvals' fixtures too
