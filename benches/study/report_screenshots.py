"""Screenshot a gymbench HTML report in headless Chromium, the whole page, for docs/images/.

    python benches/study/report_screenshots.py REPORT.html OUT.png

The page is loaded as a person's browser would load it (:mod:`gymbench.report.browser`); the
script says what the browser saw and exits 1 when the page did not load, an image is broken or a
script failed, so a picture of a broken report never lands in the docs unnoticed. Without Chromium
it says how to install it (``apt-get install -y chromium``) and exits 2.

``GYMBENCH_SCREENSHOTS=docs/images python -m pytest tests/report/test_browser.py`` takes every
report kind's screenshot at once, from reports the test renders.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gymbench.errors import GymbenchError
from gymbench.report.browser import check_page


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benches/study/report_screenshots.py REPORT.html OUT.png", file=sys.stderr)
        return 2
    report, out = Path(argv[0]), Path(argv[1])
    try:
        seen = check_page(report, out)
    except GymbenchError as exc:
        print(f"report_screenshots: {exc}", file=sys.stderr)
        return 2
    print(f"{report}: {seen.images} images, {len(seen.broken_images)} broken, "
          f"{len(seen.script_errors)} script errors; screenshot: {out}")  # fmt: skip
    for problem in [*(f"broken image: {name}" for name in seen.broken_images), *seen.script_errors]:
        print(f"  {problem}", file=sys.stderr)
    if not seen.loaded:
        print(f"  did not load: {seen.load_error or 'the page never finished loading'}", file=sys.stderr)
    return 0 if seen.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
