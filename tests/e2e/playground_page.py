"""The playground page (``GET /ui``) driven in a real headless Chromium through Playwright: open
it, type a key and a query, wait for every column, read what it shows, take a screenshot.

The browser is Debian's ``chromium`` (Playwright does not download one here). Run as a program,
it captures the page of any running service, as the docs' screenshot is made:

    python -m tests.e2e.playground_page URL OUT.png "QUERY" [--key KEY] [--filter JSON]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_INSTALL = "apt-get install -y chromium"
CHROMIUM_ARGS = [
    # As root, in a container-like sandbox, on a closed network: what Debian's Chromium needs
    # to start headless and not try to reach Google's hosts.
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
COLUMNS = ("coarse", "fine", "c2f", "auto")
WAIT_MS = 60_000


@contextmanager
def open_page(url: str, executable: str = CHROMIUM) -> Iterator[Page]:
    """The playground at ``url`` (the service's base URL) in a new headless Chromium."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            # Under the page's own CSP, which forbids eval: every wait here is a selector.
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/ui")
            yield page
        finally:
            browser.close()


def search(page: Page, query: str, *, key: str | None = None, filter: str = "") -> None:
    """Type the key (if any), the filter and the query, search, and wait until every column
    has answered (hits or an error)."""
    if key is not None:
        page.fill("#key", key)
        page.dispatch_event("#key", "change")
        page.wait_for_selector("#collection option", state="attached")
    page.fill("#filter", filter)
    page.fill("#query", query)
    page.click("button[type=submit]")
    for name in COLUMNS:
        answered = f"#column-{name}[data-state=done], #column-{name}[data-state=error]"
        page.wait_for_selector(answered, state="attached", timeout=WAIT_MS)


def column(page: Page, name: str) -> dict[str, object]:
    """What a column shows: its state, route line, timings line, problem and hit texts."""
    root = f"#column-{name}"
    return {
        "state": page.get_attribute(root, "data-state"),
        "route": page.inner_text(f"{root} .route"),
        "timings": page.inner_text(f"{root} .timings"),
        "problem": page.inner_text(f"{root} .problem"),
        "hits": page.locator(f"{root} li.hit .text").all_inner_texts(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("out", type=Path)
    parser.add_argument("query")
    parser.add_argument("--key")
    parser.add_argument("--filter", default="")
    args = parser.parse_args()
    with open_page(args.url) as page:
        search(page, args.query, key=args.key, filter=args.filter)
        page.wait_for_selector("#prefixes canvas")
        page.screenshot(path=str(args.out), full_page=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
