"""Self-play generation speed on CPU: the batched game loop vs one game at a time.

Both sides play the same games on the same tiny model (the default of
``spag build-tiny-model``), with the same words, prompts, stopping rules,
``max_new_tokens`` and sampling at temperature 1.2:

- ``batched``: ``spag.game.selfplay.play_games`` with the ``hf`` backend (all games of
  a shard advance together, finished games leave the batch);
- ``one-by-one``: the research code's way: for each game, for each turn, build
  the prompt, ``model.generate`` at batch size 1, append the reply.

Usage::

    python perf/bench_selfplay.py --games 8 32 128 --output perf/results/selfplay.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def bench_words(n: int) -> list[str]:
    """``n`` common English nouns-or-so: alphabetic, 4 to 10 letters, no stop words.

    The first 1,024 are fixed (``BENCH_WORDS``, the words wordfreq gave): the GPU check's
    node has no wordfreq. Only more than that asks wordfreq, for the same list's rest."""
    words = BENCH_WORDS.split()
    if n <= len(words):
        return words[:n]
    from wordfreq import top_n_list

    words = [w for w in top_n_list("en", 5000) if w.isalpha() and w.isascii() and 4 <= len(w) <= 10]
    return words[100 : 100 + n]


def one_by_one(model, tokenizer, words, prompts, max_turns, max_new_tokens, temperature, seed):
    """One game at a time, ``generate`` at batch size 1 (the research code's loop)."""
    import torch
    from transformers import GenerationConfig

    from spag.game.taboo import TABOO
    from spag.generation import Sampling

    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=2,
        do_sample=True,
        temperature=temperature,
        top_k=Sampling.top_k,  # as the research code (transformers default) and spag play
        top_p=Sampling.top_p,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    tokens = 0
    for word in words:
        history = []
        for turn in range(2 * max_turns):
            role = ("attacker", "defender")[turn % 2]
            text = prompts.play_prompt(history, role, word, max_turns)
            ids = [tokenizer.bos_token_id, *tokenizer.encode(text, add_special_tokens=False)]
            ids = torch.tensor([ids])
            with torch.inference_mode():
                out = model.generate(
                    input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config
                )
            new = out[0, ids.shape[1] :].tolist()
            if tokenizer.eos_token_id in new:
                new = new[: new.index(tokenizer.eos_token_id) + 1]
            tokens += len(new)
            reply = tokenizer.decode(new, skip_special_tokens=True).strip()
            history.append({"role": role, "content": reply})
            if TABOO.end_reason(history, word, max_turns):
                break
    return tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", type=int, nargs="+", default=[8, 32, 128])
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.2)
    p.add_argument("--batch-size", type=int, default=128, help="hf backend sub-batch size")
    p.add_argument(
        "--baseline-games",
        type=int,
        default=None,
        help="play at most this many games one by one per row (its speed does not "
        "depend on the shard size); default: all",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads for both sides (default 1: a shared 2-core machine "
        "slows down badly when its threads are oversubscribed)",
    )
    p.add_argument("--model", default=None, help="model folder (default: build the tiny model)")
    p.add_argument("--output", default=None, help="Markdown file for the results (+ .json)")
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spag.game.selfplay import POLICY, play_games, selfplay_specs
    from spag.game.settings import GameSettings
    from spag.game.taboo import TABOO
    from spag.generation import Sampling, load_backend
    from spag.models.tiny import build_tiny_model

    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()
    if args.model:
        model_dir = Path(args.model)
    else:
        corpus = sorted(
            p for p in (REPO / "data").glob("*") if p.suffix in (".json", ".yaml", ".txt")
        )
        model_dir = build_tiny_model(corpus, Path(tmp.name) / "model", seed=0)
    prompts = TABOO.load_prompts()
    backend = load_backend(
        "hf",
        model_dir,
        batch_size=args.batch_size,
        prompt_format=GameSettings.prompt_format,
        trust_remote_code=False,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    params = sum(x.numel() for x in model.parameters())

    rows = []
    for n in args.games:
        words = bench_words(n)
        sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
        settings = dict(max_turns=args.max_turns, sampling=sampling, seed=n)
        base_words = words[: args.baseline_games] if args.baseline_games else words
        # One-by-one games in two halves around the batched run, so that a change in
        # the machine's load during the row weighs on both sides alike.
        half = len(base_words) // 2
        base_tokens, base_s, base_cpu = 0, 0.0, 0.0
        for i, part in enumerate((base_words[:half], base_words[half:])):
            if i == 1:
                t0, c0 = time.perf_counter(), time.process_time()
                games = play_games(
                    selfplay_specs(words, 0, 0, 1),
                    {POLICY: backend},
                    prompts,
                    game=TABOO,
                    **settings,
                )
                batched_s, batched_cpu = time.perf_counter() - t0, time.process_time() - c0
                batched_tokens = sum(sum(g.message_tokens) for g in games)
            t0, c0 = time.perf_counter(), time.process_time()
            base_tokens += one_by_one(
                model,
                tokenizer,
                part,
                prompts,
                args.max_turns,
                args.max_new_tokens,
                args.temperature,
                seed=n + i,
            )
            base_s += time.perf_counter() - t0
            base_cpu += time.process_time() - c0
        row = {
            "games": n,
            "batched_tokens": batched_tokens,
            "batched_seconds": round(batched_s, 2),
            "batched_tokens_per_s": round(batched_tokens / batched_s, 1),
            "batched_episodes_per_s": round(n / batched_s, 3),
            "batched_cpu_seconds": round(batched_cpu, 2),
            "batched_tokens_per_cpu_s": round(batched_tokens / batched_cpu, 1),
            "baseline_games": len(base_words),
            "baseline_tokens": base_tokens,
            "baseline_seconds": round(base_s, 2),
            "baseline_tokens_per_s": round(base_tokens / base_s, 1),
            "baseline_episodes_per_s": round(len(base_words) / base_s, 3),
            "baseline_cpu_seconds": round(base_cpu, 2),
            "baseline_tokens_per_cpu_s": round(base_tokens / base_cpu, 1),
        }
        row["speedup_tokens_per_s"] = round(
            row["batched_tokens_per_s"] / row["baseline_tokens_per_s"], 2
        )
        row["speedup_episodes_per_s"] = round(
            row["batched_episodes_per_s"] / row["baseline_episodes_per_s"], 2
        )
        row["speedup_tokens_per_cpu_s"] = round(
            row["batched_tokens_per_cpu_s"] / row["baseline_tokens_per_cpu_s"], 2
        )
        row["load_average"] = round(os.getloadavg()[0], 1)
        rows.append(row)
        print(json.dumps(row), flush=True)

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads",
        "python": platform.python_version(),
        "model": f"tiny Llama (spag build-tiny-model defaults), {params / 1e6:.2f} M parameters",
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])]),
        "settings": {
            "max_turns": args.max_turns,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "batch_size": args.batch_size,
        },
    }
    if args.output:
        write_results(Path(args.output), meta, rows, markdown(meta, rows))
    return 0


def write_results(out: Path, meta: dict, rows: list[dict], report: str) -> None:
    """The Markdown report at ``out`` and the raw figures beside it (``.json``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
    out.write_text(report, encoding="utf-8")


NOTE = """
How the batched loop gets there: every unfinished game of the shard is one row
of a batch; the game rules that open every play prompt are computed once per
sub-batch; each game keeps its prompt's keys/values from its previous turn, so
a turn recomputes only the new message and the instruction; the KV cache is
preallocated. The one-by-one loop pays, per token, the per-step overhead of
`generate` and, per message, the whole prompt again. The speed-up grows with
the games per shard because the per-step overhead is shared by more rows.
"""


def markdown(meta: dict, rows: list[dict]) -> str:
    s = meta["settings"]
    lines = [
        "# Self-play generation speed (CPU, tiny model)",
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}, Python {meta['python']}",
        f"- model: {meta['model']}",
        f"- games: max_turns {s['max_turns']}, max_new_tokens {s['max_new_tokens']}, "
        f"temperature {s['temperature']}, hf sub-batch size {s['batch_size']}",
        f"- command: `{meta['command']}`",
        "",
        "`batched`: the `hf` backend game loop of `spag play` (all games of the shard advance "
        "together, finished games leave the batch). `one-by-one`: one game at a time, "
        "`model.generate` at batch size 1 (the research code's loop). Same words, prompts, "
        "stopping rules and sampling. The one-by-one games of a row run in two halves, before "
        "and after the batched run; a one-by-one game does not depend on the shard size, so "
        "the largest row plays only its first games one by one (count in brackets).",
        "",
        "Wall-clock rates are the goal's measure; on a shared machine they move with the "
        "load of other processes (load average in the last column), so the rates per CPU-second "
        "of this process (one torch thread: CPU time is the work done) are given too.",
        "",
        "| games per shard | batched tokens/s | one-by-one tokens/s | speed-up (tokens/s) "
        "| batched episodes/s | one-by-one episodes/s | speed-up (episodes/s) "
        "| speed-up (tokens per CPU-s) | load average |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = r["baseline_games"]
        note = "" if base == r["games"] else f" ({base} games)"
        lines.append(
            f"| {r['games']} | {r['batched_tokens_per_s']:.0f} | "
            f"{r['baseline_tokens_per_s']:.0f}{note} | **{r['speedup_tokens_per_s']:.1f}x** | "
            f"{r['batched_episodes_per_s']:.2f} | {r['baseline_episodes_per_s']:.2f} | "
            f"{r['speedup_episodes_per_s']:.1f}x | {r['speedup_tokens_per_cpu_s']:.1f}x | "
            f"{r['load_average']} |"
        )
    lines += [
        "",
        *NOTE.strip("\n").splitlines(),
        "",
        "Raw numbers (tokens, seconds) are in `selfplay.json` beside this file.",
        "",
    ]
    return "\n".join(lines)


# wordfreq 3.1.1's top 5,000 English words, alphabetic ASCII of 4 to 10 letters, from the
# 101st on (what bench_words drew before): 1,024 words, enough for the 7B shape's 768 games.
BENCH_WORDS = """
under during game thing give house place school again next each without against found
must show feel sure team ever family keep might please money free second someone away
left number city days name night play until company doing real called different having
thought done however getting government group looking public women business care start
system times week already anything case nothing person today change enough everything
full live making point read told four hard mean once support tell including music power
seen states stop water based believe call head national small took white came side
though went actually american later less line order party says service country open
season shit thank children everyone general trying united using area black following
makes together whole face five kind maybe president story working course games health
hope important least means news within able book early friends local post thanks video
young others social talk court fact given guys half hand level mind often single become
body coming control death food hours office problem south true almost fuck history known
large lost research room several started taking university wrong along anyone else girl
john matter pretty remember friend needs nice playing probably saying understand yeah
york class close comes idea looks past possible wanted cause happy human members months
move question series wait woman community data late leave north special watch either
fucking future light million morning police short stay taken deal rather reason report
soon third turn whether among check form further heart minutes myself services yourself
although asked child fire living major media phone players behind building easy gonna
market near plan political quite talking west works according available education final
former front kids list ready sometimes street bring college current example experience
heard london meet program type baby chance father march process song study word across
action clear gave gets himself month outside self students words board cost field held
instead main moment mother road seems thinking town wants department energy fight fine
force hear issue played points price rest results running shows space summer term wife
america beautiful date goes killed land miss project shot site strong account especially
eyes include june parents period position record similar total above club common died
film happened knew lead likely military perfect personal security share april center
county couple dead english happen hold industry inside issues online player private
problems return rights sense star test view weeks break british companies event higher
hour member middle needed present result sorry takes training wish answer design finally
girls gold gone guess interest july king learn policy society added alone average bank
brought certain church east hands longer medical movie original park press received role
sent themselves tried worked worth areas became bill books cool director exactly giving
ground meeting provide questions september sound source usually value evidence follow
lives official production rate reading round save stand stuff whatever amount blue
countries david drive fall fast federal feeling felt green league management match model
picture size step trust central changes england forward groups page paid range review
science trade upon various attention brother cannot character chief football hate james
looked lower natural october property quality send style vote amazing august blood china
complete economic hell involved itself language lord november related serious stage
terms title article attack born damn decided decision enjoy entire french january kill
perhaps poor release situation technology turned website written choice code considered
continue council cover currently door election european events financial foreign hair
increase legal lose michael pick race seem seven sign simple simply staff super union
walk washington began built career changed crazy daily daughter december difficult
figure hospital knows loss modern ones paper parts popular published safe starting
systems version voice whose writing army australia earth forget goal huge internet
listen okay practice rules success towards waiting ways access base below created deep
followed mark missing offer pass released risk schools sleep table truth ball build card
cases dark district europe george india mine minister note percent piece products recent
seeing straight visit wall wanna wrote allowed boys culture fans february gives growth
included married officer pain paul places respect response river rock shall speak
specific standard tonight write album century charge cold create effect eight except
funny limited moving network peace provided recently required sales spent store student
tomorrow track watching weight addition ahead allow anti beat brown capital chinese
committee conference difference double expect island moved normal plans population
potential pressure radio russian station text treatment western beginning california
campaign certainly completely content credit cross described despite female focus
husband individual join kept leading loved message miles nearly particular previous
quickly region reported section sort speed travel consider contact drop fair feet jesus
link positive sale throughout tour welcome absolutely additional beyond conditions
earlier extra forces jobs leaving minute nature numbers quick sell studies unless
winning agree canada clean computer episode favorite income justice levels manager
movement photo posted safety scene sold sounds spend statement teams ability announced
asking calling coach collection continued costs definitely designed expected friday
happens heavy includes knowledge search subject train wide author centre claim developed
fear generally german global goals gotta hotel interested judge lady leader letter lines
material named nobody plus product regular secretary sister stories unit workers annual
anymore battle brain contract degree families features finished floor france growing
hurt image insurance majority meant opening opinion physical reach rule seriously sports
stupid successful active approach australian biggest cancer civil dance defense
direction master none reasons russia ship stock trump weekend wonder worst africa
awesome band beach cash clearly commercial compared effort ended fighting imagine impact
lack latest learning multiple older operation passed pictures protect secret senior
spring sunday telling wear activities address analysis anyway bought calls choose
christmas color commission details direct dream easily finish grand increased indian
literally luck marriage names necessary patients resources rich skin speaking supposed
sweet thus touch yesterday caught closed congress damage directly disease doctor doubt
drink driving facebook feels fish germany glad greater grow largest machine notice
overall planning professor programs records reports shown trip associated basic captain
carry cars crime effective effects explain fully highly holding
"""


if __name__ == "__main__":
    sys.exit(main())
