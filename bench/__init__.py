"""Benchmarks: each script with an ``if __name__ == "__main__":`` block is one benchmark (the
other modules, such as ``bare_tasks.py``, are helpers). Every benchmark honours
``BENCH_SMOKE=1`` — tiny sizes, the whole code path, real PostgreSQL and Redis, well under 30 s —
and CI runs them all that way (``.ci/bench-smoke``), so a benchmark that stops running fails CI.
"""
