"""The staff console: dashboard, confirmation queue, unknown-outcome queue, the record of one call.

Views are thin: they read through ``console.selectors``, act through the domain services
(``confirmations``, ``resolutions``), and turn data into words and numbers with
``console.formatting`` — the domain never formats text for a page. URLs: ``console.urls``.
"""
