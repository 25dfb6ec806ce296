"""The web console in a real headless browser (Debian's chromium through chromium-driver and Selenium) against the
real system of `make sandbox`: PostgreSQL, the shell and a Worker as processes. A person signs in with a token and
watches a Run go from queued to succeeded with its output, follows a running task's output (the box follows its
tail until the reader scrolls up), sees where a long output was cut, switches between a retried Run's Attempts and
reads its timeline (local times with the zone, durations, names, no epoch milliseconds), cancels a running Run after
a confirmation (kept when dismissed); an agent's cancel is answered approval_required; a viewer is offered neither
enqueue nor cancel nor task changes; an operator runs a task now from the Tasks page; an owner disables and enables
a task, creates one and schedules it with its next fire times previewed as typed; the Workers page shows a Worker
that never connected as offline; a wrong token, a wrong Project (the token kept) and a shell that went away each get
a page that says so. Every console answer carries the security headers, and the browser made no request outside
the console's origin (its network log) and met no CSP violation (its console log).
QINGLONG_CONSOLE_SCREENSHOTS=1 also writes docs/console-runs.png, docs/console-run.png and docs/console-task.png
(scripts/console_screenshots.sh).
Touches: a temporary folder, loopback ports, child processes (the system and the browser, all cleaned up).
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import os
import re
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, TimeoutException
from selenium.webdriver import Chrome
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from qinglong.cli import admin, pki
from qinglong.cli import operators as op
from qinglong.cli.api import ApiError, UserApi
from qinglong.cli.demo import Demo
from qinglong.shell.console import wire_module
from qinglong.wire.common import token_digest

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
REPO = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
RETRIED = (NoSuchElementException, StaleElementReferenceException)  # a live page redraws what changed
SCREENSHOTS = os.environ.get("QINGLONG_CONSOLE_SCREENSHOTS") == "1"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
TASKS: dict[str, dict[str, Any]] = {
    "hello": {"argv": ["sh", "-c", "sleep 1; echo hello from the console"]},
    "count": {"argv": ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.6; done"]},
    "loud": {"argv": ["sh", "-c", "seq 1 100000"]},
    "sleeper": {"argv": ["sleep", "120"]},
    "unserved": {"argv": ["true"], "pool": "nobody"},
    "refused": {"argv": ["true"], "user": "nobody"},  # not on the demo Worker's run_as list: a start failure
    # 400 lines in 16 bursts over about 6 s: taller than the output box long before it ends
    "tail": {"argv": ["sh", "-c", "for i in $(seq 1 16); do seq $((i*25-24)) $((i*25)); sleep 0.4; done"]},
    "secretive": {  # prints a project secret it receives as a variable and as a file
        "argv": ["sh", "-c", 'echo "variable: $S"; echo "file: $(cat s.txt)"'],
        "secretEnv": {"S": "CONSOLE_SECRET"},
        "secretFiles": {"s.txt": "CONSOLE_SECRET"},
    },
}
SECRET = f"console-secret-{os.urandom(8).hex()}".encode()


@dataclass
class System:
    demo: Demo
    origin: str
    ca: Path
    spki: str  # base64 SHA-256 of the shell certificate's public key: the one certificate the browser accepts
    project: str
    tokens: dict[str, str]  # role → bearer token
    tasks: dict[str, str]  # name → task id

    def api(self, role: str = "operator") -> UserApi:
        return UserApi(self.origin, self.tokens[role], self.ca)

    def enqueue(self, task: str) -> str:
        return str(self.api().enqueue(self.project, self.tasks[task])["runId"])

    def status(self, run: str) -> str:
        return str(self.api().show(self.project, run)["run"]["status"])


@pytest.fixture(scope="module")
def system() -> Iterator[System]:
    root = Path(tempfile.mkdtemp(prefix="qinglong-console-", dir="/tmp"))
    root.chmod(0o755)
    demo = Demo(root)
    try:
        demo.start_system()
        dsn = demo.dsn
        with psycopg.connect(dsn, autocommit=True) as conn:  # a long output keeps 2 KiB of head and 64 KiB of tail
            conn.execute("update ql.settings set output_head_bytes = 2048, output_tail_bytes = 65536")
        project = admin.call(dsn, op.project_create_v1, p_name="console")["projectId"]
        tokens = {}
        people = (("olga", "user", "operator"), ("vic", "user", "viewer"), ("bot", "agent", "operator"),
                  ("oona", "user", "owner"))  # fmt: skip
        for name, kind, role in people:
            tokens[name if kind == "agent" else role] = token = os.urandom(24).hex()
            subject = admin.call(dsn, op.subject_create_v1, p_kind=kind, p_name=name,
                                 p_token_digest=token_digest(token))["subjectId"]  # fmt: skip
            admin.call(
                dsn, op.role_binding_set_v1, p_project_id=project, p_subject_id=subject, p_role=role, p_active=True
            )
        UserApi(demo.api_origin, tokens["owner"], demo.certs / "ca.crt").set_secret(project, "CONSOLE_SECRET", SECRET)
        UserApi(demo.api_origin, tokens["operator"], demo.certs / "ca.crt").set_notify_rule(project, "ops", {
            "events": ["run.failed", "run.timed_out"], "channel": "webhook",
            "url": "https://hooks.example.com/qinglong", "secretName": "CONSOLE_SECRET",
        })  # fmt: skip
        tasks = {name: demo.create_task(project, name, plan) for name, plan in TASKS.items()}
        flag = root / "flaky-tried"  # its first Attempt fails, its retry succeeds
        flaky = f"if [ -e {flag} ]; then echo second try; else touch {flag}; echo first try; exit 3; fi"
        tasks["flaky"] = demo.create_task(project, "flaky", {"argv": ["sh", "-c", flaky], "maxAttempts": 2})
        # never fires here
        admin.call(dsn, op.task_schedule_set_v1, p_project_id=project, p_name="hello", p_cron="0 3 * * *",
                   p_timezone="UTC", p_overlap="skip")  # fmt: skip
        spare = pki.issue_worker(demo.certs, "5fa1e000-0000-4000-8000-00000000000a", name="spare")
        admin.call(dsn, op.worker_enroll_v1, p_worker_id="5fa1e000-0000-4000-8000-00000000000a", p_name="spare",
                   p_pool="default", p_cert_fingerprint=spare.fingerprint)  # fmt: skip
        cert = x509.load_pem_x509_certificate((demo.certs / "server.crt").read_bytes())
        der = cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        digest = hashes.Hash(hashes.SHA256())
        digest.update(der)
        spki = base64.b64encode(digest.finalize()).decode()
        yield System(demo, demo.api_origin, demo.certs / "ca.crt", spki, "console", tokens, tasks)
    finally:
        demo.stop_all()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(system: System) -> Iterator[Chrome]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("chromium and chromium-driver are not installed: run scripts/setup.sh")
    profile = Path(tempfile.mkdtemp(prefix="qinglong-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--lang=en-US",
                f"--user-data-dir={profile}", f"--ignore-certificate-errors-spki-list={system.spki}",
                "--window-size=1280,900", "--no-first-run", "--disable-background-networking"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    # The browser's zone is not UTC, so the page's local times differ from the UTC on hover.
    service = Service(str(CHROMEDRIVER), env={**os.environ, "TZ": "Asia/Shanghai"})
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def browser_log(driver: Chrome, kind: str) -> list[dict[str, Any]]:
    """The entries of one of the browser's logs since the last read (Selenium leaves get_log untyped)."""
    entries: list[dict[str, Any]] = driver.get_log(kind)  # type: ignore[no-untyped-call]
    return entries


def wait(driver: WebDriver, what: str, check: Callable[[WebDriver], Any], within: float = 30) -> Any:
    try:
        return WebDriverWait(driver, within, poll_frequency=0.2, ignored_exceptions=RETRIED).until(check)
    except TimeoutException:
        raise AssertionError(
            f"gave up waiting for {what}; the page says: {driver.find_element(By.TAG_NAME, 'main').text[:1500]}"
        ) from None


def text(driver: WebDriver, selector: str) -> str:
    try:
        return str(driver.find_element(By.CSS_SELECTOR, selector).text)
    except NoSuchElementException:
        return ""


def shown(driver: WebDriver, selector: str) -> bool:
    return len(driver.find_elements(By.CSS_SELECTOR, selector)) > 0


def sign_in(driver: WebDriver, system: System, token: str, project: str = "console") -> None:
    """A fresh tab state, then the sign-in form by keyboard only: project, Tab, token, Enter."""
    driver.get(system.origin + "/console/")
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()
    field = wait(driver, "the sign-in form", lambda d: d.find_element(By.ID, "signin-project"))
    field.send_keys(project)
    driver.switch_to.active_element.send_keys(Keys.TAB)
    driver.switch_to.active_element.send_keys(token, Keys.ENTER)


def open_run(driver: WebDriver, system: System, run: str) -> None:
    driver.get(f"{system.origin}/console/#/run/{run}")
    wait(driver, "the Run page", lambda d: shown(d, "#run-status .status"))


def run_status(driver: WebDriver) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, "#run-status .status").get_attribute("data-status"))


def fetch(system: System, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    ctx = ssl.create_default_context(cafile=str(system.ca))

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx), NoRedirect)
    request = urllib.request.Request(system.origin + path, method=method)  # noqa: S310 - https to the test's shell
    try:
        with opener.open(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_every_console_answer_carries_the_security_headers(system: System) -> None:
    types = {
        "/console/": "text/html",
        "/console/console.js": "text/javascript",
        "/console/console.css": "text/css",
        "/console/wire.js": "text/javascript",
    }
    answers = {path: fetch(system, path) for path in types}
    shipped = REPO / "shell" / "qinglong" / "shell" / "console"
    for path, (status, headers, body) in answers.items():
        assert status == 200, path
        assert headers["Content-Type"] == f"{types[path]}; charset=utf-8"
        if path == "/console/wire.js":  # made from qinglong.wire, not shipped
            assert body == wire_module()
        else:
            assert body == (shipped / (path.removeprefix("/console/") or "index.html")).read_bytes()  # exact bytes
    redirect, unknown, posted = (
        fetch(system, "/console"),
        fetch(system, "/console/nope.js"),
        fetch(system, "/console/", "POST"),
    )
    assert redirect[0] == 308 and redirect[1]["Location"] == "/console/"
    assert unknown[0] == 404 and json.loads(unknown[2])["code"] == "request.unknown_path"
    assert posted[0] == 405 and json.loads(posted[2])["code"] == "request.method_not_allowed"
    for status, headers, _ in (*answers.values(), redirect, unknown, posted):
        assert headers["Content-Security-Policy"] == CSP, status
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["Referrer-Policy"] == "no-referrer"
        assert headers["Cache-Control"] == "no-store"
        assert "Set-Cookie" not in headers
    html = answers["/console/"][2].decode()
    assert "<script>" not in html and "style=" not in html and "http" not in html.split("-->", 1)[1]


def test_a_wrong_token_gets_a_page_that_says_so(system: System, browser: Chrome) -> None:
    sign_in(browser, system, "not-a-token-anyone-was-given")
    wait(browser, "the refusal", lambda d: "not accepted" in text(d, "#problem"))
    assert shown(browser, "#signin-token") and not browser.find_element(By.ID, "nav").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('qinglong.token')") is None
    sign_in(browser, system, system.tokens["operator"], project="no-such-project")
    wait(browser, "the refusal", lambda d: "No such Project" in text(d, "#problem"))


def test_a_wrong_project_keeps_the_token(system: System, browser: Chrome) -> None:
    sign_in(browser, system, system.tokens["operator"], project="no-such-project")
    wait(browser, "the refusal", lambda d: "No such Project" in text(d, "#problem") and "token is kept" in
         text(d, "#problem"))  # fmt: skip
    kept = browser.execute_script("return sessionStorage.getItem('qinglong.token')")
    assert kept == system.tokens["operator"]
    field = browser.switch_to.active_element  # the Project field, its wrong name selected
    assert field.get_attribute("id") == "signin-project"
    assert browser.find_element(By.ID, "signin-token").get_attribute("value") == ""  # never written back
    field.send_keys("console", Keys.ENTER)  # typed over the selection; the token field left empty
    wait(browser, "the Runs page", lambda d: text(d, "#who") == "olga (user, operator) in console")


def test_a_run_goes_from_queued_to_succeeded_with_its_output(system: System, browser: Chrome) -> None:
    sign_in(browser, system, system.tokens["operator"])
    wait(browser, "the Runs page", lambda d: shown(d, "#enqueue-task"))
    assert text(browser, "#who") == "olga (user, operator) in console"
    assert "token" not in browser.current_url and browser.get_cookies() == []
    browser.find_element(By.CSS_SELECTOR, f"#enqueue-task option[value='{system.tasks['hello']}']").click()
    browser.find_element(By.ID, "enqueue-submit").click()
    link = wait(browser, "the enqueue answer", lambda d: d.find_element(By.CSS_SELECTOR, "#enqueue-answer a"))
    assert browser.find_element(By.CSS_SELECTOR, "#enqueue-answer .status").get_attribute("data-status") == "enqueued"
    run = link.get_attribute("href").rsplit("/", 1)[1]
    wait(browser, "the Run listed", lambda d: shown(d, f"#runs-table tr[data-run='{run}']"))
    link.click()
    wait(browser, "the Run to succeed", lambda d: shown(d, "#run-status .status") and run_status(d) == "succeeded")
    wait(browser, "its output", lambda d: "hello from the console" in text(d, "#output"))
    assert text(browser, "#run-task") == "hello" and not browser.find_element(By.ID, "cancel-button").is_displayed()
    assert "null" not in text(browser, "main").splitlines()  # nothing absent is drawn as a word
    events = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#timeline-table tbody tr")]
    assert "run.queued user" in events[0] and "run.succeeded worker" in events[-1], events
    assert "attempt.starting worker" in "\n".join(events)
    stamp = browser.find_element(By.CSS_SELECTOR, "#run-facts time")
    utc = str(stamp.get_attribute("title"))
    assert utc.endswith(" UTC") and stamp.text not in utc  # the browser's zone on the page, UTC on hover
    browser.find_element(By.LINK_TEXT, "← all Runs").click()
    wait(browser, "the Run succeeded in the list",
         lambda d: d.find_element(By.CSS_SELECTOR, f"tr[data-run='{run}'] .status").get_attribute("data-status")
         == "succeeded")  # fmt: skip


def test_a_start_failure_says_why_beside_the_attempt_s_status(system: System, browser: Chrome) -> None:
    run = system.enqueue("refused")
    sign_in(browser, system, system.tokens["viewer"])
    open_run(browser, system, run)
    wait(browser, "the Run to fail", lambda d: run_status(d) == "failed")
    wait(browser, "the reason", lambda d: "plan.user_not_allowed" in text(d, "#output-note"))
    note = text(browser, "#output-note")
    assert note.startswith("Attempt 1 of 1 on demo-worker: failed, ") and note.endswith(
        ", plan.user_not_allowed: user 'nobody' is not on this Worker's run_as list (nothing ran)"
    ), note
    assert text(browser, "#output") == ""


def test_a_run_that_printed_a_secret_shows_it_masked_and_no_page_holds_it(system: System, browser: Chrome) -> None:
    run = system.enqueue("secretive")
    sign_in(browser, system, system.tokens["viewer"])
    open_run(browser, system, run)
    wait(browser, "the Run to succeed", lambda d: run_status(d) == "succeeded" and "file:" in text(d, "#output"))
    assert text(browser, "#output").splitlines() == ["variable: ***", "file: ***"]
    pages = [browser.page_source]
    browser.get(f"{system.origin}/console/#/tasks")
    wait(browser, "the Tasks page", lambda d: "secretive" in text(d, "main"))
    pages.append(browser.page_source)
    browser.get(f"{system.origin}/console/#/runs")
    wait(browser, "the Runs page", lambda d: shown(d, f"#runs-table tr[data-run='{run}']"))
    pages.append(browser.page_source)
    value = SECRET.decode()
    assert len(pages) == 3 and not [p for p in pages if value in p or base64.b64encode(SECRET).decode() in p]
    sign_in(browser, system, system.tokens["operator"])  # the tests after this one act as the operator


def test_a_running_task_s_output_is_followed_live(system: System, browser: Chrome) -> None:
    run = system.enqueue("count")
    open_run(browser, system, run)
    wait(browser, "line 2 while it runs", lambda d: "line 2" in text(d, "#output") and run_status(d) == "running")
    assert "line 8" not in text(browser, "#output")
    assert "following live" in text(browser, "#output-note")
    wait(browser, "the end", lambda d: run_status(d) == "succeeded" and "line 8" in text(d, "#output"))
    lines = text(browser, "#output").splitlines()
    assert lines == [f"line {i}" for i in range(1, 9)], lines  # each line once, in order
    assert "exit code 0" in text(browser, "#output-note")


def test_a_long_output_shows_where_it_was_cut(system: System, browser: Chrome) -> None:
    run = system.enqueue("loud")
    open_run(browser, system, run)
    wait(browser, "the end", lambda d: run_status(d) == "succeeded" and text(d, "#output").endswith("100000"), 60)
    cut = browser.find_element(By.CSS_SELECTOR, "#output .cut")
    assert int(str(cut.get_attribute("data-cut"))) > 0 and "bytes of stdout cut" in cut.text
    assert text(browser, "#output").startswith("1\n2\n3\n")


def test_an_operator_cancels_a_running_run(system: System, browser: Chrome) -> None:
    run = system.enqueue("sleeper")
    open_run(browser, system, run)
    wait(browser, "it to run", lambda d: run_status(d) == "running")
    browser.find_element(By.ID, "cancel-button").click()  # asks first: kept
    dialog = wait(browser, "the confirmation", lambda d: d.find_element(By.CSS_SELECTOR, "dialog#confirm[open]"))
    assert "Cancel Run" in dialog.text and "sleeper" in dialog.text
    assert browser.switch_to.active_element.get_attribute("id") == "confirm-no"  # the safe choice has the focus
    browser.find_element(By.ID, "confirm-no").click()
    wait(browser, "the dialog to close", lambda d: not shown(d, "dialog#confirm"))
    assert text(browser, "#cancel-kept") == "Not cancelled."
    assert system.status(run) == "running" and system.api().show(system.project, run)["run"]["cancelReason"] is None
    browser.find_element(By.ID, "cancel-button").click()  # Escape keeps it too
    wait(browser, "the confirmation", lambda d: shown(d, "dialog#confirm[open]"))
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait(browser, "the dialog to close", lambda d: not shown(d, "dialog#confirm"))
    assert system.status(run) == "running"
    browser.find_element(By.ID, "cancel-button").click()  # asks again: accepted
    wait(browser, "the confirmation", lambda d: shown(d, "dialog#confirm[open]"))
    browser.find_element(By.ID, "confirm-yes").click()
    wait(browser, "the answer", lambda d: shown(d, "#cancel-answer .status[data-status='accepted']"))
    wait(browser, "it to end cancelled", lambda d: run_status(d) == "cancelled")
    assert not browser.find_element(By.ID, "cancel-button").is_displayed()  # nothing left to cancel
    assert "reason user" in text(browser, "#run-facts")


def test_an_agent_s_cancel_is_answered_approval_required(system: System, browser: Chrome) -> None:
    run = system.enqueue("unserved")  # queued for good: no Worker serves its pool
    sign_in(browser, system, system.tokens["bot"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    open_run(browser, system, run)
    browser.find_element(By.ID, "cancel-button").click()
    wait(browser, "the confirmation", lambda d: shown(d, "dialog#confirm[open]"))
    browser.find_element(By.ID, "confirm-yes").click()
    wait(browser, "the answer", lambda d: shown(d, "#cancel-answer .status[data-status='approval_required']"))
    assert system.status(run) == "queued" and system.api().show(system.project, run)["run"]["cancelReason"] is None


def test_a_viewer_is_offered_neither_enqueue_nor_cancel(system: System, browser: Chrome) -> None:
    run = system.enqueue("unserved")
    sign_in(browser, system, system.tokens["viewer"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    assert text(browser, "#who") == "vic (user, viewer) in console"
    assert not shown(browser, "#enqueue")
    open_run(browser, system, run)
    assert run_status(browser) == "queued" and not shown(browser, "#cancel-button")
    browser.find_element(By.LINK_TEXT, "Tasks").click()
    hello = wait(browser, "the Tasks page", lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-task='hello']"))
    assert not shown(browser, "#enqueue") and not shown(browser, ".run-now") and not shown(browser, ".toggle-task")
    assert not shown(browser, "#new-task")
    assert "0 3 * * * (UTC, overlap skip)" in hello.text and "sh -c sleep 1; echo hello" in hello.text
    fires = [str(f.get_attribute("title")) for f in hello.find_elements(By.CSS_SELECTOR, "time")]
    assert len(fires) == 3 and all(f.endswith(" 03:00:00.000 UTC") for f in fires), fires  # its next fire times
    assert len({f.split()[0] for f in fires}) == 3  # three days running (UTC on hover)


def test_run_now_and_disable_and_enable_from_the_tasks_page(system: System, browser: Chrome) -> None:
    sign_in(browser, system, system.tokens["operator"])  # an operator runs tasks but does not change them
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    browser.find_element(By.LINK_TEXT, "Tasks").click()
    row = wait(browser, "the Tasks page", lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-task='hello']"))
    assert not shown(browser, ".toggle-task") and not shown(browser, "#new-task")
    row.find_element(By.CSS_SELECTOR, "button.run-now").click()
    link = wait(
        browser, "the Run it queued", lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-task='hello'] a.run-link")
    )
    assert row.find_element(By.CSS_SELECTOR, ".task-answer .status").get_attribute("data-status") == "enqueued"
    link.click()
    wait(browser, "the Run to succeed", lambda d: shown(d, "#run-status .status") and run_status(d) == "succeeded")
    assert text(browser, "#run-task") == "hello"

    sign_in(browser, system, system.tokens["owner"])  # an owner may disable and enable
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    browser.get(f"{system.origin}/console/#/tasks")
    toggle = wait(
        browser, "count's toggle", lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-task='count'] .toggle-task")
    )
    assert toggle.text == "Disable"
    toggle.click()
    wait(browser, "count disabled", lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-task='count'] .status")
         .get_attribute("data-status") == "disabled")  # fmt: skip
    assert text(browser, "#flash") == "count: disabled"
    assert not shown(browser, "tr[data-task='count'] .run-now")  # a disabled task is not offered to run
    (task,) = [t for t in system.api().tasks(system.project)["tasks"] if t["name"] == "count"]
    assert task["status"] == "disabled"
    with pytest.raises(ApiError) as refused:
        system.enqueue("count")
    assert refused.value.code == "fenced.task_disabled"
    browser.find_element(By.CSS_SELECTOR, "tr[data-task='count'] .toggle-task").click()
    wait(browser, "count enabled", lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-task='count'] .status")
         .get_attribute("data-status") == "active")  # fmt: skip
    assert text(browser, "#flash") == "count: enabled" and shown(browser, "tr[data-task='count'] .run-now")


def test_an_owner_creates_a_task_and_schedules_it_with_its_next_fire_times_previewed(
    system: System, browser: Chrome
) -> None:
    sign_in(browser, system, system.tokens["owner"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    browser.get(f"{system.origin}/console/#/tasks")
    wait(browser, "the New task link", lambda d: d.find_element(By.ID, "new-task")).click()
    name = wait(browser, "the form", lambda d: d.find_element(By.ID, "task-name"))
    assert "unsigned" in text(browser, "#signing-note") and "--sign" in text(browser, "#signing-note")
    name.send_keys("made-here")
    browser.find_element(By.ID, "task-argv").send_keys("sh\n-c\necho made in the console")
    browser.find_element(By.ID, "task-env").send_keys("GREETING=hi there\nMODE=test")
    browser.find_element(By.ID, "task-timeout").send_keys("30")
    browser.find_element(By.ID, "task-attempts").send_keys("2")
    browser.find_element(By.ID, "revision-submit").click()
    wait(browser, "the task's page", lambda d: text(d, "h1") == "Task made-here")
    assert text(browser, "#task-command") == 'sh -c "echo made in the console"'  # each argument whole
    assert text(browser, "#flash").startswith("made-here: created, revision ") and "(unsigned)" in text(
        browser, "#flash"
    )
    (task,) = [t for t in system.api().tasks(system.project)["tasks"] if t["name"] == "made-here"]
    assert (task["plan"], task["signed"], task["status"]) == (
        {"argv": ["sh", "-c", "echo made in the console"], "env": {"GREETING": "hi there", "MODE": "test"},
         "timeoutMs": 30000, "maxAttempts": 2}, False, "active")  # fmt: skip

    # The schedule: the next fire times follow the expression as it is typed.
    cron = browser.find_element(By.ID, "schedule-cron")
    zone = browser.find_element(By.ID, "schedule-zone")
    assert zone.get_attribute("value") == "Asia/Shanghai"  # the browser's zone by default
    zone.clear()
    zone.send_keys("UTC")
    cron.send_keys("*/10 * * * * *")
    fires = wait(
        browser,
        "five fire times",
        lambda d: (
            [
                int(dt.datetime.fromisoformat(str(t.get_attribute("datetime")).replace("Z", "+00:00")).timestamp())
                for t in d.find_elements(By.CSS_SELECTOR, "#schedule-fires time")
            ]
            or None
        ),
    )
    assert len(fires) == 5 and all(b - a == 10 for a, b in itertools.pairwise(fires)), fires
    assert all(f % 10 == 0 for f in fires)
    assert "GMT+8" in text(browser, "#schedule-fires")  # shown in the browser's zone, with it
    cron.clear()
    cron.send_keys("61 * * * *")
    wait(browser, "the refusal", lambda d: "invalid.cron" in text(d, "#schedule-problem"))
    cron.clear()
    cron.send_keys("15 30 4 * * *")  # six fields: 04:30:15 every day
    wait(browser, "the daily preview", lambda d: "04:30:15+00:00" in text(d, "#schedule-fires"))
    browser.find_element(By.ID, "schedule-save").click()
    wait(browser, "the schedule saved", lambda d: "schedule set" in text(d, "#flash"))
    assert text(browser, "#task-schedule") == "15 30 4 * * * (UTC, overlap skip)"
    (task,) = [t for t in system.api().tasks(system.project)["tasks"] if t["name"] == "made-here"]
    assert task["schedule"]["cron"] == "15 30 4 * * *" and task["schedule"]["timezone"] == "UTC"
    if SCREENSHOTS:
        cron = browser.find_element(By.ID, "schedule-cron")
        cron.clear()
        cron.send_keys("0 */15 9-17 * * mon-fri")
        wait(browser, "the preview", lambda d: "04:30:15" not in text(d, "#schedule-fires") and
             len(d.find_elements(By.CSS_SELECTOR, "#schedule-fires li")) == 5)  # fmt: skip
        browser.set_window_size(1280, 1300)
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(REPO / "docs" / "console-task.png"))
        browser.set_window_size(1280, 900)
    browser.find_element(By.ID, "schedule-clear").click()
    wait(browser, "the schedule cleared", lambda d: text(d, "#flash") == "schedule cleared")
    assert text(browser, "#task-schedule") == "none"

    # A new revision keeps what the form does not show, and the signed hello needs a deliberate tick.
    browser.get(f"{system.origin}/console/#/task/secretive")
    wait(browser, "secretive", lambda d: text(d, "h1") == "Task secretive")
    assert "secretEnv, secretFiles" in text(browser, "#task-kept")
    assert "(signed)" in text(browser, "#task-revision")
    browser.find_element(By.ID, "task-timeout").send_keys("60")
    browser.find_element(By.ID, "revision-submit").click()
    wait(browser, "the refusal", lambda d: "tick the box" in text(d, "#revision-answer"))
    assert next(t for t in system.api().tasks(system.project)["tasks"] if t["name"] == "secretive")["signed"]


def test_a_viewer_or_operator_cannot_change_a_task(system: System, browser: Chrome) -> None:
    sign_in(browser, system, system.tokens["operator"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    browser.get(f"{system.origin}/console/#/task/hello")
    wait(browser, "hello", lambda d: text(d, "h1") == "Task hello")
    assert "cannot change tasks" in text(browser, "#task-readonly")
    assert not shown(browser, "#revision-form") and not shown(browser, "#schedule-form")
    assert shown(browser, ".run-now")  # but it may run it


def test_the_output_follows_its_tail_until_the_reader_scrolls_up(system: System, browser: Chrome) -> None:
    sign_in(browser, system, system.tokens["operator"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    run = system.enqueue("tail")
    open_run(browser, system, run)
    gap = "const o = document.getElementById('output'); return o.scrollHeight - o.scrollTop - o.clientHeight;"
    tall = "const o = document.getElementById('output'); return o.scrollHeight > o.clientHeight + 200;"
    wait(browser, "more output than the box holds", lambda d: d.execute_script(tall) and run_status(d) == "running")
    assert browser.execute_script(gap) <= 24, "the box shows the newest lines"
    browser.execute_script("document.getElementById('output').scrollTop = 0")  # the reader scrolls up
    seen = len(text(browser, "#output"))
    wait(browser, "more lines", lambda d: len(text(d, "#output")) > seen)
    assert browser.execute_script("return document.getElementById('output').scrollTop") == 0, "the reader's place"
    jump = wait(browser, "the jump button", lambda d: d.find_element(By.ID, "output-jump").is_displayed() and
                d.find_element(By.ID, "output-jump"))  # fmt: skip
    jump.click()
    assert browser.execute_script(gap) <= 24 and not browser.find_element(By.ID, "output-jump").is_displayed()
    wait(browser, "the end", lambda d: run_status(d) == "succeeded" and text(d, "#output").endswith("\n400"))
    assert browser.execute_script(gap) <= 24, "still following to the last line"
    assert text(browser, "#output").splitlines() == [str(i) for i in range(1, 401)]


def test_every_attempt_s_output_and_a_readable_timeline(system: System, browser: Chrome) -> None:
    sign_in(browser, system, system.tokens["operator"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    run = system.enqueue("flaky")
    open_run(browser, system, run)
    wait(browser, "the retry to succeed", lambda d: run_status(d) == "succeeded" and "second try" in text(d, "#output"),
         60)  # fmt: skip
    assert text(browser, "#output") == "second try" and "Attempt 2 of 2 on demo-worker" in text(browser, "#output-note")
    assert text(browser, "#run-worker") == "demo-worker (Attempt 2)" and text(browser, "#run-attempts") == "2"
    assert shown(browser, "#run-started time") and re.fullmatch(r"[0-9.]+ (ms|s)", text(browser, "#run-duration"))
    select = browser.find_element(By.ID, "attempt-select")
    assert select.is_enabled()
    select.find_element(By.CSS_SELECTOR, "option[value='1']").click()
    wait(browser, "Attempt 1's output", lambda d: text(d, "#output") == "first try")
    note = text(browser, "#output-note")
    assert "Attempt 1 of 2 on demo-worker: failed" in note and "exit code 3" in note, note
    assert text(browser, "#run-worker") == "demo-worker (Attempt 1)"
    select.find_element(By.CSS_SELECTOR, "option[value='']").click()
    wait(browser, "the newest again", lambda d: text(d, "#output") == "second try")

    timeline = text(browser, "#timeline-table")
    assert not re.search(r"\b1[0-9]{12}\b", timeline), "no epoch milliseconds"
    assert "GMT+8" in timeline and re.search(r"\+[0-9.]+ (ms|s)", timeline)  # local times, and how long after
    starts = browser.find_elements(By.CSS_SELECTOR, "#timeline-table tr[data-event='attempt.starting']")
    assert [("attempt no 1" in r.text) for r in starts] == [True, False], [r.text for r in starts]  # one per Attempt
    retry = text(browser, "#timeline-table tr[data-event='run.retry_scheduled']")
    assert "retry at 20" in retry and "GMT+8" in retry, retry
    queued = text(browser, "#timeline-table tr[data-event='run.queued']")
    assert "task flaky" in queued, queued  # the task by its name
    if SCREENSHOTS:
        browser.set_window_size(1280, 1500)
        browser.save_screenshot(str(REPO / "docs" / "console-run.png"))
        browser.set_window_size(1280, 900)


def test_the_workers_page_finds_the_offline_worker(system: System, browser: Chrome) -> None:
    sign_in(browser, system, system.tokens["operator"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    browser.find_element(By.LINK_TEXT, "Workers").send_keys(Keys.ENTER)  # by keyboard
    row = wait(browser, "spare", lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-worker='spare']"))
    assert row.find_element(By.CSS_SELECTOR, ".status").text == "offline" and "never" in row.text
    online = browser.find_element(By.CSS_SELECTOR, "tr[data-worker='demo-worker']")
    assert online.find_element(By.CSS_SELECTOR, ".status").text == "online"
    assert browser.find_element(By.CSS_SELECTOR, "nav a[aria-current='page']").text == "Workers"


def test_the_notifications_page_shows_rules_by_their_secret_s_name_only(system: System, browser: Chrome) -> None:
    with psycopg.connect(system.demo.dsn, autocommit=True) as conn:  # one notification that failed once, as fixture
        conn.execute(
            "with o as (insert into ql.notify_outbox (rule_id, project_id, kind, payload, attempts, created_at_ms,"
            " next_attempt_at_ms) select r.id, r.project_id, 'run.failed', '{}', 1, ql.now_ms(), ql.now_ms() + 2000"
            " from ql.notify_rules r where r.name = 'ops' returning id)"
            " insert into ql.notify_deliveries (outbox_id, attempt_no, ok, status_code, error, duration_ms, at_ms)"
            " select id, 1, false, 503, 'http.status', 35, ql.now_ms() from o"
        )
    sign_in(browser, system, system.tokens["viewer"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    browser.find_element(By.LINK_TEXT, "Notifications").click()
    row = wait(browser, "the rule", lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-rule='ops']"))
    assert "run.failed, run.timed_out" in row.text and "https://hooks.example.com/qinglong" in row.text
    assert "CONSOLE_SECRET" in row.text and SECRET.decode(errors="replace") not in browser.page_source
    pending = browser.find_element(By.CSS_SELECTOR, "#notify-history tbody tr")
    assert "run.failed" in pending.text and "503 http.status" in pending.text
    assert pending.find_element(By.CSS_SELECTOR, ".status").text == "pending"
    assert browser.title == "Notifications · Qinglong console"
    assert browser.find_element(By.CSS_SELECTOR, "nav a[aria-current='page']").text == "Notifications"


def test_the_runs_page_is_readable_at_360_px(system: System, browser: Chrome) -> None:
    browser.get(system.origin + "/console/#/runs")
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table tbody tr"))
    if SCREENSHOTS:
        browser.save_screenshot(str(REPO / "docs" / "console-runs.png"))
    browser.set_window_size(360, 800)
    try:
        width = browser.execute_script("return document.documentElement.scrollWidth")
        viewport = browser.execute_script("return window.innerWidth")
        assert width <= viewport, (width, viewport)  # wide tables scroll inside their own box, not the page
        browser.find_element(By.ID, "filter-status").send_keys("succeeded", Keys.ENTER)
        wait(browser, "the filter", lambda d: {e.get_attribute("data-status") for e in
             d.find_elements(By.CSS_SELECTOR, "#runs-table .status")} == {"succeeded"})  # fmt: skip
    finally:
        browser.set_window_size(1280, 900)


def test_no_request_left_the_origin_and_no_policy_was_violated(system: System, browser: Chrome) -> None:
    """Every page of its own (also when run alone), and whatever the tests before it made the browser load."""
    sign_in(browser, system, system.tokens["operator"])
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    browser.find_element(By.LINK_TEXT, "Tasks").click()
    wait(browser, "the Tasks page", lambda d: shown(d, "tr[data-task]"))
    browser.find_element(By.LINK_TEXT, "Workers").click()
    wait(browser, "the Workers page", lambda d: shown(d, "tr[data-worker]"))
    sent = []  # (the document that asked, the URL it asked for); chrome:// pages are the browser's own
    for entry in browser_log(browser, "performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            sent.append((message["params"].get("documentURL", ""), message["params"]["request"]["url"]))
    # data: URLs fetch nothing (Chromium's own form controls draw their icons from them)
    console = [
        url for document, url in sent if document.startswith(system.origin + "/") and not url.startswith("data:")
    ]
    network = [url for _, url in sent if url.split(":", 1)[0] in ("http", "https", "ws", "wss")]
    assert any("/api/v3/projects/console/" in url for url in console)
    assert all(url.startswith(system.origin + "/") for url in console + network), sorted(set(console + network))
    problems = [e["message"] for e in browser_log(browser, "browser") if "Content Security Policy" in e["message"]]
    assert problems == []


def test_a_shell_that_went_away_gets_a_page_that_says_so(system: System, browser: Chrome) -> None:
    browser.get(system.origin + "/console/#/runs")
    wait(browser, "the Runs page", lambda d: shown(d, "#runs-table"))
    shell = system.demo.procs["shell"]
    shell.terminate()
    shell.wait(30)
    browser.find_element(By.LINK_TEXT, "Tasks").click()
    wait(browser, "the unreachable page", lambda d: "unreachable" in text(d, "h1"))
    assert "Nothing was changed" in text(browser, "main") and shown(browser, "#retry")
