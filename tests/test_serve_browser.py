"""The page of `turnformer serve` in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium, which then downloads nothing): utterances typed and pasted, the labels shown checked against the API's
answers, and an utterance's attention view. Skipped where Chromium or its driver is not installed."""

from __future__ import annotations

import httpx
import pytest

from turnformer.serve.app import create_app
from turnformer.serve.models import load_models
from turnformer.serve.server import BackgroundServer

from _benchmark_scripts import load_benchmark_script
from _serve_runs import tiny_runs

pytest.importorskip("selenium", reason="selenium (a dev dependency) is not installed")
page = load_benchmark_script("serve_screenshot")
browser, driver_path = page.chromium_paths()
pytestmark = pytest.mark.skipif(
    browser is None or driver_path is None,
    reason="Chromium or chromedriver is not installed (Debian: apt-get install chromium chromium-driver; .ci/run does it)")


@pytest.fixture(scope="module")
def url(tiny_backbone_dir, tmp_path_factory):
    runs = tiny_runs(tiny_backbone_dir, tmp_path_factory.mktemp("serve-runs"), tasks=("erc", "dialogue-act"))
    models = load_models([f"emotion={runs['erc']}", f"acts={runs['dialogue-act']}"])
    with BackgroundServer(create_app(models)) as served:
        yield served


@pytest.fixture
def driver():
    chromium = page.chromium_driver()
    yield chromium
    chromium.quit()


def type_turn(driver, speaker: str, text: str) -> None:
    by = page.By
    before = len(page.rows(driver))
    driver.find_element(by.ID, "speaker").clear()
    driver.find_element(by.ID, "speaker").send_keys(speaker)
    driver.find_element(by.ID, "text").send_keys(text + "\n")  # Enter submits the form
    page.wait_for(driver, lambda d: len(page.rows(d)) == before + 1)


def test_the_page_shows_each_utterances_labels_as_the_api_gives_them(url, driver):
    by = page.By
    driver.get(url)
    page.wait_for(driver, lambda d: d.find_element(by.TAG_NAME, "body").get_attribute("data-ready") == "true")
    boxes = driver.find_elements(by.CSS_SELECTOR, "#models input[type=checkbox]")
    assert [b.get_attribute("value") for b in boxes] == ["emotion", "acts"] and all(b.is_selected() for b in boxes)

    type_turn(driver, "Bob", "my dog died")  # the first utterance starts a conversation
    type_turn(driver, "Ann", "that is wonderful")
    page.paste(driver, [("Bob", "I failed the exam"), ("Ann", "great news, I passed!")])
    session = driver.find_element(by.TAG_NAME, "body").get_attribute("data-session")
    history = httpx.get(f"{url}/v1/sessions/{session}").json()["turns"]
    assert [(h["speaker"], h["text"]) for h in history] == [("Bob", "my dog died"), ("Ann", "that is wonderful"),
                                                            ("Bob", "I failed the exam"), ("Ann", "great news, I passed!")]
    for row, turn in zip(page.rows(driver), history):
        cells = row.find_elements(by.TAG_NAME, "td")
        assert [c.text for c in cells[:3]] == [str(turn["turn"]), turn["speaker"], turn["text"]]
        for model in ("emotion", "acts"):
            shown = row.find_element(by.CSS_SELECTOR, f'td[data-model="{model}"] .label').text
            assert shown == turn["annotations"][model]["label"]
    headers = [h.text for h in driver.find_elements(by.CSS_SELECTOR, "#columns th")]
    assert headers == ["#", "speaker", "utterance", "emotion (emotion)", "acts (act)"]

    page.show_attention(driver, 2)
    heads = driver.find_elements(by.CSS_SELECTOR, "#heads .head")
    assert [h.get_attribute("data-head") for h in heads] == ["local", "global", "speaker", "listener"]
    assert "my" in heads[0].text and "exam" in heads[0].text  # earlier tokens and the utterance's own
    assert "error" not in driver.find_element(by.ID, "status").get_attribute("class")


def test_a_second_enter_while_an_utterance_is_sent_adds_nothing(url, driver):
    """Enter pressed twice on the first utterance started two sessions (the utterance went to both, the table showed
    it twice), and twice on a later one sent it twice: the table was no longer the session's turns, and a click on a
    row asked for the attention of another utterance."""
    by = page.By
    driver.get(url)
    page.wait_for(driver, lambda d: d.find_element(by.TAG_NAME, "body").get_attribute("data-ready") == "true")
    driver.find_element(by.ID, "speaker").clear()
    driver.find_element(by.ID, "speaker").send_keys("Ann")
    for text in ("hello there", "my dog died"):
        driver.execute_script("document.getElementById('text').value = arguments[0];"
                              "const form = document.getElementById('turn-form'); form.requestSubmit(); form.requestSubmit();",
                              text)
        page.wait_for(driver, lambda d: not d.find_element(by.ID, "add").get_attribute("disabled"))
    session = driver.find_element(by.TAG_NAME, "body").get_attribute("data-session")
    history = httpx.get(f"{url}/v1/sessions/{session}").json()["turns"]
    assert [h["text"] for h in history] == ["hello there", "my dog died"]
    assert [[c.text for c in row.find_elements(by.TAG_NAME, "td")[:3]] for row in page.rows(driver)] == [
        ["0", "Ann", "hello there"], ["1", "Ann", "my dog died"]]
