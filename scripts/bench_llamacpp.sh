#!/usr/bin/env bash
# Sampling tokens/s of `endless bench sample` (candle) beside llama.cpp on the
# same GGUF file, prompt tokens, greedy decoding and thread count, at batch 1
# and batched. Batched, llama.cpp decodes as many sequences as candle's batched
# run (candle.json's batched.batch) with its own batched API, as its
# examples/batched and llama-batched-bench do: the prompt prefilled once and its
# KV cache copied to every sequence (not timed), then one llama_batch per step
# holding one token of each sequence; both engines count the tokens sampled
# after each sequence's first one over the decode time.
# And how close each engine is to the exact computation: teacher-forced on the
# sequences of `endless bench sample --check` (a few hundred positions), each
# engine's next-token distribution against the f32 dequantised model's (top-1
# agreement, mean KL), prompt run at once and the rest fed one token at a time
# in both.
#
#   scripts/bench_llamacpp.sh [TOKENS]     (default 128)
#
# Installs llama-cpp-python into target/llamacpp-venv on first use (pip builds
# llama.cpp from source: about 15 minutes on 2 cores). Not part of the test
# suite; the project itself does not need Python. Environment:
#   THREADS=2          threads for both engines (RAYON_NUM_THREADS for candle)
#   GGUF=path          model file (default: SmolLM2-135M-Instruct Q4_1, fetched)
#   ENDLESS=path       the endless binary (default: cargo build --release)
#   ROUNDS=3           timing rounds, alternating between the engines (the
#                      first also checks agreement); each side's best round
#                      is compared, and the ratio of every round is printed
#   REUSE_CANDLE=1     reuse the candle side of the last run (its figures and
#                      the f32 logits under target/bench-sample) and run only
#                      llama.cpp
set -euo pipefail
cd "$(dirname "$0")/.."

TOKENS="${1:-128}"
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
VENV=target/llamacpp-venv
OUT=target/bench-sample
mkdir -p "$OUT"

if [ -z "${ENDLESS:-}" ]; then
    echo "== building endless (release)" >&2
    cargo build --release --quiet --bin endless
    ENDLESS=target/release/endless
fi
if [ -z "${GGUF:-}" ]; then
    GGUF="$("$ENDLESS" models fetch smollm2 | tail -n 1)"
fi
[ -f "$GGUF" ] || { echo "no GGUF file at $GGUF" >&2; exit 1; }

if ! "$VENV/bin/python" -c 'import llama_cpp, numpy' 2>/dev/null; then
    echo "== installing llama-cpp-python into $VENV (builds llama.cpp, ~15 min)" >&2
    python3 -m venv "$VENV"
    # Native: our kernels use what the CPU has (AVX-512, VNNI), so llama.cpp
    # does too. A virtual machine that reports features it does not let a
    # process use makes a native build die with an illegal instruction;
    # there set CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON
    # -DGGML_F16C=ON" (and ENDLESS_KERNELS=avx2 for a like-for-like run).
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}" \
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        nice -n 10 "$VENV/bin/pip" install --disable-pip-version-check -q llama-cpp-python numpy
fi

# llama.cpp's side, run once per round (saved so that each round runs it).
cat > "$OUT/llamacpp_side.py" <<'PY'
import json, os, sys, time
import numpy as np
import llama_cpp
from llama_cpp import Llama

gguf, candle_json, threads, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
check_dir = sys.argv[5]  # empty: timings only (a later round)
candle = json.load(open(candle_json))
prompt = candle["prompt_ids"]
n_par = candle["batched"]["batch"]
llm = Llama(model_path=gguf, n_ctx=2048, n_batch=512, n_threads=threads,
            n_threads_batch=threads, logits_all=False, verbose=False)
n_vocab = llm.n_vocab()

def run(n):
    """Prefill the prompt, then greedy-decode n tokens (end of sequence ignored)."""
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    out = []
    for i in range(n):
        tok = argmax(llm._ctx.get_logits())  # last position's logits, no copy
        out.append(tok)
        if i + 1 < n:
            llm.eval([tok])
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, out

def argmax(logits):
    return int(np.argmax(np.ctypeslib.as_array(logits, shape=(n_vocab,))))

run(4)  # warm-up
best = None
for _ in range(2):
    pre, dec, out = run(tokens)
    if best is None or dec < best[1]:
        best = (min(pre, best[0]) if best else pre, dec, out)
    elif pre < best[0]:
        best = (pre, best[1], best[2])
pre, dec, out = best

def batched():
    """candle's batched run in llama.cpp's batched API: the prompt prefilled once
    (all but its last token on sequence 0, whose KV cache is then copied to the
    other sequences, and the last token once per sequence, which gives each its
    first token), then n_par sequences greedy-decoded together, one llama_batch
    of n_par tokens per step (end of sequence ignored). Same model, context
    settings (flash attention etc.) and threads as `llm`; only the decode steps
    are timed."""
    p = len(prompt)
    per_seq = -(-(p + tokens + 32) // 256) * 256  # KV cells per sequence, padded
    params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
    params.n_ctx = n_par * per_seq
    params.n_batch = params.n_ubatch = max(512, n_par)
    params.n_seq_max = n_par
    params.n_threads = params.n_threads_batch = threads
    ctx = llama_cpp.llama_init_from_model(llm._model.model, params)
    assert ctx, "llama_init_from_model failed"
    mem = llama_cpp.llama_get_memory(ctx)
    batch = llama_cpp.llama_batch_init(max(p, n_par), 0, 1)

    def decode(items):
        """items: (token, position, sequence id, logits wanted)."""
        batch.n_tokens = len(items)
        for j, (tok, pos, seq, want) in enumerate(items):
            batch.token[j], batch.pos[j], batch.n_seq_id[j] = tok, pos, 1
            batch.seq_id[j][0], batch.logits[j] = seq, want
        rc = llama_cpp.llama_decode(ctx, batch)
        assert rc == 0, f"llama_decode returned {rc}"

    def step_argmax():
        return [argmax(llama_cpp.llama_get_logits_ith(ctx, j)) for j in range(n_par)]

    def run_batched(n):
        llama_cpp.llama_memory_clear(mem, True)
        decode([(t, i, 0, False) for i, t in enumerate(prompt[:-1])])
        for s in range(1, n_par):
            llama_cpp.llama_memory_seq_cp(mem, 0, s, -1, -1)
        # Applies the pending copies (so they are not timed) and gives each
        # sequence its first token.
        decode([(prompt[-1], p - 1, s, True) for s in range(n_par)])
        outs = [[t] for t in step_argmax()]
        t0 = time.perf_counter()
        for i in range(1, n):
            decode([(outs[s][-1], p - 1 + i, s, True) for s in range(n_par)])
            for s, t in enumerate(step_argmax()):
                outs[s].append(t)
        return time.perf_counter() - t0, outs

    try:
        run_batched(4)  # warm-up
        dec_b, outs = min((run_batched(tokens) for _ in range(2)), key=lambda r: r[0])
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
    return {
        "batch": n_par,
        "tokens_per_sequence": tokens,
        "decode_tok_s": n_par * (tokens - 1) / dec_b,
        "ms_per_step": dec_b * 1000 / (tokens - 1),
        "output_ids": outs[0],
    }, sum(o == out for o in outs)

batched_figures, batched_equal = batched()

def agreement():
    """llama.cpp's next-token distributions against the f32 model's, teacher-forced
    on the sequences endless checked (prompt at once, then one token at a time)."""
    meta = json.load(open(os.path.join(check_dir, "check.json")))
    vocab = meta["vocab"]
    exact_all = np.fromfile(os.path.join(check_dir, "f32_logits.bin"), dtype="<f4")
    forced = Llama(model_path=gguf, n_ctx=2048, n_batch=512, n_threads=threads,
                   n_threads_batch=threads, logits_all=True, verbose=False)
    start, agree, kls, kinds = 0, [], [], []
    for seq in meta["sequences"]:
        ids, p = seq["ids"], seq["prompt_len"]
        n = len(ids) - 1
        exact = exact_all[start * vocab:(start + n) * vocab].reshape(n, vocab)
        start += n
        forced.reset()
        forced.eval(ids[:p])
        for tok in ids[p:n]:
            forced.eval([tok])
        ours = np.array(forced.scores[:n, :vocab], dtype=np.float64)
        for i in range(n):
            e = exact[i].astype(np.float64)
            le = e - e.max(); le -= np.log(np.exp(le).sum())
            lq = ours[i] - ours[i].max(); lq -= np.log(np.exp(lq).sum())
            kls.append(float((np.exp(le) * (le - lq)).sum()))
            agree.append(int(np.argmax(e) == np.argmax(ours[i])))
            kinds.append("prefill" if i < p else "decode")
    def summary(sel):
        idx = [i for i, k in enumerate(kinds) if sel(k)]
        return {"positions": len(idx),
                "top1_agreement": sum(agree[i] for i in idx) / max(1, len(idx)),
                "mean_kl": sum(kls[i] for i in idx) / max(1, len(idx))}
    return {"all": summary(lambda k: True), "prefill": summary(lambda k: k == "prefill"),
            "decode": summary(lambda k: k == "decode")}

print(json.dumps({
    "check": agreement() if check_dir else None,
    "engine": "llama.cpp",
    "version": llama_cpp.__version__,
    "threads": threads,
    "prompt_tokens": len(prompt),
    "tokens": tokens,
    "prefill_tok_s": len(prompt) / pre,
    "decode_tok_s": (tokens - 1) / dec,
    "ms_per_step": dec * 1000 / (tokens - 1),
    "output_ids": out,
    "batched": batched_figures,
    "batched_equal_single": batched_equal,
}))
PY

rm -f "$OUT"/candle.round*.json "$OUT"/llamacpp.round*.json
for round in $(seq 1 "$ROUNDS"); do
    # Round 1 also checks agreement and writes the files the report starts
    # from; later rounds only time.
    if [ "$round" = 1 ]; then
        check=(--check --dump "$OUT/check") check_dir="$OUT/check" suffix=""
    else
        check=() check_dir="" suffix=".round$round"
    fi
    if [ -n "${REUSE_CANDLE:-}" ] && [ -s "$OUT/candle.json" ] && [ -s "$OUT/check/check.json" ]; then
        [ "$round" = 1 ] && echo "== candle: reusing $OUT/candle.json and $OUT/check (REUSE_CANDLE)" >&2
    else
        echo "== round $round/$ROUNDS candle: endless bench sample --n $TOKENS ${check[*]:0:1} ($THREADS threads)" >&2
        RAYON_NUM_THREADS="$THREADS" "$ENDLESS" bench sample --json --n "$TOKENS" --model "$GGUF" \
            "${check[@]}" > "$OUT/candle$suffix.json"
    fi
    echo "== round $round/$ROUNDS llama.cpp: same prompt tokens, greedy, $THREADS threads" >&2
    "$VENV/bin/python" "$OUT/llamacpp_side.py" "$GGUF" "$OUT/candle.json" "$THREADS" "$TOKENS" \
        "$check_dir" > "$OUT/llamacpp$suffix.json"
done

python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
c = json.load(open(os.path.join(out, "candle.json")))
l = json.load(open(os.path.join(out, "llamacpp.json")))
c_rounds = [c] + [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "candle.round*.json")))]
l_rounds = [l] + [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "llamacpp.round*.json")))]
figures = {
    "prefill tok/s (batch 1)": (lambda r: r["single"]["prefill_tok_s"], lambda r: r["prefill_tok_s"]),
    "decode tok/s, batch 1": (lambda r: r["single"]["decode_tok_s"], lambda r: r["decode_tok_s"]),
    f"decode tok/s, batch {c['batched']['batch']} (aggregate)":
        (lambda r: r["batched"]["decode_tok_s"], lambda r: r["batched"]["decode_tok_s"]),
}
same = 0
for a, b in zip(c["output_ids"], l["output_ids"]):
    if a != b:
        break
    same += 1
print(f"{c['model']}: {len(c['prompt_ids'])}-token prompt, {l['tokens']} greedy tokens, "
      f"{c['threads']} threads (candle {c['profile']}, llama.cpp {l['version']})")
print(f"each engine's best of {len(c_rounds)} and {len(l_rounds)} alternating rounds "
      "(ratio of each round after the best's)")
print(f"{'':40} {'candle':>10} {'llama.cpp':>10} {'ratio':>7}   rounds")
for name, (cf, lf) in figures.items():
    cv, lv = max(map(cf, c_rounds)), max(map(lf, l_rounds))
    each = " ".join(f"{cf(a) / lf(b):.2f}" for a, b in zip(c_rounds, l_rounds))
    print(f"{name:40} {cv:10.1f} {lv:10.1f} {cv / lv:6.2f}x   {each}")
print(f"greedy tokens equal for the first {same} of {len(l['output_ids'])} "
      "(quantized arithmetic differs slightly between the engines)")
n = c["batched"]["batch"]
assert l["batched"]["batch"] == n, "llama.cpp's batch differs from candle's"
print(f"both engines decode {n} sequences in one batch per step; sequences equal to the "
      f"engine's own batch-1 greedy tokens: candle {c['batched_equal_single']} of {n}, "
      f"llama.cpp {l['batched_equal_single']} of {n}")
cc, lc = c["check"], l["check"]
print(f"against the f32 dequantised model, teacher-forced on {cc['all']['positions']} positions:")
print(f"{'':40} {'candle':>10} {'llama.cpp':>10}")
for part in ("all", "prefill", "decode"):
    print(f"{'top-1 agreement, ' + part:40} {cc[part]['top1_agreement'] * 100:9.2f}% "
          f"{lc[part]['top1_agreement'] * 100:9.2f}%")
    print(f"{'mean KL (nats), ' + part:40} {cc[part]['mean_kl']:10.5f} {lc[part]['mean_kl']:10.5f}")
PY
