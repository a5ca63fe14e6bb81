#!/usr/bin/env python
"""Screenshot every built documentation page in headless Chromium and check
that nothing scrolls sideways at a given window width.

    sphinx-build -q -W -b html docs docs/_build/html
    python scripts/qa/screenshot_docs.py                    # 1280 px, docs/_build/html
    python scripts/qa/screenshot_docs.py --width 1024 --out /tmp/shots

Needs a Chromium (Debian: ``apt-get install -y chromium``; ``--chromium`` or
``CHROMIUM`` name another).  For each page it

1. takes a screenshot of the top of the page (``<out>/<page>.png``,
   ``--height`` px tall) to look at;
2. loads a copy of the page with a small script appended that, once the
   stylesheets are applied, measures (a) whether the page itself is wider
   than the window (``document.documentElement.scrollWidth >
   clientWidth``: the page scrolls sideways) and (b) every element of
   the page with ``overflow-x: auto`` or ``scroll`` whose content is wider
   than its box (a code block or a table cut behind its own scrollbar), and
   reads the answer back from Chromium's ``--dump-dom``.

Exit status 1 if any page overflows, with each offending element and the
start of its text.  The copies are removed afterwards.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
MARK = "mxdeconv-overflow-report"
#: Appended to each page's copy: the verdict, as JSON, in a <pre id=MARK>.
PROBE = """
<script>
(function () {
  function report() {
    var width = document.documentElement.clientWidth;
    var found = [];
    var page = document.documentElement.scrollWidth;
    var all = document.querySelectorAll("body *");
    for (var i = 0; i < all.length; i++) {
      var el = all[i];
      if (el.id === "%(mark)s") continue;
      var style = window.getComputedStyle(el);
      if (style.display === "none" || style.visibility === "hidden") continue;
      if (style.overflowX !== "auto" && style.overflowX !== "scroll") continue;
      if (el.scrollWidth > el.clientWidth + 1) {
        found.push({tag: el.tagName.toLowerCase(), cls: el.className || "",
                    box: el.clientWidth, content: el.scrollWidth,
                    text: (el.innerText || "").trim().split("\\n")[0].slice(0, 100)});
      }
    }
    var out = document.getElementById("%(mark)s") || document.createElement("pre");
    out.id = "%(mark)s";
    out.style.display = "none";
    out.textContent = JSON.stringify({window: width, page: page, elements: found});
    document.body.appendChild(out);
  }
  report();
  window.addEventListener("load", report);
})();
</script>
""" % {"mark": MARK}


def find_chromium(name: Optional[str]) -> str:
    for candidate in (name, os.environ.get("CHROMIUM"), "chromium", "chromium-browser",
                      "google-chrome"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)  # type: ignore[return-value]
    sys.exit("screenshot_docs.py: no Chromium found (Debian: apt-get install -y chromium; "
             "or pass --chromium PATH)")


def chromium_args(chromium: str, width: int, height: int) -> List[str]:
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run",
            f"--window-size={width},{height}", "--virtual-time-budget=3000"]


def pages(html: Path) -> List[Path]:
    """Every built page (search and index pages included), sorted."""
    return sorted(p for p in html.glob("*.html") if not p.name.startswith("_overflow_"))


def measure(chromium: str, page: Path, width: int, height: int) -> Dict[str, object]:
    copy = page.with_name(f"_overflow_{page.name}")
    text = page.read_text(encoding="utf-8")
    copy.write_text(text.replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
    try:
        result = subprocess.run(chromium_args(chromium, width, height)
                                + ["--dump-dom", copy.as_uri()],
                                capture_output=True, text=True, timeout=120)
    finally:
        copy.unlink()
    found = re.search(rf'<pre id="{MARK}"[^>]*>(.*?)</pre>', result.stdout, re.S)
    if not found:
        raise RuntimeError(f"{page.name}: no report from Chromium (exit {result.returncode}): "
                           f"{result.stderr.strip()[-500:]}")
    raw = (found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
           .replace("&amp;", "&"))
    return json.loads(raw)


def screenshot(chromium: str, page: Path, target: Path, width: int, height: int) -> None:
    subprocess.run(chromium_args(chromium, width, height)
                   + [f"--screenshot={target}", page.as_uri()],
                   capture_output=True, text=True, timeout=120, check=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=Path, default=ROOT / "docs" / "_build" / "html",
                        help="the built HTML (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "_build" / "screenshots",
                        help="where the screenshots go (default: %(default)s)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1600,
                        help="window height: how much of each page the screenshot shows")
    parser.add_argument("--no-screenshots", action="store_true", help="check only")
    parser.add_argument("--chromium", help="the browser binary (default: chromium)")
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)
    built = pages(args.html)
    if not built:
        print(f"no pages under {args.html}: build them first "
              "(sphinx-build -q -W -b html docs docs/_build/html)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    failures = 0
    for page in built:
        verdict = measure(chromium, page, args.width, args.height)
        problems = []
        if verdict["page"] > verdict["window"]:
            problems.append(f"the page is {verdict['page']} px wide in a "
                            f"{verdict['window']} px window: it scrolls sideways")
        for element in verdict["elements"]:
            problems.append(f"<{element['tag']} class=\"{element['cls']}\"> holds "
                            f"{element['content']} px in {element['box']} px: "
                            f"{element['text']!r}")
        if not args.no_screenshots:
            screenshot(chromium, page, args.out / f"{page.stem}.png", args.width, args.height)
        failures += bool(problems)
        status = "ok" if not problems else f"{len(problems)} overflow(s)"
        print(f"{page.name:28s} {status}")
        for problem in problems:
            print(f"    {problem}")
    where = "" if args.no_screenshots else f"; screenshots in {args.out}"
    print(f"{len(built)} pages at {args.width} px: "
          f"{'none scrolls sideways' if not failures else f'{failures} overflow'}{where}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
