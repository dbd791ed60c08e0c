"""The agents' REST API (``/api/v1/``): runs, model calls, proposals, invocations, tools; DRF views,
serializers, token authentication, problem+json errors and the OpenAPI schema. A front door:
it parses and answers, the domain services (``invocations_app``, ``specs_app``) decide."""
