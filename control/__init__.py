"""The staff console and the people's approvals API: dashboard, confirmation queue, unknown-outcome
queue, the record of one call, tokens; ``approvals_api`` serves the same decisions over REST.

Views are thin: they read through ``selectors``, act through the domain services
(``invocations_app.confirmations``, ``worker.support``), and turn data into words and numbers with
``formatting`` — the domain never formats text for a page. URLs: ``control.urls``.
"""
