# ToolOps — two commands on a fresh machine with Python 3.11+:
#   make run    set up and run the console + API + a Celery worker on embedded defaults
#               (PORT=8090 make run: the console on 8090, the MCP server and demo servers follow)
#   make test   run the test suite
#   make docs   build the documentation site into var/site (offline)
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: run test docs venv migrate demo bench clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is required") if sys.version_info < (3, 11) else None'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

migrate: venv
	$(PY) manage.py migrate --noinput

demo: migrate
	$(PY) manage.py load_demo

run: migrate
	$(PY) manage.py run_console $(RUN_ARGS)

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

# Reference pages generated from the code (error codes, settings, commands, the OpenAPI schema,
# the state diagram), then a strict build: a broken link or a page missing from the nav fails.
docs: venv
	$(PY) docs/gen/generate.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir var/site

bench: venv
	$(PY) bench/admission.py

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis
