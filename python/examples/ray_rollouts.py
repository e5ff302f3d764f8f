"""Rollouts of `endless` environments as Ray tasks, through SkyRL's `EndlessEnv`.

Starts a local Ray cluster (`ray.init`), and runs N episodes as Ray tasks, each an
`endless_env.skyrl.EndlessEnv` (the env class "endless" SkyRL builds from dataset rows)
against the node's `endless serve`, with a scripted policy:

- `oracle` replays the task's reference solution (`solution/solve.sh` of its bundle in
  `--workspace`) and says done: every reward is 1;
- `loop` runs the same command every turn until the turn limit: reward 0, failure mode
  `loop`.

    endless serve --run ray &          # on each node; token in the state dir
    python python/examples/ray_rollouts.py --workspace WS --episodes 8 --loop-episodes 2 \
        --url http://127.0.0.1:8765 --token-file ~/.local/state/endless/serve.token

Prints one JSON object: every episode's task, policy, reward, turns, end reason and
failure mode, and the mean reward per policy. Exits 1 when an oracle episode did not earn
1 or a loop episode was not labelled `loop`. Needs `ray`, `skyrl-gym` and `endless-env`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any, Dict, List, Optional

import ray

LOOP_REPLY = "<think>Look again.</think>\n<command>ls -la</command>"
DONE_REPLY = "<think>Finished.</think>\n<action>done</action>"


def oracle_reply(script: str) -> str:
    """A reply that runs the reference solution as one shell command."""
    delim = "ENDLESS_SOLVE_EOF"
    while any(line.strip() == delim for line in script.splitlines()):
        delim += "_"
    return f"<think>Run the solution.</think>\n<command>bash <<'{delim}'\n{script.rstrip()}\n{delim}</command>"


@ray.remote
def run_episode(url: str, token: Optional[str], task_id: str, policy: str, script: str,
                max_turns: int, run: str) -> Dict[str, Any]:
    """One episode in a Ray worker: the SkyRL environment driven by a scripted policy."""
    from endless_env.skyrl import EndlessEnv

    extras = {"extra_info": {"task_id": task_id, "max_turns": max_turns, "run": run, "server_url": url},
              "reward_spec": {"method": "rule", "ground_truth": task_id}}
    env = EndlessEnv({"token": token}, extras)
    env.init([])
    rewards: List[float] = []
    step = {"done": False, "metadata": {}}
    try:
        for turn in range(max_turns + 1):
            if policy == "oracle":
                reply = oracle_reply(script) if turn == 0 else DONE_REPLY
            else:
                reply = LOOP_REPLY
            step = env.step(reply)
            rewards.append(float(step["reward"]))
            if step["done"]:
                break
    finally:
        env.close()
    info = step["metadata"]
    return {"task_id": task_id, "policy": policy, "reward": rewards[-1] if rewards else 0.0,
            "done": bool(step["done"]), "turns": info.get("turn"), "end_reason": info.get("end_reason"),
            "failure_mode": info.get("failure_mode"), "worker_pid": os.getpid()}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("ENDLESS_URL", "http://127.0.0.1:8765"))
    p.add_argument("--token-file", default=os.environ.get("ENDLESS_TOKEN_FILE"))
    p.add_argument("--workspace", required=True, help="the server's workspace (for the oracle solutions)")
    p.add_argument("--episodes", type=int, default=4, help="oracle episodes")
    p.add_argument("--loop-episodes", type=int, default=1, help="episodes of the looping policy")
    p.add_argument("--max-turns", type=int, default=6)
    p.add_argument("--run", default="ray", help="episodes are recorded under run serve-RUN")
    p.add_argument("--num-cpus", type=int, default=2)
    args = p.parse_args(argv)

    token = os.environ.get("ENDLESS_TOKEN")
    if args.token_file:
        token = pathlib.Path(args.token_file).read_text().split()[0]
    from endless_env import Client

    tasks = [t["id"] for t in Client(args.url, token).tasks()]
    if not tasks:
        print(f"no tasks on {args.url}", file=sys.stderr)
        return 2
    solutions = {}
    for t in tasks:
        path = pathlib.Path(args.workspace) / "tasks" / t / "solution" / "solve.sh"
        solutions[t] = path.read_text() if path.is_file() else ""
    with_oracle = [t for t in tasks if solutions[t]]
    if args.episodes and not with_oracle:
        print(f"no task in {args.workspace} has solution/solve.sh", file=sys.stderr)
        return 2

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        jobs = []
        for i in range(args.episodes):
            t = with_oracle[i % len(with_oracle)]
            jobs.append(run_episode.remote(args.url, token, t, "oracle", solutions[t], args.max_turns, args.run))
        for i in range(args.loop_episodes):
            t = tasks[i % len(tasks)]
            jobs.append(run_episode.remote(args.url, token, t, "loop", "", args.max_turns, args.run))
        episodes = ray.get(jobs)
    finally:
        ray.shutdown()

    def mean(policy: str) -> Optional[float]:
        r = [e["reward"] for e in episodes if e["policy"] == policy]
        return sum(r) / len(r) if r else None

    summary = {"episodes": episodes, "mean_reward": {"oracle": mean("oracle"), "loop": mean("loop")},
               "ray_workers": len({e["worker_pid"] for e in episodes})}
    print(json.dumps(summary, indent=2))
    ok = all(e["reward"] == 1.0 for e in episodes if e["policy"] == "oracle") and all(
        e["failure_mode"] == "loop" for e in episodes if e["policy"] == "loop")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
