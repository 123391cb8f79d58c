"""Fuzz the gateway from its own OpenAPI document with schemathesis, on a real stack (.ci/run).

``python -m tests.contracts.fuzz_gateway [--budget SECONDS]`` starts nats-server, the ledger,
the agent, the inner plane, memory and the gateway as real processes (tests/support/system.py)
with the offline OpenAI stand-in, fetches ``/api/openapi.json`` with the owner's token, and runs
schemathesis over every operation in it with that token, for the budget (default 180 s). The
checks: no 5xx (fuzz_hooks), every response as its document declares it (status, content type,
schema), nothing written on a 4xx (fuzz_hooks). It prints the budget and how many cases ran,
and exits with schemathesis's status: nonzero on any failure.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("ledger", "agent", "inner-plane", "memory", "gateway")
CHECKS = ("status_code_conformance", "content_type_conformance", "response_schema_conformance")
CUSTOM_CHECKS = ("gateway_not_a_server_error", "nothing_written_on_4xx")
TWILIO_AUTH_TOKEN = "fuzz_twilio_auth_token_0123"
PUBLIC_BASE_URL = "https://delegate.example.test"


def stack_env(standin: StandinProcess) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": TEST_API_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "OPENAI_MAX_RETRIES": "1",
        # Twilio's routes are on, and fuzz_hooks signs their forms as Twilio would.
        "TWILIO_AUTH_TOKEN": TWILIO_AUTH_TOKEN,
        "OWNER_PHONE": "+15550001111",
        "PUBLIC_BASE_URL": PUBLIC_BASE_URL,
        # A webhook's writes happen before its answer (the spool would drain them later, into
        # another case's window of nothing_written_on_4xx).
        "GATEWAY_SPOOL": "false",
    }


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def cases_in(report: Path) -> int:
    """Test cases schemathesis ran, from its NDJSON event stream."""
    cases = 0
    for line in report.read_text().splitlines():
        event = json.loads(line)
        for name, body in event.items():
            if name == "ScenarioFinished":
                recorder = body.get("recorder") or {}
                cases += len(recorder.get("cases") or {})
    return cases


def run(budget: int, workdir: Path) -> int:
    standin = StandinProcess(log_dir=workdir / "standin").start()
    system = System(workdir / "system", env=stack_env(standin))
    try:
        system.start(*SERVICES)
        assert system.nats is not None
        schema = workdir / "openapi.json"
        reply = httpx.get(f"{system.http}/api/openapi.json", headers=system.auth(), timeout=30)
        reply.raise_for_status()
        schema.write_text(reply.text)
        operations = sum(len(ops) for ops in reply.json()["paths"].values())
        report = workdir / "events.ndjson"
        say(f"fuzz: schemathesis over {operations} operations, budget {budget} s")
        started = time.monotonic()
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.contracts.fuzz_hooks", "FUZZ_NATS_URL": system.nats.url,
               "FUZZ_TWILIO_AUTH_TOKEN": TWILIO_AUTH_TOKEN, "FUZZ_PUBLIC_BASE_URL": PUBLIC_BASE_URL,
               "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "run", str(schema), "--url", system.http,
             "--header", f"Authorization: Bearer {system.token}",
             "--checks", ",".join(CHECKS + CUSTOM_CHECKS), "--max-time", str(budget), "--workers", "1",
             "--seed", os.environ.get("FUZZ_SEED", "0"), "--request-timeout", "30",
             "--report", "ndjson", "--report-ndjson-path", str(report), "--no-color"],
            cwd=ROOT, env=env, check=False, timeout=budget + 300,
        )
        took = time.monotonic() - started
        say(f"fuzz: {cases_in(report) if report.exists() else 0} cases in {took:.0f} s "
            f"(budget {budget} s); schemathesis exit {proc.returncode}")
        if proc.returncode != 0:
            sys.stderr.write(system.dump_logs(tail=3000) + "\n")
        return proc.returncode
    finally:
        system.stop()
        standin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=int(os.environ.get("FUZZ_BUDGET_S", "180")))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fuzz-gateway-") as tmp:
        sys.exit(run(args.budget, Path(tmp)))


if __name__ == "__main__":
    main()
