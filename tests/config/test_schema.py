from pathlib import Path

from tests.conftest import REPO, Run


def test_committed_schemas_match_the_models(run: Run) -> None:
    result = run("schema", "--check", "--out", str(REPO / "schemas"))
    assert result.code == 0, result.err


def test_schema_drift_is_detected_and_repaired(tmp_path: Path, run: Run) -> None:
    out = tmp_path / "schemas"
    assert run("schema", "--out", str(out)).lines == [f"wrote 3 schemas to {out} (3 changed)"]
    assert run("schema", "--check", "--out", str(out)).code == 0
    (out / "config.schema.json").write_text("{}")
    drift = run("schema", "--check", "--out", str(out))
    assert drift.code == 1
    assert drift.err_lines[0] == f"{out / 'config.schema.json'}: differs from the models"


def test_every_field_is_described(tmp_path: Path, run: Run) -> None:
    import json

    run("schema", "--out", str(tmp_path))
    missing = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.get("properties", {}).items():
                if "description" not in value:
                    missing.append(f"{where}.{key}")
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    for file in tmp_path.glob("*.json"):
        walk(json.loads(file.read_text()), file.name)
    assert missing == []
