"""Cut the schemas the stand-in validates against out of OpenAI's published OpenAPI spec.

    python services/openai-standin/tools/trim_openapi.py <openapi.yaml> --commit f85dbe2

reads `openapi.yaml` from the public repository openai/openai-openapi (MIT) and writes
`src/delegate/openai_standin/spec/openapi.trimmed.json`: the request bodies and query
parameters of the Responses routes the stand-in serves, and the Realtime client events,
with every `$ref` they reach. Only annotations are dropped (descriptions, examples,
`x-oaiMeta`); the validation keywords are OpenAI's, unchanged. The spec's `LICENSE` must be
copied beside the output (the script does it when `--license` is given).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

OUTPUT = Path(__file__).resolve().parents[1] / "src/delegate/openai_standin/spec/openapi.trimmed.json"
SOURCE = "https://github.com/openai/openai-openapi (openapi.yaml)"

# What the stand-in serves: request bodies by operation, query parameters by operation.
BODIES = {
    "responses.create": ("/responses", "post"),
    "responses.compact": ("/responses/compact", "post"),
    "responses.input_tokens": ("/responses/input_tokens", "post"),
}
QUERIES = {
    "responses.retrieve": ("/responses/{response_id}", "get"),
    "responses.input_items": ("/responses/{response_id}/input_items", "get"),
}
CLIENT_EVENTS = "RealtimeClientEvent"

# Keywords that only annotate. `properties` maps property names to schemas, so a
# property called "description" is kept (the walk below never strips inside that map).
_ANNOTATIONS = {"description", "example", "examples", "title", "x-oaiMeta", "x-oaiTypeLabel", "x-oaiExpandable"}
_SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "dependentSchemas"}
_REF_PREFIX = "#/components/schemas/"


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """YAML without timestamp resolution: the spec's dates stay strings, as in JSON."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def strip(node: Any) -> Any:
    if isinstance(node, list):
        return [strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _ANNOTATIONS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: strip(schema) for name, schema in value.items()}
        else:
            out[key] = strip(value)
    return out


def referenced(node: Any, schemas: dict[str, Any], found: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            referenced(item, schemas, found)
    elif isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            name = ref.removeprefix(_REF_PREFIX)
            if name not in found:
                found.add(name)
                referenced(schemas[name], schemas, found)
        for value in node.values():
            referenced(value, schemas, found)


def trim(spec: dict[str, Any], commit: str) -> dict[str, Any]:
    schemas = spec["components"]["schemas"]
    bodies = {
        name: spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        for name, (path, method) in BODIES.items()
    }
    queries = {
        name: {
            param["name"]: param["schema"]
            for param in spec["paths"][path][method].get("parameters", [])
            if param.get("in") == "query"
        }
        for name, (path, method) in QUERIES.items()
    }
    events = {
        schemas[ref["$ref"].removeprefix(_REF_PREFIX)]["properties"]["type"]["enum"][0]: ref
        for ref in schemas[CLIENT_EVENTS]["anyOf"]
    }
    found: set[str] = set()
    referenced([bodies, queries, events], schemas, found)
    return {
        "x-source": {
            "repository": SOURCE,
            "commit": commit,
            "info.version": spec["info"]["version"],
            "license": "MIT, see LICENSE beside this file",
            "trimmed_by": "services/openai-standin/tools/trim_openapi.py",
        },
        "bodies": strip(bodies),
        "queries": strip(queries),
        "realtime_client_events": strip(events),
        "components": {"schemas": {name: strip(schemas[name]) for name in sorted(found)}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path, help="openapi.yaml from openai/openai-openapi")
    parser.add_argument("--commit", required=True, help="the commit the spec was taken from")
    parser.add_argument("--license", type=Path, help="the spec repository's LICENSE, copied beside the output")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    with args.spec.open(encoding="utf-8") as handle:
        spec = yaml.load(handle, Loader=_Loader)  # a safe loader, minus timestamps
    trimmed = trim(spec, args.commit)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(trimmed, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    if args.license is not None:
        shutil.copyfile(args.license, args.output.parent / "LICENSE")
    count = len(trimmed["components"]["schemas"])
    sys.stdout.write(f"{args.output}: {count} schemas, {args.output.stat().st_size / 1024:.0f} KiB\n")


if __name__ == "__main__":
    main()
