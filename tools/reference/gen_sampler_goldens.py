"""Writes tests/data/sampler_golden.json: deterministic logits run through the logits processors that
transformers' own GenerationMixin._get_logits_processor builds for a GenerationConfig (a bias per token,
repetition penalty, temperature, top-k, top-p, min-p, in HF's order), recording which token ids survive, their processed logits,
and the greedy (do_sample=False) token.

Parameters are passed to HF as the float32 values the C++ SamplingParams holds (e.g. top_p=float32(0.8)), so
thresholds such as `1 - top_p` are the same numbers on both sides. Large logits vectors are not stored: they
come from a small integer formula (`synth_logits`) that tests/test_sampler.cpp repeats exactly.

HF sorts with torch.sort, which is not stable, so when equal logits straddle a top-p cut HF's choice among them
is arbitrary; every case here is checked to have no such tie (ties at the top-k boundary are fine: HF keeps all
values >= the k-th largest)."""
import json

import numpy as np
import torch
from transformers import GenerationConfig
from transformers.generation.utils import GenerationMixin

import qvl_reference as ref

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def synth_logits(vocab, seed, levels, step, peak_every, peak_boost):
    """x_i = (h % levels - levels // 2) * step, plus peak_boost when (h >> 40) % peak_every == 0, where
    h = splitmix64(seed * 2^32 + i); computed in double, then rounded to float32 (the C++ test does the same)."""
    out = np.empty(vocab, dtype=np.float32)
    half = levels // 2
    for i in range(vocab):
        h = splitmix64(((seed << 32) + i) & M64)
        x = (h % levels - half) * step
        if peak_every and (h >> 40) % peak_every == 0:
            x += peak_boost
        out[i] = np.float32(x)
    return out


def f32(v):
    return float(np.float32(v))


class _Mixin:
    """Just enough of a model for GenerationMixin._get_logits_processor (it only merges processor lists)."""

    def _merge_criteria_processor_list(self, default_list, custom_list):
        return GenerationMixin._merge_criteria_processor_list(self, default_list, custom_list)


def processors(do_sample, p, input_len):
    # OpenAI's logit_bias is HF's sequence_bias with one-token sequences: {(id,): bias} (its list form refuses
    # token 0).
    bias = {(int(i),): f32(b) for i, b in p["logit_bias"]} if p.get("logit_bias") else None
    gc = GenerationConfig(do_sample=do_sample, temperature=f32(p.get("temperature", 1.0)),
                          top_k=p.get("top_k", 0), top_p=f32(p.get("top_p", 1.0)),
                          min_p=f32(p["min_p"]) if p.get("min_p", 0.0) > 0 else None,
                          repetition_penalty=f32(p.get("repetition_penalty", 1.0)), sequence_bias=bias)
    return GenerationMixin._get_logits_processor(_Mixin(), gc, input_ids_seq_length=input_len, device="cpu",
                                                 model_kwargs={})


def run_case(name, logits, params, input_ids, synth=None):
    ids = torch.tensor([input_ids if input_ids else [0]], dtype=torch.long)
    scores = torch.from_numpy(logits.copy()).unsqueeze(0)
    procs = processors(True, params, ids.shape[1])
    if not input_ids:  # no history: the repetition penalty must have nothing to act on
        assert params.get("repetition_penalty", 1.0) == 1.0
    # Apply the processors one by one (as LogitsProcessorList does) to keep the input of the warpers.
    s = scores.clone()
    pre_warp = topp_in = None
    for q in procs:
        kind = type(q).__name__
        if kind in ("TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper") and pre_warp is None:
            pre_warp = s[0].numpy().copy()
        if kind == "TopPLogitsWarper":
            topp_in = s[0].numpy().copy()
        s = q(ids, s)
    out = s[0].numpy()
    assert np.array_equal(out, procs(ids, scores.clone())[0].numpy(), equal_nan=True)
    if pre_warp is None:
        pre_warp = out
    greedy_procs = processors(False, params, ids.shape[1])
    greedy = int(torch.argmax(greedy_procs(ids, scores.clone())[0]).item())

    kept = np.nonzero(np.isfinite(out))[0]
    removed = np.nonzero(~np.isfinite(out))[0]
    kept_min = float(out[kept].min())
    removed_max = None
    if len(removed):
        # The value each removed token had before the warpers filtered it (penalties + temperature applied):
        # every warper keeps a threshold set, so the survivors are exactly the values >= kept_min.
        removed_max = float(pre_warp[removed].max())
        assert removed_max < kept_min, (name, removed_max, kept_min)
    if topp_in is not None:
        check_top_p_margin(name, topp_in, params)
    case = {"name": name, "params": params, "input_ids": input_ids,
            "processors": [type(q).__name__ for q in procs], "greedy": greedy,
            "n_kept": int(len(kept)), "kept_min": kept_min, "removed_max": removed_max}
    if synth is not None:
        case["synth"] = synth
    else:
        case["logits"] = [float(v) for v in logits]
    if len(kept) <= 200:
        case["kept"] = [int(i) for i in kept]
        case["kept_logits"] = [float(out[i]) for i in kept]
    return case


def check_top_p_margin(name, topp_in, params):
    """The top-p cut must be far from the threshold compared with the rounding error of torch's float32
    softmax + cumsum (measured here against float64), so that the C++ float path, rounding differently, cuts
    at the same token."""
    x = np.sort(topp_in[np.isfinite(topp_in)])
    p = np.exp(x.astype(np.float64) - float(x.max()))
    cum = np.cumsum(p / p.sum())
    torch_cum = torch.from_numpy(x).softmax(-1).cumsum(-1).numpy().astype(np.float64)
    thr = float(np.float32(1.0 - f32(params["top_p"])))
    near = cum <= 2 * thr + 1e-6  # the error that matters is the one near the threshold
    err = float(np.max(np.abs(torch_cum - cum)[near])) if near.any() else 0.0
    gap = float(np.min(np.abs(cum - thr)))
    assert gap > 10 * max(err, 1e-8), (name, gap, err)
    print("  %s: top-p cut %.3g from the threshold; torch's rounding error %.3g" % (name, gap, err))


def main():
    rng = np.random.RandomState(20251)
    small = rng.randn(50).astype(np.float32) * np.float32(1.5)
    small = np.round(small, 2).astype(np.float32)
    small[np.argmax(small)] = np.float32(2.05)  # tame the one outlier this seed draws (4.18)
    ties = small.copy()
    order = np.argsort(-ties, kind="stable")
    ties[order[3:8]] = ties[order[3]]  # five equal values at ranks 4..8 straddle top_k=5
    ties[order[0]] = ties[order[1]]  # and two equal maxima (greedy takes the lower id)
    peaked = small.copy()
    peaked[17] = 9.5

    cases = []
    cases.append(run_case("small_topk5", small, {"temperature": 1.0, "top_k": 5, "top_p": 1.0}, []))
    cases.append(run_case("small_topk5_ties", ties, {"temperature": 1.0, "top_k": 5, "top_p": 1.0}, []))
    cases.append(run_case("small_topk1", ties, {"temperature": 1.0, "top_k": 1, "top_p": 1.0}, []))
    cases.append(run_case("small_topk_over_vocab", small, {"temperature": 1.0, "top_k": 80, "top_p": 1.0}, []))
    cases.append(run_case("small_topp08", small, {"temperature": 1.0, "top_k": 0, "top_p": 0.8}, []))
    cases.append(run_case("small_topp05_temp07", small, {"temperature": 0.7, "top_k": 0, "top_p": 0.5}, []))
    cases.append(run_case("small_topp_tiny", peaked, {"temperature": 1.0, "top_k": 0, "top_p": 0.05}, []))
    cases.append(run_case("small_minp01", small, {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.1}, []))
    cases.append(run_case("small_minp_temp15", small, {"temperature": 1.5, "top_k": 0, "top_p": 1.0,
                                                        "min_p": 0.2}, []))
    cases.append(run_case("small_qwen_default", small, {"temperature": 0.7, "top_k": 20, "top_p": 0.8}, []))
    cases.append(run_case("small_repetition_only", small, {"temperature": 1.0, "top_k": 0, "top_p": 1.0,
                                                            "repetition_penalty": 1.3},
                          [int(i) for i in order[:3]] + [int(order[-1]), 7, 7, 30, int(order[0])]))
    cases.append(run_case("small_everything", ties, {"temperature": 0.6, "top_k": 10, "top_p": 0.7,
                                                     "min_p": 0.05, "repetition_penalty": 1.25},
                          [int(order[0]), int(order[4]), 11, 12, 12, int(order[-1])]))
    # logit_bias (sequence_bias), before the repetition penalty: a ban, a boost past the maximum, a token both
    # biased and penalized (order matters: (x + b) / rp), and greedy decided by the bias.
    cases.append(run_case("small_logit_bias", small, {"temperature": 1.0, "top_k": 0, "top_p": 0.8,
                                                      "logit_bias": [[int(order[0]), -100.0], [int(order[5]), 3.5],
                                                                     [int(order[12]), 1.25], [49, -0.75]]}, []))
    cases.append(run_case("small_logit_bias_repetition", small, {"temperature": 0.8, "top_k": 10, "top_p": 1.0,
                                                                 "repetition_penalty": 1.3,
                                                                 "logit_bias": [[int(order[2]), 2.5],
                                                                                [int(order[6]), -1.5],
                                                                                [int(order[9]), 100.0]]},
                          [int(order[2]), int(order[6]), int(order[9]), 4]))

    vocab = 151936
    # Coarse levels: many ties, including the forced ones below at the top-k boundary and the maximum.
    coarse = {"vocab": vocab, "seed": 7, "levels": 2001, "step": 0.005, "peak_every": 1000, "peak_boost": 10.0}
    big = synth_logits(**coarse)
    forced = {"19.0": [151935, 7], "20.0": [1000], "16.0": [3, 99999, 151000, 42, 77777]}
    for j, i in enumerate([11, 222, 3333, 44444, 55555, 66666, 77776, 88888, 99998, 111111, 122222,
                           133333, 144444, 150000]):
        forced["%.1f" % (17.0 + 0.1 * j)] = forced.get("%.1f" % (17.0 + 0.1 * j), []) + [i]
    for value, ids in forced.items():
        for i in ids:
            big[i] = np.float32(float(value))
    coarse["forced"] = {k: sorted(v) for k, v in forced.items()}
    cases.append(run_case("large_qwen_default_ties", big, {"temperature": 0.7, "top_k": 20, "top_p": 0.8,
                                                           "repetition_penalty": 1.1},
                          [1000, 11, 5, 5, 6, 99999, 151644, 198], synth=coarse))
    cases.append(run_case("large_topk50_only", big, {"temperature": 1.0, "top_k": 50, "top_p": 1.0}, [],
                          synth=coarse))
    # Fine levels: (almost) no ties, so the top-p cut deep in the tail is unambiguous.
    fine = {"vocab": vocab, "seed": 11, "levels": 2000001, "step": 0.000005, "peak_every": 1000, "peak_boost": 10.0}
    big_fine = synth_logits(**fine)
    cases.append(run_case("large_topp09_no_topk", big_fine, {"temperature": 1.0, "top_k": 0, "top_p": 0.9}, [],
                          synth=fine))
    cases.append(run_case("large_topp098_no_topk", big_fine, {"temperature": 1.0, "top_k": 0, "top_p": 0.98}, [],
                          synth=fine))
    cases.append(run_case("large_minp_no_topk", big_fine, {"temperature": 1.0, "top_k": 0, "top_p": 1.0,
                                                           "min_p": 0.01}, [], synth=fine))
    cases.append(run_case("large_logit_bias_qwen_default", big_fine, {"temperature": 0.7, "top_k": 20, "top_p": 0.8,
                                                                      "logit_bias": [[0, -100.0], [77777, 9.0],
                                                                                     [135715, -2.0], [151645, 12.5]]}, [],
                          synth=fine))
    cases.append(run_case("large_temp05_topp_minp", big_fine, {"temperature": 0.5, "top_k": 0, "top_p": 0.95,
                                                               "min_p": 0.001}, [], synth=fine))

    doc = {"transformers": __import__("transformers").__version__, "cases": cases}
    path = ref.DATA / "sampler_golden.json"
    with open(path, "w") as f:
        f.write("{\"transformers\":%s,\"cases\":[\n" % json.dumps(doc["transformers"]))
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    for c in cases:
        print(c["name"], c["processors"], "kept", c["n_kept"], "greedy", c["greedy"])


if __name__ == "__main__":
    main()
