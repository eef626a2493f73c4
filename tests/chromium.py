"""Debian's Chromium driven by Playwright: the real browser the browser tests use (no download)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.conftest import missing_service

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
BASE_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
)


@asynccontextmanager
async def chromium(*extra_args: str) -> AsyncIterator[Any]:
    """Headless Chromium; the test fails in CI when it (or Playwright) is missing, as a missing
    server does."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        missing_service("Playwright is not installed (the dev extra)")
    if not HAVE_CHROMIUM:
        missing_service("Chromium is not installed (apt-get install chromium)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*BASE_ARGS, *extra_args]
        )
        try:
            yield launched
        finally:
            await launched.close()
