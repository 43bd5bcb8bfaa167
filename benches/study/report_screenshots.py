"""Render a gymbench HTML report's figures into one PNG, in page order, for docs/images/.

No headless browser can be installed here (the network reaches package registries only, and
Playwright/pyppeteer fetch their browsers from elsewhere), so this stands in for a screenshot:
it decodes every embedded image of the page, exactly as a browser would receive it, and stacks
them with their section titles.

    python benches/study/report_screenshots.py REPORT.html OUT.png
"""

from __future__ import annotations

import base64
import io
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

SECTION = re.compile(r"<h2>([^<]*)</h2>|<img alt=\"([^\"]*)\" src=\"data:image/png;base64,([^\"]+)\"")


def figures(text: str) -> list[tuple[str, object]]:
    found, title = [], ""
    for heading, alt, data in SECTION.findall(text):
        if heading:
            title = heading
            continue
        found.append((title or alt, matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png")))
    return found


def main(report: Path, out: Path) -> None:
    images = figures(report.read_text(encoding="utf-8"))
    heights = [image.shape[0] / image.shape[1] for _, image in images]  # type: ignore[attr-defined]
    figure, axes = plt.subplots(len(images), 1, figsize=(10, sum(10 * h + 0.4 for h in heights)),
                                gridspec_kw={"height_ratios": heights}, squeeze=False)  # fmt: skip
    for ax, (title, image) in zip(axes.flat, images, strict=True):
        ax.imshow(image)
        ax.set_title(title, fontsize=10, loc="left")
        ax.axis("off")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=90)
    print(f"{len(images)} figures of {report} -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
