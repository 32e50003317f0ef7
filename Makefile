# `make run` and `make test` work from a fresh clone: they create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
IDP_STAMP := tests/idp/node_modules/.installed
INDEX ?= var/demo-index
KEYS ?= var/demo-keys.json
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run lint test install bench clean ocr-engine

install: $(STAMP)

# CPU torch goes in first, and the constraints file keeps it there, so nothing pulls a CUDA build.
# The client distribution (client/, with its LangChain and LlamaIndex extras) goes in before
# the service, which imports its wire models.
$(STAMP): pyproject.toml constraints.txt client/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e './client[langchain,llamaindex]'
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,cluster]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/quarry demo --index $(INDEX) --keys $(KEYS) --host $(HOST) --port $(PORT)

# Style and layering first (seconds), then the tests; the first failure stops the run.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: lint $(IDP_STAMP) ocr-engine
	$(PY) -m pytest

# The OCR engine scanned PDF pages are read with (Debian's tesseract-ocr, English model): installed
# when missing and the package manager can; without it, the OCR tests skip and say why.
ocr-engine:
	@command -v tesseract >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tesseract-ocr tesseract-ocr-eng \
		>/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends tesseract-ocr tesseract-ocr-eng >/dev/null 2>&1; }; }; } || \
		echo "tesseract could not be installed: the OCR tests will skip"

# The OpenID Connect provider the token tests sign in with (tests/idp: oidc-provider, pinned by
# its lock file). Without Node.js there is nothing to install, and those tests skip.
$(IDP_STAMP): tests/idp/package.json tests/idp/package-lock.json
	@if command -v node >/dev/null; then \
		cd tests/idp && npm ci --no-audit --no-fund --silent && touch node_modules/.installed; \
	else echo "node is not on PATH: the OpenID Connect provider tests will skip"; fi

bench: $(STAMP)
	$(PY) benchmarks/retrievers.py

clean:
	rm -rf var .pytest_cache .hypothesis .mypy_cache .ruff_cache .import_linter_cache
