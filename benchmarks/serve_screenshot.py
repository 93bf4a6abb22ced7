"""A screenshot of `turnformer serve`'s page, taken by headless Chromium (Debian's chromium and chromium-driver: no
browser is downloaded), for the docs.

    python benchmarks/serve_screenshot.py --checkpoint RUN [--checkpoint RUN ...] [--input meld:test] [--dialogue 3]
        [--utterance -1] [--out docs/serve-page.png]

The page is served by the app on these checkpoints at 127.0.0.1; a conversation of ``--input`` is pasted and added
turn by turn, one utterance is clicked for its attention view, and the page is saved as a small PNG (a palette of
128 colours).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Sequence

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from turnformer.serve.app import create_app
from turnformer.serve.models import load_models
from turnformer.results import DOCS_DIR
from turnformer.serve.server import BackgroundServer
from turnformer.tasks.common import load_conversations


def chromium_paths() -> tuple[str | None, str | None]:
    """Debian's Chromium and its driver, where installed."""
    return shutil.which("chromium"), shutil.which("chromedriver")


def chromium_driver(width: int = 1100, height: int = 900) -> webdriver.Chrome:
    """Headless Chromium driven through the system's chromedriver (Selenium then downloads nothing)."""
    browser, driver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={width},{height}"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_for(driver: webdriver.Chrome, condition, timeout_s: float = 60):
    return WebDriverWait(driver, timeout_s).until(lambda d: condition(d))


def rows(driver: webdriver.Chrome) -> list:
    return driver.find_elements(By.CSS_SELECTOR, "#turns tr")


def paste(driver: webdriver.Chrome, turns: Sequence[tuple[str, str]]) -> None:
    """Paste a conversation ("speaker: text" lines) and add it, then wait until every line is a row."""
    before = len(rows(driver))
    driver.find_element(By.CSS_SELECTOR, "details summary").click()
    driver.find_element(By.ID, "paste").send_keys("\n".join(f"{speaker}: {text}" for speaker, text in turns))
    driver.find_element(By.ID, "add-all").click()
    wait_for(driver, lambda d: len(rows(d)) == before + len(turns))


def show_attention(driver: webdriver.Chrome, turn: int) -> None:
    rows(driver)[turn].click()
    wait_for(driver, lambda d: d.find_element(By.ID, "attention").is_displayed()
             and f"utterance {turn}'s" in d.find_element(By.ID, "attention-title").text)


def save_whole_page(driver: webdriver.Chrome, path: Path, width: int = 1100) -> None:
    """The whole page, not only the window's part of it: the viewport made as tall as the page first."""
    height = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]["height"]
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": int(height) + 1,
                                                                   "deviceScaleFactor": 1, "mobile": False})
    driver.save_screenshot(str(path))


def small_png(path: Path, colours: int = 128) -> None:
    Image.open(path).convert("RGB").quantize(colours).save(path, optimize=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", required=True)
    parser.add_argument("--input", default="meld:test")
    parser.add_argument("--dialogue", type=int, default=3)
    parser.add_argument("--utterance", type=int, default=-1, help="The utterance whose attention is shown (-1: the last).")
    parser.add_argument("--out", type=Path, default=DOCS_DIR / "serve-page.png")
    args = parser.parse_args(argv)
    models = load_models(args.checkpoint)
    dialogue = load_conversations(args.input)[args.dialogue]
    turns = [(t.speaker, " ".join(t.text.split())) for t in dialogue.turns]
    with BackgroundServer(create_app(models)) as url:
        driver = chromium_driver()
        try:
            driver.get(url)
            wait_for(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
            paste(driver, turns)
            show_attention(driver, args.utterance % len(turns))
            save_whole_page(driver, args.out)
        finally:
            driver.quit()
    small_png(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
