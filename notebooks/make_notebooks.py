import nbformat as nbf

def nb(cells):
    n = nbf.v4.new_notebook()
    n.cells = [nbf.v4.new_markdown_cell(c[3:]) if c.startswith("md:") else nbf.v4.new_code_cell(c) for c in cells]
    n.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return n

quick = nb([
"""md:# Quickstart: data → train → evaluate → prune → ONNX

This notebook walks the whole package on the embedded SQuAD-derived corpus. With
`PRUNER_NB_FAST=1` (what CI sets) it trains for a handful of steps so it runs in a few minutes;
unset it for a model worth using (about the quickstart config: ~12 minutes on 2 CPU cores).""",
"""import os, tempfile
from pathlib import Path

# run from the repository root (where configs/ and data/ live)
if not Path("configs").is_dir() and Path("../configs").is_dir():
    os.chdir("..")
FAST = os.environ.get("PRUNER_NB_FAST") == "1"
WORK = Path(tempfile.mkdtemp(prefix="pruner-nb-"))
RUN = WORK / "run"
print("fast mode:", FAST, "| work folder:", WORK)""",
"""md:## 1. Build labeled records
`pruner data squad` downloads the `bigbench==1.0.0` sdist once (cached in `~/.cache/pruner`) and
writes 5-passage groups: gold paragraph + hard and easy distractors (train: SQuAD dev + new_wiki,
dev: nyt).""",
"""from pruner_model.cli import main

if not Path("data/squad/train.jsonl").is_file():
    assert main(["data", "squad", "--output", "data/squad"]) == 0
print(open("data/squad/report.json").read())""",
"""md:## 2. Train
The same `pruner train` the CLI runs; `--set` overrides config values.""",
"""overrides = ["--set", "data.max_train_groups=40", "--set", "train.max_steps=8", "--set", "train.eval_every=0",
             "--set", "data.max_dev_groups=20", "--set", "data.calibration_dev_groups=40",
             "--set", "data.report_dev_groups=40"] if FAST else []
assert main(["train", "--config", "configs/quickstart.yaml", "--output", str(RUN), *overrides]) == 0""",
"""md:## 3. Evaluate against baselines
Compression vs evidence preserved for the model, BM25 top-N passages and sentence lexical overlap.""",
"""REPORT = WORK / "report"
groups = "30" if FAST else "300"
assert main(["evaluate", "--model", str(RUN), "--data", "data/squad/dev.jsonl", "--output", str(REPORT),
             "--max-groups", groups, "--baselines", "all,bm25,lexical"]) == 0
from IPython.display import Image
Image(filename=str(REPORT / "curve.png"), width=520)""",
"""md:## 4. Prune a passage and look at it
Kept sentences are highlighted; hover for scores.""",
"""import json
from IPython.display import HTML
from inference import ContextPruner
from inference.html import render_html

pruner = ContextPruner.from_pretrained(RUN)
passages = json.load(open("examples/passages.json"))
query = "Who built the metal framework of the Statue of Liberty?"
result = pruner.prune(query, passages)
print(result.stats)
HTML(render_html(result, [p["text"] for p in passages]))""",
"""md:## 5. Export to ONNX and compare
The export validates itself against torch; the ONNX backend gives the same result without torch.
In fast mode only fp32 is exported: a model trained for a few steps has its scores bunched at the
threshold, where int8 flips keep/drop decisions, and the export's int8 validation (≥ 98% agreement)
refuses it (seen: 0.91 after 8 steps; 1.00 for the quickstart model).""",
"""import time
from inference.onnx_export import export_onnx

report = export_onnx(RUN, WORK / "onnx", quantize=None if FAST else "int8")
print({k: v for k, v in report.items() if k.startswith(("fp32", "int8"))})
onnx_pruner = ContextPruner.from_pretrained(WORK / "onnx")
same = [p.spans for p in onnx_pruner.prune(query, passages).passages]
print("same kept spans as torch:", [[s[:2] for s in sp] for sp in same] == [[s[:2] for s in p.spans] for p in result.passages])
for name, p in [("torch", pruner), ("onnx", onnx_pruner)]:
    t = time.perf_counter(); [p.prune(query, passages) for _ in range(5)]
    print(f"{name}: {(time.perf_counter() - t) / 5 * 1000:.1f} ms per query (this machine, this moment)")""",
])

yours = nb([
"""md:# Evaluate the pruner on your own data and pick a threshold

Bring a JSONL of labeled records (one object a line):
`{"id": "query-id/passage-id", "query": ..., "context": ..., "relevant_spans": [[start, end], ...]}`
(`[]` = the passage is not needed). Records sharing the id before `/` form one query's group.""",
"""import json, os, tempfile
from pathlib import Path

if not Path("configs").is_dir() and Path("../configs").is_dir():
    os.chdir("..")
WORK = Path(tempfile.mkdtemp(prefix="pruner-eval-"))
# point these at your own files
MODEL = Path(os.environ.get("PRUNER_MODEL", "runs/quickstart"))
DATA = Path(os.environ.get("PRUNER_DATA", WORK / "my_records.jsonl"))""",
"""md:No data of your own yet? This cell writes a small example file in the expected format.""",
"""if not DATA.exists():
    rows = []
    facts = [("Paris", "France", "the Seine"), ("Berlin", "Germany", "the Spree"), ("Rome", "Italy", "the Tiber"),
             ("Vienna", "Austria", "the Danube"), ("Prague", "Czechia", "the Vltava"), ("Budapest", "Hungary", "the Danube")]
    for i, (city, country, river) in enumerate(facts):
        ctx = f"{city} is the capital of {country}. It is famous for its museums. The river {river[4:]} flows through {city}."
        s = ctx.index("The river")
        rows.append({"id": f"q{i}/gold", "query": f"Which river flows through {city}?", "context": ctx,
                     "relevant_spans": [[s, len(ctx)]]})
        other = facts[(i + 1) % len(facts)]
        rows.append({"id": f"q{i}/other", "query": f"Which river flows through {city}?",
                     "context": f"{other[0]} is the capital of {other[1]}. It hosts many festivals.", "relevant_spans": []})
    DATA.write_text("".join(json.dumps(r) + "\\n" for r in rows))
print(DATA, sum(1 for _ in open(DATA)), "records")""",
"""md:A model: your trained checkpoint (or ONNX export). If none is there, this notebook builds a fresh,
**untrained** MiniLM pruner so that the cells run; its curve shows what *no training* looks like.""",
"""if not (MODEL / "config.json").is_file():
    from transformers import AutoTokenizer
    from pruner_model import PrunerModel, default_backbone_path
    MODEL = WORK / "untrained"
    PrunerModel.from_backbone().save_pretrained(MODEL)
    AutoTokenizer.from_pretrained(str(default_backbone_path())).save_pretrained(MODEL)
    print("using an UNTRAINED pruner at", MODEL)""",
"""from pruner_model.cli import main

OUT = WORK / "report"
assert main(["evaluate", "--model", str(MODEL), "--data", str(DATA), "--output", str(OUT),
             "--target-evidence", "0.95", "--max-groups", "200", "--baselines", "all,bm25,lexical"]) == 0""",
"""md:## Read the curve
Each line is one system: higher is better (more queries keep all their evidence), further right
is better (fewer tokens). The star is the recommended operating point for your target.""",
"""from IPython.display import Image
Image(filename=str(OUT / "curve.png"), width=520)""",
"""report = json.loads((OUT / "report.json").read_text())
print("recommended threshold:", round(report["recommended_threshold"], 4))
for name, s in report["systems"].items():
    print(f"{name:>18}", {k: (None if v is None else round(v["compression"], 3)) for k, v in s["best_compression_at"].items()})""",
"""md:## Store the threshold
`--write-threshold` writes the recommended threshold into the model's `config.json`, so
`ContextPruner.from_pretrained(MODEL)` uses it by default. (Here on a copy.)""",
"""import shutil
COPY = WORK / "model-copy"
shutil.copytree(MODEL, COPY, ignore=shutil.ignore_patterns("checkpoints"))
assert main(["evaluate", "--model", str(COPY), "--data", str(DATA), "--output", str(WORK / "r2"),
             "--target-evidence", "0.95", "--baselines", "none", "--write-threshold"]) == 0
print(json.loads((COPY / "config.json").read_text())["threshold"])""",
])
nbf.write(quick, "notebooks/quickstart.ipynb")
nbf.write(yours, "notebooks/evaluate_your_data.ipynb")
