"""Development and demo commands: ``run_console`` (what ``make run`` starts), the demo data and
services, the bulk loader for benchmarks. Nothing in production imports this package."""
