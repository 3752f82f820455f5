# Two entry points for a fresh machine: `make demo` and `make test`. Both bootstrap .venv from PyPI.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-setup fast lint typecheck clean postgres redis browser debian-packages ui bench sagemaker-sdk pai-sdk

# Three distributions from this repository: the provider (.), the local training platform
# (local-platform/) and the private development harness with the test tools (devel/).
$(STAMP): pyproject.toml local-platform/pyproject.toml devel/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -c constraints.txt \
		-e . -e ./local-platform -e ./devel
	touch $(STAMP)

# The SageMaker Python SDK v2 in a venv of its own (it would downgrade Airflow's packaging, attrs and
# protobuf): tests/e2e/test_sagemaker_sdk.py runs `Estimator.fit()` with it. Pinned by its own
# constraints file (`uv pip freeze` of the venv); built once, kept by its stamp.
SDK_VENV := build/sagemaker-sdk-venv
SDK_STAMP := $(SDK_VENV)/.installed
$(SDK_STAMP): $(STAMP) devel/sagemaker-sdk-constraints.txt
	$(BIN)/uv venv -q --allow-existing $(SDK_VENV)
	$(BIN)/uv pip install -q --python $(SDK_VENV)/bin/python -c devel/sagemaker-sdk-constraints.txt "sagemaker<3"
	touch $(SDK_STAMP)

sagemaker-sdk: $(SDK_STAMP)

# Alibaba's PAI Python SDK (`alipai` 0.4) in a venv of its own (it pins numpy<2 and pulls pyodps,
# oss2, pyarrow): tests/local_platform/test_alipai.py drives its lifecycle and `Estimator.fit()`.
# Pinned by devel/pai-sdk-constraints.txt (`uv pip freeze` of the venv); built once, kept by its stamp.
PAI_SDK_VENV := build/pai-sdk-venv
PAI_SDK_STAMP := $(PAI_SDK_VENV)/.installed
$(PAI_SDK_STAMP): $(STAMP) devel/pai-sdk-constraints.txt
	$(BIN)/uv venv -q --allow-existing $(PAI_SDK_VENV)
	$(BIN)/uv pip install -q --python $(PAI_SDK_VENV)/bin/python -c devel/pai-sdk-constraints.txt "alipai<0.5"
	touch $(PAI_SDK_STAMP)

pai-sdk: $(PAI_SDK_STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

# Debian's servers the tests use, installed with one `apt-get update` for all that are missing: the
# kill-path tests run Airflow on PostgreSQL (two triggerers need row locks), the CeleryExecutor's
# broker is Redis, the UI test drives headless Chromium (Playwright from PyPI never downloads a browser
# here). `postgres`, `redis`, `browser`: one each.
HAVE_POSTGRES := ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
HAVE_REDIS := command -v redis-server >/dev/null 2>&1
HAVE_BROWSER := command -v chromium-headless-shell >/dev/null 2>&1 || command -v chromium >/dev/null 2>&1
APT_INSTALL = apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null
debian-packages:
	@missing=""; \
	$(HAVE_POSTGRES) || missing="$$missing postgresql"; \
	$(HAVE_REDIS) || missing="$$missing redis-server"; \
	($(HAVE_BROWSER)) || missing="$$missing chromium-headless-shell"; \
	[ -z "$$missing" ] || ($(call APT_INSTALL,$$missing))
postgres:
	@$(HAVE_POSTGRES) || ($(call APT_INSTALL,postgresql))
redis:
	@$(HAVE_REDIS) || ($(call APT_INSTALL,redis-server))
browser:
	@$(HAVE_BROWSER) || ($(call APT_INSTALL,chromium-headless-shell))

# What the tests need, built side by side (the venv and the SDK venvs download while apt installs).
test-setup: $(STAMP) typecheck debian-packages sagemaker-sdk pai-sdk

# The types first (`make typecheck`), then pure logic and in-process runs three at a time (as
# `make fast`), then the tiers that start servers.
test:
	$(MAKE) --no-print-directory -j3 test-setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 3 --dist loadgroup -m parallel tests/unit tests/inprocess tests/local_platform tests/integration
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 -m "not parallel" --ignore=tests/unit

# The local platform and Airflow with the example DAGs, for a look at the UI; Ctrl-C stops it all.
ui: $(STAMP) postgres
	$(BIN)/python -m airflow_training_devel.devstack --workdir .ui --dags-folder example_dags --allow-user-code

# What a waiting job costs the triggerer: the trigger against baselines at 1,000/5,000/10,000 pollers
# (not part of `make test`; about 20 minutes; writes docs/images/trigger-cpu-per-poll.png). Then what
# it costs in the platform's API quota: 100 and 1,000 waiting jobs per platform at 30 s, per-job polling
# then coalesced in the same run (about 30 minutes more, one mode at a time: side by side, two
# thousand-job processes and the platform saturate two cores; writes docs/images/api-calls-per-job-hour.png
# and prints the table of docs/scale.md).
bench: $(STAMP)
	$(BIN)/uv pip install -q --python $(BIN)/python -c constraints.txt -e . -e ./local-platform -e "./devel[bench]"
	$(BIN)/python scripts/bench_triggers.py --sizes 1000,5000,10000 --interval 1,1,30 --window 20 \
		--plot docs/images/trigger-cpu-per-poll.png
	$(BIN)/python scripts/bench_quota.py --sizes 100,1000 --interval 30 --sequential \
		--plot docs/images/api-calls-per-job-hour.png

# The fast tier: the types, pure logic and in-process runs against the local platform (under a
# minute); in-process runs that train for many seconds are marked `slow` and left to `make test`.
# Three workers on two cores: the in-process runs mostly wait on their jobs (53 s, not 66 s).
fast: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 3 -m "not slow" tests/unit tests/inprocess

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The provider package's types (mypy, configured in pyproject.toml; local-platform/ and devel/ not
# yet): about 15 s, a second or two with its cache.
typecheck: $(STAMP)
	$(BIN)/python -m mypy

clean:
	rm -rf $(VENV) $(SDK_VENV) $(PAI_SDK_VENV) .demo .ui test-artifacts .mypy_cache
