"""`endless tasks export --format skyrl|jsonl`, read back with pyarrow (installed by scripts/test.sh)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import endless
from endless_env import Client

COLUMNS = ["data_source", "prompt", "env_class", "reward_spec", "extra_info"]


def test_skyrl_export_loads_in_pyarrow_with_the_documented_columns(workspace, task_ids, server, tmp_path):
    out = tmp_path / "data"
    done = json.loads(endless(workspace, "tasks", "export", "--all", "--format", "skyrl", "--dev-count", "1",
                              "--seed", "2", "--out", str(out), "--json").stdout)
    assert (done["train"], done["validation"]) == (len(task_ids) - 1, 1)
    train = pq.read_table(out / "train.parquet")
    dev = pq.read_table(out / "validation.parquet")
    assert train.column_names == COLUMNS and dev.column_names == COLUMNS
    assert train.num_rows == len(task_ids) - 1 and dev.num_rows == 1
    schema = train.schema
    assert pa.types.is_list(schema.field("prompt").type)
    assert pa.types.is_struct(schema.field("prompt").type.value_type)
    assert {f.name for f in schema.field("extra_info").type} == {"task_id", "max_turns", "max_time"}
    rows = train.to_pylist() + dev.to_pylist()
    assert sorted(r["extra_info"]["task_id"] for r in rows) == sorted(task_ids)
    for r in rows:
        assert r["data_source"] == "endless" and r["env_class"] == "endless"
        assert r["reward_spec"] == {"method": "rule", "ground_truth": r["extra_info"]["task_id"]}
        assert r["extra_info"]["max_turns"] >= 1 and r["extra_info"]["max_time"] >= 0
        assert [m["role"] for m in r["prompt"]] == ["system", "user"]
    # The prompt is the one the server gives a policy for the same task.
    row = rows[0]
    client = Client(server.url, server.token)
    session = client.open(row["extra_info"]["task_id"], run="export-check")
    try:
        assert session.messages == row["prompt"]
    finally:
        client.close(session.id)


def test_jsonl_export_holds_the_same_rows(workspace, task_ids, tmp_path):
    a, b = tmp_path / "pq", tmp_path / "jl"
    endless(workspace, "tasks", "export", "--all", "--format", "skyrl", "--dev-count", "1", "--out", str(a))
    endless(workspace, "tasks", "export", "--all", "--format", "jsonl", "--dev-count", "1", "--out", str(b))
    for part in ("train", "validation"):
        from_parquet = pq.read_table(a / f"{part}.parquet").to_pylist()
        lines = (b / f"{part}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == from_parquet


def test_skyrl_export_loads_with_datasets_load_dataset(workspace, task_ids, tmp_path, monkeypatch):
    """What SkyRL itself does with the files: `datasets.load_dataset("parquet", ...)`,
    offline (no hub), each split with the documented columns and every task once."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import datasets

    out = tmp_path / "data"
    endless(workspace, "tasks", "export", "--all", "--format", "skyrl", "--dev-count", "1", "--out", str(out))
    ds = datasets.load_dataset("parquet", data_files={"train": str(out / "train.parquet"),
                                                      "validation": str(out / "validation.parquet")},
                               cache_dir=str(tmp_path / "cache"))
    assert set(ds.keys()) == {"train", "validation"}
    assert ds["train"].column_names == COLUMNS and ds["validation"].column_names == COLUMNS
    assert ds["train"].num_rows == len(task_ids) - 1 and ds["validation"].num_rows == 1
    rows = list(ds["train"]) + list(ds["validation"])
    assert sorted(r["extra_info"]["task_id"] for r in rows) == sorted(task_ids)
    assert all([m["role"] for m in r["prompt"]] == ["system", "user"] for r in rows)
