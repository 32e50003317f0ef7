"""The readable side of `quarry eval` and `quarry tune`: metrics.json, a markdown report,
PNG plots (route confusion, quality and latency per route), and the wrong questions as lines
for stderr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retrieval.evaluate import TOP, plot_grouping


def _cell(value: Any) -> str:
    return "n/a" if value is None else str(value)


def report_title(target: str, cwd: Path | None = None) -> str:
    """The title of an eval report of `target` (a labels file or a BEIR folder) as people
    know it: relative to the working directory when it lies under it, else its folder and
    name; never the absolute path of the machine that ran it (the console shows the title)."""
    path = Path(target)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to((cwd or Path.cwd()).resolve())
        except ValueError:
            path = Path(*path.parts[-2:])
    return f"Quarry evaluation of {path.as_posix()}"


def write_report(result: dict[str, Any], directory: Path, title: str) -> list[Path]:
    """metrics.json, report.md and three PNG plots (confusion matrix, quality per route, latency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "metrics.json", directory / "report.md"]
    paths[0].write_text(json.dumps(result, indent=2))
    paths[1].write_text(report_markdown(result, title))
    return paths + _plots(result, directory, plt)


def report_markdown(result: dict[str, Any], title: str) -> str:
    """report.md: the top metrics, errors, route confusion, per-group tables, leaks, wrong questions."""
    group_key, group_name = plot_grouping(result)
    lines = [f"# {title}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {m} | {_cell(result.get(m))} |" for m in ("questions", "errors", *TOP) if m in result]
    for name, kind in (result.get("error_kinds") or {}).items():
        lines += ["", f"{kind['count']} questions raised {name} (e.g. {kind['example']}); each counts as wrong in every figure."]
    if result.get("confusion"):
        routes = sorted({p for row in result["confusion"].values() for p in row} | set(result["confusion"]))
        lines += ["", "## Route confusion (rows: labeled, columns: chosen)", "",
                  "| labeled | " + " | ".join(routes) + " |", "|---|" + "---|" * len(routes)]
        for gold in routes:
            row = result["confusion"].get(gold, {})
            if row:
                lines.append(f"| {gold} | " + " | ".join(str(row.get(p, 0)) for p in routes) + " |")
    sections = (("per_route", "Per labeled route"), ("per_chosen_route", "Per chosen route"), ("per_tag", "Per tag"))
    for section, heading in sections:
        if result.get(section):
            lines += ["", f"## {heading}", "", "| group | n | route acc | gap F1 | nDCG@10 | recall@k | attempts | p50 ms |",
                      "|---|---|---|---|---|---|---|---|"]
            for name, m in result[section].items():
                lines.append(f"| {name} | {m['questions']} | " + " | ".join(_cell(m[c]) for c in (
                    "route_accuracy", "gap_f1", "ndcg@10", "recall@k", "mean_attempts", "latency_p50_ms")) + " |")
    if result.get("leaks"):
        lines += ["", "## LEAKS", ""] + [f"- {x}" for x in result["leaks"]]
    if "wrong" in result:
        lines += ["", f"## Wrong questions ({len(result['wrong'])})", "",
                  "| id | question | problems | expected | got | attempts |", "|---|---|---|---|---|---|"]
        lines += [f"| {w['id']} | {_md(w['question'])} | {', '.join(w['problems'])} | {_md(_expected(w))} | {_md(_got(w))} | "
                  f"{w['attempts']} ({' > '.join(w['trail'])}) |" for w in result["wrong"]]
    if result.get(group_key):
        lines += ["", f"Plots: quality_per_route.png and latency.png group questions by **{group_name}**"
                  + ("; confusion.png has labeled routes as rows, chosen routes as columns." if result.get("confusion") else ".")]
    return "\n".join(lines) + "\n"


def _plots(result: dict[str, Any], directory: Path, plt: Any) -> list[Path]:
    """confusion.png (when routes are labeled), quality_per_route.png and latency.png."""
    group_key, group_name = plot_grouping(result)
    paths: list[Path] = []
    if result.get("confusion"):
        routes = sorted({p for row in result["confusion"].values() for p in row} | set(result["confusion"]))
        grid = [[result["confusion"].get(g, {}).get(p, 0) for p in routes] for g in routes]
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.imshow(grid, cmap="Blues")
        ax.set_xticks(range(len(routes)), routes, rotation=45)
        ax.set_yticks(range(len(routes)), routes)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center")
        ax.set_xlabel("chosen route")
        ax.set_ylabel("labeled route")
        paths.append(_save(fig, ax, "Route confusion (rows: labeled, columns: chosen)", directory / "confusion.png"))
    groups = result.get(group_key) or {}
    if groups:
        names = list(groups)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        shown = [m for m in ("ndcg@10", "recall@k", "gap_f1") if any(groups[n].get(m) is not None for n in names)]
        for offset, metric in enumerate(shown):  # a metric undefined in every group (null) gets no bar
            vals = [groups[n].get(metric) or 0.0 for n in names]
            ax.bar([i + 0.27 * offset for i in range(len(names))], vals, width=0.27, label=metric)
        ax.set_xticks([i + 0.27 * (len(shown) - 1) / 2 for i in range(len(names))], names)
        ax.set_xlabel(group_name)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
        paths.append(_save(fig, ax, f"Quality per {group_name}", directory / "quality_per_route.png"))
        p50 = [groups[n]["latency_p50_ms"] or 0.0 for n in names]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.bar(names, p50, label="p50")
        spread = [(groups[n]["latency_p95_ms"] or 0.0) - lo for n, lo in zip(names, p50, strict=True)]
        ax.bar(names, spread, bottom=p50, label="p95", alpha=0.5)
        ax.set_xlabel(group_name)
        ax.set_ylabel("ms")
        ax.legend(fontsize=8)
        paths.append(_save(fig, ax, f"Latency per {group_name}", directory / "latency.png"))
    return paths


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _expected(w: dict[str, Any]) -> str:
    e = w["expected"]
    return f"route {e['route'] or '-'}, {e['status']}" + (f", docs {', '.join(e['relevant'])}" if e["relevant"] else "")


def _got(w: dict[str, Any]) -> str:
    g = w["got"]
    if g.get("error"):
        return g["error"]
    out = f"route {g['route']}, {g['status']}" + (f" ({g['gap_reason']})" if g.get("gap_reason") else "")
    out += f", missing {', '.join(g['missing'])}" if g["missing"] else ""
    return out + (f", leaked {', '.join(g['leaked'])}" if g.get("leaked") else "")


def failure_lines(result: dict[str, Any], limit: int = 50) -> list[str]:
    """A readable list of the wrong questions (for stderr), at most `limit` of them."""
    wrong = result.get("wrong") or []
    lines = [f"wrong: {len(wrong)} of {result['questions']} questions"]
    for w in wrong[:limit]:
        q = w["question"] if len(w["question"]) <= 70 else w["question"][:67] + "..."
        lines.append(f"  {w['id']}: {', '.join(w['problems'])}; expected {_expected(w)}; got {_got(w)}; "
                     f"attempts {w['attempts']} ({' > '.join(w['trail']) or '-'}); {q!r}")
    if len(wrong) > limit:
        lines.append(f"  ... and {len(wrong) - limit} more (all of them in --report DIR/report.md and --full)")
    return lines


def _save(fig: Any, ax: Any, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Title": title})
    plt.close(fig)
    return path
