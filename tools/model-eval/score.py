#!/usr/bin/env python3
"""Scores an OpenAI-compatible model server on a fixed prompt set (issue 34).

    tools/model-eval/score.py --url http://127.0.0.1:8081 [--model NAME]
        [--prompts tools/model-eval/prompts.json] [--seeds 1,2,3]
        [--param repeat_penalty=1.1 --param dry_multiplier=0.8 ...]
        [--max-tokens 512] [--show] [--json out.json]

Sends every prompt of the set (prompts.json beside this file) to
`POST {url}/v1/chat/completions`, once per seed (non-streaming; the seed and
every `--param key=value` go into the request body, the value parsed as
JSON when it parses, so llama-server's sampling fields such as
`repeat_penalty`, `dry_multiplier`, `min_p` can be tried without restarting
it), and scores each answer on the checks its prompt names, each from 0 to 1:

  keywords    the share of the prompt's keyword groups the answer hits (a
              group is a list of alternatives, matched case-insensitively as
              whole words);
  markdown    "list": the answer has a Markdown list (`- `, `* `, `+ ` or
              `1. ` lines): 1 with the asked number of items (`list_items`),
              0.5 with another number; "code": a fenced code block;
  length      the answer's word count is within the prompt's `words` bounds;
  single_line one non-empty line without a `Title:` prefix (the title
              prompt);
  repetition  (every prompt) 1 when at most 10 % of the answer is repeated,
              0 from 40 % on, linear between; "repeated" is the larger of
              the share of sentences that are a copy of an earlier one and
              the share of word 4-grams seen before in the answer;
  no_cap      (every prompt) the answer ended by itself, not at the token cap
              (`finish_reason` is not `length`).

A prompt's score is the mean of its checks; the total is the mean of the
prompts' scores, as a percentage. Prints one line per prompt and seed,
then the per-prompt means and the total; `--json` also writes every answer
and check. Python 3 standard library only. Exit status 0 when every request
got an answer, 1 otherwise.
"""

import argparse
import json
import re
import statistics
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_PROMPTS = Path(__file__).with_name("prompts.json")

LIST_LINE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")
FENCE = re.compile(r"```[^\n]*\n.*?```", re.S)
WORD = re.compile(r"[\w'’-]+", re.U)


def words(text):
    """The answer's words (letters, digits, apostrophes and hyphens)."""
    return WORD.findall(text)


def repetition(text):
    """The share of the answer that repeats itself, 0..1: the larger of the
    share of sentences (of 3 words or more) that copy an earlier one and the
    share of word 4-grams that occurred before."""
    sentences = [
        " ".join(w.lower() for w in words(s))
        for s in re.split(r"(?<=[.!?])\s+|\n+", text)
    ]
    sentences = [s for s in sentences if len(s.split()) >= 3]
    dup_sentences = (len(sentences) - len(set(sentences))) / len(sentences) if sentences else 0.0
    ws = [w.lower() for w in words(text)]
    grams = [tuple(ws[i : i + 4]) for i in range(len(ws) - 3)]
    dup_grams = (len(grams) - len(set(grams))) / len(grams) if grams else 0.0
    return max(dup_sentences, dup_grams)


def keyword_hit(text, alternatives):
    for alt in alternatives:
        if re.search(r"(?<!\w)" + re.escape(alt) + r"(?!\w)", text, re.I):
            return True
    return False


def score_answer(prompt, text, finish_reason):
    """The checks of one answer: {name: score 0..1} and the measured
    repetition ratio."""
    checks = {}
    if prompt.get("keywords"):
        groups = prompt["keywords"]
        checks["keywords"] = sum(keyword_hit(text, g) for g in groups) / len(groups)
    kind = prompt.get("markdown")
    if kind == "list":
        items = sum(1 for line in text.splitlines() if LIST_LINE.match(line))
        want = prompt.get("list_items")
        checks["markdown"] = 0.0 if items == 0 else (1.0 if want is None or items == want else 0.5)
    elif kind == "code":
        checks["markdown"] = 1.0 if FENCE.search(text) else 0.0
    if prompt.get("words"):
        lo, hi = prompt["words"]
        checks["length"] = 1.0 if lo <= len(words(text)) <= hi else 0.0
    if prompt.get("single_line"):
        lines = [l for l in text.splitlines() if l.strip()]
        checks["single_line"] = (
            1.0 if len(lines) == 1 and not re.match(r"\s*\**title\**\s*:", lines[0], re.I) else 0.0
        )
    rep = repetition(text)
    checks["repetition"] = max(0.0, min(1.0, (0.4 - rep) / 0.3))
    checks["no_cap"] = 0.0 if finish_reason == "length" else 1.0
    return checks, rep


def ask(url, body, timeout):
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def parse_param(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param wants key=value, not {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8081", help="the model server's base URL")
    parser.add_argument("--model", default="default", help="the request's model field")
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS)
    parser.add_argument("--seeds", default="1,2", help="comma-separated seeds; one request per prompt and seed")
    parser.add_argument("--param", type=parse_param, action="append", default=[],
                        help="an extra request field, key=value (value as JSON if it parses)")
    parser.add_argument("--max-tokens", type=int, help="the token cap (default: the prompt set's)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per request")
    parser.add_argument("--only", help="comma-separated prompt ids to run")
    parser.add_argument("--label", default="", help="a name for this run in the output")
    parser.add_argument("--show", action="store_true", help="print every answer")
    parser.add_argument("--json", type=Path, help="write every answer and check here")
    args = parser.parse_args()

    spec = json.loads(args.prompts.read_text())
    prompts = spec["prompts"]
    if args.only:
        wanted = set(args.only.split(","))
        prompts = [p for p in prompts if p["id"] in wanted]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    max_tokens = args.max_tokens or spec.get("max_tokens", 512)
    params = dict(args.param)

    results, failures = [], 0
    gen_tokens, gen_seconds = 0, 0.0
    for prompt in prompts:
        for seed in seeds:
            body = {"model": args.model, "messages": prompt["messages"], "max_tokens": max_tokens,
                    "seed": seed, "stream": False, **params}
            started = time.monotonic()
            try:
                response = ask(args.url, body, args.timeout)
            except (urllib.error.URLError, OSError, json.JSONDecodeError) as err:
                print(f"{prompt['id']:<26} seed={seed} ERROR {err}", flush=True)
                failures += 1
                results.append({"id": prompt["id"], "seed": seed, "error": str(err), "score": 0.0})
                continue
            seconds = time.monotonic() - started
            choice = response["choices"][0]
            text = choice["message"].get("content") or ""
            finish = choice.get("finish_reason")
            usage = response.get("usage") or {}
            out_tokens = usage.get("completion_tokens") or 0
            gen_tokens += out_tokens
            gen_seconds += seconds
            checks, rep = score_answer(prompt, text, finish)
            score = statistics.mean(checks.values())
            results.append({"id": prompt["id"], "seed": seed, "score": score, "checks": checks,
                            "repetition": rep, "finish_reason": finish, "completion_tokens": out_tokens,
                            "seconds": round(seconds, 2), "answer": text})
            failed = [k for k, v in checks.items() if v < 1]
            print(f"{prompt['id']:<26} seed={seed} score={score:.2f} tokens={out_tokens:<4} "
                  f"rep={rep:.2f} finish={finish} {seconds:5.1f}s"
                  f"{'  low: ' + ','.join(failed) if failed else ''}", flush=True)
            if args.show:
                print("    | " + text.strip().replace("\n", "\n    | "), flush=True)

    by_prompt = {}
    for r in results:
        by_prompt.setdefault(r["id"], []).append(r["score"])
    print(f"== per prompt ({args.label or 'run'}):")
    for pid, scores in by_prompt.items():
        print(f"   {pid:<26} {100 * statistics.mean(scores):5.1f}")
    total = 100 * statistics.mean(statistics.mean(s) for s in by_prompt.values()) if by_prompt else 0.0
    capped = sum(1 for r in results if r.get("finish_reason") == "length")
    reps = [r["repetition"] for r in results if "repetition" in r]
    print(f"== total {args.label or ''}: {total:.1f} / 100  (answers {len(results)}, hit the token cap {capped}, "
          f"mean repetition {statistics.mean(reps) if reps else 0:.2f}, "
          f"{gen_tokens / gen_seconds if gen_seconds else 0:.1f} tokens/s end to end, {gen_tokens} tokens)")
    if args.json:
        args.json.write_text(json.dumps({"label": args.label, "params": params, "max_tokens": max_tokens,
                                         "total": total, "results": results}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
