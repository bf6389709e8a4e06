"""`picpac explore` in a real browser (headless Chromium through selenium): load each page, click grid ->
record -> augmentation, check the DOM, save screenshots. Skipped when Chromium or its driver is missing
(Debian: `apt-get install chromium chromium-driver`). PICPAC_EXPLORE_SCREENSHOTS=DIR also saves them there
(docs/images/explore-*.png are made so)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")

from helpers import SHARED_DATA  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = "/usr/bin/chromedriver"
pytestmark = pytest.mark.skipif(CHROMIUM is None or not os.path.exists(DRIVER),
                                reason="Chromium or chromedriver is not installed "
                                       "(apt-get install -y chromium chromium-driver)")
COCO = SHARED_DATA / "coco128-train"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not COCO.is_dir():
        pytest.skip(f"{COCO} is not there")
    tmp = tmp_path_factory.mktemp("explore-browser")
    for part in ("images", "detection"):
        shutil.copytree(COCO / part, tmp / part)
    shutil.copy(COCO / "detection-classes.yaml", tmp)
    from picpac.tools.ingest import import_dataset

    db = tmp / "coco.picpac"
    import_dataset(tmp / "images", db, format="yolo", labels=tmp / "detection", classes=tmp / "detection-classes.yaml",
                   progress=False)
    proc = subprocess.Popen([sys.executable, "-c", "from picpac.tools.cli import main; main()", "explore", str(db),
                             "--port", "0", "--no-browser"], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
    if not match:
        proc.kill()
        pytest.fail(f"explore printed no URL: {line!r}")
    urllib.request.urlopen(match.group(1) + "/grid?per=1", timeout=30).read()
    yield match.group(1)
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, read by console_errors()
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def console_errors(browser) -> list[str]:
    """What the browser's console logged as errors since the last call (a missing /favicon.ico would be one)."""
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def shot(browser, tmp_path: Path, name: str) -> None:
    browser.save_screenshot(str(tmp_path / f"explore-{name}.png"))
    extra = os.environ.get("PICPAC_EXPLORE_SCREENSHOTS")
    if extra:
        browser.save_screenshot(os.path.join(extra, f"explore-{name}.png"))
    assert (tmp_path / f"explore-{name}.png").stat().st_size > 1000


def loaded(browser, img) -> bool:
    return browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img)


def test_overview_grid_record_augmentation(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/")
    assert browser.find_element(By.ID, "records").text == "128"
    assert browser.find_element(By.ID, "damaged").text == "0"
    assert "person" in browser.find_element(By.ID, "shapes").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#folds tr")) == 5
    shot(browser, tmp_path, "overview")

    browser.find_element(By.ID, "nav-grid").click()
    cells = browser.find_elements(By.CSS_SELECTOR, "#grid .cell")
    assert [c.get_attribute("data-id") for c in cells] == [str(i) for i in range(60)]
    images = browser.find_elements(By.CSS_SELECTOR, "#grid img")
    WebDriverWait(browser, 60).until(lambda b: all(loaded(b, img) for img in images[:12]))
    shot(browser, tmp_path, "grid")

    browser.find_elements(By.CSS_SELECTOR, "#grid a.rec")[3].click()
    WebDriverWait(browser, 30).until(lambda b: b.current_url.endswith("/record/3"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Record 3"
    fields = browser.find_element(By.ID, "fields").text
    assert "image" in fields and "annotation" in fields and "JPEG" in fields
    assert '"path"' in browser.find_element(By.ID, "meta").text
    WebDriverWait(browser, 60).until(lambda b: loaded(b, b.find_element(By.ID, "image")))
    shot(browser, tmp_path, "record")

    browser.find_element(By.ID, "augment").click()
    box = browser.find_element(By.ID, "config")
    box.clear()
    box.send_keys("seed: 3\nbatch: 8\nresize_width: 160\nresize_height: 160\nperturb: true\npert_hflip: true\n"
                  "pert_angle: 20\npert_min_scale: 0.7\npert_max_scale: 1.2\npert_color1: 25\n")
    browser.find_element(By.ID, "run").click()
    samples = WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#samples img"))
    assert len(samples) == 8
    WebDriverWait(browser, 60).until(lambda b: all(loaded(b, img) for img in samples))
    assert browser.execute_script("return arguments[0].naturalWidth", samples[0]) == 160
    shot(browser, tmp_path, "augment")
    assert console_errors(browser) == []  # every page, picture and script the browser asked for so far, favicon too

    box = browser.find_element(By.ID, "config")
    box.clear()
    box.send_keys("mixin: /etc/passwd\n")
    browser.find_element(By.ID, "run").click()
    error = WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "error"))
    assert "config key 'mixin' is not allowed" in error.text


def pixels_of(url: str):
    import cv2
    import numpy as np

    with urllib.request.urlopen(url, timeout=30) as answer:
        return cv2.imdecode(np.frombuffer(answer.read(), np.uint8), cv2.IMREAD_COLOR)


DETECT = ("seed: 3\nbatch: 4\nshuffle: false\nresize_width: 224\nresize_height: 224\ntask: detect\nannotate: json\n"
          "perturb: true\npert_angle: 0\n")


def test_the_augmentation_controls_edit_the_config_and_redraw(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def settled(old: str) -> list:
        """The samples once a run other than ``old`` is shown and its pictures have loaded."""
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "samples").get_attribute("data-digest")
                                         not in ("", old))
        images = browser.find_elements(By.CSS_SELECTOR, "#samples img")
        WebDriverWait(browser, 60).until(lambda b: all(loaded(b, img) for img in images))
        return images

    def digest() -> str:
        return browser.find_element(By.ID, "samples").get_attribute("data-digest")

    def config() -> str:
        return browser.find_element(By.ID, "config").get_attribute("value")

    browser.get(server + "/augment?" + urllib.parse.urlencode({"config": DETECT}))
    images = settled("")
    assert len(images) == 4 and all(img.get_attribute("src").endswith("-drawn.png") for img in images)
    captions = [span.text for span in browser.find_elements(By.CSS_SELECTOR, "#samples .shapes")]
    assert len(captions) == 4 and all(re.match(r"\d+ shapes?: \d+ [a-z]", text) for text in captions), captions
    exact = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#samples a.exact")]
    drawn = [pixels_of(img.get_attribute("src")) for img in images]
    for picture, plain in zip(drawn, exact):  # boxes and captions drawn over the stream's pixels
        assert picture.shape == (224, 224, 3) and 0 < (picture != pixels_of(plain)).any(2).mean() < 0.5

    first = digest()
    browser.find_element(By.ID, "c-pert_angle").send_keys(Keys.END)  # the slider to its end: 180 degrees
    images = settled(first)
    assert "pert_angle: 180\n" in config() and browser.find_element(By.ID, "v-pert_angle").text == "180"
    turned = [pixels_of(img.get_attribute("src")) for img in images]
    assert any((a != b).any() for a, b in zip(drawn, turned))
    assert "draw=1" in browser.current_url and "pert_angle%3A+180" in browser.current_url
    shot(browser, tmp_path, "augment-controls")

    before = digest()
    browser.find_element(By.ID, "c-pert_hflip").click()
    settled(before)
    assert "pert_hflip: true\n" in config()

    # an edit made while the run of the one before is under way: the next run carries both
    before = digest()
    browser.find_element(By.ID, "c-pert_color1").send_keys(Keys.END)
    time.sleep(0.5)  # past the slider's pause: its run has started (a run starts a process: about a second)
    browser.find_element(By.ID, "c-pert_vflip").click()
    WebDriverWait(browser, 60).until(lambda b: "pert_color1: 100\n" in config() and "pert_vflip: true\n" in config())
    settled(before)

    before = digest()
    Select(browser.find_element(By.ID, "c-task")).select_by_value("keypoints")
    settled(before)
    assert 'task: "keypoints"\n' in config() and "task: detect" not in config()

    before = digest()
    browser.find_element(By.ID, "reroll").click()
    settled(before)
    seed = int(re.search(r"^seed: (\d+)$", config(), re.M).group(1))
    assert seed != 3 and browser.find_element(By.ID, "c-seed").get_attribute("value") == str(seed)

    before = digest()
    browser.find_element(By.LINK_TEXT, "fold 1 of 5").click()
    settled(before)
    assert "split: 5\nsplit_fold: 1\nsplit_negate: true\n" in config()
    assert browser.find_element(By.CSS_SELECTOR, "#folds a.on").text == "fold 1 of 5"

    browser.find_element(By.ID, "draw").click()  # annotations off: the stream's own pixels
    images = browser.find_elements(By.CSS_SELECTOR, "#samples img")
    WebDriverWait(browser, 30).until(lambda b: all(not img.get_attribute("src").endswith("-drawn.png")
                                                   for img in images))
    plain = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#samples a.exact")]
    assert [img.get_attribute("src") for img in images] == plain and "draw=0" in browser.current_url

    box = browser.find_element(By.ID, "config")
    box.send_keys("mixin: /etc/passwd\n")
    browser.find_element(By.ID, "run").click()
    error = WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "error"))
    assert error.text.startswith("config refused: config key 'mixin' is not allowed")
    assert browser.find_elements(By.CSS_SELECTOR, "#samples img") == []
