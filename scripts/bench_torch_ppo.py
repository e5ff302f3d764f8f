#!/usr/bin/env python3
"""PPO update throughput in PyTorch (CPU) on the model and batch that
`endless bench ppo --dump DIR` wrote, for comparison with the candle trainer.

Self-contained: a Qwen2/Llama-style decoder (RMSNorm, non-interleaved rotary
embeddings as in Hugging Face, grouped-query attention with a causal mask,
SwiGLU MLP, optional q/k/v bias, tied or untied LM head) plus a linear value
head; the same PPO loss as `src/rl/ppo.rs` (only agent positions reach the LM
head, sequence-level averaging, asymmetric clipping, squared-error value loss),
global-norm gradient clipping and AdamW with the same warmup.

Usage: bench_torch_ppo.py DIR [--steps N] [--warmup N] [--threads N] [--json] [--profile ROWS]
It prints the first-step loss next to candle's (DIR/candle.json) and fails
when they differ by more than 1e-3.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


class Decoder(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // self.nh
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.tied = cfg.get("tie_word_embeddings", False)
        self.n_layers = cfg["num_hidden_layers"]
        self.params = torch.nn.ParameterDict()
        for name, t in weights.items():
            self.params[name.replace(".", "__")] = torch.nn.Parameter(t.float().clone())
        theta = cfg.get("rope_theta", 10000.0)
        inv = 1.0 / theta ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd)
        pos = torch.arange(cfg.get("max_position_embeddings", 4096), dtype=torch.float32)
        freqs = pos[:, None] * inv.float()[None, :]
        self.cos = freqs.cos()
        self.sin = freqs.sin()

    def w(self, name):
        return self.params[name.replace(".", "__")]

    def maybe(self, name):
        key = name.replace(".", "__")
        return self.params[key] if key in self.params else None

    def rms(self, x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * w

    @staticmethod
    def rope(x, cos, sin):
        # Non-interleaved halves (Hugging Face rotate_half).
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def hidden_states(self, ids):
        b, t = ids.shape
        cos, sin = self.cos[:t], self.sin[:t]
        x = F.embedding(ids, self.w("model.embed_tokens.weight"))
        mask = torch.full((t, t), float("-inf")).triu(1)
        groups = self.nh // self.nkv
        scale = 1.0 / math.sqrt(self.hd)
        for i in range(self.n_layers):
            p = f"model.layers.{i}"
            h = self.rms(x, self.w(f"{p}.input_layernorm.weight"))
            a = f"{p}.self_attn"
            q = F.linear(h, self.w(f"{a}.q_proj.weight"), self.maybe(f"{a}.q_proj.bias"))
            k = F.linear(h, self.w(f"{a}.k_proj.weight"), self.maybe(f"{a}.k_proj.bias"))
            v = F.linear(h, self.w(f"{a}.v_proj.weight"), self.maybe(f"{a}.v_proj.bias"))
            q = q.view(b, t, self.nh, self.hd)
            k = k.view(b, t, self.nkv, self.hd)
            v = v.view(b, t, self.nkv, self.hd)
            qn, kn = self.maybe(f"{a}.q_norm.weight"), self.maybe(f"{a}.k_norm.weight")
            if qn is not None:
                q = self.rms(q, qn)
                k = self.rms(k, kn)
            q = self.rope(q.transpose(1, 2), cos, sin)
            k = self.rope(k.transpose(1, 2), cos, sin)
            v = v.transpose(1, 2)
            if groups > 1:
                k = k.repeat_interleave(groups, dim=1)
                v = v.repeat_interleave(groups, dim=1)
            att = (q @ k.transpose(-1, -2)) * scale + mask
            att = att.softmax(-1)
            o = (att @ v).transpose(1, 2).reshape(b, t, self.nh * self.hd)
            x = x + F.linear(o, self.w(f"{a}.o_proj.weight"))
            h = self.rms(x, self.w(f"{p}.post_attention_layernorm.weight"))
            m = f"{p}.mlp"
            g = F.silu(F.linear(h, self.w(f"{m}.gate_proj.weight")))
            u = F.linear(h, self.w(f"{m}.up_proj.weight"))
            x = x + F.linear(g * u, self.w(f"{m}.down_proj.weight"))
        return self.rms(x, self.w("model.norm.weight"))

    def forward_at(self, ids, positions):
        h = self.hidden_states(ids)
        b, t, d = h.shape
        h = h.reshape(b * t, d).index_select(0, positions)
        head = self.w("model.embed_tokens.weight") if self.tied else self.w("lm_head.weight")
        logits = F.linear(h, head)
        values = F.linear(h, self.w("value_head.weight"), self.w("value_head.bias")).squeeze(-1)
        return logits, values


def prepare(batch):
    """As `rl::ppo::prepare`: inputs tokens[..-1], right-padded with 0; agent
    positions, targets, old log-probs, sequence-level weights."""
    seqs = batch["sequences"]
    b = len(seqs)
    t = max(1, max(len(s["tokens"]) for s in seqs) - 1)
    inputs = [[0] * t for _ in range(b)]
    positions, targets, old, weights, seq_of = [], [], [], [], []
    live = sum(1 for s in seqs if any(s["agent_mask"]))
    for i, s in enumerate(seqs):
        n = sum(1 for m in s["agent_mask"] if m)
        for j in range(len(s["tokens"]) - 1):
            inputs[i][j] = s["tokens"][j]
            if s["agent_mask"][j + 1]:
                positions.append(i * t + j)
                targets.append(s["tokens"][j + 1])
                old.append(s["old_logprobs"][j + 1])
                weights.append(1.0 / n / live)
                seq_of.append(i)
    return {
        "inputs": torch.tensor(inputs, dtype=torch.long),
        "positions": torch.tensor(positions, dtype=torch.long),
        "targets": torch.tensor(targets, dtype=torch.long),
        "old": torch.tensor(old, dtype=torch.float32),
        "weights": torch.tensor(weights, dtype=torch.float32),
        "seq_of": seq_of,
        "rewards": [s["reward"] for s in seqs],
    }


def advantages(prep, values, gamma, lam):
    """GAE per sequence over its agent tokens, one terminal reward (`rl::gae`)."""
    vals = values.detach().tolist()
    seq_of, n = prep["seq_of"], len(vals)
    adv, ret = [0.0] * n, [0.0] * n
    k = 0
    while k < n:
        seq = seq_of[k]
        end = k
        while end < n and seq_of[end] == seq:
            end += 1
        next_value, running = 0.0, 0.0
        for j in range(end - 1, k - 1, -1):
            r = prep["rewards"][seq] if j == end - 1 else 0.0
            delta = r + gamma * next_value - vals[j]
            running = delta + gamma * lam * running
            adv[j] = running
            ret[j] = running + vals[j]
            next_value = vals[j]
        k = end
    return torch.tensor(adv), torch.tensor(ret)


def ppo_loss(prep, logits, values, adv, ret, ppo):
    if abs(ppo["temperature"] - 1.0) > 1e-12 and ppo["temperature"] > 0:
        logits = logits / ppo["temperature"]
    w = prep["weights"]
    lp_all = logits.log_softmax(-1)
    lp = lp_all.gather(1, prep["targets"][:, None]).squeeze(1)
    ratio = (lp - prep["old"]).exp()
    clipped = ratio.clamp(1.0 - ppo["eps_low"], 1.0 + ppo["eps_high"])
    pg = torch.maximum(-adv * ratio, -adv * clipped)
    policy_loss = (pg * w).sum()
    value_loss = ((values - ret).pow(2) * 0.5 * w).sum()
    entropy = -(lp_all.exp() * lp_all).sum(-1)
    entropy = (entropy * w).sum()
    loss = policy_loss + ppo["value_coef"] * value_loss
    if ppo["entropy_coef"] != 0:
        loss = loss - ppo["entropy_coef"] * entropy
    return loss, policy_loss.item(), value_loss.item(), entropy.item()


def warmup_lr(lr, step, warmup):
    return lr if warmup == 0 else lr * min(1.0, (step + 1) / warmup)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="ROWS",
        help="after the timed steps, run one more under torch.profiler and print its "
        "ROWS most expensive ops by self CPU time (to compare op by op with a perf "
        "profile of `endless bench ppo`)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    d = args.dir
    cfg = json.load(open(os.path.join(d, "config.json")))
    batch = json.load(open(os.path.join(d, "batch.json")))
    train = json.load(open(os.path.join(d, "train.json")))
    weights = load_file(os.path.join(d, "model.safetensors"))
    model = Decoder(cfg, weights)
    params = list(model.params.values())
    adam = train["adam"]
    opt = torch.optim.AdamW(
        params,
        lr=train["lr"],
        betas=(adam["beta1"], adam["beta2"]),
        eps=adam["eps"],
        weight_decay=adam["weight_decay"],
    )
    ppo = train["ppo"]
    tokens = sum(len(s["tokens"]) for s in batch["sequences"])

    def update(step):
        prep = prepare(batch)
        logits, values = model.forward_at(prep["inputs"], prep["positions"])
        adv, ret = advantages(prep, values, ppo["gamma"], ppo["lambda"])
        loss, pl, vl, ent = ppo_loss(prep, logits, values, adv, ret, ppo)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, train["max_grad_norm"]).item()
        for g in opt.param_groups:
            g["lr"] = warmup_lr(train["lr"], step, train["warmup_steps"])
        opt.step()
        return prep, pl, vl, ent, norm

    losses, times, first = [], [], None
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        prep, pl, vl, ent, norm = update(step)
        secs = time.perf_counter() - start
        losses.append(pl + ppo["value_coef"] * vl)
        if first is None:
            first = {"policy_loss": pl, "value_loss": vl, "grad_norm": norm, "entropy": ent}
        if step >= args.warmup:
            times.append(secs)

    if args.profile > 0:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            update(args.warmup + args.steps)
        print(
            prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile),
            file=sys.stderr,
        )

    mean = sum(times) / max(1, len(times))
    report = {
        "backend": "torch",
        "torch": torch.__version__,
        "params": sum(p.numel() for p in params),
        "tokens_per_step": tokens,
        "agent_tokens": int(prep["positions"].numel()),
        "threads": torch.get_num_threads(),
        "warmup_steps": args.warmup,
        "timed_steps": len(times),
        "seconds_per_step": mean,
        "min_seconds_per_step": min(times) if times else float("nan"),
        "tokens_per_s": tokens / mean if mean > 0 else float("nan"),
        "tokens_per_s_best": tokens / min(times) if times else float("nan"),
        "losses": losses,
        "policy_loss_first": first["policy_loss"],
        "value_loss_first": first["value_loss"],
        "grad_norm_first": first["grad_norm"],
    }
    ok = True
    candle_path = os.path.join(d, "candle.json")
    if os.path.exists(candle_path):
        c = json.load(open(candle_path))
        diff = abs(c["losses"][0] - losses[0])
        report["candle_first_loss"] = c["losses"][0]
        report["first_loss_abs_diff"] = diff
        n = min(len(c["losses"]), len(losses))
        report["max_loss_abs_diff_all_steps"] = max(
            abs(a - b) for a, b in zip(c["losses"][:n], losses[:n])
        )
        report["grad_norm_rel_diff"] = abs(c["grad_norm_first"] - first["grad_norm"]) / max(
            1e-12, abs(first["grad_norm"])
        )
        ok = diff <= args.tolerance
    with open(os.path.join(d, "torch.json"), "w") as f:
        json.dump(report, f, indent=2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"PPO update, torch {torch.__version__} CPU, {report['params']} parameters, "
            f"{len(batch['sequences'])} x {tokens // len(batch['sequences'])} tokens, "
            f"{report['threads']} threads"
        )
        print(
            f"  {mean:.3f} s/step (min {report['min_seconds_per_step']:.3f}) over {len(times)} "
            f"steps after {args.warmup} warmup: {report['tokens_per_s']:.0f} tokens/s "
            f"(best step {report['tokens_per_s_best']:.0f})"
        )
        print(
            f"  first-step loss torch {losses[0]:.6f} (policy {first['policy_loss']:.6f}, "
            f"value {first['value_loss']:.6f}), grad norm {first['grad_norm']:.6f}"
        )
        if "candle_first_loss" in report:
            print(
                f"  first-step loss candle {report['candle_first_loss']:.6f}: "
                f"|diff| {report['first_loss_abs_diff']:.2e} "
                f"(all steps max {report['max_loss_abs_diff_all_steps']:.2e}, "
                f"grad norm rel diff {report['grad_norm_rel_diff']:.2e})"
            )
    if not ok:
        print(
            f"error: first-step losses differ by {report['first_loss_abs_diff']:.2e} "
            f"> {args.tolerance}",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
