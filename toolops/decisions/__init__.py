"""The pure core, top layer: authorization from granted capabilities, approval policies and what
an approver is shown, retries by failure and side-effect class, deadlines, egress rules.
Builds on ``toolops.runtime`` and ``toolops.model_io``; imports no Django."""
