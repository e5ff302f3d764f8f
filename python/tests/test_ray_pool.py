"""`endless_env.pool.ServePool` on a local Ray cluster of 2 worker CPUs: two `endless serve`
nodes with `--max-sessions 1` each behind one client, which spreads 8 oracle episodes over
them and passes a create to the other node when one is full; a node killed mid-run loses
only its own sessions (`NodeLost`), and the pool's episodes merge back into the workspace."""

import json
import re
import sqlite3
import threading

import pytest

from conftest import endless_home, home_env, oracle_reply
from endless_env import Client, NodeLost, Retry
from endless_env.pool import ServePool


@pytest.fixture
def tasks_ws(tmp_path):
    ws = tmp_path / "ws"
    endless_home(tmp_path, ws, "generate", "--offline", "--count", "3", "--seed", "11")
    ids = [t["id"] for t in json.loads(endless_home(tmp_path, ws, "tasks", "list", "--json").stdout)]
    return ws, ids


def oracle_episode(client, ws, task_id):
    s = client.open(task_id)
    client.step(s.id, oracle_reply(ws, task_id))
    r = client.step(s.id, "<action>done</action>")
    client.close(s.id)
    return r["reward"]


def errors_429(metrics_text):
    m = re.search(r'endless_serve_errors_total\{status="429"\} (\d+)', metrics_text)
    return int(m.group(1)) if m else 0


def test_two_nodes_run_eight_episodes_spread_and_passed_on_when_full(ray_local, tasks_ws, tmp_path):
    ws, ids = tasks_ws
    with ServePool(ws, nodes=2, run="pt", serve_args=["--max-sessions", "1"], env=home_env(tmp_path),
                   num_cpus=0) as pool:
        # A node held by another client is full: a create goes to the other node.
        outsider = Client(pool.nodes[0].url, pool.nodes[0].token)
        held = outsider.open(ids[0])
        c = pool.client(retry=Retry(queue_wait=5))
        s = c.open(ids[1])
        assert c.nodes.node_of(s.id).url == pool.nodes[1].url
        c.close(s.id)
        outsider.close(held.id)
        # 8 episodes from 4 threads on 2 places: creates find full nodes and pass on.
        rewards = []

        def worker(k):
            for j in range(2):
                rewards.append(oracle_episode(c, ws, ids[(2 * k + j) % len(ids)]))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert rewards == [1.0] * 8
        assert c.nodes.load() == {n.url: 0 for n in pool.nodes}
        metrics = [Client(n.url, n.token).metrics() for n in pool.nodes]
        assert sum(errors_429(m) for m in metrics) >= 1, metrics
        merged = json.loads(pool.merge())
        assert merged, merged
        assert pool.stop() == [0, 0]
    db = sqlite3.connect(f"file:{ws / 'endless.db'}?mode=ro", uri=True)
    rows = db.execute("SELECT run_id, COUNT(*), SUM(passed) FROM episodes WHERE run_id LIKE 'serve-pt-%' "
                      "GROUP BY run_id ORDER BY run_id").fetchall()
    db.close()
    # Both nodes ran episodes; all 9 (8 + the one moved to node 1) are in the workspace, the
    # outsider's interrupted one too.
    assert [r[0] for r in rows] == ["serve-pt-0", "serve-pt-1"], rows
    assert sum(r[1] for r in rows) == 10 and sum(r[2] for r in rows) == 8, rows


def test_a_killed_node_loses_only_its_sessions(ray_local, tasks_ws, tmp_path):
    ws, ids = tasks_ws
    with ServePool(ws, nodes=2, run="kill", env=home_env(tmp_path), num_cpus=0) as pool:
        c = pool.client(retry=Retry(attempts=2, backoff=0.05))
        a, b = c.open(ids[0]), c.open(ids[1])
        node_a, node_b = c.nodes.node_of(a.id), c.nodes.node_of(b.id)
        assert node_a != node_b, "two sessions on two idle nodes are spread"
        c.step(a.id, oracle_reply(ws, ids[0]))
        c.step(b.id, oracle_reply(ws, ids[1]))
        dead = [n.url for n in pool.nodes].index(node_a.url)
        pool.kill(dead)
        with pytest.raises(NodeLost) as lost:
            c.step(a.id, "<action>done</action>")
        assert lost.value.node == node_a.url and lost.value.session_id == a.id
        assert f"node {node_a.url} is lost, and session {a.id} with it" in str(lost.value)
        # The other node's session goes on, and new sessions go to the node left.
        r = c.step(b.id, "<action>done</action>")
        assert r["done"] and r["reward"] == 1.0
        c.close(b.id)
        assert oracle_episode(c, ws, ids[2]) == 1.0
        assert pool.alive() == [i != dead for i in range(2)]
        # Issue 48: a node whose actor died (its worker process or machine went) is not
        # alive either; alive() said so by raising RayActorError.
        ray_local.kill(pool.actors[dead])
        assert pool.alive() == [i != dead for i in range(2)]
